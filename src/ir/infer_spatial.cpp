// Shape inference of conv, group_norm and interpolate (see infer_spatial.h): the layout
// rules of NCL / NCHW tensors, with errors that name the operand and the rule broken.
#include "ir/infer_spatial.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>

namespace rlx::ir::detail {
namespace {

Error bad(const std::string& what) { return Error::verify("{}", what); }

constexpr int64_t kMaxSpatialAttr = int64_t{1} << 20;  // strides, pads, dilations, sizes

}  // namespace

std::optional<int64_t> conv_out_len(int64_t len, int64_t k, int64_t stride, int64_t pad, int64_t dil) {
  int64_t span = 0, padded = 0;  // dil*(k-1) + 1 and len + 2*pad, checked for overflow
  if (__builtin_mul_overflow(dil, k - 1, &span) || __builtin_add_overflow(span, int64_t{1}, &span) ||
      __builtin_mul_overflow(pad, int64_t{2}, &padded) || __builtin_add_overflow(padded, len, &padded))
    return std::nullopt;
  if (padded < span || stride < 1) return std::nullopt;
  return (padded - span) / stride + 1;
}

Expected<TensorType> infer_conv(const std::vector<TensorType>& in, const ConvAttrs& a) {
  const TensorType &x = in[0], &w = in[1];
  if (!is_float(x.dtype) || x.dtype != w.dtype)
    return bad(fmt::format("conv input and weight must share a float type, got {} and {}", x.to_string(), w.to_string()));
  const int64_t rank = x.shape.rank();
  if (rank != 3 && rank != 4)
    return bad(fmt::format("conv input must be [N, C, L] or [N, C, H, W], got {}", x.to_string()));
  const auto spatial = static_cast<size_t>(rank - 2);
  if (w.shape.rank() != rank)
    return bad(fmt::format("conv weight must be [O, C/groups{}], got {}", spatial == 1 ? ", K" : ", KH, KW", w.to_string()));
  for (const Dim& d : w.shape)
    if (!d.is_static()) return bad(fmt::format("conv weight needs static dims, got {}", w.to_string()));
  for (size_t i = 1; i < static_cast<size_t>(rank); ++i)
    if (!x.shape[static_cast<int64_t>(i)].is_static())
      return bad(fmt::format("conv input needs static channel and spatial dims, got {}", x.to_string()));
  auto check_list = [&](const std::vector<int64_t>& v, const char* name, int64_t lo) -> Status {
    if (!v.empty() && v.size() != spatial)
      return bad(fmt::format("conv {} has {} entries for {} spatial dims", name, v.size(), spatial));
    for (int64_t e : v)
      if (e < lo || e > kMaxSpatialAttr) return bad(fmt::format("conv {} {} is out of range [{}, {}]", name, e, lo, kMaxSpatialAttr));
    return {};
  };
  TRY(check_list(a.stride, "stride", 1));
  TRY(check_list(a.padding, "padding", 0));
  TRY(check_list(a.dilation, "dilation", 1));
  const int64_t c = x.shape[1].value(), o = w.shape[0].value(), cg = w.shape[1].value();
  if (a.groups < 1 || a.groups > kMaxSpatialAttr || c % a.groups != 0 || o % a.groups != 0)
    return bad(fmt::format("conv groups {} must divide the {} input and {} output channels", a.groups, c, o));
  if (cg * a.groups != c)
    return bad(fmt::format("conv weight {} needs C/groups = {} input channels per group (C = {}, groups = {})",
                           w.to_string(), c / a.groups, c, a.groups));
  if (in.size() == 3 && (in[2].dtype != x.dtype || in[2].shape != Shape{Dim(o)}))
    return bad(fmt::format("conv bias must be {}[{}], got {}", dtype_name(x.dtype), o, in[2].to_string()));
  std::vector<Dim> out{x.shape[0], Dim(o)};
  for (size_t i = 0; i < spatial; ++i) {
    const int64_t len = x.shape[static_cast<int64_t>(2 + i)].value(), k = w.shape[static_cast<int64_t>(2 + i)].value();
    const int64_t s = a.stride.empty() ? 1 : a.stride[i], p = a.padding.empty() ? 0 : a.padding[i];
    const int64_t d = a.dilation.empty() ? 1 : a.dilation[i];
    if (k < 1) return bad(fmt::format("conv kernel {} has an empty spatial dim", w.to_string()));
    const std::optional<int64_t> n = conv_out_len(len, k, s, p, d);
    if (!n)
      return bad(fmt::format("conv spatial dim {} of length {} (padding {}) is shorter than the dilated kernel ({} x {})",
                             i, len, p, k, d));
    out.emplace_back(*n);
  }
  return TensorType{x.dtype, Shape(std::move(out))};
}

Expected<TensorType> infer_conv_transpose(const std::vector<TensorType>& in, const ConvTransposeAttrs& a) {
  const TensorType &x = in[0], &w = in[1];
  if (!is_float(x.dtype) || x.dtype != w.dtype)
    return bad(fmt::format("conv_transpose input and weight must share a float type, got {} and {}", x.to_string(),
                           w.to_string()));
  const int64_t rank = x.shape.rank();
  if (rank != 3 && rank != 4)
    return bad(fmt::format("conv_transpose input must be [N, C, L] or [N, C, H, W], got {}", x.to_string()));
  const auto spatial = static_cast<size_t>(rank - 2);
  if (w.shape.rank() != rank)
    return bad(fmt::format("conv_transpose weight must be [C, O/groups{}], got {}", spatial == 1 ? ", K" : ", KH, KW",
                           w.to_string()));
  for (const Dim& d : w.shape)
    if (!d.is_static()) return bad(fmt::format("conv_transpose weight needs static dims, got {}", w.to_string()));
  for (int64_t i = 1; i < rank; ++i)
    if (!x.shape[i].is_static())
      return bad(fmt::format("conv_transpose input needs static channel and spatial dims, got {}", x.to_string()));
  auto check_list = [&](const std::vector<int64_t>& v, const char* name, int64_t lo) -> Status {
    if (!v.empty() && v.size() != spatial)
      return bad(fmt::format("conv_transpose {} has {} entries for {} spatial dims", name, v.size(), spatial));
    for (int64_t e : v)
      if (e < lo || e > kMaxSpatialAttr)
        return bad(fmt::format("conv_transpose {} {} is out of range [{}, {}]", name, e, lo, kMaxSpatialAttr));
    return {};
  };
  TRY(check_list(a.stride, "stride", 1));
  TRY(check_list(a.padding, "padding", 0));
  TRY(check_list(a.dilation, "dilation", 1));
  TRY(check_list(a.output_padding, "output_padding", 0));
  const int64_t c = x.shape[1].value();
  if (w.shape[0].value() != c)
    return bad(fmt::format("conv_transpose weight {} must have the input's {} channels first", w.to_string(), c));
  if (a.groups < 1 || a.groups > kMaxSpatialAttr || c % a.groups != 0)
    return bad(fmt::format("conv_transpose groups {} must divide the {} input channels", a.groups, c));
  const int64_t o = w.shape[1].value() * a.groups;
  if (in.size() == 3 && (in[2].dtype != x.dtype || in[2].shape != Shape{Dim(o)}))
    return bad(fmt::format("conv_transpose bias must be {}[{}], got {}", dtype_name(x.dtype), o, in[2].to_string()));
  std::vector<Dim> out{x.shape[0], Dim(o)};
  for (size_t i = 0; i < spatial; ++i) {
    const int64_t len = x.shape[static_cast<int64_t>(2 + i)].value(), k = w.shape[static_cast<int64_t>(2 + i)].value();
    const int64_t s = a.stride.empty() ? 1 : a.stride[i], p = a.padding.empty() ? 0 : a.padding[i];
    const int64_t d = a.dilation.empty() ? 1 : a.dilation[i], op = a.output_padding.empty() ? 0 : a.output_padding[i];
    if (op >= std::max(s, d))
      return bad(fmt::format("conv_transpose output_padding {} must be smaller than stride {} or dilation {}", op, s, d));
    if (k < 1) return bad(fmt::format("conv_transpose kernel {} has an empty spatial dim", w.to_string()));
    // (len-1)*s - 2*p + d*(k-1) + op + 1, checked for overflow.
    int64_t n = 0, tail = 0;
    const bool overflow = __builtin_mul_overflow(len - 1, s, &n) || __builtin_mul_overflow(d, k - 1, &tail) ||
                          __builtin_add_overflow(n, tail, &n) || __builtin_add_overflow(n, op + 1, &n) ||
                          __builtin_sub_overflow(n, 2 * p, &n);
    if (overflow || n < 1)
      return bad(fmt::format("conv_transpose spatial dim {} of length {} gives no output (padding {})", i, len, p));
    out.emplace_back(n);
  }
  return TensorType{x.dtype, Shape(std::move(out))};
}

Expected<TensorType> infer_group_norm(const std::vector<TensorType>& in, const GroupNormAttrs& a) {
  const TensorType& x = in[0];
  if (!is_float(x.dtype)) return bad(fmt::format("group_norm input must be a float type, got {}", x.to_string()));
  if (x.shape.rank() < 2 || !x.shape[1].is_static())
    return bad(fmt::format("group_norm input must be [N, C, ...] with a static C, got {}", x.to_string()));
  const int64_t c = x.shape[1].value();
  if (a.groups < 1 || c % a.groups != 0)
    return bad(fmt::format("group_norm groups {} must divide the {} channels", a.groups, c));
  if (!(a.eps >= 0) || !std::isfinite(a.eps)) return bad(fmt::format("group_norm eps must be >= 0, got {}", a.eps));
  for (size_t i = 1; i < in.size(); ++i)
    if (!is_float(in[i].dtype) || in[i].shape != Shape{Dim(c)})
      return bad(fmt::format("group_norm {} must be [{}], got {}", i == 1 ? "gamma" : "beta", c, in[i].to_string()));
  return x;
}

Expected<TensorType> infer_interpolate(const TensorType& x, const InterpolateAttrs& a) {
  if (!is_float(x.dtype)) return bad(fmt::format("interpolate input must be a float type, got {}", x.to_string()));
  if (x.shape.rank() != 4 || !x.shape[2].is_static() || !x.shape[3].is_static())
    return bad(fmt::format("interpolate input must be [N, C, H, W] with static H and W, got {}", x.to_string()));
  if (a.size.size() != 2 || a.size[0] < 1 || a.size[1] < 1 || a.size[0] > kMaxSpatialAttr || a.size[1] > kMaxSpatialAttr)
    return bad(fmt::format("interpolate size must be two lengths in [1, {}] (H, W)", kMaxSpatialAttr));
  if (a.mode == InterpMode::Nearest && a.align_corners)
    return bad("interpolate nearest takes no align_corners");
  return TensorType{x.dtype, Shape{x.shape[0], x.shape[1], Dim(a.size[0]), Dim(a.size[1])}};
}

namespace {

// The static dims of a rank-4 window operand, or an error naming the op.
Expected<std::vector<int64_t>> window_dims(const TensorType& x, const char* op, const char* form) {
  if (!is_float(x.dtype)) return bad(fmt::format("{} input must be a float type, got {}", op, x.to_string()));
  if (x.shape.rank() != 4 || !x.shape.is_static())
    return bad(fmt::format("{} input must be {} with static dims, got {}", op, form, x.to_string()));
  return x.shape.static_dims();
}

}  // namespace

Expected<TensorType> infer_window_partition(const TensorType& x, const WindowAttrs& a) {
  ASSIGN_OR_RETURN(std::vector<int64_t> d, window_dims(x, "window_partition", "[B, H, W, C]"));
  if (a.window < 1 || a.window > kMaxSpatialAttr)
    return bad(fmt::format("window_partition window {} must be in [1, {}]", a.window, kMaxSpatialAttr));
  if (a.height != 0 || a.width != 0)
    return bad(fmt::format("window_partition takes no height / width (got {} x {})", a.height, a.width));
  const int64_t nh = (d[1] + a.window - 1) / a.window, nw = (d[2] + a.window - 1) / a.window;
  int64_t per_image = 0, n = 0;
  if (__builtin_mul_overflow(nh, nw, &per_image) || __builtin_mul_overflow(d[0], per_image, &n))
    return bad("window_partition: the window count overflows");
  return TensorType{x.dtype, Shape{Dim(n), Dim(a.window), Dim(a.window), Dim(d[3])}};
}

Expected<TensorType> infer_window_unpartition(const TensorType& x, const WindowAttrs& a) {
  ASSIGN_OR_RETURN(std::vector<int64_t> d, window_dims(x, "window_unpartition", "[N, window, window, C]"));
  if (a.window < 1 || d[1] != a.window || d[2] != a.window)
    return bad(fmt::format("window_unpartition input {} must hold {} x {} windows", x.to_string(), a.window, a.window));
  if (a.height < 1 || a.width < 1 || a.height > kMaxSpatialAttr || a.width > kMaxSpatialAttr)
    return bad(fmt::format("window_unpartition height and width must be in [1, {}], got {} x {}", kMaxSpatialAttr,
                           a.height, a.width));
  const int64_t per_image = ((a.height + a.window - 1) / a.window) * ((a.width + a.window - 1) / a.window);
  if (d[0] % per_image != 0)
    return bad(fmt::format("window_unpartition: {} windows are no whole number of {} x {} images ({} windows each)",
                           d[0], a.height, a.width, per_image));
  return TensorType{x.dtype, Shape{Dim(d[0] / per_image), Dim(a.height), Dim(a.width), Dim(d[3])}};
}

Expected<TensorType> infer_rel_pos_attention(const std::vector<TensorType>& in, const RelPosAttentionAttrs& a) {
  const TensorType& q = in[0];
  if (!is_float(q.dtype)) return bad(fmt::format("rel_pos_attention q must be a float type, got {}", q.to_string()));
  if (a.n_heads < 1 || a.head_dim < 1 || a.grid_h < 1 || a.grid_w < 1 || a.grid_h > kMaxSpatialAttr ||
      a.grid_w > kMaxSpatialAttr)
    return bad("rel_pos_attention needs n_heads, head_dim, grid_h and grid_w >= 1");
  if (!std::isfinite(a.scale) || a.scale < 0) return bad(fmt::format("rel_pos_attention scale must be >= 0, got {}", a.scale));
  int64_t tokens = 0, width = 0;
  if (__builtin_mul_overflow(a.grid_h, a.grid_w, &tokens) || tokens > kMaxSpatialAttr)
    return bad(fmt::format("rel_pos_attention grid {} x {} is too large", a.grid_h, a.grid_w));
  if (a.n_heads > kMaxSpatialAttr || a.head_dim > kMaxSpatialAttr || __builtin_mul_overflow(a.n_heads, a.head_dim, &width))
    return bad(fmt::format("rel_pos_attention n_heads {} x head_dim {} is too large", a.n_heads, a.head_dim));
  const char* names[] = {"q", "k", "v"};
  for (size_t i = 0; i < 3; ++i) {
    const TensorType& t = in[i];
    if (t.dtype != q.dtype || t.shape.rank() != 3 || !t.shape[1].is_static() || t.shape[1].value() != tokens ||
        !t.shape[2].is_static() || t.shape[2].value() != width || t.shape[0] != q.shape[0])
      return bad(fmt::format("rel_pos_attention {} must be {}[N, {}, {}] like q, got {}", names[i], dtype_name(q.dtype),
                             tokens, width, t.to_string()));
  }
  const int64_t lens[] = {2 * a.grid_h - 1, 2 * a.grid_w - 1};
  for (size_t i = 0; i < 2; ++i) {
    const TensorType& t = in[3 + i];
    if (t.dtype != q.dtype || t.shape != Shape{Dim(lens[i]), Dim(a.head_dim)})
      return bad(fmt::format("rel_pos_attention {} must be {}[{}, {}], got {}", i == 0 ? "rel_h" : "rel_w",
                             dtype_name(q.dtype), lens[i], a.head_dim, t.to_string()));
  }
  return q;
}

}  // namespace rlx::ir::detail
