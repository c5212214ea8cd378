// CUDA kernel of causal_conv1d (Mamba / gated delta-net's short convolution), which
// writes its state handle in place (ir::updates_state; the gated delta rule's kernels are
// in kernels_delta_rule.cu). One thread per (sequence, channel, slice of rows) walks its
// rows with the window of K-1 earlier inputs (the state, or zeros for a fresh sequence);
// the first slice's thread, the only one that reads the state, then writes the last K-1
// inputs of its channel's real rows back into it.
#include <algorithm>

#include "backends/cuda/cuda_common.cuh"
#include "backends/cuda/recurrent_seq.cuh"

namespace rlx::cuda_backend {
namespace {

__global__ void causal_conv1d_kernel(const CausalConvParams p, const int64_t slice_rows) {
  pdl_wait();
  const int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x, b = blockIdx.z;
  if (c >= p.chans) return;
  int32_t seen = 0, len = 0;
  if (!seq_entry(p.seq, b, p.rows, p.err, p.err_code, &seen, &len)) return;
  const int64_t hist = p.kernel - 1, C = p.chans;
  float* st = p.state + b * hist * C;
  const float* x = p.x + b * p.rows * C;
  float* y = p.y + b * p.rows * C;
  const float* w = p.w + c * p.kernel;
  auto win = [&](int64_t r) -> float { return r < hist ? (seen > 0 ? st[r * C + c] : 0.0f) : x[(r - hist) * C + c]; };
  const int64_t t0 = blockIdx.y * slice_rows, t1 = min(p.rows, t0 + slice_rows);
  for (int64_t t = t0; t < t1; ++t) {
    float acc = 0.0f;
    for (int64_t j = 0; j < p.kernel; ++j) acc += w[j] * win(t + j);
    y[t * C + c] = p.silu ? acc / (1.0f + expf(-acc)) : acc;
  }
  // Only the first slice reads the state (slice_rows >= hist), so it alone rewrites it.
  if (blockIdx.y != 0 || len == 0) return;
  // Front to back: row i takes window row len + i >= i, never one already overwritten.
  for (int64_t i = 0; i < hist; ++i) st[i * C + c] = win(len + i);
}

}  // namespace

void launch_causal_conv1d(const CausalConvParams& p, cudaStream_t s) {
  const unsigned threads = 128;
  // Rows in slices of at least 32 (and at least the window; at most 65535 slices), a
  // thread per (channel, slice).
  const int64_t slice = std::max({int64_t{32}, p.kernel - 1, (p.rows + 65534) / 65535});
  const int64_t slices = std::max<int64_t>(1, (p.rows + slice - 1) / slice);
  launch_k(causal_conv1d_kernel,
           dim3(static_cast<unsigned>((p.chans + threads - 1) / threads), static_cast<unsigned>(slices),
                static_cast<unsigned>(p.batch)),
           dim3(threads), 0, s, p, slice);
}

}  // namespace rlx::cuda_backend
