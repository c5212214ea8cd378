// Attention over a grid of tokens with SAM's decomposed relative-position bias (the
// rel_pos_attention op; its definition is RelPosAttentionAttrs in rlx/ir/op.h): per item,
// head and block of query rows the scores q kᵀ and the product p v run through the f32
// GEMM micro-tiles, and the bias — a row offset along the grid's height plus a column
// offset along its width, each a dot product of the query with a table row — is added
// to the scores between them from two small per-block tables.
#pragma once

#include <cstdint>

#include "backends/cpu/kernels/kernel_context.h"

namespace rlx::cpu {

struct RelPosAttentionParams {
  int64_t items = 0;               ///< N: windows or images
  int64_t n_heads = 0;             ///< H
  int64_t head_dim = 0;            ///< D
  int64_t grid_h = 0, grid_w = 0;  ///< T = grid_h * grid_w tokens per item, row-major
  float scale = 0.0f;              ///< 0 means 1/sqrt(D)
};

/// o = softmax(scale q kᵀ + bias) v per item and head; q, k, v, o are [N, T, H*D]
/// dense, rel_h [2*grid_h - 1, D], rel_w [2*grid_w - 1, D]. Uses per-thread scratch
/// (kAttention, and the calling thread's kPanels for the packed K and V of up to
/// 256 MiB of items at a time); allocates only the list of packed views.
void rel_pos_attention_f32(const KernelContext& ctx, const RelPosAttentionParams& p, const float* q, const float* k,
                           const float* v, const float* rel_h, const float* rel_w, float* o);

}  // namespace rlx::cpu
