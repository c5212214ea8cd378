// AVX2 build of the DequantMatMul GEMV loops (qmatmul_simd.inc): u8 x s8 dots through
// vpmaddubsw + vpmaddwd. Function-level target pragma, so the binary runs on any
// x86-64; only called after cpu_features() reports AVX2.
#include <cstdint>
#include <cstring>

#include "backends/cpu/kernels/qmatmul_kernels.h"
#include "rlx/base/half.h"
#include "rlx/formats/quant.h"
#include "rlx/formats/iq_grids.h"
#include "rlx/formats/quant_blocks.h"

#if defined(__x86_64__)
#include <immintrin.h>

#pragma GCC push_options
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC target("avx,avx2,fma,f16c")
namespace rlx::cpu::detail {
namespace {
inline __m256i dot_us(__m256i acc, __m256i u, __m256i s) {
  return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
}
constexpr int kMaxRows = 4;
#include "backends/cpu/kernels/qmatmul_simd.inc"
}  // namespace
const QKernels kQAvx2Kernels = make_qtable(IsaLevel::kAvx2);
}  // namespace rlx::cpu::detail
#pragma GCC diagnostic pop
#pragma GCC pop_options

#else
namespace rlx::cpu::detail {
const QKernels kQAvx2Kernels = kQScalarKernels;
}
#endif
