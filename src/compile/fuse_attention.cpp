// Fusion: recognizes the primitive attention form written by emit_attention_primitives
// (emit.cpp: split heads, [GQA repeat], matmul(q, k^T) * scale, [softcap], [causal or
// sliding mask from positions], softmax, matmul(p, v), merge heads) and replaces it with
// one Attention node whose attrs reproduce the same math. Every value on the score path
// must have one user; anything unrecognized is left as is.
#include <cmath>
#include <limits>

#include "emit.h"
#include "rewriter.h"
#include "rlx/compile/passes.h"

namespace rlx::compile {
using namespace ir;

namespace {

struct Match {
  ValueId q = kNoValue, k = kNoValue, v = kNoValue, q_pos = kNoValue;
  AttentionAttrs attrs;
};

class Matcher {
 public:
  explicit Matcher(const Graph& g) : g_(g), uses_(g.use_counts()), users_(detail::users_of(g)) {}

  const Node& node(ValueId v) const { return g_.node(v); }
  bool single(ValueId v) const { return uses_[static_cast<size_t>(v)] == 1; }
  ValueId sole_user(ValueId v) const {
    return single(v) && users_[static_cast<size_t>(v)].size() == 1 ? users_[static_cast<size_t>(v)][0] : kNoValue;
  }
  bool is(ValueId v, OpKind k) const { return v >= 0 && node(v).op == k; }
  bool is_binary(ValueId v, BinaryKind k) const { return is(v, OpKind::Binary) && node(v).attr<BinaryAttrs>().kind == k; }
  std::optional<double> constant(ValueId v) const { return detail::uniform_constant(g_, v); }

  static bool head_swap(const std::vector<int64_t>& perm) {
    const int64_t r = static_cast<int64_t>(perm.size());
    if (r < 3) return false;
    for (int64_t i = 0; i < r; ++i) {
      const int64_t want = i == r - 3 ? r - 2 : i == r - 2 ? r - 3 : i;
      if (perm[static_cast<size_t>(i)] != want) return false;
    }
    return true;
  }

  // transpose(reshape(x, [P.., L, heads, D])) -> x, heads, D
  std::optional<std::tuple<ValueId, int64_t, int64_t>> split(ValueId t) const {
    if (!is(t, OpKind::Transpose) || !head_swap(node(t).attr<TransposeAttrs>().perm)) return std::nullopt;
    const ValueId r = node(t).inputs[0];
    if (!is(r, OpKind::Reshape)) return std::nullopt;
    const ValueId x = node(r).inputs[0];
    const Shape& xs = node(x).shape;
    const Shape& rs = node(r).shape;
    if (rs.rank() != xs.rank() + 1 || !rs[rs.rank() - 1].is_static() || !rs[rs.rank() - 2].is_static()) return std::nullopt;
    for (int64_t i = 0; i + 1 < xs.rank(); ++i)
      if (xs[i] != rs[i]) return std::nullopt;
    return std::make_tuple(x, rs[rs.rank() - 2].value(), rs[rs.rank() - 1].value());
  }

  // split(x), optionally repeated by reshape(expand(reshape(.))) -> x, kv heads, D, groups
  std::optional<std::tuple<ValueId, int64_t, int64_t, int64_t>> kv(ValueId h) const {
    if (auto s = split(h)) return std::make_tuple(std::get<0>(*s), std::get<1>(*s), std::get<2>(*s), int64_t{1});
    if (!is(h, OpKind::Reshape)) return std::nullopt;
    const ValueId e = node(h).inputs[0];
    if (!is(e, OpKind::Expand)) return std::nullopt;
    const ValueId r = node(e).inputs[0];
    if (!is(r, OpKind::Reshape)) return std::nullopt;
    auto s = split(node(r).inputs[0]);
    if (!s) return std::nullopt;
    const Shape& es = node(e).shape;
    const Dim groups = es[es.rank() - 3];
    if (!groups.is_static()) return std::nullopt;
    return std::make_tuple(std::get<0>(*s), std::get<1>(*s), std::get<2>(*s), groups.value());
  }

  // expand(1, [n]) or a constant of n ones.
  bool ones(ValueId v, const Dim& n) const {
    if (node(v).shape != Shape{n}) return false;
    if (is(v, OpKind::Expand)) return constant(node(v).inputs[0]) == 1.0;
    return constant(v) == 1.0;
  }
  // cumsum_excl(ones[n])
  bool iota(ValueId v, const Dim& n) const {
    if (!is(v, OpKind::Cumsum)) return false;
    const auto& c = node(v).attr<CumsumAttrs>();
    return c.exclusive && (c.axis == 0 || c.axis == -1) && ones(node(v).inputs[0], n);
  }
  // sub(iota[n], reduce_sum(ones[n], keep))
  bool shifted_iota(ValueId v, const Dim& n) const {
    if (!is_binary(v, BinaryKind::Sub)) return false;
    const ValueId a = node(v).inputs[0], r = node(v).inputs[1];
    if (!iota(a, n) || !is(r, OpKind::Reduce)) return false;
    const auto& ra = node(r).attr<ReduceAttrs>();
    return ra.kind == ReduceKind::Sum && ra.keep_dims && ones(node(r).inputs[0], n);
  }

  // Fills mask, window and q_pos from the where() condition.
  bool mask(ValueId cond, const Dim& S, const Dim& T, Match& m) const {
    ValueId causal = cond;
    int64_t window = 0;
    if (is(cond, OpKind::Where)) {
      const Node& w = node(cond);
      if (constant(w.inputs[2]) != 0.0 || !is(w.inputs[1], OpKind::Compare) ||
          node(w.inputs[1]).attr<CompareAttrs>().kind != CompareKind::Lt)
        return false;
      const ValueId diff = node(w.inputs[1]).inputs[0];
      const auto win = constant(node(w.inputs[1]).inputs[1]);
      if (!win || !is_binary(diff, BinaryKind::Sub)) return false;
      window = static_cast<int64_t>(*win);
      causal = w.inputs[0];
      // diff must be pq_col - pk of the causal compare (checked below)
      if (!is(causal, OpKind::Compare) || node(diff).inputs != std::vector<ValueId>{node(causal).inputs[1], node(causal).inputs[0]})
        return false;
    }
    if (!is(causal, OpKind::Compare) || node(causal).attr<CompareAttrs>().kind != CompareKind::Le) return false;
    const ValueId pk = node(causal).inputs[0], pq_col = node(causal).inputs[1];
    if (!is(pq_col, OpKind::Reshape) || node(pq_col).shape != Shape{S, Dim(1)}) return false;
    const ValueId pq = node(pq_col).inputs[0];
    if (iota(pk, T)) {
      if (node(pq).shape != Shape{S}) return false;
      m.q_pos = pq;
    } else if (!(shifted_iota(pk, T) && shifted_iota(pq, S))) {
      return false;
    }
    m.attrs.mask = is(cond, OpKind::Where) ? MaskKind::SlidingWindow : MaskKind::Causal;
    m.attrs.window = window;
    return true;
  }

  // Anchored at a softmax; returns the match and the root (final reshape).
  std::optional<std::pair<Match, ValueId>> at(ValueId sm) const {
    const Node& smn = node(sm);
    if (smn.op != OpKind::Softmax) return std::nullopt;
    const int64_t ax = smn.attr<SoftmaxAttrs>().axis;
    if (ax != -1 && ax != smn.shape.rank() - 1) return std::nullopt;
    Match m;
    ValueId s = smn.inputs[0];
    ValueId cond = kNoValue;
    if (is(s, OpKind::Where)) {
      if (!single(s) || constant(node(s).inputs[2]) != -std::numeric_limits<double>::infinity()) return std::nullopt;
      cond = node(s).inputs[0];
      s = node(s).inputs[1];
    }
    if (!single(s) || !is_binary(s, BinaryKind::Mul)) return std::nullopt;
    if (const ValueId t = node(s).inputs[0]; is(t, OpKind::Activation) &&
                                             node(t).attr<ActivationAttrs>().kind == ActKind::Tanh && single(t)) {
      const ValueId d = node(t).inputs[0];
      const auto c1 = constant(node(s).inputs[1]);
      if (!is_binary(d, BinaryKind::Div) || !single(d) || !c1 || constant(node(d).inputs[1]) != c1) return std::nullopt;
      m.attrs.softcap = *c1;
      s = node(d).inputs[0];
      if (!single(s) || !is_binary(s, BinaryKind::Mul)) return std::nullopt;
    }
    const ValueId mm = node(s).inputs[0];
    const auto scale = constant(node(s).inputs[1]);
    if (!scale || !is(mm, OpKind::MatMul) || !single(mm)) return std::nullopt;
    const auto& mma = node(mm).attr<MatMulAttrs>();
    if (mma.transpose_a || !mma.transpose_b) return std::nullopt;
    auto qs = split(node(mm).inputs[0]);
    auto ks = kv(node(mm).inputs[1]);
    if (!qs || !ks) return std::nullopt;
    const auto [q, heads, head_dim] = *qs;
    const auto [k, kv_heads, kd, groups] = *ks;
    if (kd != head_dim || kv_heads * groups != heads) return std::nullopt;
    // p @ v, merge heads
    const ValueId pv = sole_user(sm);
    if (pv == kNoValue || !is(pv, OpKind::MatMul) || node(pv).inputs[0] != sm) return std::nullopt;
    const auto& pva = node(pv).attr<MatMulAttrs>();
    if (pva.transpose_a || pva.transpose_b) return std::nullopt;
    auto vs = kv(node(pv).inputs[1]);
    if (!vs || std::get<1>(*vs) != kv_heads || std::get<2>(*vs) != head_dim || std::get<3>(*vs) != groups) return std::nullopt;
    const ValueId tr = sole_user(pv);
    if (tr == kNoValue || !is(tr, OpKind::Transpose) || !head_swap(node(tr).attr<TransposeAttrs>().perm)) return std::nullopt;
    const ValueId root = sole_user(tr);
    if (root == kNoValue || !is(root, OpKind::Reshape) || node(root).shape != node(q).shape) return std::nullopt;
    const Shape& qshape = node(q).shape;
    const Shape& kshape = node(k).shape;
    if (cond != kNoValue && !mask(cond, qshape[qshape.rank() - 2], kshape[kshape.rank() - 2], m)) return std::nullopt;
    if (cond == kNoValue) m.attrs.mask = MaskKind::None;
    m.q = q;
    m.k = k;
    m.v = std::get<0>(*vs);
    m.attrs.n_heads = heads;
    m.attrs.n_kv_heads = kv_heads;
    m.attrs.head_dim = head_dim;
    // The default scale (1/sqrt(D) rounded to the dtype) is recorded as 0 = default.
    const DType dt = node(q).dtype;
    const auto def = detail::encode_scalar(dt, 1.0 / std::sqrt(static_cast<double>(head_dim)));
    m.attrs.scale = detail::decode_element(dt, def.data(), 0) == *scale ? 0.0 : *scale;
    return std::make_pair(m, root);
  }

 private:
  const Graph& g_;
  std::vector<int32_t> uses_;
  std::vector<std::vector<ValueId>> users_;
};

}  // namespace

MirModule fuse_attention(const MirModule& m, FusionReport* report) {
  const Graph& g = m.graph;
  Matcher mt(g);
  std::vector<std::optional<Match>> at(static_cast<size_t>(g.size()));
  bool any = false;
  for (ValueId v = 0; v < g.size(); ++v) {
    if (g.node(v).op != OpKind::Softmax) continue;
    auto r = mt.at(v);
    if (!r) continue;
    at[static_cast<size_t>(r->second)] = r->first;
    any = true;
  }
  if (!any) return m;
  return detail::rebuild_with_matches(g, at, [&](detail::Rewriter& rw, ValueId v, const Match& a) {
    std::optional<ValueId> pos;
    if (a.q_pos != kNoValue) pos = rw.map(a.q_pos);
    rw.b().label(g.node(v).label);
    rw.set(v, rw.b().attention(rw.map(a.q), rw.map(a.k), rw.map(a.v), a.attrs, pos));
    if (report) report->record("attention");
  });
}

}  // namespace rlx::compile
