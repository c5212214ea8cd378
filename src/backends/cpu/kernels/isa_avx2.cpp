// AVX2 + FMA + F16C build of the per-ISA inner loops (isa_impl.inc). Compiled with a
// function-level target pragma so the binary still runs on any x86-64; only called
// after cpu_features() reports AVX2.
#include <cmath>
#include <cstdint>
#include <cstring>

#include "backends/cpu/kernels/isa_kernels.h"
#include "rlx/base/half.h"

#if defined(__x86_64__)
#include <immintrin.h>

#pragma GCC push_options
#pragma GCC diagnostic push
// GCC 12 warns inside its own intrinsic headers (self-initialised "undefined" vectors)
// and about vector-returning lambda invokers that are never emitted.
#pragma GCC diagnostic ignored "-Wpsabi"
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC target("avx,avx2,fma,f16c")
namespace rlx::cpu::detail {
namespace {
#include "backends/cpu/kernels/simd_avx2.inc"
#include "backends/cpu/kernels/isa_impl.inc"
}  // namespace
const IsaKernels kAvx2Kernels = make_table(IsaLevel::kAvx2);
}  // namespace rlx::cpu::detail
#pragma GCC diagnostic pop
#pragma GCC pop_options

#else
namespace rlx::cpu::detail {
const IsaKernels kAvx2Kernels = kScalarKernels;  // never selected off x86-64
}
#endif
