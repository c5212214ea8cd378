// CPU steps for mixtures of experts: MoeRoute (router logits -> the k chosen experts'
// weights per token) and MoeFfn (each routed expert's gated FFN over just its tokens).
// MoeFfn groups the rows by expert, gathers each expert's rows and runs its three
// matmuls once over them through the kernels library's dequant_matmul (every weight
// type the dense matmuls take); experts no row chose are never read, so one-token
// decode streams only the k chosen experts' weights.
#include <cmath>
#include <limits>

#include "backends/cpu/cpu_step.h"
#include "backends/cpu/kernels/elementwise.h"
#include "backends/cpu/kernels/qmatmul.h"

namespace rlx::cpu_backend {
namespace {

using ir::DType;

// ---- moe_route ------------------------------------------------------------------------

struct RouteParams {
  int64_t rows = 0, experts = 0, k = 1;
  DType in_dt = DType::F32;
  ir::MoeGating gating = ir::MoeGating::Softmax;
  bool normalize = false;
  int64_t chosen_off = 0;  // scratch: one flag per expert
};

// Rows run one after another: the router is E exponentials and k passes over E per
// row, small next to the experts' matmuls.
Status route_fn(const Step& s, const StepCtx& ctx) {
  const RouteParams& p = s.p<RouteParams>();
  const int64_t rows = ctx.rows(p.rows, s.scalable);
  const int64_t e = p.experts;
  float* out = s.outf();
  const uint8_t* in = s.in_ptr[0];
  uint8_t* chosen = ctx.scratch + p.chosen_off;  // [e]
  for (int64_t r = 0; r < rows; ++r) {
    float* o = out + r * e;  // the gate probabilities until the choice, then the weights
    if (p.gating == ir::MoeGating::Softmax) {
      float mx = -std::numeric_limits<float>::infinity();
      for (int64_t j = 0; j < e; ++j) mx = std::max(mx, load_f(p.in_dt, in, r * e + j));
      double sum = 0;
      for (int64_t j = 0; j < e; ++j) {
        o[j] = std::exp(load_f(p.in_dt, in, r * e + j) - mx);
        sum += o[j];
      }
      const auto inv = static_cast<float>(1.0 / sum);
      for (int64_t j = 0; j < e; ++j) o[j] *= inv;
    } else {
      for (int64_t j = 0; j < e; ++j) o[j] = 1.0f / (1.0f + std::exp(-load_f(p.in_dt, in, r * e + j)));
    }
    // The k largest (ties: the lower index; a number wins over NaN).
    std::fill(chosen, chosen + e, uint8_t{0});
    double chosen_sum = 0;
    for (int64_t c = 0; c < p.k; ++c) {
      int64_t best = -1;
      for (int64_t j = 0; j < e; ++j) {
        if (chosen[j]) continue;
        if (best < 0 || o[j] > o[best] || (std::isnan(o[best]) && !std::isnan(o[j]))) best = j;
      }
      chosen[best] = 1;
      chosen_sum += o[best];
    }
    const float scale = p.normalize && chosen_sum > 0 ? static_cast<float>(1.0 / chosen_sum) : 1.0f;
    for (int64_t j = 0; j < e; ++j) o[j] = chosen[j] ? o[j] * scale : 0.0f;
  }
  return {};
}

// ---- moe_ffn --------------------------------------------------------------------------

formats::GgmlType weight_type(DType t) {
  switch (t) {
    case DType::F32: return formats::GgmlType::F32;
    case DType::F16: return formats::GgmlType::F16;
    case DType::BF16: return formats::GgmlType::BF16;
    default: return *ggml_type_of(t);
  }
}

struct FfnParams {
  int64_t rows = 0, experts = 0, dim = 0, hidden = 0;
  formats::GgmlType gate_t{}, up_t{}, down_t{};
  int64_t gate_expert_bytes = 0, up_expert_bytes = 0, down_expert_bytes = 0;
  cpu::UnaryOp act = cpu::UnaryOp::kSilu;
  // Scratch offsets: per-expert row lists, gathered rows, gate / up / down results,
  // the matmuls' own scratch.
  int64_t order_off = 0, counts_off = 0, x_off = 0, g_off = 0, u_off = 0, y_off = 0, q_off = 0;
  int64_t q_bytes = 0;
};

Status ffn_fn(const Step& s, const StepCtx& ctx) {
  const FfnParams& p = s.p<FfnParams>();
  const int64_t rows = ctx.rows(p.rows, s.scalable);
  const int64_t e = p.experts, d = p.dim, f = p.hidden;
  const float* x = s.inf(0);
  const float* route = s.inf(1);
  float* out = s.outf();
  std::fill(out, out + rows * d, 0.0f);
  if (rows == 0) return {};
  // Rows per expert: a counting sort of the nonzero routes, in row order per expert.
  auto* counts = reinterpret_cast<int64_t*>(ctx.scratch + p.counts_off);  // [e + 1], then the fill cursors [e]
  int64_t* next = counts + e + 1;
  auto* order = reinterpret_cast<int32_t*>(ctx.scratch + p.order_off);  // [rows * e]
  std::fill(counts, counts + e + 1, int64_t{0});
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < e; ++j)
      if (route[r * e + j] != 0.0f) ++counts[j + 1];
  for (int64_t j = 0; j < e; ++j) counts[j + 1] += counts[j];
  std::copy_n(counts, e, next);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < e; ++j)
      if (route[r * e + j] != 0.0f) order[next[j]++] = static_cast<int32_t>(r);
  float* xs = reinterpret_cast<float*>(ctx.scratch + p.x_off);
  float* g = reinterpret_cast<float*>(ctx.scratch + p.g_off);
  float* u = reinterpret_cast<float*>(ctx.scratch + p.u_off);
  float* y = reinterpret_cast<float*>(ctx.scratch + p.y_off);
  const cpu::QMatmulScratch qs{ctx.scratch + p.q_off, static_cast<size_t>(p.q_bytes)};
  const cpu::KernelContext kc{ctx.pool, isa_cap()};
  for (int64_t j = 0; j < e; ++j) {
    const int64_t m = counts[j + 1] - counts[j];
    if (m == 0) continue;
    const int32_t* idx = order + counts[j];
    for (int64_t i = 0; i < m; ++i) std::copy_n(x + idx[i] * d, d, xs + i * d);
    cpu::QMatmulParams up{};
    up.m = m;
    up.n = f;
    up.k = d;
    TRY(cpu::dequant_matmul(kc, up, p.gate_t, xs, s.in_ptr[2] + j * p.gate_expert_bytes, g, qs));
    TRY(cpu::dequant_matmul(kc, up, p.up_t, xs, s.in_ptr[3] + j * p.up_expert_bytes, u, qs));
    cpu::unary_f32(kc, p.act, g, g, m * f);
    for (int64_t i = 0; i < m * f; ++i) g[i] *= u[i];
    cpu::QMatmulParams down{};
    down.m = m;
    down.n = d;
    down.k = f;
    TRY(cpu::dequant_matmul(kc, down, p.down_t, g, s.in_ptr[4] + j * p.down_expert_bytes, y, qs));
    for (int64_t i = 0; i < m; ++i) {
      const float w = route[idx[i] * e + j];
      float* o = out + idx[i] * d;
      const float* yi = y + i * d;
      for (int64_t c = 0; c < d; ++c) o[c] += w * yi[c];
    }
  }
  return {};
}

}  // namespace

Status build_moe_route(BuildCtx& ctx, Step& step) {
  const ir::Node& n = ctx.node();
  const ir::Node& x = ctx.input(0);
  const auto& a = n.attr<ir::MoeRouteAttrs>();
  if (!ir::is_float(x.dtype)) return step_error(ctx, "router logits {} are not float", x.type().to_string());
  auto p = std::make_shared<RouteParams>();
  const auto dims = x.shape.static_dims();
  p->rows = dims[0];
  p->experts = dims[1];
  p->k = a.k;
  p->in_dt = x.dtype;
  p->gating = a.gating;
  p->normalize = a.normalize;
  p->chosen_off = ctx.scratch(p->experts);
  step.fn = &route_fn;
  step.params = p;
  step.scalable = ctx.outer_is_bucket(ctx.id, 1);
  return {};
}

Status build_moe_ffn(BuildCtx& ctx, Step& step) {
  const ir::Node& n = ctx.node();
  const auto& a = n.attr<ir::MoeFfnAttrs>();
  auto p = std::make_shared<FfnParams>();
  const auto xd = ctx.input(0).shape.static_dims();
  const auto wd = ctx.input(2).shape.static_dims();
  p->rows = xd[0];
  p->dim = xd[1];
  p->experts = wd[0];
  p->hidden = wd[1];
  const ir::Node* w[3] = {&ctx.input(2), &ctx.input(3), &ctx.input(4)};
  formats::GgmlType* types[3] = {&p->gate_t, &p->up_t, &p->down_t};
  int64_t* slab[3] = {&p->gate_expert_bytes, &p->up_expert_bytes, &p->down_expert_bytes};
  for (int i = 0; i < 3; ++i) {
    const DType dt = w[i]->dtype;
    if (!ir::is_packed(dt) && dt != DType::F32 && dt != DType::F16 && dt != DType::BF16)
      return step_error(ctx, "expert weight {} has dtype {}", i, ir::dtype_name(dt));
    *types[i] = weight_type(dt);
    if (!cpu::qmatmul_supported(*types[i]))
      return step_error(ctx, "expert weights of type {} have no CPU matmul", ir::dtype_name(dt));
    const auto dims = w[i]->shape.static_dims();
    const auto row_bytes = ir::dtype_bytes(dt, dims[2]);
    if (!row_bytes) return step_error(ctx, "expert weight {} rows are not whole blocks", i);
    *slab[i] = dims[1] * *row_bytes;
  }
  switch (a.act) {
    case ir::ActKind::Silu: p->act = cpu::UnaryOp::kSilu; break;
    case ir::ActKind::Gelu: p->act = cpu::UnaryOp::kGelu; break;
    case ir::ActKind::GeluTanh: p->act = cpu::UnaryOp::kGeluTanh; break;
    default: return step_error(ctx, "activation {}", ir::enum_name(a.act));
  }
  const int64_t t = p->rows, e = p->experts, d = p->dim, f = p->hidden;
  p->counts_off = ctx.scratch((2 * e + 1) * 8);
  p->order_off = ctx.scratch(t * e * 4);
  p->x_off = ctx.scratch(t * d * 4);
  p->g_off = ctx.scratch(t * f * 4);
  p->u_off = ctx.scratch(t * f * 4);
  p->y_off = ctx.scratch(t * d * 4);
  size_t q = 0;
  for (auto [type, k] : {std::pair{p->gate_t, d}, {p->up_t, d}, {p->down_t, f}})
    q = std::max(q, cpu::qmatmul_scratch_bytes(type, t, k, cpu::QMatmulPath::kAuto, isa_cap()));
  p->q_bytes = static_cast<int64_t>(q);
  p->q_off = ctx.scratch(p->q_bytes);
  step.fn = &ffn_fn;
  step.params = p;
  step.scalable = ctx.outer_is_bucket(ctx.id, 1);
  return {};
}

}  // namespace rlx::cpu_backend
