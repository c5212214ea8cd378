// shard_tensor_parallel: which blocks split, the part shapes and shard attrs of their
// weights and KV caches, the collectives inserted (and printed), the blocks kept whole
// with their reasons, and the compile pipeline running the pass for a group target.
#include <gtest/gtest.h>

#include "rlx/compile/passes.h"
#include "rlx/compile/pipeline.h"
#include "rlx/ir/text.h"
#include "test_graphs.h"

namespace rlx::compile {
namespace {

using ir::OpKind;

testing::LlamaShape small() {
  testing::LlamaShape s;
  s.layers = 2;
  s.vocab = 512;
  s.kv_cache = true;
  s.seq = ir::Dim(4);
  return s;
}

const ir::Node* param(const ir::Graph& g, const std::string& name) {
  for (const ir::Node& n : g.nodes())
    if (n.op == OpKind::Param && n.attr<ir::ParamAttrs>().name == name) return &n;
  return nullptr;
}

int64_t count(const ir::Graph& g, OpKind k) {
  int64_t c = 0;
  for (const ir::Node& n : g.nodes()) c += n.op == k;
  return c;
}

TEST(ShardTensorParallel, SplitsHeadsFfnAndHeadWithCollectives) {
  const ir::HirModule hir = testing::llama(small(), ir::FusionPolicy::Direct);
  ShardReport rep;
  auto r = shard_tensor_parallel(hir, 2, &rep);
  ASSERT_TRUE(r) << r.error().to_string();
  const ir::Graph& g = r->graph;
  EXPECT_EQ(rep.attention_split, 2);
  EXPECT_EQ(rep.ffn_split, 2);
  EXPECT_EQ(rep.lm_head_split, 1);
  EXPECT_EQ(rep.all_reduces, 4);
  EXPECT_EQ(rep.all_gathers, 1);
  EXPECT_TRUE(rep.kept_whole.empty());
  EXPECT_EQ(count(g, OpKind::AllReduce), 4);
  EXPECT_EQ(count(g, OpKind::AllGather), 1);

  // Rows of q/k/v, gate, up and the LM head; columns of the output and down projections.
  auto expect_part = [&](const std::string& name, std::vector<int64_t> dims, int64_t axis) {
    const ir::Node* n = param(g, name);
    ASSERT_NE(n, nullptr) << name;
    EXPECT_EQ(n->shape.static_dims(), dims) << name;
    EXPECT_EQ(n->attr<ir::ParamAttrs>().shard_axis, axis) << name;
    EXPECT_EQ(n->attr<ir::ParamAttrs>().shard_parts, axis < 0 ? 1 : 2) << name;
  };
  expect_part("blk.0.attn_q", {32, 64}, 0);
  expect_part("blk.0.attn_k", {16, 64}, 0);
  expect_part("blk.0.attn_output", {64, 32}, 1);
  expect_part("blk.1.ffn_gate", {64, 64}, 0);
  expect_part("blk.1.ffn_down", {64, 64}, 1);
  expect_part("output", {256, 64}, 0);
  expect_part("blk.0.attn_norm", {64}, -1);  // norms stay whole
  expect_part("tok_embd", {512, 64}, -1);

  for (const ir::Node& n : g.nodes()) {
    if (n.op == OpKind::HirAttentionBlock) {
      EXPECT_EQ(n.attr<ir::AttentionBlockAttrs>().attn.n_heads, 2);
      EXPECT_EQ(n.attr<ir::AttentionBlockAttrs>().attn.n_kv_heads, 1);
    }
    if (n.op == OpKind::Handle) {
      EXPECT_EQ(n.shape.static_dims(), (std::vector<int64_t>{64, 16}));
    }
  }
  // The logits keep the whole model's shape; the report and the text form show it all.
  EXPECT_EQ(g.node(g.outputs()[0].value).shape.static_dims(), (std::vector<int64_t>{4, 512}));
  EXPECT_NE(rep.to_string().find("2 attention blocks, 2 feed-forwards, 1 LM heads split; 4 all_reduce, 1 all_gather"),
            std::string::npos)
      << rep.to_string();
  const std::string text = ir::print(*r);
  EXPECT_NE(text.find("all_reduce"), std::string::npos);
  EXPECT_NE(text.find("shard_axis=1, shard_parts=2"), std::string::npos);
  auto back = ir::parse_hir(text);
  ASSERT_TRUE(back) << back.error().to_string();
  EXPECT_EQ(ir::print(*back), text);
}

TEST(ShardTensorParallel, KeepsWholeWhatDoesNotDivide) {
  testing::LlamaShape s = small();
  s.heads = 3;  // 3 query heads over 2 ranks
  s.kv_heads = 1;
  s.layers = 1;
  ShardReport rep;
  auto r = shard_tensor_parallel(testing::llama(s, ir::FusionPolicy::Direct), 2, &rep);
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(rep.attention_split, 0);
  EXPECT_EQ(rep.ffn_split, 1);
  ASSERT_EQ(rep.kept_whole.size(), 1u);
  EXPECT_NE(rep.kept_whole[0].find("3 query / 1 KV heads do not divide by 2"), std::string::npos) << rep.kept_whole[0];
  EXPECT_EQ(param(r->graph, "blk.0.attn_q")->shape.static_dims(), (std::vector<int64_t>{48, 64}));

  // A packed down projection whose column half would cut its 256-element blocks.
  s = small();
  s.layers = 1;
  s.vocab = 0;
  s.ffn = 256;
  s.weight_dtype = ir::DType::Q4_K;
  s.dim = 256;
  s.heads = 16;
  s.kv_heads = 2;
  auto q = shard_tensor_parallel(testing::llama(s, ir::FusionPolicy::Direct), 2, &rep);
  ASSERT_TRUE(q) << q.error().to_string();
  EXPECT_EQ(rep.ffn_split, 0);
  bool named = false;
  for (const std::string& k : rep.kept_whole)
    named |= k.find("would cut its 256-element q4_k blocks") != std::string::npos;
  EXPECT_TRUE(named) << rep.to_string();
}

// Gemma's feed-forward written out as products: gelu(x.Wg^T) rounded through f16, times
// x.Wu^T, into Wd. The products split like a fused FFN; a value of it that something
// else reads keeps it whole.
ir::HirModule written_out_ffn(bool leak) {
  using namespace ir;
  GraphBuilder b;
  const ValueId x = b.input("x", DType::F32, {4, 64});
  const ValueId wg = b.param("ffn_gate", DType::F32, {128, 64}), wu = b.param("ffn_up", DType::F32, {128, 64});
  const ValueId wd = b.param("ffn_down", DType::F32, {64, 128}), head = b.param("output", DType::F32, {32, 64});
  const ValueId g = b.op(OpKind::HirLinear, {x, wg}, FusedMatMulAttrs{});
  const ValueId u = b.op(OpKind::HirLinear, {x, wu}, FusedMatMulAttrs{});
  const ValueId act = b.cast(b.cast(b.activation(ActKind::Gelu, g), DType::F16), DType::F32);
  const ValueId down = b.op(OpKind::HirLinear, {b.mul(act, u), wd}, FusedMatMulAttrs{});
  b.output(b.op(OpKind::HirLinear, {b.add(x, down), head}, FusedMatMulAttrs{}), "y");
  if (leak) b.output(act, "act");
  return HirModule{std::move(b.build()).value(), FusionPolicy::Direct};
}

TEST(ShardTensorParallel, WrittenOutFeedForwardSplitsLikeAFusedOne) {
  ShardReport rep;
  auto r = shard_tensor_parallel(written_out_ffn(false), 2, &rep);
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(rep.ffn_split, 1) << rep.to_string();
  EXPECT_EQ(rep.lm_head_split, 1) << rep.to_string();
  EXPECT_EQ(param(r->graph, "ffn_gate")->shape.static_dims(), (std::vector<int64_t>{64, 64}));
  EXPECT_EQ(param(r->graph, "ffn_down")->shape.static_dims(), (std::vector<int64_t>{64, 64}));
  EXPECT_EQ(param(r->graph, "ffn_down")->attr<ir::ParamAttrs>().shard_axis, 1);
  for (const ir::Node& n : r->graph.nodes())
    if (n.op == OpKind::Cast) {
      EXPECT_EQ(n.shape.static_dims(), (std::vector<int64_t>{4, 64}));  // the rank's half of the hidden units
    }
  EXPECT_EQ(count(r->graph, OpKind::AllReduce), 1);

  auto kept = shard_tensor_parallel(written_out_ffn(true), 2, &rep);
  ASSERT_TRUE(kept) << kept.error().to_string();
  EXPECT_EQ(rep.ffn_split, 0);
  ASSERT_FALSE(rep.kept_whole.empty());
  EXPECT_NE(rep.kept_whole[0].find("is read outside the feed-forward"), std::string::npos) << rep.to_string();
  EXPECT_EQ(param(kept->graph, "ffn_gate")->shape.static_dims(), (std::vector<int64_t>{128, 64}));
}

// A mixture of experts over 8 experts of width `ffn`: the router linear, moe_route,
// moe_ffn of stacked gate / up [8, ffn, 64] and down [8, 64, ffn] weights of `down_type`.
ir::HirModule moe_layer(int64_t ffn, ir::DType down_type) {
  using namespace ir;
  GraphBuilder b;
  const ValueId x = b.input("x", DType::F32, {4, 64});
  const ValueId router = b.param("ffn_gate_inp", DType::F32, {8, 64});
  const ValueId wg = b.param("ffn_gate_exps", DType::F32, {8, ffn, 64});
  const ValueId wu = b.param("ffn_up_exps", DType::F32, {8, ffn, 64});
  const ValueId wd = b.param("ffn_down_exps", down_type, {8, 64, ffn});
  const ValueId route = b.moe_route(b.op(OpKind::HirLinear, {x, router}, FusedMatMulAttrs{}), MoeRouteAttrs{2});
  b.output(b.add(x, b.moe_ffn(x, route, wg, wu, wd)), "y");
  return HirModule{std::move(b.build()).value(), FusionPolicy::Direct};
}

TEST(ShardTensorParallel, MixtureOfExpertsSplitsEveryExpert) {
  ShardReport rep;
  auto r = shard_tensor_parallel(moe_layer(64, ir::DType::F32), 2, &rep);
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(rep.ffn_split, 1) << rep.to_string();
  EXPECT_TRUE(rep.kept_whole.empty()) << rep.to_string();
  const ir::Graph& g = r->graph;
  EXPECT_EQ(param(g, "ffn_gate_exps")->shape.static_dims(), (std::vector<int64_t>{8, 32, 64}));
  EXPECT_EQ(param(g, "ffn_gate_exps")->attr<ir::ParamAttrs>().shard_axis, 1);
  EXPECT_EQ(param(g, "ffn_up_exps")->shape.static_dims(), (std::vector<int64_t>{8, 32, 64}));
  EXPECT_EQ(param(g, "ffn_down_exps")->shape.static_dims(), (std::vector<int64_t>{8, 64, 32}));
  EXPECT_EQ(param(g, "ffn_down_exps")->attr<ir::ParamAttrs>().shard_axis, 2);
  // The router stays whole: every rank picks the same experts.
  EXPECT_EQ(param(g, "ffn_gate_inp")->shape.static_dims(), (std::vector<int64_t>{8, 64}));
  EXPECT_EQ(param(g, "ffn_gate_inp")->attr<ir::ParamAttrs>().shard_parts, 1);
  EXPECT_EQ(count(g, OpKind::AllReduce), 1);
  for (const ir::Node& n : g.nodes())
    if (n.op == OpKind::AllReduce) {
      EXPECT_EQ(g.node(n.inputs[0]).op, OpKind::MoeFfn);
    }

  // Q4_K down projections of width 256: a half would cut their 256-element blocks.
  auto kept = shard_tensor_parallel(moe_layer(256, ir::DType::Q4_K), 2, &rep);
  ASSERT_TRUE(kept) << kept.error().to_string();
  EXPECT_EQ(rep.ffn_split, 0);
  ASSERT_EQ(rep.kept_whole.size(), 1u) << rep.to_string();
  EXPECT_NE(rep.kept_whole[0].find("would cut its 256-element q4_k blocks"), std::string::npos) << rep.to_string();
  EXPECT_EQ(count(kept->graph, OpKind::AllReduce), 0);
}

TEST(ShardTensorParallel, WorldOneIsIdentityAndZeroIsAnError) {
  const ir::HirModule hir = testing::llama(small(), ir::FusionPolicy::Direct);
  auto one = shard_tensor_parallel(hir, 1);
  ASSERT_TRUE(one);
  EXPECT_EQ(ir::print(*one), ir::print(hir));
  EXPECT_FALSE(shard_tensor_parallel(hir, 0));
}

TEST(ShardTensorParallel, PipelineShardsForAGroupTarget) {
  Target t("cpu");
  t.tensor_parallel = 2;
  const OpSet ops = OpSet::all_mir();
  auto r = compile_hir(testing::llama(small(), ir::FusionPolicy::Direct), CompileOptions{}, ops, t);
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(count(r->lir.graph, OpKind::AllReduce), 4);
  EXPECT_EQ(count(r->lir.graph, OpKind::AllGather), 1);
  EXPECT_EQ(r->shard.world, 2);
  bool timed = false;
  for (const PassTiming& p : r->timings) timed |= p.pass == "shard_tensor_parallel";
  EXPECT_TRUE(timed);
}

}  // namespace
}  // namespace rlx::compile
