// CUDA kernels of the recurrent-state ops of gated delta-net layers (ir::updates_state),
// both writing their state handle in place.
// launch_causal_conv1d: one thread per (sequence, channel) walks the rows with the
// window of K-1 earlier inputs (the state, or zeros for a fresh sequence), then writes
// the last K-1 inputs of its channel's real rows back into the state.
// launch_gated_delta_rule: one block per (sequence, value head), one thread per column
// j of the state S [dk, dv]; per row the block stages the l2-normalized q and k in
// shared memory, then thread j decays its column, reads mem_j = Σ_i S[i][j] k_i, takes
// u_j = beta (v_j - mem_j), adds k_i u_j and reads o_j = Σ_i S[i][j] q_i: the recurrence
// token by token (the chunked form is the CPU's; here every row is sequential).
// Padding rows (past a sequence's real count) read the state and never change it.
#include "backends/cuda/cuda_common.cuh"

namespace rlx::cuda_backend {
namespace {

// Sequence b's (seen, len), or false (and the error word set) when they do not fit.
__device__ __forceinline__ bool seq_entry(const int32_t* seq, int64_t b, int64_t rows, int* err, int code,
                                          int32_t* seen, int32_t* len) {
  *seen = seq[2 * b];
  *len = seq[2 * b + 1];
  if (*seen < 0 || *len < 0 || *len > rows) {
    atomicExch(err, code);
    return false;
  }
  return true;
}

__global__ void causal_conv1d_kernel(const CausalConvParams p) {
  pdl_wait();
  const int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x, b = blockIdx.y;
  if (c >= p.chans) return;
  int32_t seen = 0, len = 0;
  if (!seq_entry(p.seq, b, p.rows, p.err, p.err_code, &seen, &len)) return;
  const int64_t hist = p.kernel - 1, C = p.chans;
  float* st = p.state + b * hist * C;
  const float* x = p.x + b * p.rows * C;
  float* y = p.y + b * p.rows * C;
  const float* w = p.w + c * p.kernel;
  auto win = [&](int64_t r) -> float { return r < hist ? (seen > 0 ? st[r * C + c] : 0.0f) : x[(r - hist) * C + c]; };
  for (int64_t t = 0; t < p.rows; ++t) {
    float acc = 0.0f;
    for (int64_t j = 0; j < p.kernel; ++j) acc += w[j] * win(t + j);
    y[t * C + c] = p.silu ? acc / (1.0f + expf(-acc)) : acc;
  }
  if (len == 0) return;
  // Front to back: row i takes window row len + i >= i, never one already overwritten.
  for (int64_t i = 0; i < hist; ++i) st[i * C + c] = win(len + i);
}

__global__ void gated_delta_rule_kernel(const DeltaRuleParams p) {
  extern __shared__ float smem[];
  float* qs = smem;          // [dk]
  float* ks = smem + p.dk;   // [dk]
  __shared__ float norms[2];
  pdl_wait();
  const int64_t bh = blockIdx.x, b = bh / p.hv, h = bh % p.hv, kh = h / (p.hv / p.hk);
  const int64_t j = threadIdx.x;
  int32_t seen = 0, len = 0;
  if (!seq_entry(p.seq, b, p.rows, p.err, p.err_code, &seen, &len)) return;
  float* S = p.state + bh * p.dk * p.dv;
  if (seen == 0 && j < p.dv)
    for (int64_t i = 0; i < p.dk; ++i) S[i * p.dv + j] = 0.0f;
  for (int64_t t = 0; t < p.rows; ++t) {
    const int64_t r = b * p.rows + t;
    const float* qr = p.q + (r * p.hk + kh) * p.dk;
    const float* kr = p.k + (r * p.hk + kh) * p.dk;
    __syncthreads();  // the previous row's readers of qs / ks are done
    for (int64_t i = threadIdx.x; i < p.dk; i += blockDim.x) {
      qs[i] = qr[i];
      ks[i] = kr[i];
    }
    if (threadIdx.x < 2) norms[threadIdx.x] = 0.0f;
    __syncthreads();
    if (threadIdx.x == 0 && p.l2norm) {
      double qq = 0, kk = 0;
      for (int64_t i = 0; i < p.dk; ++i) {
        qq += double(qs[i]) * qs[i];
        kk += double(ks[i]) * ks[i];
      }
      norms[0] = static_cast<float>(1.0 / sqrt(qq + 1e-6));
      norms[1] = static_cast<float>(1.0 / sqrt(kk + 1e-6));
    }
    __syncthreads();
    const float qscale = (p.l2norm ? norms[0] : 1.0f) * p.scale, kscale = p.l2norm ? norms[1] : 1.0f;
    if (j >= p.dv) continue;
    float o = 0.0f;
    if (t < len) {
      const float decay = expf(p.g[r * p.hv + h]), beta = p.beta[r * p.hv + h];
      float mem = 0.0f;
      for (int64_t i = 0; i < p.dk; ++i) {
        const float s = S[i * p.dv + j] * decay;
        S[i * p.dv + j] = s;
        mem += s * ks[i] * kscale;
      }
      const float u = beta * (p.v[(r * p.hv + h) * p.dv + j] - mem);
      for (int64_t i = 0; i < p.dk; ++i) {
        const float s = S[i * p.dv + j] + ks[i] * kscale * u;
        S[i * p.dv + j] = s;
        o += s * qs[i] * qscale;
      }
    } else {
      for (int64_t i = 0; i < p.dk; ++i) o += S[i * p.dv + j] * qs[i] * qscale;
    }
    p.out[(r * p.hv + h) * p.dv + j] = o;
  }
  pdl_trigger();
}

}  // namespace

void launch_causal_conv1d(const CausalConvParams& p, cudaStream_t s) {
  const unsigned threads = 128;
  launch_k(causal_conv1d_kernel, dim3(static_cast<unsigned>((p.chans + threads - 1) / threads),
                                      static_cast<unsigned>(p.batch)),
           dim3(threads), 0, s, p);
}

void launch_gated_delta_rule(const DeltaRuleParams& p, cudaStream_t s) {
  const auto threads = static_cast<unsigned>((std::max<int64_t>(p.dv, 32) + 31) / 32 * 32);
  launch_k(gated_delta_rule_kernel, dim3(static_cast<unsigned>(p.batch * p.hv)), dim3(threads),
           static_cast<size_t>(2 * p.dk) * sizeof(float), s, p);
}

}  // namespace rlx::cuda_backend
