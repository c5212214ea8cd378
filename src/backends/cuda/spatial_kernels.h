// Host-callable launchers of the CUDA kernels of the ops over spatial dims (conv's
// im2col and bias, group norm, interpolate, SAM's windows and rel_pos_attention), with plain-data parameter structs; shared
// by kernels_spatial.cu (nvcc) and cuda_steps_spatial.cpp (C++). Conv's products run
// through cuBLASLt (the executor's GEMM plans); these kernels do the data movement and
// the epilogues. All compute in f32.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace rlx::cuda_backend {

/// One image's unfolding for conv: col[g][k][p] (k = (c', ky, kx) of group g's input
/// channels, p an output position) = x[g*cg + c', oy*sh - ph + ky*dh, ox*sw - pw + kx*dw],
/// 0 outside the input. A conv1d has h = kh = oh = 1, sh = dh = 1, ph = 0.
struct Im2colParams {
  const float* x = nullptr;  ///< one image [C, H, W]
  float* col = nullptr;      ///< [groups, cg*kh*kw, oh*ow]
  int64_t groups = 1, cg = 1, h = 1, w = 1, kh = 1, kw = 1, oh = 1, ow = 1;
  int64_t sh = 1, sw = 1, ph = 0, pw = 0, dh = 1, dw = 1;
};
void launch_im2col(const Im2colParams& p, cudaStream_t s);

/// Transposed conv's gather, one image: y[g*og + o', q] (+= nothing: it sets the value) =
/// bias[.] + sum over (ky, kx) and input positions p with q = p*stride - pad + k*dil of
/// cols[g][(o', ky, kx)][p], where cols = W_g^T . x_g was made by a GEMM. A conv1d has
/// h = kh = oh = 1, sh = dh = 1, ph = 0.
struct Col2imParams {
  const float* cols = nullptr;  ///< [groups, og*kh*kw, h*w]
  const float* bias = nullptr;  ///< [groups*og] or null
  float* y = nullptr;           ///< one image [groups*og, oh, ow]
  int64_t groups = 1, og = 1, h = 1, w = 1, kh = 1, kw = 1, oh = 1, ow = 1;
  int64_t sh = 1, sw = 1, ph = 0, pw = 0, dh = 1, dw = 1;
};
void launch_col2im(const Col2imParams& p, cudaStream_t s);

/// y[n, o, p] += bias[o] over [n_images, o, positions].
struct ChannelBiasParams {
  float* y = nullptr;
  const float* bias = nullptr;
  int64_t images = 1, channels = 1, positions = 1;
};
void launch_channel_bias(const ChannelBiasParams& p, cudaStream_t s);

/// Group norm of x[n, c, spatial]: per (n, group) mean and biased variance over its
/// c/groups channels and all positions (in double), y = (x - mean) / sqrt(var + eps) *
/// gamma[c] (+ beta[c]).
struct GroupNormKParams {
  const float* x = nullptr;
  const float* gamma = nullptr;
  const float* beta = nullptr;  ///< may be null
  float* y = nullptr;
  int64_t n = 1, c = 1, spatial = 1, groups = 1;
  float eps = 1e-5f;
};
void launch_group_norm(const GroupNormKParams& p, cudaStream_t s);

/// Resampling of planes [planes, ih, iw] to [planes, oh, ow] by separable taps: output
/// row i reads input rows ty_index[i*ty_n + t] with weights ty_weight[...] (likewise
/// columns); the tap tables live in device memory (uploaded at compile).
struct InterpolateKParams {
  const float* x = nullptr;
  float* y = nullptr;
  int64_t planes = 1, ih = 1, iw = 1, oh = 1, ow = 1;
  int ty_n = 1, tx_n = 1;
  const int64_t* ty_index = nullptr;
  const float* ty_weight = nullptr;
  const int64_t* tx_index = nullptr;
  const float* tx_weight = nullptr;
};
void launch_interpolate(const InterpolateKParams& p, cudaStream_t s);

/// window_partition (image [images, height, width, chan] -> windows [images*nh*nw, win,
/// win, chan], zeros where the padding is) or its inverse window_unpartition.
struct WindowKParams {
  const float* x = nullptr;
  float* y = nullptr;
  int64_t images = 1, height = 1, width = 1, chan = 1, win = 1, nh = 1, nw = 1;
  bool partition = true;
};
void launch_window(const WindowKParams& p, cudaStream_t s);

/// rel_pos_attention (RelPosAttentionAttrs in rlx/ir/op.h) over q, k, v, o [items, T,
/// heads*head_dim] with rel_h [2*grid_h-1, head_dim], rel_w [2*grid_w-1, head_dim].
/// Flash-style on the f32 cores: a block per (32 queries, head, item) streams key tiles
/// through shared memory with an online softmax; head_dim <= kRelPosMaxHeadDim.
struct RelPosAttnKParams {
  const float *q = nullptr, *k = nullptr, *v = nullptr, *rel_h = nullptr, *rel_w = nullptr;
  float* o = nullptr;
  int64_t items = 1, n_heads = 1, head_dim = 1, grid_h = 1, grid_w = 1;
  float scale = 1.0f;
};
inline constexpr int64_t kRelPosMaxHeadDim = 256;
/// Dynamic shared memory one block of the kernel needs for these sizes.
int64_t rel_pos_attention_smem(int64_t head_dim, int64_t grid_h, int64_t grid_w);
/// Raises the kernel's shared-memory limit on the current device to its opt-in maximum
/// (once; call at compile, not inside a capture). False when `smem_bytes` exceeds it.
bool prepare_rel_pos_attention(int64_t smem_bytes);
void launch_rel_pos_attention(const RelPosAttnKParams& p, cudaStream_t s);

/// The pieces of rel_pos_attention's GEMM form (long grids: two cuBLASLt products per
/// head with the scores in scratch). Split: q, k, v [items, T, H*D] -> head-major
/// [items, H, T, D] copies. Softmax: each row of scores [items*H*T, T] (= q kᵀ of a head)
/// becomes softmax(scale * s + bias) in place, the bias read from bias_h [items*H*T,
/// 2*grid_h - 1] and bias_w [.., 2*grid_w - 1] (each row's q times every table row, made
/// by two GEMMs). Merge: o [items, H, T, D] -> [items, T, H*D].
struct RelPosGemmKParams {
  const float *q = nullptr, *k = nullptr, *v = nullptr;
  float *qh = nullptr, *kh = nullptr, *vh = nullptr, *scores = nullptr, *oh = nullptr, *o = nullptr;
  const float *bias_h = nullptr, *bias_w = nullptr;
  int64_t items = 1, n_heads = 1, head_dim = 1, grid_h = 1, grid_w = 1;
  float scale = 1.0f;
};
inline constexpr int64_t kRelPosSoftmaxMaxKeys = 8192;  ///< the softmax kernel's row limit
inline constexpr int64_t kRelPosGemmMinKeys = 64;  ///< grids of this many tokens take the GEMM form
void launch_rel_pos_split(const RelPosGemmKParams& p, cudaStream_t s);
void launch_rel_pos_softmax(const RelPosGemmKParams& p, cudaStream_t s);
void launch_rel_pos_merge(const RelPosGemmKParams& p, cudaStream_t s);

}  // namespace rlx::cuda_backend
