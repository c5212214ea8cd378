// Legalization (after fusion and precision, before planning): rewrites op kinds a backend
// does not claim into common-IR primitives, round by round until legal or stuck.
// Every rewrite is semantics-preserving; the exact forms are documented at each case.
#include "rlx/compile/legalize.h"

#include <unordered_map>

#include "emit.h"
#include "rewriter.h"
#include "rlx/compile/passes.h"

namespace rlx::compile {
namespace {
using namespace ir;
using detail::Rewriter;

constexpr int kMaxRounds = 16;

bool is_boundary(OpKind k) { return op_info(k).category == OpCategory::Boundary; }

// Can this particular node be rewritten? (DequantMatMul only with a half weight; Rope
// only with a static row width, which its primitive form splits into heads.)
bool rewritable(const Graph& g, const Node& n) {
  if (n.op == OpKind::DequantMatMul) return !is_packed(g.node(n.inputs[1]).dtype);
  if (n.op == OpKind::Rope) return n.shape.back().is_static();
  return has_common_rewrite(n.op);
}

// Rewrites node `v` of rw.src() into primitives; `later` collects replacements for
// users (Narrow views of fused residual outputs).
void rewrite(Rewriter& rw, ValueId v, const std::vector<std::vector<ValueId>>& users,
             std::unordered_map<ValueId, ValueId>& later) {
  const Graph& g = rw.src();
  const Node& n = g.node(v);
  GraphBuilder& b = rw.b();
  std::vector<ValueId> in;
  for (ValueId i : n.inputs) in.push_back(rw.map(i));
  b.label(n.label);
  switch (n.op) {
    case OpKind::FusedMatMulBiasAct: {
      // act(matmul(x, W, transpose_b) + bias)
      const auto& f = n.attr<FusedMatMulAttrs>();
      rw.set(v, detail::emit_linear_primitives(b, in[0], in[1], f.has_bias ? std::optional<ValueId>(in[2]) : std::nullopt,
                                               f.act, f.transpose_b));
      return;
    }
    case OpKind::DequantMatMul:
      // x . cast(W)^T for an f16/bf16 weight (packed weights have no rewrite).
      rw.set(v, detail::emit_linear_primitives(b, in[0], in[1], std::nullopt, ActKind::Identity, true));
      return;
    case OpKind::FusedSwiGLU:
      // silu(x . Wg) * (x . Wu)
      rw.set(v, detail::emit_swiglu_primitives(b, in[0], in[1], in[2], n.attr<FusedSwiGLUAttrs>().transpose_b));
      return;
    case OpKind::FusedResidualRmsNorm:
    case OpKind::FusedResidualLayerNorm: {
      // sum = x + res; normed = norm(sum). Users that are Narrow(axis 0, i, 1) read
      // reshape(sum or normed, [1, ..]) directly; otherwise the [2, ..] value is
      // concat(reshape(sum), reshape(normed)) along axis 0.
      const double eps = n.attr<NormAttrs>().eps;
      const ValueId sum = b.add(in[0], in[1]);
      const ValueId normed = n.op == OpKind::FusedResidualRmsNorm
                                 ? b.rms_norm(sum, in[2], eps)
                                 : b.layer_norm(sum, in[2], in.size() == 4 ? std::optional<ValueId>(in[3]) : std::nullopt, eps);
      std::vector<Dim> one{Dim(1)};
      for (const Dim& d : b.type(sum).shape) one.push_back(d);
      bool all_narrow = !users[static_cast<size_t>(v)].empty();
      for (ValueId u : users[static_cast<size_t>(v)]) {
        const Node& un = g.node(u);
        if (un.op != OpKind::Narrow || un.attr<NarrowAttrs>().axis != 0 || un.attr<NarrowAttrs>().length != Dim(1))
          all_narrow = false;
      }
      const auto uses = g.use_counts();
      if (all_narrow && uses[static_cast<size_t>(v)] == static_cast<int32_t>(users[static_cast<size_t>(v)].size())) {
        for (ValueId u : users[static_cast<size_t>(v)])
          later[u] = b.reshape(g.node(u).attr<NarrowAttrs>().start == 0 ? sum : normed, Shape(one));
        rw.set(v, sum);  // no remaining reader; keeps the map total
      } else {
        rw.set(v, b.concat({b.reshape(sum, Shape(one)), b.reshape(normed, Shape(one))}, 0));
      }
      return;
    }
    case OpKind::ElementwiseRegion: {
      // Each step as its own op, in order; step broadcasting is the ops' broadcasting.
      const auto& steps = n.attr<RegionAttrs>().steps;
      std::vector<ValueId> vals;
      for (const RegionStep& s : steps) {
        std::vector<ValueId> a;
        for (int32_t x : s.args) a.push_back(x < 0 ? in[static_cast<size_t>(-1 - x)] : vals[static_cast<size_t>(x)]);
        switch (s.op) {
          case OpKind::Activation: vals.push_back(b.activation(static_cast<ActKind>(s.kind), a[0])); break;
          case OpKind::Binary: vals.push_back(b.binary(static_cast<BinaryKind>(s.kind), a[0], a[1])); break;
          case OpKind::Compare: vals.push_back(b.compare(static_cast<CompareKind>(s.kind), a[0], a[1])); break;
          case OpKind::Where: vals.push_back(b.where(a[0], a[1], a[2])); break;
          default: vals.push_back(b.cast(a[0], s.dtype)); break;
        }
      }
      rw.set(v, vals.back());
      return;
    }
    case OpKind::Attention: {
      // matmul / scale / softcap / explicit mask / softmax / matmul (emit.cpp).
      std::optional<ValueId> pos, kv_len;
      if (in.size() >= 4) pos = in[3];
      if (in.size() == 5) kv_len = in[4];
      rw.set(v, detail::emit_attention_primitives(b, in[0], in[1], in[2], n.attr<AttentionAttrs>(), pos, kv_len));
      return;
    }
    case OpKind::FusedLinear: {
      // [rms_norm] -> the product (dequant_matmul for half or packed weights, else a
      // matmul with transpose_b) -> [silu * up product] -> [+ residual] -> [rope] ->
      // [update_slice of the cache at start, in the cache's dtype]: the op's definition.
      const auto& a = n.attr<FusedLinearAttrs>();
      const auto at = [&](int i) { return in[static_cast<size_t>(i)]; };
      ValueId x = in[0];
      if (a.norm) x = b.rms_norm(x, at(a.gamma_input()), a.eps);
      const auto product = [&](ValueId w) {
        return b.type(w).dtype == DType::F32 ? b.matmul(x, w, false, true) : b.dequant_matmul(x, w);
      };
      ValueId y = product(in[1]);
      if (a.swiglu) y = b.mul(b.activation(ActKind::Silu, y), product(at(a.w_up_input())));
      if (a.residual) y = b.add(y, at(a.residual_input()));
      if (a.rope) y = b.rope(y, at(a.pos_input()), a.rope_attrs);
      if (a.cache_write) {
        const ValueId cache = at(a.cache_input());
        if (b.type(cache).dtype != b.type(y).dtype) y = b.cast(y, b.type(cache).dtype);
        y = b.update_slice(cache, y, at(a.cache_input() + 1), 0);
      }
      rw.set(v, y);
      return;
    }
    case OpKind::Rope:
      // cos/sin of pos * inv_freq, rotation by narrows, muls and a concat (emit.cpp).
      rw.set(v, detail::emit_rope_primitives(b, in[0], in[1], n.attr<RopeAttrs>()));
      return;
    default:
      RLX_ASSERT(!"rewrite: kind without a common-IR rewrite");
  }
}

}  // namespace

bool has_common_rewrite(OpKind kind) {
  switch (kind) {
    case OpKind::FusedMatMulBiasAct:
    case OpKind::FusedSwiGLU:
    case OpKind::FusedResidualRmsNorm:
    case OpKind::FusedResidualLayerNorm:
    case OpKind::ElementwiseRegion:
    case OpKind::Attention:
    case OpKind::Rope:
    case OpKind::FusedLinear:
    case OpKind::DequantMatMul: return true;
    default: return false;
  }
}

bool DispatchReport::complete() const {
  for (const auto& [k, e] : kinds)
    if (e.missing > 0) return false;
  return true;
}

std::string DispatchReport::to_string() const {
  std::string s = fmt::format("dispatch report for backend '{}'\n", backend);
  for (const auto& [k, e] : kinds) {
    s += fmt::format("  {:<26}", op_name(k));
    if (e.native) s += fmt::format(" native {}", e.native);
    if (e.rewritten) s += fmt::format(" rewritten {}", e.rewritten);
    if (e.missing) s += fmt::format(" MISSING {}", e.missing);
    s += "\n";
  }
  return s;
}

Expected<MirModule> legalize(const MirModule& m, const OpSet& ops, const std::string& backend,
                             const KernelDispatchConfig& dispatch, DispatchReport* report, const Target* target) {
  DispatchReport local;
  DispatchReport& rep = report ? *report : local;
  rep = DispatchReport{};
  rep.backend = backend;
  auto wants_rewrite = [&](OpKind k) {
    if (dispatch.force_native.contains(k)) return false;
    if (!ops.contains(k) || dispatch.force_common.contains(k)) return true;
    return dispatch.policy == KernelDispatchPolicy::ForceCommon && has_common_rewrite(k);
  };
  MirModule cur = m;
  for (int round = 0; round < kMaxRounds; ++round) {
    const Graph& g = cur.graph;
    bool changed = false;
    Rewriter rw(g);
    const auto users = detail::users_of(g);
    std::unordered_map<ValueId, ValueId> later;
    for (ValueId v = 0; v < g.size(); ++v) {
      const Node& n = g.node(v);
      if (auto it = later.find(v); it != later.end()) {
        rw.set(v, it->second);
        continue;
      }
      // A claimed fused_linear runs natively only in a form the target's kernel takes.
      const bool form_refused = n.op == OpKind::FusedLinear && ops.contains(n.op) && target != nullptr &&
                                !dispatch.force_native.contains(n.op) &&
                                target->fused_linear && target->fused_linear(fused_linear_query(g, v)) != nullptr;
      if (!is_boundary(n.op) && (wants_rewrite(n.op) || form_refused) && rewritable(g, n)) {
        rewrite(rw, v, users, later);
        ++rep.kinds[n.op].rewritten;
        changed = true;
      } else {
        rw.copy(v);
      }
    }
    auto next = rw.finish();
    if (!next) return next.error().with_context(fmt::format("legalize for backend '{}'", backend));
    cur = MirModule{std::move(next).value()};
    if (!changed) break;
  }
  std::optional<Error> first;
  for (ValueId v = 0; v < cur.graph.size(); ++v) {
    const Node& n = cur.graph.node(v);
    if (is_boundary(n.op)) continue;
    if (ops.contains(n.op)) {
      ++rep.kinds[n.op].native;
      continue;
    }
    ++rep.kinds[n.op].missing;
    if (!first) {
      std::string why = "has no common-IR rewrite";
      if (n.op == OpKind::DequantMatMul)
        why = fmt::format("has a packed {} weight and no dequant_matmul kernel", dtype_name(cur.graph.node(n.inputs[1]).dtype));
      first = Error::unsupported("{}: kind {} is not supported by backend '{}' and {}", cur.graph.describe(v),
                                 op_name(n.op), backend, why);
    }
  }
  if (first) return *first;
  return cur;
}

}  // namespace rlx::compile
