// Portable (scalar) build of the per-ISA inner loops in isa_impl.inc, plus the
// table lookup that maps a requested IsaLevel to the table the CPU can run.
#include <cmath>
#include <cstdint>
#include <cstring>

#include "backends/cpu/kernels/isa_kernels.h"
#include "rlx/base/half.h"

namespace rlx::cpu::detail {
namespace {
#include "backends/cpu/kernels/simd_scalar.inc"
#include "backends/cpu/kernels/isa_impl.inc"
}  // namespace

const IsaKernels kScalarKernels = make_table(IsaLevel::kScalar);

const IsaKernels& isa_kernels(IsaLevel requested) {
  switch (resolve_isa(requested)) {
    case IsaLevel::kAmx:  // the tiles serve matmuls only (amx_matmul.h); all else is AVX-512
    case IsaLevel::kAvx512: return kAvx512Kernels;
    case IsaLevel::kAvx2: return kAvx2Kernels;
    case IsaLevel::kScalar: break;
  }
  return kScalarKernels;
}

}  // namespace rlx::cpu::detail
