// Fusion for backends with a fused linear kernel (Target::fused_linear; CUDA's decode
// GEMVs): a product x . W^T (matmul with transpose_b over f32 weights, or dequant_matmul)
// takes in, as far as the backend's check allows,
//   - the RMS norm it reads (rms_norm(x, gamma), when every reader of the norm fuses it:
//     each recomputes it),
//   - silu(product) * (the sibling product over the same x) (SwiGLU),
//   - + a residual of its own shape,
//   - rope of its rows,
//   - the write of its rows into a KV-cache handle (update_slice on axis 0, through the
//     cast to the cache's dtype),
// each step only through a value with one reader. Then products over the same x (and
// norm) that the backend runs as one launch get one group id, their nodes next to each
// other. Semantics: fused_linear's definition (ir/op.h) is this chain of ops.
// Records "linear_norm", "linear_swiglu", "linear_residual", "linear_rope",
// "linear_cache_write" and "linear_group"; an epilogue the backend refuses is a miss.
#include <algorithm>
#include <map>
#include <set>

#include "rewriter.h"
#include "rlx/compile/passes.h"

namespace rlx::compile {
using namespace ir;

namespace {

// One product and what it takes in. `nodes` are the chain's nodes from the product to
// `end` (the node the fused op replaces); `up` and `up_silu` the SwiGLU's other nodes.
struct Plan {
  ValueId product = kNoValue, end = kNoValue;
  FusedLinearAttrs a;
  ValueId x = kNoValue, w = kNoValue, w_up = kNoValue, gamma = kNoValue, norm = kNoValue;
  ValueId residual = kNoValue, pos = kNoValue, cache = kNoValue, start = kNoValue;
  std::vector<ValueId> nodes;  // the chain, product first
  ValueId up = kNoValue, silu = kNoValue;
  FusedLinearQuery query;
  bool unfusable = false;  // a fused_swiglu node whose SwiGLU the backend refuses: left as it is
};

// The query for a product of x by w with flags `a` (cache: the cache it writes, or none);
// rows 0 when x's rows are symbolic.
FusedLinearQuery query_of(const Graph& g, ValueId x, ValueId w, const FusedLinearAttrs& a, ValueId cache) {
  const Node& xn = g.node(x);
  const Node& wn = g.node(w);
  FusedLinearQuery q;
  q.attrs = a;
  q.w_dtype = wn.dtype;
  q.k = xn.shape.back().is_static() ? xn.shape.back().value() : 0;
  q.n = wn.shape[0].is_static() ? wn.shape[0].value() : 0;
  const auto elements = xn.shape.num_elements();
  q.rows = elements && q.k > 0 ? *elements / q.k : 0;
  if (cache != kNoValue) q.cache_dtype = g.node(cache).dtype;
  return q;
}

class LinearFuser {
 public:
  LinearFuser(const Graph& g, const Target& t, FusionReport* r)
      : g_(g), t_(t), report_(r), users_(detail::users_of(g)), uses_(g.use_counts()) {}

  MirModule run() {
    for (ValueId v = 0; v < g_.size(); ++v)
      if ((is_product(v) || is_swiglu_node(v)) && !taken_.count(v)) plan_chain(v);
    decide_norms();
    decide_groups();
    return rebuild();
  }

 private:
  // x . W^T over f32 x of static shape: matmul (transpose_b, f32 rank-2 W), a
  // fused_matmul_bias_act without bias or activation (Direct lowering's linear), or
  // dequant_matmul.
  bool is_product(ValueId v) const {
    const Node& n = g_.node(v);
    if ((n.op != OpKind::MatMul && n.op != OpKind::DequantMatMul && n.op != OpKind::FusedMatMulBiasAct) ||
        n.dtype != DType::F32 || !n.shape.is_static())
      return false;
    const Node& x = g_.node(n.inputs[0]);
    if (x.dtype != DType::F32 || !x.shape.is_static() || x.shape.rank() < 1) return false;
    if (n.op == OpKind::DequantMatMul) return true;
    const Node& w = g_.node(n.inputs[1]);
    if (w.shape.rank() != 2 || w.dtype != DType::F32) return false;
    if (n.op == OpKind::FusedMatMulBiasAct) {
      const auto& f = n.attr<FusedMatMulAttrs>();
      return f.transpose_b && !f.has_bias && f.act == ActKind::Identity;
    }
    const auto& m = n.attr<MatMulAttrs>();
    return !m.transpose_a && m.transpose_b;
  }
  // fused_swiglu(x, Wg, Wu) with transpose_b over f32 x and f32 weights, static shape:
  // a SwiGLU product as the Direct lowering emits it.
  bool is_swiglu_node(ValueId v) const {
    const Node& n = g_.node(v);
    if (n.op != OpKind::FusedSwiGLU || !n.attr<FusedSwiGLUAttrs>().transpose_b || n.dtype != DType::F32 ||
        !n.shape.is_static())
      return false;
    const Node& x = g_.node(n.inputs[0]);
    const Node& w = g_.node(n.inputs[1]);
    return x.dtype == DType::F32 && x.shape.is_static() && w.shape.rank() == 2 && w.dtype == DType::F32;
  }
  // The single node reading v, when v has exactly one reader and is not an output.
  std::optional<ValueId> only_user(ValueId v) const {
    if (uses_[static_cast<size_t>(v)] != 1 || users_[static_cast<size_t>(v)].size() != 1) return std::nullopt;
    return users_[static_cast<size_t>(v)][0];
  }
  bool is_op(ValueId v, OpKind k) const { return g_.node(v).op == k; }

  // True for the up product of silu(gate) * up with gate a product: the gate's chain
  // takes it.
  bool is_swiglu_up(ValueId p) const {
    const auto m = only_user(p);
    if (!m || !is_op(*m, OpKind::Binary) || g_.node(*m).attr<BinaryAttrs>().kind != BinaryKind::Mul) return false;
    const Node& mn = g_.node(*m);
    const ValueId s = mn.inputs[0] == p ? mn.inputs[1] : mn.inputs[0];
    return is_op(s, OpKind::Activation) && g_.node(s).attr<ActivationAttrs>().kind == ActKind::Silu &&
           is_product(g_.node(s).inputs[0]);
  }

  void plan_chain(ValueId p) {
    if (is_swiglu_up(p)) return;
    Plan plan;
    plan.product = p;
    plan.x = g_.node(p).inputs[0];
    plan.w = g_.node(p).inputs[1];
    plan.nodes = {p};
    ValueId cur = p;
    if (is_swiglu_node(p)) {
      plan.a.swiglu = true;
      plan.w_up = g_.node(p).inputs[2];
    }
    // SwiGLU: silu(p) * q, q a product over the same x with a weight like p's; p is the gate.
    if (auto s = only_user(p); !plan.a.swiglu && s && is_op(*s, OpKind::Activation) &&
                               g_.node(*s).attr<ActivationAttrs>().kind == ActKind::Silu) {
      if (auto m = only_user(*s); m && is_op(*m, OpKind::Binary) &&
                                  g_.node(*m).attr<BinaryAttrs>().kind == BinaryKind::Mul) {
        const Node& mn = g_.node(*m);
        const ValueId q = mn.inputs[0] == *s ? mn.inputs[1] : mn.inputs[0];
        if (q != *s && is_product(q) && !taken_.count(q) && only_user(q) == *m && g_.node(q).inputs[0] == plan.x &&
            g_.node(q).op == g_.node(p).op && g_.node(g_.node(q).inputs[1]).type() == g_.node(plan.w).type() &&
            g_.node(q).type() == g_.node(p).type()) {
          plan.a.swiglu = true;
          plan.w_up = g_.node(q).inputs[1];
          plan.up = q;
          plan.silu = *s;
          plan.nodes.push_back(*m);
          cur = *m;
        }
      }
    }
    // + residual of the product's own type
    if (auto u = only_user(cur); u && is_op(*u, OpKind::Binary) &&
                                 g_.node(*u).attr<BinaryAttrs>().kind == BinaryKind::Add) {
      const Node& an = g_.node(*u);
      const ValueId r = an.inputs[0] == cur ? an.inputs[1] : an.inputs[0];
      if (r != cur && g_.node(r).type() == g_.node(cur).type() && an.type() == g_.node(cur).type()) {
        plan.a.residual = true;
        plan.residual = r;
        plan.nodes.push_back(*u);
        cur = *u;
      }
    }
    if (!plan.a.swiglu) {
      // rope over whole rows
      if (auto u = only_user(cur); u && is_op(*u, OpKind::Rope) && g_.node(*u).inputs[0] == cur) {
        const auto& r = g_.node(*u).attr<RopeAttrs>();
        if (r.offset == 0 && r.width == 0) {
          plan.a.rope = true;
          plan.a.rope_attrs = r;
          plan.pos = g_.node(*u).inputs[1];
          plan.nodes.push_back(*u);
          cur = *u;
        }
      }
      // the write into a cache handle, through a cast to its dtype
      ValueId src = cur;
      std::optional<ValueId> u = only_user(cur);
      std::optional<ValueId> cast;
      if (u && is_op(*u, OpKind::Cast)) {
        cast = u;
        src = *u;
        u = only_user(*u);
      }
      if (u && is_op(*u, OpKind::UpdateSlice) && g_.node(*u).inputs[1] == src &&
          g_.node(*u).attr<AxisAttrs>().axis == 0 && is_op(g_.node(*u).inputs[0], OpKind::Handle) &&
          g_.node(*u).shape.rank() == 2 && g_.node(cur).shape.rank() == 2 && is_float(g_.node(*u).dtype) &&
          (!cast || g_.node(*cast).dtype == g_.node(*u).dtype)) {
        plan.a.cache_write = true;
        plan.cache = g_.node(*u).inputs[0];
        plan.start = g_.node(*u).inputs[2];
        if (cast) plan.nodes.push_back(*cast);
        plan.nodes.push_back(*u);
        cur = *u;
      }
    }
    plan.end = cur;
    fill_query(plan);
    trim(plan);
    ValueId lone_up = kNoValue;  // the up product of a SwiGLU the backend does not fuse
    if (plan.up != kNoValue && !plan.a.swiglu) {
      lone_up = plan.up;
      plan.up = plan.silu = kNoValue;
    }
    for (ValueId v : plan.nodes) taken_.insert(v);
    if (plan.up != kNoValue) taken_.insert(plan.up);
    plans_.push_back(std::move(plan));
    if (lone_up != kNoValue && !taken_.count(lone_up)) plan_alone(lone_up);
  }

  // A product with nothing to take in (the up product of an unfused SwiGLU): a plan of
  // its own, so that it may still share a launch with the products over its x.
  void plan_alone(ValueId p) {
    Plan plan;
    plan.product = plan.end = p;
    plan.x = g_.node(p).inputs[0];
    plan.w = g_.node(p).inputs[1];
    plan.nodes = {p};
    fill_query(plan);
    trim(plan);
    taken_.insert(p);
    plans_.push_back(std::move(plan));
  }

  void fill_query(Plan& plan) const { plan.query = query_of(g_, plan.x, plan.w, plan.a, plan.cache); }

  // Drops epilogues from the end of the chain until the backend takes the form.
  void trim(Plan& plan) {
    while (true) {
      plan.query.attrs = plan.a;
      const char* why = t_.fused_linear(plan.query);
      if (why == nullptr) return;
      const char* pattern = nullptr;
      size_t drop = 0;
      if (plan.a.cache_write) {
        pattern = "linear_cache_write";
        plan.a.cache_write = false;
        drop = g_.node(plan.nodes[plan.nodes.size() - 2]).op == OpKind::Cast ? 2 : 1;
        plan.cache = plan.start = kNoValue;
      } else if (plan.a.rope) {
        pattern = "linear_rope";
        plan.a.rope = false;
        plan.a.rope_attrs = RopeAttrs{};
        plan.pos = kNoValue;
        drop = 1;
      } else if (plan.a.residual) {
        pattern = "linear_residual";
        plan.a.residual = false;
        plan.residual = kNoValue;
        drop = 1;
      } else if (plan.a.swiglu && plan.up == kNoValue) {  // a fused_swiglu node: all or nothing
        miss("linear_swiglu", plan.product, why);
        plan.unfusable = true;
        return;
      } else if (plan.a.swiglu) {
        pattern = "linear_swiglu";
        plan.a.swiglu = false;
        plan.w_up = kNoValue;
        drop = 1;
      } else {
        plan.a = FusedLinearAttrs{};
        plan.nodes.resize(1);
        plan.end = plan.product;
        bare_why_[plan.product] = why;  // no fused form at all (grouping may still ask)
        return;
      }
      miss(pattern, plan.nodes.back(), why);
      plan.nodes.resize(plan.nodes.size() - drop);
      plan.end = plan.nodes.back();
      plan.query.cache_dtype = DType::F32;
    }
  }

  void miss(const char* pattern, ValueId v, const char* why) {
    if (report_ != nullptr) report_->miss({pattern, {g_.describe(v)}, why});
  }

  // A norm prologue for every reader of an rms_norm, or for none: each reader must be a
  // planned product of the norm's output, and the backend must take all of them with it.
  void decide_norms() {
    std::map<ValueId, std::vector<size_t>> readers;  // norm -> plans reading it
    for (size_t i = 0; i < plans_.size(); ++i)
      if (is_op(plans_[i].x, OpKind::RmsNorm)) readers[plans_[i].x].push_back(i);
    for (const auto& [norm, plans] : readers) {
      size_t product_reads = 0;  // (a SwiGLU of two products reads the norm twice)
      bool unfusable = false;
      for (size_t i : plans) {
        product_reads += plans_[i].up != kNoValue ? 2 : 1;
        unfusable = unfusable || plans_[i].unfusable;
      }
      if (unfusable) {
        miss("linear_norm", norm, "a reader of the normed rows has no fused form");
        continue;
      }
      if (product_reads != static_cast<size_t>(uses_[static_cast<size_t>(norm)]) ||
          product_reads != users_[static_cast<size_t>(norm)].size()) {
        miss("linear_norm", norm, "the normed rows have readers other than fused products");
        continue;
      }
      int64_t total_n = 0;
      for (size_t i : plans) total_n += plans_[i].query.n * (plans_[i].a.swiglu ? 2 : 1);
      const char* why = nullptr;
      for (size_t i : plans) {
        FusedLinearQuery q = plans_[i].query;
        q.attrs = plans_[i].a;
        q.attrs.norm = true;
        q.norm_readers_n = total_n;
        if ((why = t_.fused_linear(q)) != nullptr) break;
      }
      if (why != nullptr) {
        miss("linear_norm", norm, why);
        continue;
      }
      const Node& nn = g_.node(norm);
      for (size_t i : plans) {
        Plan& p = plans_[i];
        p.a.norm = true;
        p.a.eps = nn.attr<NormAttrs>().eps;
        p.norm = norm;
        p.gamma = nn.inputs[1];
        p.x = nn.inputs[0];
        p.query.attrs = p.a;
        p.query.norm_readers_n = total_n;
        bare_why_.erase(p.product);
      }
      absorbed_norms_.insert(norm);
      if (report_ != nullptr) report_->record("linear_norm", static_cast<int64_t>(plans.size()));
    }
  }

  // Nodes a group's members read that come after its first member's end must be moved
  // before it: pure nodes only, that reach no member's chain, and not many.
  bool hoistable(const std::vector<size_t>& members, ValueId first_end, std::vector<ValueId>& hoist) const {
    std::set<ValueId> chain;
    for (size_t i : members) {
      chain.insert(plans_[i].nodes.begin(), plans_[i].nodes.end());
      if (plans_[i].up != kNoValue) chain.insert({plans_[i].up, plans_[i].silu});
    }
    std::set<ValueId> seen;
    std::vector<ValueId> stack;
    for (size_t i : members)
      for (ValueId in : fused_inputs(plans_[i])) stack.push_back(in);
    while (!stack.empty()) {
      const ValueId v = stack.back();
      stack.pop_back();
      if (v < first_end || seen.count(v)) continue;
      const Node& n = g_.node(v);
      if (chain.count(v) || in_place_input(n) >= 0 || updates_state(n.op) || n.op == OpKind::Custom) return false;
      seen.insert(v);
      if (seen.size() > 64) return false;
      for (ValueId in : n.inputs) stack.push_back(in);
    }
    hoist.assign(seen.begin(), seen.end());  // ascending: inputs before readers
    return true;
  }

  void decide_groups() {
    // Products over the same x and norm, in node order.
    std::map<std::pair<ValueId, ValueId>, std::vector<size_t>> by_x;
    for (size_t i = 0; i < plans_.size(); ++i) by_x[{plans_[i].x, plans_[i].gamma}].push_back(i);
    if (!t_.fused_linear_group) return;
    for (auto& [key, members] : by_x) {
      if (members.size() < 2) continue;
      std::vector<size_t> group;
      std::vector<FusedLinearQuery> queries;
      for (size_t i : members) {
        if (bare_why_.count(plans_[i].product) || plans_[i].unfusable) continue;  // no fused form of it
        queries.push_back(plans_[i].query);
        if (t_.fused_linear_group(queries) != nullptr) {
          queries.pop_back();
          continue;
        }
        group.push_back(i);
      }
      if (group.size() < 2) continue;
      ValueId first_end = plans_[group[0]].end;
      for (size_t i : group) first_end = std::min(first_end, plans_[i].end);
      std::vector<ValueId> hoist;
      if (!hoistable(group, first_end, hoist)) {
        miss("linear_group", first_end, "a member reads a value made after the first member");
        continue;
      }
      const int64_t id = next_group_++;
      for (size_t i : group) plans_[i].a.group = id;
      groups_[first_end] = {group, hoist};
      if (report_ != nullptr) report_->record("linear_group");
    }
  }

  std::vector<ValueId> fused_inputs(const Plan& p) const {
    std::vector<ValueId> in = {p.x, p.w};
    if (p.a.swiglu) in.push_back(p.w_up);
    if (p.a.norm) in.push_back(p.gamma);
    if (p.a.residual) in.push_back(p.residual);
    if (p.a.rope) in.push_back(p.pos);
    if (p.a.cache_write) in.insert(in.end(), {p.cache, p.start});
    return in;
  }

  bool fused(const Plan& p) const {
    return !p.unfusable && (p.a.norm || p.a.swiglu || p.a.residual || p.a.rope || p.a.cache_write || p.a.group >= 0);
  }

  void emit(detail::Rewriter& rw, const Plan& p) {
    std::vector<ValueId> in;
    for (ValueId v : fused_inputs(p)) in.push_back(rw.map(v));
    rw.b().label(g_.node(p.product).label);
    rw.set(p.end, rw.b().op(OpKind::FusedLinear, std::move(in), p.a));
    if (report_ == nullptr) return;
    if (p.a.swiglu) report_->record("linear_swiglu");
    if (p.a.residual) report_->record("linear_residual");
    if (p.a.rope) report_->record("linear_rope");
    if (p.a.cache_write) report_->record("linear_cache_write");
  }

  MirModule rebuild() {
    std::vector<const Plan*> at_end(static_cast<size_t>(g_.size()), nullptr);
    std::vector<char> absorbed(static_cast<size_t>(g_.size()), 0);
    for (const Plan& p : plans_) {
      if (!fused(p)) continue;
      at_end[static_cast<size_t>(p.end)] = &p;
      for (ValueId v : p.nodes)
        if (v != p.end) absorbed[static_cast<size_t>(v)] = 1;
      if (p.up != kNoValue) absorbed[static_cast<size_t>(p.up)] = absorbed[static_cast<size_t>(p.silu)] = 1;
    }
    for (ValueId n : absorbed_norms_) absorbed[static_cast<size_t>(n)] = 1;
    detail::Rewriter rw(g_);
    for (ValueId v = 0; v < g_.size(); ++v) {
      if (rw.mapped(v) || absorbed[static_cast<size_t>(v)]) continue;
      if (auto it = groups_.find(v); it != groups_.end()) {
        for (ValueId h : it->second.hoist)
          if (!rw.mapped(h)) rw.copy(h);
        for (size_t i : it->second.members) emit(rw, plans_[i]);
        continue;
      }
      if (const Plan* p = at_end[static_cast<size_t>(v)]) emit(rw, *p);
      else rw.copy(v);
    }
    return MirModule{rw.finish_ok()};
  }

  struct Group {
    std::vector<size_t> members;
    std::vector<ValueId> hoist;
  };
  const Graph& g_;
  const Target& t_;
  FusionReport* report_;
  std::vector<std::vector<ValueId>> users_;
  std::vector<int32_t> uses_;
  std::vector<Plan> plans_;
  std::set<ValueId> taken_, absorbed_norms_;
  std::map<ValueId, const char*> bare_why_;
  std::map<ValueId, Group> groups_;  // first member's end -> the group
  int64_t next_group_ = 0;
};

}  // namespace

FusedLinearQuery fused_linear_query(const Graph& g, ValueId v) {
  const Node& n = g.node(v);
  const auto& a = n.attr<FusedLinearAttrs>();
  FusedLinearQuery q =
      query_of(g, n.inputs[0], n.inputs[1], a, a.cache_write ? n.inputs[static_cast<size_t>(a.cache_input())] : kNoValue);
  q.norm_readers_n = a.norm ? q.n * (a.swiglu ? 2 : 1) : 0;
  return q;
}

MirModule fuse_linear(const MirModule& m, const Target& target, FusionReport* report) {
  if (!target.fused_linear) return m;
  return LinearFuser(m.graph, target, report).run();
}

}  // namespace rlx::compile
