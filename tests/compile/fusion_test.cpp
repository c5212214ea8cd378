// Golden tests of every fusion pass (text IR in -> text IR out, positive and negative
// cases), FusionReport contents, and Direct vs Fusable lowering reaching the same MIR.
#include <gtest/gtest.h>

#include "golden.h"
#include "rlx/compile/legalize.h"
#include "rlx/compile/lower.h"
#include "rlx/compile/passes.h"
#include "rlx/ir/text.h"
#include "test_graphs.h"

namespace rlx::compile {
namespace {
using namespace ir;
using testing::mir;

// --- matmul + bias + activation ---------------------------------------------------
constexpr const char* kMatMulBiasGelu = R"(
  %0 = input "x" : f32[8, 32]
  %1 = param "w" : f32[64, 32]
  %2 = param "b" : f32[64]
  %3 = matmul %0, %1 {transpose_b=true}
  %4 = binary.add %3, %2
  %5 = activation.gelu %4
  output %5 "y"
)";

TEST(FuseMatMulBiasAct, BiasAndGelu) {
  FusionReport r;
  const MirModule out = fuse_matmul_bias_act(mir(kMatMulBiasGelu), &r);
  testing::expect_golden("matmul_bias_act_gelu.mir", print(out));
  EXPECT_EQ(r.count("matmul_bias_act"), 1);
  EXPECT_TRUE(r.clean());
}

TEST(FuseMatMulBiasAct, SecondUserOfMatMulBlocksBiasAndIsReported) {
  FusionReport r;
  const MirModule out = fuse_matmul_bias_act(mir(R"(
    %0 = input "x" : f32[8, 32]
    %1 = param "w" : f32[64, 32]
    %2 = param "b" : f32[64]
    %3 = matmul %0, %1 {transpose_b=true}
    %4 = binary.add %3, %2
    output %4 "y"
    output %3 "raw"
  )"), &r);
  testing::expect_golden("matmul_bias_act_multi_user.mir", print(out));
  ASSERT_EQ(r.missed.size(), 1u);
  EXPECT_EQ(r.missed[0].pattern, "matmul_bias_act");
  EXPECT_NE(r.missed[0].reason.find("2 users"), std::string::npos);
}

TEST(FuseMatMulBiasAct, ResidualAddIsNotABias) {
  const MirModule in = mir(R"(
    %0 = input "x" : f32[8, 32]
    %1 = param "w" : f32[32, 32]
    %2 = matmul %0, %1 {transpose_b=true}
    %3 = binary.add %2, %0
    output %3 "y"
  )");
  FusionReport r;
  testing::expect_golden("matmul_bias_act_residual.mir", print(fuse_matmul_bias_act(in, &r)));
  EXPECT_TRUE(r.clean());
}

// --- swiglu -------------------------------------------------------------------------
TEST(FuseSwiGLU, SharedInput) {
  FusionReport r;
  const MirModule out = fuse_swiglu(mir(R"(
    %0 = input "x" : f32[8, 32]
    %1 = param "wg" : f32[64, 32]
    %2 = param "wu" : f32[64, 32]
    %3 = matmul %0, %1 {transpose_b=true}
    %4 = matmul %0, %2 {transpose_b=true}
    %5 = activation.silu %3
    %6 = binary.mul %5, %4
    output %6 "y"
  )"), &r);
  testing::expect_golden("swiglu_shared_input.mir", print(out));
  EXPECT_EQ(r.count("swiglu"), 1);
}

TEST(FuseSwiGLU, DifferentInputsAreAMiss) {
  FusionReport r;
  const MirModule out = fuse_swiglu(mir(R"(
    %0 = input "x" : f32[8, 32]
    %1 = input "z" : f32[8, 32]
    %2 = param "wg" : f32[64, 32]
    %3 = param "wu" : f32[64, 32]
    %4 = matmul %0, %2 {transpose_b=true}
    %5 = matmul %1, %3 {transpose_b=true}
    %6 = activation.silu %4
    %7 = binary.mul %6, %5
    output %7 "y"
  )"), &r);
  testing::expect_golden("swiglu_different_inputs.mir", print(out));
  EXPECT_EQ(r.count("swiglu"), 0);
  ASSERT_EQ(r.missed.size(), 1u);
  EXPECT_EQ(r.missed[0].reason, "gate and up matmuls read different inputs");
}

// --- residual + norm ----------------------------------------------------------------
TEST(FuseResidualNorm, RmsNormWithSumReusedLater) {
  FusionReport r;
  const MirModule out = fuse_residual_norm(mir(R"(
    %0 = input "x" : f32[8, 32]
    %1 = input "r" : f32[8, 32]
    %2 = param "g" : f32[32]
    %3 = binary.add %0, %1
    %4 = rms_norm %3, %2 {eps=1e-06}
    %5 = binary.mul %4, %3
    output %5 "y"
  )"), &r);
  testing::expect_golden("residual_rms_norm.mir", print(out));
  EXPECT_EQ(r.count("residual_norm"), 1);
}

TEST(FuseResidualNorm, BroadcastAddIsNotFused) {
  FusionReport r;
  const MirModule out = fuse_residual_norm(mir(R"(
    %0 = input "x" : f32[8, 32]
    %1 = param "bias" : f32[32]
    %2 = param "g" : f32[32]
    %3 = param "b" : f32[32]
    %4 = binary.add %0, %1
    %5 = layer_norm %4, %2, %3 {eps=1e-05}
    output %5 "y"
  )"), &r);
  testing::expect_golden("residual_layer_norm_broadcast.mir", print(out));
  EXPECT_EQ(r.count("residual_norm"), 0);
  EXPECT_EQ(r.missed.size(), 1u);
}

// --- narrow(q/k) -> rope ---------------------------------------------------------------
// A fused qkv projection [S, (4 + 2 + 2) * 8] sliced into q, k, v; q and k rotate. The k
// slice has a second user (kept as a narrow for it); a row narrow is not a column slice.
TEST(FuseNarrowRope, QkSlicesOfFusedQkvReadInPlace) {
  FusionReport r;
  const MirModule out = fuse_narrow_rope(mir(R"(
    %0 = input "qkv" : f32[SEQ, 64]
    %1 = input "pos" : i32[SEQ]
    %2 = narrow %0 {axis=1, start=0, length=32}
    %3 = narrow %0 {axis=1, start=32, length=16}
    %4 = narrow %0 {axis=1, start=48, length=16}
    %5 = rope %2, %1 {head_dim=8, n_rot=8, layout=neox, theta=10000}
    %6 = rope %3, %1 {head_dim=8, n_rot=8, layout=neox, theta=10000}
    %7 = attention %5, %6, %4 {n_heads=4, n_kv_heads=2, head_dim=8, mask=causal}
    output %7 "o"
    output %3 "k_unrotated"
  )"), &r);
  testing::expect_golden("narrow_rope_qkv.mir", print(out));
  EXPECT_EQ(r.count("narrow_rope"), 2);
  EXPECT_TRUE(r.clean());
  EXPECT_TRUE(verify(out.graph).ok());
}

TEST(FuseNarrowRope, RowNarrowAndSymbolicWidth) {
  FusionReport r;
  const MirModule out = fuse_narrow_rope(mir(R"(
    %0 = input "x" : f32[8, 32]
    %1 = input "pos" : i32[4]
    %2 = narrow %0 {axis=0, start=4, length=4}
    %3 = rope %2, %1 {head_dim=8, n_rot=8, theta=10000}
    %4 = input "y" : f32[4, 8*SEQ]
    %5 = narrow %4 {axis=1, start=0, length=8}
    %6 = rope %5, %1 {head_dim=8, n_rot=8, theta=10000}
    output %3 "rows"
    output %6 "sym"
  )"), &r);
  testing::expect_golden("narrow_rope_not_fused.mir", print(out));
  EXPECT_EQ(r.count("narrow_rope"), 0);
  ASSERT_EQ(r.missed.size(), 1u);
  EXPECT_EQ(r.missed[0].reason, "the sliced width is symbolic");
}

// --- elementwise regions ------------------------------------------------------------
constexpr const char* kChain = R"(
  %0 = input "x" : f32[8, 32]
  %1 = input "y" : f32[8, 32]
  %2 = input "z" : f32[32]
  %3 = activation.silu %0
  %4 = binary.mul %3, %1
  %5 = binary.add %4, %2
  %6 = activation.tanh %5
  output %6 "out"
)";

TEST(FuseElementwise, ChainBecomesOneRegion) {
  FusionReport r;
  testing::expect_golden("elementwise_chain.mir", print(fuse_elementwise(mir(kChain), FusionLimits::cpu(), &r)));
  EXPECT_EQ(r.count("elementwise_region"), 1);
}

TEST(FuseElementwise, StepLimitSplitsAndReports) {
  FusionReport r;
  const MirModule out = fuse_elementwise(mir(kChain), FusionLimits{0, 2}, &r);
  testing::expect_golden("elementwise_chain_limited.mir", print(out));
  EXPECT_EQ(r.count("elementwise_region"), 2);
  EXPECT_FALSE(r.clean());
}

TEST(FuseElementwise, ValueWithSecondUserStaysVisible) {
  FusionReport r;
  const MirModule out = fuse_elementwise(mir(R"(
    %0 = input "x" : f32[8, 32]
    %1 = param "w" : f32[32, 32]
    %2 = matmul %0, %1
    %3 = activation.silu %2
    %4 = binary.mul %3, %2
    %5 = activation.exp %3
    output %4 "a"
    output %5 "b"
  )"), FusionLimits::cpu(), &r);
  testing::expect_golden("elementwise_shared_value.mir", print(out));
  EXPECT_EQ(r.count("elementwise_region"), 0);
}

TEST(FuseElementwise, UnfuseRestoresTheOps) {
  const MirModule fused = fuse_elementwise(mir(kChain), FusionLimits::cpu());
  const MirModule back = unfuse_elementwise(fused);
  EXPECT_EQ(print(back), print(mir(kChain)));
}

// --- attention ----------------------------------------------------------------------
MirModule attention_primitives(const AttentionAttrs& a, bool with_pos) {
  HirModule h;
  GraphBuilder b;
  const ValueId q = b.input("q", DType::F32, Shape{Dim(6), Dim(a.n_heads * a.head_dim)});
  const ValueId k = b.input("k", DType::F32, Shape{Dim(10), Dim(a.n_kv_heads * a.head_dim)});
  const ValueId v = b.input("v", DType::F32, Shape{Dim(10), Dim(a.n_kv_heads * a.head_dim)});
  const ValueId pos = b.input("pos", DType::I32, Shape{Dim(6)});
  ValueId o = b.attention(q, k, v, a, with_pos ? std::optional<ValueId>(pos) : std::nullopt);
  b.output(o, "o");
  auto g = b.build();
  EXPECT_TRUE(g.has_value());
  return MirModule{std::move(g).value()};
}

class AttentionRoundTrip : public ::testing::TestWithParam<std::tuple<MaskKind, bool, int64_t, double>> {};

// Attention -> primitives (legalization) -> fuse_attention gives back the same node.
TEST_P(AttentionRoundTrip, RecoversAttrs) {
  const auto [mask, with_pos, kv_heads, softcap] = GetParam();
  AttentionAttrs a;
  a.n_heads = 4;
  a.n_kv_heads = kv_heads;
  a.head_dim = 8;
  a.mask = mask;
  a.window = mask == MaskKind::SlidingWindow ? 3 : 0;
  a.softcap = softcap;
  const MirModule direct = attention_primitives(a, with_pos);
  OpSet prims = OpSet::primitives();
  auto legal = legalize(direct, prims, "prims");
  ASSERT_TRUE(legal.has_value()) << legal.error().to_string();
  FusionReport r;
  const MirModule back = fuse_attention(*legal, &r);
  EXPECT_EQ(r.count("attention"), 1);
  if (mask == MaskKind::None && with_pos) {
    // q_pos is irrelevant without a mask and is not recovered.
    EXPECT_EQ(back.graph.of_kind(OpKind::Attention).size(), 1u);
    EXPECT_EQ(back.graph.node(back.graph.of_kind(OpKind::Attention)[0]).inputs.size(), 3u);
  } else {
    EXPECT_EQ(print(back), print(direct));
  }
}

INSTANTIATE_TEST_SUITE_P(Masks, AttentionRoundTrip,
                         ::testing::Values(std::make_tuple(MaskKind::Causal, false, 2, 0.0),
                                           std::make_tuple(MaskKind::Causal, true, 4, 0.0),
                                           std::make_tuple(MaskKind::SlidingWindow, true, 1, 0.0),
                                           std::make_tuple(MaskKind::SlidingWindow, false, 2, 30.0),
                                           std::make_tuple(MaskKind::None, false, 2, 0.0),
                                           std::make_tuple(MaskKind::None, true, 4, 50.0)));

TEST(FuseAttention, ExtraUserOfScoresBlocksFusion) {
  const MirModule m = mir(R"(
    %0 = input "q" : f32[4, 8]
    %1 = input "k" : f32[4, 8]
    %2 = input "v" : f32[4, 8]
    %3 = reshape %0 {shape=[4, 1, 8]}
    %4 = transpose %3 {perm=[1, 0, 2]}
    %5 = reshape %1 {shape=[4, 1, 8]}
    %6 = transpose %5 {perm=[1, 0, 2]}
    %7 = reshape %2 {shape=[4, 1, 8]}
    %8 = transpose %7 {perm=[1, 0, 2]}
    %9 = matmul %4, %6 {transpose_b=true}
    %10 = constant {data=[0.35355339]} : f32[]
    %11 = binary.mul %9, %10
    %12 = softmax %11 {axis=-1}
    %13 = matmul %12, %8
    %14 = transpose %13 {perm=[1, 0, 2]}
    %15 = reshape %14 {shape=[4, 8]}
    output %15 "o"
    output %11 "scores"
  )");
  FusionReport r;
  const MirModule out = fuse_attention(m, &r);
  EXPECT_EQ(r.count("attention"), 0);
  EXPECT_EQ(print(out), print(m));
}

// --- Direct vs Fusable ----------------------------------------------------------------
MirModule fused(const HirModule& h) {
  auto m = lower(h);
  EXPECT_TRUE(m.has_value()) << m.error().to_string();
  MirModule x = eliminate_dead_code(*m);
  x = fuse_attention(x);
  x = fuse_swiglu(x);
  x = fuse_matmul_bias_act(x);
  return eliminate_dead_code(x);
}

TEST(Lowering, DirectAndFusableReachTheSameFusedMir) {
  for (bool cache : {false, true}) {
    for (bool extras : {false, true}) {
      testing::LlamaShape s;
      s.layers = 2;
      s.kv_cache = cache;
      s.qkv_bias = extras;
      s.qk_norm = extras;
      if (cache) s.seq = Dim(4);
      const MirModule d = fused(testing::llama(s, FusionPolicy::Direct));
      const MirModule f = fused(testing::llama(s, FusionPolicy::Fusable));
      EXPECT_EQ(fingerprint(d.graph), fingerprint(f.graph)) << "cache=" << cache << " extras=" << extras << "\n"
                                                            << print(d) << "\n----\n" << print(f);
      EXPECT_EQ(d.graph.of_kind(OpKind::Attention).size(), 2u);
      EXPECT_EQ(d.graph.of_kind(OpKind::FusedSwiGLU).size(), 2u);
      EXPECT_EQ(f.graph.of_kind(OpKind::MatMul).size(), 0u);
    }
  }
}

TEST(Lowering, FusableLowersToPrimitivesOnly) {
  testing::LlamaShape s;
  auto m = lower(testing::llama(s, FusionPolicy::Fusable));
  ASSERT_TRUE(m.has_value());
  for (const Node& n : m->graph.nodes()) {
    EXPECT_NE(op_info(n.op).category, OpCategory::Fused) << op_name(n.op);
    EXPECT_NE(n.op, OpKind::Attention);
  }
}

TEST(Lowering, DirectGoldenBlock) {
  testing::LlamaShape s;
  s.dim = 16;
  s.heads = 2;
  s.kv_heads = 1;
  s.head_dim = 8;
  s.ffn = 32;
  s.kv_cache = true;
  s.ctx = 16;
  s.seq = Dim(1);
  auto m = lower(testing::llama(s, FusionPolicy::Direct));
  ASSERT_TRUE(m.has_value()) << m.error().to_string();
  testing::expect_golden("lower_direct_decode_block.mir", print(*m));
}

TEST(Lowering, PackedWeightsUseDequantMatMul) {
  testing::LlamaShape s;
  s.dim = 256;
  s.heads = 2;
  s.kv_heads = 2;
  s.head_dim = 128;
  s.ffn = 512;
  s.weight_dtype = DType::Q4_K;
  for (FusionPolicy p : {FusionPolicy::Direct, FusionPolicy::Fusable}) {
    auto m = lower(testing::llama(s, p));
    ASSERT_TRUE(m.has_value()) << m.error().to_string();
    EXPECT_EQ(m->graph.of_kind(OpKind::DequantMatMul).size(), 7u);
    EXPECT_EQ(m->graph.of_kind(OpKind::FusedSwiGLU).size(), 0u);
  }
}

}  // namespace
}  // namespace rlx::compile
