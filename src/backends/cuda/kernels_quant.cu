// Generic CUDA GEMV over packed GGUF weights for DequantMatMul at decode sizes (the
// types and sizes launch_gemv, kernels_gemv.cu, does not cover): one warp per output
// column n, each lane decoding 32-element units of W's row n straight from the packed
// blocks (either layout) and dotting them with up to 8 rows of x. Larger M goes through
// launch_dequant_f16 + cuBLAS (see cuda_steps.cpp). Also the rounding of x to llama.cpp's
// Q8_0 activations that both paths take for Q8_0 / Q4_0 weights (launch_round_q8_0).
#include "backends/cuda/cuda_common.cuh"

namespace rlx::cuda_backend {
namespace {

constexpr int kWarps = 8;
constexpr int kMaxM = 8;

template <DT T>
__global__ void __launch_bounds__(kWarps * 32) qgemv_kernel(const QGemvParams p) {
  pdl_wait();
  pdl_trigger();
  const int lane = threadIdx.x & 31;
  const int64_t n = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  if (n >= p.N) return;
  const int64_t units = p.K / 32;
  float acc[kMaxM];
#pragma unroll
  for (int m = 0; m < kMaxM; ++m) acc[m] = 0.0f;
  for (int64_t u = lane; u < units; u += 32) {
    float y[32];
    decode_row_unit<T>(p.w, p.row_bytes, p.d_offset, n, u, y);
#pragma unroll
    for (int m = 0; m < kMaxM; ++m) {
      if (m >= p.M) break;
      const float4* x4 = reinterpret_cast<const float4*>(p.x + m * p.K + u * 32);
      float s = 0.0f;
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const float4 v = __ldg(x4 + i);
        s = fmaf(y[4 * i], v.x, s);
        s = fmaf(y[4 * i + 1], v.y, s);
        s = fmaf(y[4 * i + 2], v.z, s);
        s = fmaf(y[4 * i + 3], v.w, s);
      }
      acc[m] += s;
    }
  }
#pragma unroll
  for (int m = 0; m < kMaxM; ++m) {
    if (m >= p.M) break;
    const float v = warp_sum(acc[m]);
    if (lane == 0) p.y[m * p.N + n] = v;
  }
}

// One warp per 32-element block of x, one element per lane (K is a multiple of 32).
template <typename O>
__global__ void round_q8_0_kernel(const float* x, O* out, int64_t blocks) {
  pdl_wait();
  pdl_trigger();
  const int lane = threadIdx.x & 31;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x >> 5);
  for (int64_t b = static_cast<int64_t>(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5); b < blocks; b += warps) {
    const float v = x[b * 32 + lane];
    float amax = fabsf(v);
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, o));
    const float d = __half2float(__float2half_rn(amax / 127.0f)), id = amax > 0.0f ? 127.0f / amax : 0.0f;
    const float r = isfinite(v) ? d * static_cast<float>(__float2int_rn(v * id)) : v;
    if constexpr (std::is_same_v<O, float>) out[b * 32 + lane] = r;
    else out[b * 32 + lane] = __float2half_rn(r);
  }
}

}  // namespace

bool q8_0_activations(DT w) { return w == DT::Q8_0 || w == DT::Q4_0; }

void launch_round_q8_0(const float* x, void* out, DT out_dt, int64_t rows, int64_t K, cudaStream_t s) {
  const int64_t blocks = rows * (K / 32);
  if (blocks <= 0) return;
  const unsigned g = static_cast<unsigned>(std::min<int64_t>((blocks + kWarps - 1) / kWarps, 65535));
  if (out_dt == DT::F16) launch_k(round_q8_0_kernel<__half>, g, kWarps * 32, 0, s, x, static_cast<__half*>(out), blocks);
  else launch_k(round_q8_0_kernel<float>, g, kWarps * 32, 0, s, x, static_cast<float*>(out), blocks);
}

void launch_qgemv(const QGemvParams& p, cudaStream_t s) {
  const unsigned g = static_cast<unsigned>((p.N + kWarps - 1) / kWarps);
  for (int64_t m0 = 0; m0 < p.M; m0 += kMaxM) {
    QGemvParams q = p;
    q.x = p.x + m0 * p.K;
    q.y = p.y + m0 * p.N;
    q.M = p.M - m0 < kMaxM ? p.M - m0 : kMaxM;
    switch (p.w_dt) {
      case DT::Q4_0: launch_k(qgemv_kernel<DT::Q4_0>, g, kWarps * 32, 0, s, q); break;
      case DT::Q4_1: launch_k(qgemv_kernel<DT::Q4_1>, g, kWarps * 32, 0, s, q); break;
      case DT::Q5_0: launch_k(qgemv_kernel<DT::Q5_0>, g, kWarps * 32, 0, s, q); break;
      case DT::Q5_1: launch_k(qgemv_kernel<DT::Q5_1>, g, kWarps * 32, 0, s, q); break;
      case DT::Q8_0: launch_k(qgemv_kernel<DT::Q8_0>, g, kWarps * 32, 0, s, q); break;
      case DT::Q4_K: launch_k(qgemv_kernel<DT::Q4_K>, g, kWarps * 32, 0, s, q); break;
      case DT::Q5_K: launch_k(qgemv_kernel<DT::Q5_K>, g, kWarps * 32, 0, s, q); break;
      case DT::Q6_K: launch_k(qgemv_kernel<DT::Q6_K>, g, kWarps * 32, 0, s, q); break;
      case DT::IQ4_NL: launch_k(qgemv_kernel<DT::IQ4_NL>, g, kWarps * 32, 0, s, q); break;
      case DT::IQ4_XS: launch_k(qgemv_kernel<DT::IQ4_XS>, g, kWarps * 32, 0, s, q); break;
      case DT::IQ3_S: launch_k(qgemv_kernel<DT::IQ3_S>, g, kWarps * 32, 0, s, q); break;
      case DT::IQ3_XXS: launch_k(qgemv_kernel<DT::IQ3_XXS>, g, kWarps * 32, 0, s, q); break;
      case DT::IQ2_S: launch_k(qgemv_kernel<DT::IQ2_S>, g, kWarps * 32, 0, s, q); break;
      case DT::IQ2_XS: launch_k(qgemv_kernel<DT::IQ2_XS>, g, kWarps * 32, 0, s, q); break;
      case DT::IQ2_XXS: launch_k(qgemv_kernel<DT::IQ2_XXS>, g, kWarps * 32, 0, s, q); break;
      case DT::IQ1_S: launch_k(qgemv_kernel<DT::IQ1_S>, g, kWarps * 32, 0, s, q); break;
      case DT::IQ1_M: launch_k(qgemv_kernel<DT::IQ1_M>, g, kWarps * 32, 0, s, q); break;
      case DT::TQ1_0: launch_k(qgemv_kernel<DT::TQ1_0>, g, kWarps * 32, 0, s, q); break;
      case DT::TQ2_0: launch_k(qgemv_kernel<DT::TQ2_0>, g, kWarps * 32, 0, s, q); break;
      default: break;
    }
  }
}

}  // namespace rlx::cuda_backend
