// CPU steps for reductions and norms: Reduce, Softmax, Cumsum, TopK, Sample, LayerNorm,
// RmsNorm and the fused residual norms. Reduce and Softmax run the kernels library's
// f32 kernels (f16/bf16 storage widened to f32 in scratch); the other row ops widen each
// row to f32 (accumulating in double where it matters).
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "backends/cpu/cpu_step.h"
#include "backends/cpu/kernels/kernel_context.h"
#include "backends/cpu/kernels/norm.h"
#include "backends/cpu/kernels/reduce.h"
#include "rlx/base/token_choice.h"

namespace rlx::cpu_backend {
namespace {

using ir::DType;

// ---- Reduce -----------------------------------------------------------------------

struct ReduceParams {
  cpu::ReduceOp op = cpu::ReduceOp::kSum;
  DType in_dt = DType::F32, out_dt = DType::F32;
  cpu::Dims dims;                         // the input's
  int64_t strides[cpu::kMaxRank] = {};    // the input's (elements): also right for a shortened bucket axis
  uint32_t axes = 0;                      // reduced axes, bit i = axis i
  int bucket_axis = -1;                   // a reduced axis that is the bucket axis (extent), -1 none
  int64_t in_elems = 0, out_elems = 0;
  int64_t in_off = -1, out_off = -1;      // scratch: f32 copies of a non-f32 input / output
};

cpu::ReduceOp reduce_op(ir::ReduceKind k) {
  switch (k) {
    case ir::ReduceKind::Sum: return cpu::ReduceOp::kSum;
    case ir::ReduceKind::Mean: return cpu::ReduceOp::kMean;
    case ir::ReduceKind::Max: return cpu::ReduceOp::kMax;
    case ir::ReduceKind::Min: return cpu::ReduceOp::kMin;
  }
  return cpu::ReduceOp::kSum;
}

// f16 / bf16 (or other) storage: widened to f32 in scratch for the kernels, and back.
const float* as_f32_input(DType dt, const uint8_t* src, int64_t n, int64_t off, const StepCtx& ctx) {
  if (dt == DType::F32) return reinterpret_cast<const float*>(src);
  auto* f = reinterpret_cast<float*>(ctx.scratch + off);
  parallel_for(ctx, n, 4096, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) f[i] = load_f(dt, src, i);
  });
  return f;
}
void store_from_f32(DType dt, uint8_t* dst, const float* f, int64_t n, const StepCtx& ctx) {
  if (dt == DType::F32) return;
  parallel_for(ctx, n, 4096, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) store_f(dt, dst, i, f[i]);
  });
}

// The kernels library's reduction; a reduced bucket axis runs over its `actual` rows.
Status reduce_fn(const Step& s, const StepCtx& ctx) {
  const ReduceParams& r = s.p<ReduceParams>();
  cpu::Dims d = r.dims;
  if (r.bucket_axis >= 0 && ctx.extent_on) d.d[r.bucket_axis] = d.d[r.bucket_axis] / ctx.upper * ctx.actual;
  const float* x = as_f32_input(r.in_dt, s.in_ptr[0], r.in_elems, r.in_off, ctx);
  float* y = r.out_dt == DType::F32 ? s.outf() : reinterpret_cast<float*>(ctx.scratch + r.out_off);
  cpu::reduce_f32(cpu::KernelContext{ctx.pool, isa_cap()}, r.op, x, d, r.axes, y, r.strides);
  store_from_f32(r.out_dt, s.out_ptr, y, r.out_elems, ctx);
  return {};
}

// ---- row helpers ------------------------------------------------------------------

// View of a tensor as [outer, len, inner] around `axis`.
struct AxisView {
  int64_t outer = 1, len = 1, inner = 1;
};
AxisView axis_view(const std::vector<int64_t>& d, int64_t axis) {
  AxisView v;
  v.outer = prod(d, 0, static_cast<size_t>(axis));
  v.len = d[static_cast<size_t>(axis)];
  v.inner = prod(d, static_cast<size_t>(axis) + 1, d.size());
  return v;
}

float* row_scratch(int64_t n) {
  return static_cast<float*>(cpu::thread_scratch(cpu::ScratchSlot::kShared, sizeof(float) * static_cast<size_t>(n)));
}

// ---- Softmax / Cumsum ---------------------------------------------------------------

struct AxisParams {
  AxisView v;
  DType in_dt = DType::F32, out_dt = DType::F32;
  bool exclusive = false;
  bool bucket_axis = false;  // the op's axis is the bucket axis (softmax: only `actual` entries)
  int64_t k = 1;             // topk
  bool values = false;       // topk
  bool finite_check = false; // topk (k == 1): -1 for a row with a NaN or an infinity
  int64_t in_off = -1, out_off = -1;  // softmax: scratch for f32 copies of non-f32 input / output
};

// The kernels library's softmax; along the bucket axis only its `actual` entries (each
// outer slice's first rows, a contiguous prefix), the rest zero.
Status softmax_fn(const Step& s, const StepCtx& ctx) {
  const AxisParams& a = s.p<AxisParams>();
  const int64_t len_eff = a.bucket_axis && ctx.extent_on ? a.v.len / ctx.upper * ctx.actual : a.v.len;
  const int64_t outer = ctx.rows(a.v.outer, s.scalable), slice = a.v.len * a.v.inner, n = outer * slice;
  const float* x = as_f32_input(a.in_dt, s.in_ptr[0], n, a.in_off, ctx);
  float* y = a.out_dt == DType::F32 ? s.outf() : reinterpret_cast<float*>(ctx.scratch + a.out_off);
  const cpu::KernelContext kc{ctx.pool, isa_cap()};
  if (len_eff == a.v.len) {
    cpu::softmax_axis_f32(kc, x, y, cpu::Dims{outer, a.v.len, a.v.inner}, 1);
  } else {
    const cpu::KernelContext one{nullptr, kc.isa};
    parallel_for(ctx, outer, 1, [&](int64_t b, int64_t e) {
      for (int64_t o = b; o < e; ++o) {
        cpu::softmax_axis_f32(one, x + o * slice, y + o * slice, cpu::Dims{1, len_eff, a.v.inner}, 1);
        std::fill(y + o * slice + len_eff * a.v.inner, y + (o + 1) * slice, 0.0f);
      }
    });
  }
  store_from_f32(a.out_dt, s.out_ptr, y, n, ctx);
  return {};
}

Status cumsum_fn(const Step& s, const StepCtx& ctx) {
  const AxisParams& a = s.p<AxisParams>();
  const int64_t lines = ctx.rows(a.v.outer, s.scalable) * a.v.inner;
  const bool integer = ir::is_integer(a.out_dt) || a.out_dt == DType::F64;
  parallel_for(ctx, lines, 16, [&](int64_t b, int64_t e) {
    for (int64_t l = b; l < e; ++l) {
      const int64_t o = l / a.v.inner, i = l % a.v.inner;
      const int64_t base = o * a.v.len * a.v.inner + i;
      if (integer && a.out_dt != DType::F64) {
        int64_t acc = 0;
        for (int64_t j = 0; j < a.v.len; ++j) {
          const int64_t v = load_i(a.in_dt, s.in_ptr[0], base + j * a.v.inner);
          if (a.exclusive) { store_i(a.out_dt, s.out_ptr, base + j * a.v.inner, acc); acc += v; }
          else { acc += v; store_i(a.out_dt, s.out_ptr, base + j * a.v.inner, acc); }
        }
      } else {
        double acc = 0;
        for (int64_t j = 0; j < a.v.len; ++j) {
          const double v = load_d(a.in_dt, s.in_ptr[0], base + j * a.v.inner);
          if (a.exclusive) { store_d(a.out_dt, s.out_ptr, base + j * a.v.inner, acc); acc += v; }
          else { acc += v; store_d(a.out_dt, s.out_ptr, base + j * a.v.inner, acc); }
        }
      }
    }
  });
  return {};
}

Status topk_fn(const Step& s, const StepCtx& ctx) {
  const AxisParams& a = s.p<AxisParams>();
  const int64_t rows = ctx.rows(a.v.outer, s.scalable);
  parallel_for(ctx, rows, 4, [&](int64_t b, int64_t e) {
    auto* idx = static_cast<int32_t*>(
        cpu::thread_scratch(cpu::ScratchSlot::kTemp, sizeof(int32_t) * static_cast<size_t>(a.v.len)));
    float* vals = row_scratch(a.v.len);
    for (int64_t r = b; r < e; ++r) {
      bool finite = true;  // finite_check: read on the way in, no second pass
      for (int64_t j = 0; j < a.v.len; ++j) {
        vals[j] = load_f(a.in_dt, s.in_ptr[0], r * a.v.len + j);
        finite = finite && std::isfinite(vals[j]);
        idx[j] = static_cast<int32_t>(j);
      }
      // Descending by value, ties by lower index; NaN sorts last.
      auto greater = [&](int32_t x, int32_t y) {
        const float vx = vals[x], vy = vals[y];
        const bool nx = std::isnan(vx), ny = std::isnan(vy);
        if (nx != ny) return ny;
        if (vx != vy && !nx) return vx > vy;
        return x < y;
      };
      std::partial_sort(idx, idx + a.k, idx + a.v.len, greater);
      for (int64_t j = 0; j < a.k; ++j) {
        if (a.values) store_f(a.out_dt, s.out_ptr, r * a.k + j, vals[idx[j]]);
        else store_i(a.out_dt, s.out_ptr, r * a.k + j, idx[j]);
      }
      if (a.finite_check && !finite) store_i(a.out_dt, s.out_ptr, r, -1);  // k == 1 (verified)
    }
  });
  return {};
}

// One token per row: choose_token over the row with the row's parameters (input 1).
Status sample_fn(const Step& s, const StepCtx& ctx) {
  const AxisParams& a = s.p<AxisParams>();
  const int64_t rows = ctx.rows(a.v.outer, s.scalable);
  parallel_for(ctx, rows, 1, [&](int64_t b, int64_t e) {
    thread_local TokenChoiceScratch scratch;
    float* vals = row_scratch(a.v.len);
    for (int64_t r = b; r < e; ++r) {
      for (int64_t j = 0; j < a.v.len; ++j) vals[j] = load_f(a.in_dt, s.in_ptr[0], r * a.v.len + j);
      const auto* params = reinterpret_cast<const float*>(s.in_ptr[1]) + r * ir::kSampleParams;
      const SampleRow row = read_sample_params(params, ir::kMaxSampleTopK);
      const int32_t token =
          choose_token(std::span<const float>(vals, static_cast<size_t>(a.v.len)), row.filter, row.draw, scratch);
      store_i(a.out_dt, s.out_ptr, r, token);
    }
  });
  return {};
}

// ---- norms ----------------------------------------------------------------------------

struct NormParams {
  int64_t rows = 0, d = 0;
  DType x_dt = DType::F32, out_dt = DType::F32, g_dt = DType::F32, b_dt = DType::F32;
  float eps = 1e-5f;
  bool rms = true;
  bool has_beta = false;
  bool residual = false;  // FusedResidual*: inputs x, res, gamma, [beta]; out [2, rows, d]
};

Status norm_fn(const Step& s, const StepCtx& ctx) {
  const NormParams& p = s.p<NormParams>();
  const int64_t rows = ctx.rows(p.rows, s.scalable);
  const size_t gi = p.residual ? 2 : 1;
  const bool fast = p.x_dt == DType::F32 && p.out_dt == DType::F32 && p.g_dt == DType::F32 &&
                    (!p.has_beta || p.b_dt == DType::F32);
  if (fast) {  // all f32: the kernels library's SIMD norms, split over the pool
    const cpu::KernelContext kc{ctx.pool, isa_cap()};
    const float* g = s.inf(gi);
    const float* bt = p.has_beta ? s.inf(gi + 1) : nullptr;
    if (p.residual) {
      float* sum = s.outf();
      float* y = sum + p.rows * p.d;
      if (p.rms) cpu::add_rms_norm_f32(kc, s.inf(0), s.inf(1), sum, g, y, rows, p.d, p.eps);
      else cpu::add_layer_norm_f32(kc, s.inf(0), s.inf(1), sum, g, bt, y, rows, p.d, p.eps);
    } else {
      if (p.rms) cpu::rms_norm_f32(kc, s.inf(0), g, s.outf(), rows, p.d, p.eps);
      else cpu::layer_norm_f32(kc, s.inf(0), g, bt, s.outf(), rows, p.d, p.eps);
    }
    return {};
  }
  // Other dtypes: widen each row to f32, statistics in double.
  parallel_for(ctx, rows, 8, [&](int64_t b, int64_t e) {
    float* buf = row_scratch(p.d);
    for (int64_t r = b; r < e; ++r) {
      for (int64_t j = 0; j < p.d; ++j) {
        float v = load_f(p.x_dt, s.in_ptr[0], r * p.d + j);
        if (p.residual) v += load_f(p.x_dt, s.in_ptr[1], r * p.d + j);
        buf[j] = v;
      }
      if (p.residual) {  // out[0] = x + res, rounded to the storage dtype
        for (int64_t j = 0; j < p.d; ++j) {
          store_f(p.out_dt, s.out_ptr, r * p.d + j, buf[j]);
          buf[j] = load_f(p.out_dt, s.out_ptr, r * p.d + j);
        }
      }
      const float* x = buf;
      double mean = 0, ss = 0;
      if (!p.rms) {
        for (int64_t j = 0; j < p.d; ++j) mean += x[j];
        mean /= static_cast<double>(p.d);
      }
      for (int64_t j = 0; j < p.d; ++j) {
        const double c = x[j] - mean;
        ss += c * c;
      }
      const float scale = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(p.d) + p.eps));
      const float m = static_cast<float>(mean);
      const int64_t obase = (p.residual ? p.rows * p.d : 0) + r * p.d;
      for (int64_t j = 0; j < p.d; ++j) {
        float v = (x[j] - m) * scale * load_f(p.g_dt, s.in_ptr[gi], j);
        if (p.has_beta) v += load_f(p.b_dt, s.in_ptr[gi + 1], j);
        store_f(p.out_dt, s.out_ptr, obase + j, v);
      }
    }
  });
  return {};
}

Status build_norm(BuildCtx& ctx, Step& step, bool rms, bool residual) {
  const ir::Node& n = ctx.node();
  const ir::Node& x = ctx.input(0);
  if (!ir::is_float(x.dtype)) return step_error(ctx, "norm input must be float");
  auto p = std::make_shared<NormParams>();
  const auto d = x.shape.static_dims();
  p->d = d.back();
  p->rows = prod(d, 0, d.size() - 1);
  p->x_dt = x.dtype;
  p->out_dt = n.dtype;
  p->rms = rms;
  p->residual = residual;
  p->eps = static_cast<float>(n.attr<ir::NormAttrs>().eps);
  const size_t gi = residual ? 2 : 1;
  p->g_dt = ctx.input(gi).dtype;
  p->has_beta = n.inputs.size() > gi + 1;
  if (p->has_beta) p->b_dt = ctx.input(gi + 1).dtype;
  step.fn = &norm_fn;
  step.params = p;
  // Residual norms write two halves [2, rows, d]: rows scale within each half.
  step.scalable = ctx.outer_is_bucket(n.inputs[0], x.shape.rank() - 1);
  return {};
}

}  // namespace

Status build_reduce(BuildCtx& ctx, Step& step) {
  const ir::Node& n = ctx.node();
  const auto& ra = n.attr<ir::ReduceAttrs>();
  const ir::Node& x = ctx.input(0);
  if (ir::is_packed(x.dtype)) return step_error(ctx, "packed input");
  const auto d = x.shape.static_dims();
  if (d.size() > static_cast<size_t>(cpu::kMaxRank)) return step_error(ctx, "rank {} (at most {})", d.size(), cpu::kMaxRank);
  const auto strides = d.empty() ? std::vector<int64_t>{} : x.shape.strides();
  auto p = std::make_shared<ReduceParams>();
  p->op = reduce_op(ra.kind);
  p->in_dt = x.dtype;
  p->out_dt = n.dtype;
  p->dims = cpu::Dims::of(d.data(), static_cast<int>(d.size()));
  for (size_t i = 0; i < d.size(); ++i) p->strides[i] = strides[i];
  for (int64_t a : ra.axes) p->axes |= 1u << *x.shape.axis(a);
  p->in_elems = std::accumulate(d.begin(), d.end(), int64_t{1}, std::multiplies<>());
  p->out_elems = *n.shape.num_elements();
  const int xb = ctx.bucket(n.inputs[0]);
  if (xb >= 0 && (p->axes >> xb & 1u) != 0) p->bucket_axis = xb;
  if (p->in_dt != DType::F32) p->in_off = ctx.scratch(4 * p->in_elems);
  if (p->out_dt != DType::F32) p->out_off = ctx.scratch(4 * p->out_elems);
  if (p->bucket_axis >= 0) step.mixes_bucket = true;  // handled: the kernel reduces `actual` rows
  if (xb == -2) step.extent_ok = false;
  step.fn = &reduce_fn;
  step.params = p;
  return {};
}

Status build_softmax(BuildCtx& ctx, Step& step) {
  const ir::Node& n = ctx.node();
  const auto d = n.shape.static_dims();
  const int64_t axis = *n.shape.axis(n.attr<ir::SoftmaxAttrs>().axis);
  auto p = std::make_shared<AxisParams>();
  p->v = axis_view(d, axis);
  p->in_dt = ctx.input(0).dtype;
  p->out_dt = n.dtype;
  const int b = ctx.bucket(n.inputs[0]);
  p->bucket_axis = b == static_cast<int>(axis);
  const int64_t elems = p->v.outer * p->v.len * p->v.inner;
  if (p->in_dt != DType::F32) p->in_off = ctx.scratch(4 * elems);
  if (p->out_dt != DType::F32) p->out_off = ctx.scratch(4 * elems);
  if (b == -2) step.extent_ok = false;
  step.fn = &softmax_fn;
  step.params = p;
  step.scalable = !p->bucket_axis && ctx.outer_is_bucket(ctx.id, axis);
  return {};
}

Status build_cumsum(BuildCtx& ctx, Step& step) {
  const ir::Node& n = ctx.node();
  const auto& ca = n.attr<ir::CumsumAttrs>();
  const int64_t axis = *n.shape.axis(ca.axis);
  auto p = std::make_shared<AxisParams>();
  p->v = axis_view(n.shape.static_dims(), axis);
  p->in_dt = ctx.input(0).dtype;
  p->out_dt = n.dtype;
  p->exclusive = ca.exclusive;
  step.fn = &cumsum_fn;
  step.params = p;
  step.scalable = ctx.outer_is_bucket(ctx.id, axis);
  return {};
}

Status build_topk(BuildCtx& ctx, Step& step) {
  const ir::Node& n = ctx.node();
  const ir::Node& x = ctx.input(0);
  const auto& ta = n.attr<ir::TopKAttrs>();
  auto p = std::make_shared<AxisParams>();
  p->v = axis_view(x.shape.static_dims(), x.shape.rank() - 1);
  p->in_dt = x.dtype;
  p->out_dt = n.dtype;
  p->k = ta.k;
  p->values = ta.values;
  p->finite_check = ta.finite_check;
  if (ir::is_packed(x.dtype)) return step_error(ctx, "packed input");
  const int b = ctx.bucket(n.inputs[0]);
  if (b == static_cast<int>(x.shape.rank() - 1) || b == -2) {
    step.mixes_bucket = true;
    step.extent_ok = false;
  }
  step.fn = &topk_fn;
  step.params = p;
  step.scalable = ctx.outer_is_bucket(n.inputs[0], x.shape.rank() - 1);
  return {};
}

Status build_sample(BuildCtx& ctx, Step& step) {
  const ir::Node& n = ctx.node();
  const ir::Node& x = ctx.input(0);
  auto p = std::make_shared<AxisParams>();
  p->v = axis_view(x.shape.static_dims(), x.shape.rank() - 1);
  p->in_dt = x.dtype;
  p->out_dt = n.dtype;
  if (ir::is_packed(x.dtype)) return step_error(ctx, "packed input");
  if (ctx.input(1).dtype != DType::F32) return step_error(ctx, "sample params not f32");
  const int b = ctx.bucket(n.inputs[0]);
  if (b == static_cast<int>(x.shape.rank() - 1) || b == -2) {
    step.mixes_bucket = true;
    step.extent_ok = false;
  }
  step.fn = &sample_fn;
  step.params = p;
  step.scalable = ctx.outer_is_bucket(n.inputs[0], x.shape.rank() - 1);
  return {};
}

Status build_layer_norm(BuildCtx& ctx, Step& step) { return build_norm(ctx, step, false, false); }
Status build_rms_norm(BuildCtx& ctx, Step& step) { return build_norm(ctx, step, true, false); }
Status build_fused_residual_norm(BuildCtx& ctx, Step& step) {
  return build_norm(ctx, step, ctx.node().op == ir::OpKind::FusedResidualRmsNorm, true);
}

}  // namespace rlx::cpu_backend
