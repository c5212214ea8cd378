// AVX-512 VNNI build of the DequantMatMul GEMV loops (qmatmul_simd.inc): u8 x s8 dots
// through vpdpbusd (256-bit, AVX512VL). Function-level target pragma, so the binary
// runs on any x86-64; only called when cpu_features() reports AVX-512 and VNNI.
#include <cstdint>
#include <cstring>

#include "backends/cpu/kernels/qmatmul_kernels.h"
#include "rlx/formats/quant_blocks.h"

#if defined(__x86_64__)
#include <immintrin.h>

#pragma GCC push_options
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC target("avx,avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")
namespace rlx::cpu::detail {
namespace {
inline __m256i dot_us(__m256i acc, __m256i u, __m256i s) {
  return _mm256_dpbusd_epi32(acc, u, s);
}
constexpr int kMaxRows = 8;
#include "backends/cpu/kernels/qmatmul_simd.inc"
}  // namespace
const QKernels kQAvx512Kernels = make_qtable(IsaLevel::kAvx512);
}  // namespace rlx::cpu::detail
#pragma GCC diagnostic pop
#pragma GCC pop_options

#else
namespace rlx::cpu::detail {
const QKernels kQAvx512Kernels = kQScalarKernels;
}
#endif
