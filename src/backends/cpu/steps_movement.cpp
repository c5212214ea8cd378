// CPU steps for data movement: Reshape/Narrow/Cast copies (when the planner did not
// make them views), Transpose, Concat, Expand, Gather and UpdateSlice (in-place write
// into a persistent handle), plus the no-op boundary kinds.
#include <algorithm>
#include <cstring>

#include "backends/cpu/cpu_step.h"
#include "rlx/formats/quant.h"

namespace rlx::cpu_backend {
namespace {

using ir::DType;

struct CopyParams {
  int64_t bytes = 0;
  int64_t row_bytes = 0;  // bytes per bucket row (extent scaling)
};

Status copy_fn(const Step& s, const StepCtx& ctx) {
  const CopyParams& p = s.p<CopyParams>();
  const int64_t n = s.scalable && ctx.extent_on ? ctx.rows(p.bytes / p.row_bytes, true) * p.row_bytes : p.bytes;
  if (s.out_ptr != s.in_ptr[0]) std::memmove(s.out_ptr, s.in_ptr[0], static_cast<size_t>(n));
  return {};
}

constexpr int kMaxDims = 8;

struct StridedParams {
  int rank = 0;
  int64_t out_dims[kMaxDims] = {};
  int64_t in_strides[kMaxDims] = {};  // elements, per output dim
  int64_t es = 4;
  int64_t total = 0;
};

template <typename T>
void strided_copy(const StridedParams& p, const uint8_t* in, uint8_t* out, int64_t b, int64_t e) {
  const T* src = reinterpret_cast<const T*>(in);
  T* dst = reinterpret_cast<T*>(out);
  int64_t idx[kMaxDims];
  int64_t rem = b;
  for (int d = p.rank - 1; d >= 0; --d) {
    idx[d] = rem % p.out_dims[d];
    rem /= p.out_dims[d];
  }
  int64_t off = 0;
  for (int d = 0; d < p.rank; ++d) off += idx[d] * p.in_strides[d];
  const int64_t last_stride = p.in_strides[p.rank - 1];
  for (int64_t o = b; o < e; ++o) {
    dst[o] = src[off];
    int d = p.rank - 1;
    ++idx[d];
    off += last_stride;
    while (d > 0 && idx[d] >= p.out_dims[d]) {
      off -= idx[d] * p.in_strides[d];
      idx[d] = 0;
      --d;
      ++idx[d];
      off += p.in_strides[d];
    }
  }
}

Status strided_fn(const Step& s, const StepCtx& ctx) {
  const StridedParams& p = s.p<StridedParams>();
  parallel_for(ctx, p.total, 1 << 15, [&](int64_t b, int64_t e) {
    switch (p.es) {
      case 1: strided_copy<uint8_t>(p, s.in_ptr[0], s.out_ptr, b, e); break;
      case 2: strided_copy<uint16_t>(p, s.in_ptr[0], s.out_ptr, b, e); break;
      case 8: strided_copy<uint64_t>(p, s.in_ptr[0], s.out_ptr, b, e); break;
      default: strided_copy<uint32_t>(p, s.in_ptr[0], s.out_ptr, b, e); break;
    }
  });
  return {};
}

Status make_strided(BuildCtx& ctx, Step& step, const std::vector<int64_t>& out_dims, const std::vector<int64_t>& strides,
                    int64_t base_elems) {
  const ir::Node& n = ctx.node();
  if (ir::is_packed(n.dtype)) return step_error(ctx, "packed dtype {}", ir::dtype_name(n.dtype));
  if (out_dims.size() > kMaxDims) return step_error(ctx, "rank above {}", kMaxDims);
  auto p = std::make_shared<StridedParams>();
  p->rank = std::max<int>(1, static_cast<int>(out_dims.size()));
  p->out_dims[0] = 1;
  for (size_t d = 0; d < out_dims.size(); ++d) {
    p->out_dims[d] = out_dims[d];
    p->in_strides[d] = strides[d];
  }
  p->es = elem_size(n.dtype);
  p->total = prod(out_dims);
  step.fn = &strided_fn;
  step.params = p;
  // base offset folded into the operand reference
  step.in[0].offset += base_elems * p->es;
  return {};
}

struct ConcatParams {
  int64_t outer = 1, inner_bytes = 1, out_len = 0;
  std::vector<int64_t> lens;
};

Status concat_fn(const Step& s, const StepCtx& ctx) {
  const ConcatParams& p = s.p<ConcatParams>();
  parallel_for(ctx, p.outer, 16, [&](int64_t b, int64_t e) {
    for (int64_t o = b; o < e; ++o) {
      int64_t at = 0;
      for (size_t i = 0; i < p.lens.size(); ++i) {
        const int64_t chunk = p.lens[i] * p.inner_bytes;
        std::memcpy(s.out_ptr + (o * p.out_len + at) * p.inner_bytes, s.in_ptr[i] + o * chunk,
                    static_cast<size_t>(chunk));
        at += p.lens[i];
      }
    }
  });
  return {};
}

struct GatherParams {
  int64_t outer = 1, axis_len = 1, n_idx = 1, inner_bytes = 1;
  DType idx_dt = DType::I32;
  std::string what;  // for the error message
};

Status gather_fn(const Step& s, const StepCtx& ctx) {
  const GatherParams& p = s.p<GatherParams>();
  const int64_t n_idx = s.scalable ? ctx.rows(p.n_idx, true) : p.n_idx;
  for (int64_t i = 0; i < n_idx; ++i) {
    const int64_t ix = load_i(p.idx_dt, s.in_ptr[1], i);
    if (ix < 0 || ix >= p.axis_len)
      return Error::invalid_argument("{}: index {} at position {} is out of range [0, {})", p.what, ix, i, p.axis_len);
  }
  parallel_for(ctx, p.outer * n_idx, 64, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      const int64_t o = t / n_idx, i = t % n_idx;
      const int64_t ix = load_i(p.idx_dt, s.in_ptr[1], i);
      std::memcpy(s.out_ptr + (o * p.n_idx + i) * p.inner_bytes, s.in_ptr[0] + (o * p.axis_len + ix) * p.inner_bytes,
                  static_cast<size_t>(p.inner_bytes));
    }
  });
  return {};
}

struct UpdateParams {
  int64_t outer = 1, dst_len = 0, src_len = 0, inner_bytes = 0, total_bytes = 0;
  bool src_bucket = false;
  bool start_per_outer = false;  // one start per outer slice (a stacked cache of several sequences)
  DType start_dt = DType::I32;
  std::string what;
};

Status update_fn(const Step& s, const StepCtx& ctx) {
  const UpdateParams& p = s.p<UpdateParams>();
  const int64_t len = p.src_bucket && ctx.extent_on ? p.src_len / ctx.upper * ctx.actual : p.src_len;
  for (int64_t o = 0; o < (p.start_per_outer ? p.outer : 1); ++o) {
    const int64_t start = load_i(p.start_dt, s.in_ptr[2], o);
    if (start < 0 || start + len > p.dst_len)
      return Error::invalid_argument("{}: writing {} rows at {} exceeds the handle's {} rows{}", p.what, len, start,
                                     p.dst_len, p.start_per_outer ? fmt::format(" (slice {})", o) : std::string());
  }
  // The handle's storage is mutable by design: UpdateSlice writes it in place.
  auto* dst = const_cast<uint8_t*>(s.in_ptr[0]);
  for (int64_t o = 0; o < p.outer; ++o) {
    const int64_t start = load_i(p.start_dt, s.in_ptr[2], p.start_per_outer ? o : 0);
    std::memcpy(dst + (o * p.dst_len + start) * p.inner_bytes, s.in_ptr[1] + o * p.src_len * p.inner_bytes,
                static_cast<size_t>(len * p.inner_bytes));
  }
  if (s.out_ptr != dst) std::memcpy(s.out_ptr, dst, static_cast<size_t>(p.total_bytes));
  return {};
}

}  // namespace

Status build_boundary(BuildCtx&, Step& step) {
  step.fn = nullptr;  // storage only; no work
  return {};
}

Status build_copy(BuildCtx& ctx, Step& step) {
  const ir::Node& n = ctx.node();
  const ir::Node& x = ctx.input(0);
  if (x.dtype != n.dtype) return step_error(ctx, "copy between dtypes");
  auto p = std::make_shared<CopyParams>();
  p->bytes = ir::dtype_bytes(n.dtype, *n.shape.num_elements()).value_or(0);
  const auto d = n.shape.static_dims();
  p->row_bytes = std::max<int64_t>(1, d.empty() ? p->bytes : p->bytes / std::max<int64_t>(1, d[0]));
  step.fn = &copy_fn;
  step.params = p;
  step.scalable = ctx.outer_is_bucket(ctx.id, 1) && ctx.outer_is_bucket(n.inputs[0], 1) && !d.empty() &&
                  ctx.input(0).shape.rank() > 0 && ctx.input(0).shape[0] == n.shape[0];
  return {};
}

Status build_transpose(BuildCtx& ctx, Step& step) {
  const ir::Node& n = ctx.node();
  const auto& perm = n.attr<ir::TransposeAttrs>().perm;
  const ir::Node& x = ctx.input(0);
  const auto xs = x.shape.rank() ? x.shape.strides() : std::vector<int64_t>{};
  std::vector<int64_t> st;
  for (int64_t p : perm) st.push_back(xs[static_cast<size_t>(p)]);
  return make_strided(ctx, step, n.shape.static_dims(), st, 0);
}

Status build_narrow(BuildCtx& ctx, Step& step) {
  const ir::Node& n = ctx.node();
  const auto& na = n.attr<ir::NarrowAttrs>();
  const ir::Node& x = ctx.input(0);
  const int64_t axis = *x.shape.axis(na.axis);
  const auto xs = x.shape.strides();
  return make_strided(ctx, step, n.shape.static_dims(), xs, na.start * xs[static_cast<size_t>(axis)]);
}

Status build_expand(BuildCtx& ctx, Step& step) {
  const ir::Node& n = ctx.node();
  const auto out = n.shape.static_dims();
  return make_strided(ctx, step, out, broadcast_strides(ctx.input(0).shape.static_dims(), out), 0);
}

Status build_concat(BuildCtx& ctx, Step& step) {
  const ir::Node& n = ctx.node();
  if (ir::is_packed(n.dtype)) return step_error(ctx, "packed dtype");
  const auto d = n.shape.static_dims();
  const int64_t axis = *n.shape.axis(n.attr<ir::AxisAttrs>().axis);
  auto p = std::make_shared<ConcatParams>();
  p->outer = prod(d, 0, static_cast<size_t>(axis));
  p->inner_bytes = prod(d, static_cast<size_t>(axis) + 1, d.size()) * elem_size(n.dtype);
  p->out_len = d[static_cast<size_t>(axis)];
  for (size_t i = 0; i < n.inputs.size(); ++i) p->lens.push_back(ctx.input(i).shape.static_dims()[static_cast<size_t>(axis)]);
  step.fn = &concat_fn;
  step.params = p;
  return {};
}

// Rows of a packed [rows, cols] table (embedding lookup of quantized weights): each
// selected row's blocks are dequantized straight into the f32 output row.
struct PackedGatherParams {
  int64_t rows = 0, cols = 0, row_bytes = 0, n_idx = 0;
  formats::GgmlType type = formats::GgmlType::F32;
  DType idx_dt = DType::I32;
  std::string what;
};

Status packed_gather_fn(const Step& s, const StepCtx& ctx) {
  const PackedGatherParams& p = s.p<PackedGatherParams>();
  const int64_t n_idx = s.scalable ? ctx.rows(p.n_idx, true) : p.n_idx;
  for (int64_t i = 0; i < n_idx; ++i) {
    const int64_t ix = load_i(p.idx_dt, s.in_ptr[1], i);
    if (ix < 0 || ix >= p.rows)
      return Error::invalid_argument("{}: index {} at position {} is out of range [0, {})", p.what, ix, i, p.rows);
  }
  for (int64_t i = 0; i < n_idx; ++i) {
    const int64_t ix = load_i(p.idx_dt, s.in_ptr[1], i);
    TRY(formats::dequantize_row(p.type, s.in_ptr[0] + ix * p.row_bytes, s.outf() + i * p.cols, p.cols));
  }
  return {};
}

Status build_packed_gather(BuildCtx& ctx, Step& step) {
  const ir::Node& n = ctx.node();
  const ir::Node& t = ctx.input(0);
  const ir::Node& idx = ctx.input(1);
  auto p = std::make_shared<PackedGatherParams>();
  const auto type = ggml_type_of(t.dtype);
  if (!type) return step_error(ctx, "no block codec for {}", ir::dtype_name(t.dtype));
  p->type = *type;
  p->rows = t.shape[0].value();
  p->cols = t.shape[1].value();
  p->row_bytes = *ir::dtype_bytes(t.dtype, p->cols);
  p->n_idx = *idx.shape.num_elements();
  p->idx_dt = idx.dtype;
  p->what = ctx.graph->describe(ctx.id);
  step.fn = &packed_gather_fn;
  step.params = p;
  step.scalable = ctx.outer_is_bucket(n.inputs[1], idx.shape.rank());
  return {};
}

Status build_gather(BuildCtx& ctx, Step& step) {
  const ir::Node& n = ctx.node();
  const ir::Node& t = ctx.input(0);
  const ir::Node& idx = ctx.input(1);
  if (ir::is_packed(t.dtype)) return build_packed_gather(ctx, step);
  const auto td = t.shape.static_dims();
  const int64_t axis = *t.shape.axis(n.attr<ir::AxisAttrs>().axis);
  auto p = std::make_shared<GatherParams>();
  p->outer = prod(td, 0, static_cast<size_t>(axis));
  p->axis_len = td[static_cast<size_t>(axis)];
  p->inner_bytes = prod(td, static_cast<size_t>(axis) + 1, td.size()) * elem_size(t.dtype);
  p->n_idx = *idx.shape.num_elements();
  p->idx_dt = idx.dtype;
  p->what = ctx.graph->describe(ctx.id);
  step.fn = &gather_fn;
  step.params = p;
  step.scalable = p->outer == 1 && ctx.outer_is_bucket(n.inputs[1], idx.shape.rank());
  return {};
}

Status build_update_slice(BuildCtx& ctx, Step& step) {
  const ir::Node& n = ctx.node();
  const ir::Node& dst = ctx.input(0);
  const ir::Node& src = ctx.input(1);
  if (dst.op != ir::OpKind::Handle)
    return step_error(ctx, "update_slice must write a handle, got {}", ir::op_name(dst.op));
  const auto dd = dst.shape.static_dims(), sd = src.shape.static_dims();
  const int64_t axis = *dst.shape.axis(n.attr<ir::AxisAttrs>().axis);
  auto p = std::make_shared<UpdateParams>();
  p->outer = prod(dd, 0, static_cast<size_t>(axis));
  p->dst_len = dd[static_cast<size_t>(axis)];
  p->src_len = sd[static_cast<size_t>(axis)];
  p->inner_bytes = prod(dd, static_cast<size_t>(axis) + 1, dd.size()) * elem_size(dst.dtype);
  p->total_bytes = prod(dd) * elem_size(dst.dtype);
  p->start_dt = ctx.input(2).dtype;
  p->start_per_outer = ctx.input(2).shape.num_elements() != std::optional<int64_t>(1);
  p->src_bucket = ctx.bucket(n.inputs[1]) == static_cast<int>(axis) && p->outer == 1;
  // (a bucketed source of several slices would need a per-slice extent: run it whole)
  if (ctx.bucket(n.inputs[1]) == -2 || (ctx.bucket(n.inputs[1]) == static_cast<int>(axis) && p->outer != 1))
    step.extent_ok = false;
  p->what = ctx.graph->describe(ctx.id);
  step.fn = &update_fn;
  step.params = p;
  return {};
}

}  // namespace rlx::cpu_backend
