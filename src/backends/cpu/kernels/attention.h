// Scaled dot-product attention with GQA, softcap and causal / sliding-window masks over
// per-query absolute positions. Flash-style online softmax (no S x T score matrix),
// parallel over heads x query blocks (from 16 query rows as blocked GEMMs: scores and
// p·v through the f32 micro-tiles); decode (S == 1) also splits T across threads.
#pragma once

#include <cstdint>

#include "backends/cpu/kernels/kernel_context.h"

namespace rlx::cpu {

enum class AttnMask : uint8_t {
  kNone,           ///< every key visible
  kCausal,         ///< key j visible iff j <= pos
  kSlidingWindow,  ///< j <= pos and pos - j < window
};

/// q[S, H*D], k[T, KVH*D], v[T, KVH*D], o[S, H*D] (row strides may exceed H*D / KVH*D,
/// e.g. views into a KV cache). Head h reads kv head h / (H / KVH).
struct AttentionParams {
  int64_t seq_q = 0;       ///< S
  int64_t seq_kv = 0;      ///< T
  int64_t n_heads = 0;     ///< H
  int64_t n_kv_heads = 0;  ///< KVH, divides H
  int64_t head_dim = 0;    ///< D
  int64_t q_stride = 0, k_stride = 0, v_stride = 0, o_stride = 0;  ///< elements per row; 0 = dense
  float scale = 0.0f;      ///< score scale; 0 means 1/sqrt(D)
  float softcap = 0.0f;    ///< > 0: s = softcap * tanh(s / softcap), applied before masking
  AttnMask mask = AttnMask::kCausal;
  int64_t window = 0;      ///< sliding window length (> 0) for kSlidingWindow
  /// Absolute position of each query [S]; null means pos_i = T - S + i. Keys sit at
  /// positions 0..T-1.
  const int32_t* q_pos = nullptr;
};

/// o = softmax(mask(softcap(scale * q k^T))) v per head. A query that sees no key gets
/// zeros. Never allocates per call beyond per-thread scratch.
void attention_f32(const KernelContext& ctx, const AttentionParams& p, const float* q, const float* k,
                   const float* v, float* o);

/// The same with a half-precision KV cache (k/v are IEEE f16 bits), following the
/// numerics of llama.cpp's f16 cache: q is rounded to f16 before q.k (products summed
/// in f32), the softmax is computed in f32 over the whole visible row, and the
/// normalised probabilities are rounded to f16 before the weighted sum of v.
void attention_f16kv(const KernelContext& ctx, const AttentionParams& p, const float* q, const uint16_t* k,
                     const uint16_t* v, float* o);

}  // namespace rlx::cpu
