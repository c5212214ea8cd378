// CUDA kernels of the spatial ops (see spatial_kernels.h): conv's im2col unfolding and
// per-channel bias, group norm (one block per (image, group), statistics in double) and
// separable interpolation. Every kernel waits for its predecessor (pdl_wait) before it
// reads activations.
#include "backends/cuda/cuda_common.cuh"
#include "backends/cuda/spatial_kernels.h"

namespace rlx::cuda_backend {
namespace {

__global__ void im2col_kernel(const Im2colParams p) {
  pdl_wait();
  const int64_t positions = p.oh * p.ow, rows = p.cg * p.kh * p.kw;
  const int64_t total = p.groups * rows * positions;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t pos = i % positions, r = (i / positions) % rows, g = i / (positions * rows);
    const int64_t ci = r / (p.kh * p.kw), ky = (r / p.kw) % p.kh, kx = r % p.kw;
    const int64_t oy = pos / p.ow, ox = pos % p.ow;
    const int64_t iy = oy * p.sh - p.ph + ky * p.dh, ix = ox * p.sw - p.pw + kx * p.dw;
    float v = 0.0f;
    if (iy >= 0 && iy < p.h && ix >= 0 && ix < p.w) v = p.x[((g * p.cg + ci) * p.h + iy) * p.w + ix];
    p.col[i] = v;
  }
  pdl_trigger();
}

__global__ void col2im_kernel(const Col2imParams p) {
  pdl_wait();
  const int64_t out_pos = p.oh * p.ow, in_pos = p.h * p.w, total = p.groups * p.og * out_pos;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t ox = i % p.ow, oy = (i / p.ow) % p.oh, oc = i / out_pos;  // oc = g*og + o'
    const int64_t g = oc / p.og, oo = oc % p.og;
    const float* cols = p.cols + g * p.og * p.kh * p.kw * in_pos;
    float acc = p.bias ? p.bias[oc] : 0.0f;
    for (int64_t ky = 0; ky < p.kh; ++ky) {
      const int64_t ty = oy + p.ph - ky * p.dh;
      if (ty < 0 || ty % p.sh != 0 || ty / p.sh >= p.h) continue;
      for (int64_t kx = 0; kx < p.kw; ++kx) {
        const int64_t tx = ox + p.pw - kx * p.dw;
        if (tx < 0 || tx % p.sw != 0 || tx / p.sw >= p.w) continue;
        acc += cols[((oo * p.kh + ky) * p.kw + kx) * in_pos + (ty / p.sh) * p.w + tx / p.sw];
      }
    }
    p.y[i] = acc;
  }
  pdl_trigger();
}

__global__ void channel_bias_kernel(const ChannelBiasParams p) {
  pdl_wait();
  const int64_t total = p.images * p.channels * p.positions;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total; i += int64_t{gridDim.x} * blockDim.x)
    p.y[i] += p.bias[(i / p.positions) % p.channels];
  pdl_trigger();
}

__global__ void group_norm_kernel(const GroupNormKParams p) {
  __shared__ double red[32];
  __shared__ double stats[2];
  pdl_wait();
  const int64_t cg = p.c / p.groups, count = cg * p.spatial;
  const int64_t n = blockIdx.x / p.groups, g = blockIdx.x % p.groups;
  const int64_t base = (n * p.c + g * cg) * p.spatial;
  double s = 0;
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x) s += p.x[base + i];
  s = block_sum_d(s, red);
  if (threadIdx.x == 0) stats[0] = s / static_cast<double>(count);
  __syncthreads();
  const double mean = stats[0];
  double q = 0;
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x) {
    const double d = p.x[base + i] - mean;
    q += d * d;
  }
  q = block_sum_d(q, red);
  if (threadIdx.x == 0) stats[1] = 1.0 / sqrt(q / static_cast<double>(count) + static_cast<double>(p.eps));
  __syncthreads();
  const double inv = stats[1];
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x) {
    const int64_t ch = g * cg + i / p.spatial;
    const float scale = static_cast<float>(inv * p.gamma[ch]);
    const float shift = static_cast<float>(-mean * inv * p.gamma[ch]) + (p.beta ? p.beta[ch] : 0.0f);
    p.y[base + i] = p.x[base + i] * scale + shift;
  }
  pdl_trigger();
}

__global__ void interpolate_kernel(const InterpolateKParams p) {
  pdl_wait();
  const int64_t total = p.planes * p.oh * p.ow;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t ox = i % p.ow, oy = (i / p.ow) % p.oh, plane = i / (p.ow * p.oh);
    const float* src = p.x + plane * p.ih * p.iw;
    float acc = 0.0f;
    for (int a = 0; a < p.ty_n; ++a) {
      const float* row = src + p.ty_index[oy * p.ty_n + a] * p.iw;
      float racc = 0.0f;
      for (int b = 0; b < p.tx_n; ++b) racc += p.tx_weight[ox * p.tx_n + b] * row[p.tx_index[ox * p.tx_n + b]];
      acc += p.ty_weight[oy * p.ty_n + a] * racc;
    }
    p.y[i] = acc;
  }
  pdl_trigger();
}

}  // namespace

void launch_im2col(const Im2colParams& p, cudaStream_t s) {
  const int64_t total = p.groups * p.cg * p.kh * p.kw * p.oh * p.ow;
  if (total == 0) return;
  launch_k(im2col_kernel, grid_for(total, 256), 256, 0, s, p);
}

void launch_col2im(const Col2imParams& p, cudaStream_t s) {
  const int64_t total = p.groups * p.og * p.oh * p.ow;
  if (total == 0) return;
  launch_k(col2im_kernel, grid_for(total, 256), 256, 0, s, p);
}

void launch_channel_bias(const ChannelBiasParams& p, cudaStream_t s) {
  const int64_t total = p.images * p.channels * p.positions;
  if (total == 0) return;
  launch_k(channel_bias_kernel, grid_for(total, 256), 256, 0, s, p);
}

void launch_group_norm(const GroupNormKParams& p, cudaStream_t s) {
  if (p.n * p.groups == 0) return;
  launch_k(group_norm_kernel, static_cast<unsigned>(p.n * p.groups), 256, 0, s, p);
}

void launch_interpolate(const InterpolateKParams& p, cudaStream_t s) {
  const int64_t total = p.planes * p.oh * p.ow;
  if (total == 0) return;
  launch_k(interpolate_kernel, grid_for(total, 256), 256, 0, s, p);
}

}  // namespace rlx::cuda_backend
