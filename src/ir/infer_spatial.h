// Shape and dtype inference of the ops over spatial dims (conv, group_norm, interpolate,
// SAM's windows and relative-position attention),
// called by infer.cpp's dispatch. Internal to src/ir.
#pragma once

#include <optional>
#include <vector>

#include "rlx/base/status.h"
#include "rlx/ir/graph.h"
#include "rlx/ir/op.h"

namespace rlx::ir::detail {

/// conv: x[N, C, *S] (1 or 2 spatial dims), w[O, C/groups, *K], optional bias[O] -> [N, O, *S'].
Expected<TensorType> infer_conv(const std::vector<TensorType>& in, const ConvAttrs& a);
/// conv_transpose: x[N, C, *S], w[C, O/groups, *K], optional bias[O] -> [N, O, *S'].
Expected<TensorType> infer_conv_transpose(const std::vector<TensorType>& in, const ConvTransposeAttrs& a);
/// group_norm: x[N, C, *S], gamma[C], optional beta[C] -> x's type.
Expected<TensorType> infer_group_norm(const std::vector<TensorType>& in, const GroupNormAttrs& a);
/// interpolate: x[N, C, H, W] -> [N, C, size[0], size[1]].
Expected<TensorType> infer_interpolate(const TensorType& x, const InterpolateAttrs& a);

/// window_partition: x[B, H, W, C] -> [B * ceil(H/win) * ceil(W/win), win, win, C].
Expected<TensorType> infer_window_partition(const TensorType& x, const WindowAttrs& a);
/// window_unpartition: x[B * nh * nw, win, win, C] -> [B, height, width, C].
Expected<TensorType> infer_window_unpartition(const TensorType& x, const WindowAttrs& a);
/// rel_pos_attention: q, k, v [N, T, H*D], rel_h [2*gh-1, D], rel_w [2*gw-1, D] -> q's type.
Expected<TensorType> infer_rel_pos_attention(const std::vector<TensorType>& in, const RelPosAttentionAttrs& a);

/// The output length of one conv spatial dim, or nullopt when it is below 1 or the
/// arithmetic overflows: (len + 2*pad - dil*(k-1) - 1) / stride + 1.
std::optional<int64_t> conv_out_len(int64_t len, int64_t k, int64_t stride, int64_t pad, int64_t dil);

}  // namespace rlx::ir::detail
