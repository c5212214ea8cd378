// shard_tensor_parallel: the HIR pass that makes one rank's graph of a tensor-parallel
// group (see passes.h). Decides per attention block, feed-forward (dense or mixture of
// experts) and LM head whether it splits (heads / hidden units / vocabulary divide by
// the world size, packed blocks stay whole, the weights are the block's alone), then
// rebuilds the graph: split weights and KV caches get their part's shape, split
// attention blocks their per-rank head counts, and the collectives follow the blocks.
#include <algorithm>
#include <map>
#include <optional>

#include "rlx/compile/passes.h"
#include "rlx/ir/graph.h"

namespace rlx::compile {
namespace {

using ir::AttentionBlockAttrs;
using ir::Dim;
using ir::Graph;
using ir::Node;
using ir::OpKind;
using ir::Shape;
using ir::ValueId;

enum class Split : uint8_t { kNone, kAttention, kFfn, kLmHead };

struct Planner {
  const Graph& g;
  int world;
  std::vector<std::vector<ValueId>> readers;  // per value: the nodes reading it
  std::map<ValueId, int64_t> param_axis;      // weights (and KV caches) split, with their axis

  std::string name(ValueId v) const {
    const Node& n = g.node(v);
    return n.label.empty() ? g.describe(v) : n.label;
  }

  // Why `w` cannot be split along `axis` into `world` parts (empty: it can).
  std::string cannot_split(ValueId w, int64_t axis) const {
    const Node& n = g.node(w);
    if (n.op != OpKind::Param && n.op != OpKind::Handle) return g.describe(w) + " is not a weight";
    if (readers[static_cast<size_t>(w)].size() != 1) return g.describe(w) + " is shared with other ops";
    if (param_axis.count(w)) return g.describe(w) + " is split already";
    if (axis >= n.shape.rank() || !n.shape[axis].is_static()) return g.describe(w) + " has no static dim to split";
    const int64_t len = n.shape[axis].value();
    if (len % world != 0) return fmt::format("{} dim {} ({}) does not divide by {}", g.describe(w), axis, len, world);
    // A packed weight is cut inside its rows only at block boundaries.
    const int64_t block = ir::dtype_info(n.dtype).block_size;
    if (axis == n.shape.rank() - 1 && (len / world) % block != 0)
      return fmt::format("{} would cut its {}-element {} blocks ({} / {} columns)", g.describe(w), block,
                         ir::dtype_name(n.dtype), len, world);
    return {};
  }

  // Splits every (weight, axis) of a block, or none: the reason when it cannot.
  std::string split_all(const std::vector<std::pair<ValueId, int64_t>>& parts) {
    for (const auto& [w, axis] : parts) {
      std::string why = cannot_split(w, axis);
      if (!why.empty()) return why;
    }
    for (const auto& [w, axis] : parts) param_axis[w] = axis;
    return {};
  }

  std::string attention(const Node& n) {
    const auto& a = n.attr<AttentionBlockAttrs>();
    if (a.attn.n_heads % world != 0 || a.attn.n_kv_heads % world != 0)
      return fmt::format("{} query / {} KV heads do not divide by {}", a.attn.n_heads, a.attn.n_kv_heads, world);
    const auto& in = n.inputs;
    std::vector<std::pair<ValueId, int64_t>> parts{{in[1], 0}, {in[2], 0}, {in[3], 0}, {in[4], 1}};
    if (a.latent()) {
      // W_q and W_kv_b by heads, W_o by its heads' columns; W_kv_a, the latent norms and
      // W_q_a are every rank's (each expands the same latent into its own heads).
      parts = {{in[1], 0}, {in[3], 0}, {in[4], 1}};
      const size_t at = 6 + (a.latent_q_rank > 0 ? 3 : 1);
      if (a.kv_cache)
        for (size_t j = at; j < at + 2; ++j) parts.push_back({in[j], g.node(in[j]).shape.rank() - 1});
      return split_all(parts);
    }
    size_t i = 6;
    if (a.qkv_bias) {
      for (int j = 0; j < 3; ++j) parts.push_back({in[i + static_cast<size_t>(j)], 0});
      i += 3;
    }
    if (a.qk_norm) i += 2;  // per head_dim: the same on every rank
    if (a.kv_cache)  // [ctx, kv heads * head_dim], or [batch, ctx, ...]: the last axis
      for (size_t j = i; j < i + 2; ++j) parts.push_back({in[j], g.node(in[j]).shape.rank() - 1});
    // (compact rows' two index inputs follow the caches: the same on every rank)
    return split_all(parts);
  }

  std::string ffn(const Node& n) {
    const auto& in = n.inputs;
    std::vector<std::pair<ValueId, int64_t>> parts;
    for (size_t i = 1; i + 1 < in.size(); ++i) parts.push_back({in[i], 0});  // gate, up: rows
    parts.push_back({in.back(), 1});                                         // down: columns
    return split_all(parts);
  }

  // A mixture of experts: every expert's hidden units split like a dense feed-forward's
  // (gate / up [E, F, D] by F, down [E, D, F] by its columns); the router stays whole, so
  // each rank computes the same choice of experts and its part of each chosen expert.
  std::string moe(const Node& n) {
    const auto& in = n.inputs;
    return split_all({{in[2], 1}, {in[3], 1}, {in[4], 2}});
  }

  // A feed-forward written out as products (Gemma's f16-rounded GELU form): `down`
  // (a linear) reads, through elementwise ops only, the outputs of linears (gate, up),
  // and nothing else reads those. Split like a fused FFN: the up-side products by rows
  // (their elementwise ops then work on each rank's columns), `down` by columns, then
  // an all_reduce. nullopt: `down` is no such product (nothing to report); an empty
  // string: split (region: the elementwise ops between).
  std::optional<std::string> mlp(ValueId down, std::vector<ValueId>& region) {
    const Node& d = g.node(down);
    const auto& da = d.attr<ir::FusedMatMulAttrs>();
    if (!da.transpose_b || d.inputs.size() > 2) return std::nullopt;  // (a bias would be added on every rank)
    std::vector<ValueId> ups, stack{d.inputs[0]};
    region.clear();
    while (!stack.empty()) {
      const ValueId v = stack.back();
      stack.pop_back();
      if (std::find(region.begin(), region.end(), v) != region.end() ||
          std::find(ups.begin(), ups.end(), v) != ups.end())
        continue;
      const Node& n = g.node(v);
      if (n.op == OpKind::HirLinear) {
        ups.push_back(v);
        continue;
      }
      const bool elementwise = n.op == OpKind::Activation || n.op == OpKind::Binary || n.op == OpKind::Cast ||
                               n.op == OpKind::Compare || n.op == OpKind::Where;
      if (!elementwise) return std::nullopt;
      region.push_back(v);
      for (ValueId in : n.inputs) {
        const Node& x = g.node(in);
        const bool scalar = x.shape.rank() == 0 || (x.shape.num_elements() && *x.shape.num_elements() == 1);
        if (!scalar) stack.push_back(in);
      }
    }
    if (ups.empty()) return std::nullopt;
    // Nothing outside reads the region or the up-side products.
    std::vector<ValueId> inside = region;
    inside.push_back(down);
    auto read_outside = [&](ValueId v) {
      for (const ir::GraphOutput& o : g.outputs())
        if (o.value == v) return true;
      for (ValueId r : readers[static_cast<size_t>(v)])
        if (std::find(inside.begin(), inside.end(), r) == inside.end()) return true;
      return false;
    };
    std::vector<std::pair<ValueId, int64_t>> parts;
    for (ValueId v : region)
      if (read_outside(v)) return fmt::format("{} is read outside the feed-forward", g.describe(v));
    for (ValueId u : ups) {
      if (read_outside(u)) return fmt::format("{} is read outside the feed-forward", g.describe(u));
      const Node& un = g.node(u);
      if (!un.attr<ir::FusedMatMulAttrs>().transpose_b) return fmt::format("{} is not x . W^T", g.describe(u));
      parts.push_back({un.inputs[1], 0});
      if (un.inputs.size() > 2) parts.push_back({un.inputs[2], 0});  // its bias, by the same rows
    }
    parts.push_back({d.inputs[1], 1});
    return split_all(parts);
  }

  std::string lm_head(const Node& n) {
    const auto& a = n.attr<ir::FusedMatMulAttrs>();
    if (a.act != ir::ActKind::Identity || !a.transpose_b) return "not a plain x . W^T";
    if (n.shape.rank() != 2) return fmt::format("logits of rank {} (the split takes [rows, vocab])", n.shape.rank());
    std::vector<std::pair<ValueId, int64_t>> parts{{n.inputs[1], 0}};
    if (n.inputs.size() > 2) parts.push_back({n.inputs[2], 0});
    return split_all(parts);
  }
};

bool is_compute(OpKind k) {
  return k == OpKind::HirLinear || k == OpKind::HirSwiGLUFfn || k == OpKind::HirGeluFfn ||
         k == OpKind::HirAttentionBlock || k == OpKind::MatMul || k == OpKind::MoeFfn || k == OpKind::GatedDeltaRule;
}

}  // namespace

std::string ShardReport::to_string() const {
  if (world <= 1) return {};
  std::string s = fmt::format(
      "tensor parallel over {} ranks: {} attention blocks, {} feed-forwards, {} LM heads split; {} all_reduce, {} "
      "all_gather\n",
      world, attention_split, ffn_split, lm_head_split, all_reduces, all_gathers);
  for (const std::string& k : kept_whole) s += "  kept whole (every rank computes it): " + k + "\n";
  return s;
}

Expected<ir::HirModule> shard_tensor_parallel(const ir::HirModule& m, int world, ShardReport* report) {
  ShardReport local;
  ShardReport& rep = report ? *report : local;
  rep = ShardReport{};
  rep.world = world;
  if (world < 1) return Error::invalid_argument("shard_tensor_parallel: world {} < 1", world);
  if (world == 1) return m;
  const Graph& g = m.graph;
  Planner p{g, world, std::vector<std::vector<ValueId>>(static_cast<size_t>(g.size())), {}};
  for (ValueId v = 0; v < g.size(); ++v)
    for (ValueId in : g.node(v).inputs) p.readers[static_cast<size_t>(in)].push_back(v);
  // Values some compute follows (then a linear is no LM head).
  std::vector<bool> feeds_compute(static_cast<size_t>(g.size()), false);
  for (ValueId v = g.size() - 1; v >= 0; --v) {
    const Node& n = g.node(v);
    if (is_compute(n.op) || feeds_compute[static_cast<size_t>(v)])
      for (ValueId in : n.inputs) feeds_compute[static_cast<size_t>(in)] = true;
  }

  std::vector<Split> split(static_cast<size_t>(g.size()), Split::kNone);
  // Elementwise ops between the products of a written-out feed-forward: their width
  // becomes the rank's part (re-inferred; a cast's declared shape follows its input).
  std::vector<bool> in_region(static_cast<size_t>(g.size()), false);
  for (ValueId v = 0; v < g.size(); ++v) {
    const Node& n = g.node(v);
    std::string why;
    Split s = Split::kNone;
    if (n.op == OpKind::HirAttentionBlock) {
      s = Split::kAttention;
      why = p.attention(n);
    } else if (n.op == OpKind::HirSwiGLUFfn || n.op == OpKind::HirGeluFfn) {
      s = Split::kFfn;
      why = p.ffn(n);
    } else if (n.op == OpKind::MoeFfn) {
      s = Split::kFfn;
      why = p.moe(n);
    } else if (n.op == OpKind::HirLinear && !feeds_compute[static_cast<size_t>(v)]) {
      s = Split::kLmHead;
      why = p.lm_head(n);
    } else if (n.op == OpKind::HirLinear) {
      std::vector<ValueId> region;
      const std::optional<std::string> m = p.mlp(v, region);
      if (!m) continue;
      s = Split::kFfn;
      why = *m;
      if (why.empty())
        for (ValueId r : region) in_region[static_cast<size_t>(r)] = true;
    } else {
      continue;
    }
    if (!why.empty()) {
      rep.kept_whole.push_back(p.name(v) + ": " + why);
      continue;
    }
    split[static_cast<size_t>(v)] = s;
  }

  // Rebuild: node by node, with the split weights' part shapes and the collectives.
  Graph out;
  std::vector<ValueId> map(static_cast<size_t>(g.size()), ir::kNoValue);
  for (ValueId v = 0; v < g.size(); ++v) {
    const Node& n = g.node(v);
    std::vector<ValueId> in;
    for (ValueId x : n.inputs) in.push_back(map[static_cast<size_t>(x)]);
    ir::Attrs attrs = n.attrs;
    ir::TensorType declared = n.type();
    if (auto it = p.param_axis.find(v); it != p.param_axis.end()) {
      declared.shape[it->second] = Dim(n.shape[it->second].value() / world);
      if (auto* pa = std::get_if<ir::ParamAttrs>(&attrs)) {
        pa->shard_axis = it->second;
        pa->shard_parts = world;
      }
    }
    if (in_region[static_cast<size_t>(v)] && n.op == OpKind::Cast) declared.shape = out.node(in[0]).shape;
    const Split s = split[static_cast<size_t>(v)];
    if (s == Split::kAttention) {
      auto& a = std::get<AttentionBlockAttrs>(attrs);
      a.attn.n_heads /= world;
      a.attn.n_kv_heads /= world;
    }
    ASSIGN_OR_RETURN(ValueId r, out.add(n.op, std::move(in), std::move(attrs), declared, n.label));
    const std::string& label = n.label;
    if (s == Split::kAttention || s == Split::kFfn) {
      // The ranks' partial sums of the output projection.
      ASSIGN_OR_RETURN(r, out.add(OpKind::AllReduce, {r}, ir::CollectiveAttrs{world}, {}, label + ".all_reduce"));
      ++rep.all_reduces;
      ++(s == Split::kAttention ? rep.attention_split : rep.ffn_split);
    } else if (s == Split::kLmHead) {
      // [rows, V/world] per rank -> [world, rows, V/world] -> [rows, world, V/world] -> [rows, V].
      ASSIGN_OR_RETURN(ValueId all,
                       out.add(OpKind::AllGather, {r}, ir::CollectiveAttrs{world}, {}, label + ".all_gather"));
      ASSIGN_OR_RETURN(ValueId t,
                       out.add(OpKind::Transpose, {all}, ir::TransposeAttrs{{1, 0, 2}}, {}, label + ".gather"));
      ASSIGN_OR_RETURN(r, out.add(OpKind::Reshape, {t}, ir::ShapeAttrs{n.shape}, {}, label + ".gather"));
      ++rep.all_gathers;
      ++rep.lm_head_split;
    }
    map[static_cast<size_t>(v)] = r;
  }
  for (const ir::GraphOutput& o : g.outputs()) out.add_output(map[static_cast<size_t>(o.value)], o.name);
  TRY(ir::verify(out, /*allow_hir=*/true));
  return ir::HirModule{std::move(out), m.policy};
}

}  // namespace rlx::compile
