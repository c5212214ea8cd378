// shard_tensor_parallel: the HIR pass that makes one rank's graph of a tensor-parallel
// group (see passes.h). Decides per attention block, feed-forward and LM head whether
// it splits (heads / hidden units / vocabulary divide by the world size, packed blocks
// stay whole, the weights are the block's alone), then rebuilds the graph: split
// weights and KV caches get their part's shape, split attention blocks their per-rank
// head counts, and the collectives follow the blocks.
#include <map>

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
  std::vector<int> users;                 // per value: nodes reading it
  std::map<ValueId, int64_t> param_axis;  // weights (and KV caches) split, with their axis

  std::string name(ValueId v) const {
    const Node& n = g.node(v);
    return n.label.empty() ? g.describe(v) : n.label;
  }

  // Why `w` cannot be split along `axis` into `world` parts (empty: it can).
  std::string cannot_split(ValueId w, int64_t axis) const {
    const Node& n = g.node(w);
    if (n.op != OpKind::Param && n.op != OpKind::Handle) return g.describe(w) + " is not a weight";
    if (users[static_cast<size_t>(w)] != 1) return g.describe(w) + " is shared with other ops";
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
    size_t i = 6;
    if (a.qkv_bias) {
      for (int j = 0; j < 3; ++j) parts.push_back({in[i + static_cast<size_t>(j)], 0});
      i += 3;
    }
    if (a.qk_norm) i += 2;  // per head_dim: the same on every rank
    if (a.kv_cache)
      for (; i < in.size(); ++i) parts.push_back({in[i], 1});  // [ctx, kv heads * head_dim]
    return split_all(parts);
  }

  std::string ffn(const Node& n) {
    const auto& in = n.inputs;
    std::vector<std::pair<ValueId, int64_t>> parts;
    for (size_t i = 1; i + 1 < in.size(); ++i) parts.push_back({in[i], 0});  // gate, up: rows
    parts.push_back({in.back(), 1});                                         // down: columns
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
  Planner p{g, world, std::vector<int>(static_cast<size_t>(g.size()), 0), {}};
  for (const Node& n : g.nodes())
    for (ValueId v : n.inputs) ++p.users[static_cast<size_t>(v)];
  // Values some compute follows (then a linear is no LM head).
  std::vector<bool> feeds_compute(static_cast<size_t>(g.size()), false);
  for (ValueId v = g.size() - 1; v >= 0; --v) {
    const Node& n = g.node(v);
    if (is_compute(n.op) || feeds_compute[static_cast<size_t>(v)])
      for (ValueId in : n.inputs) feeds_compute[static_cast<size_t>(in)] = true;
  }

  std::vector<Split> split(static_cast<size_t>(g.size()), Split::kNone);
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
    } else if (n.op == OpKind::HirLinear && !feeds_compute[static_cast<size_t>(v)]) {
      s = Split::kLmHead;
      why = p.lm_head(n);
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
