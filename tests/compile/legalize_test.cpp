// Legalization tests with a fake primitives-only backend: every fused op rewrites and the
// result verifies; unsupported ops give an error naming node, kind and backend; the
// dispatch policy and report.
#include <gtest/gtest.h>

#include "golden.h"
#include "rlx/compile/legalize.h"
#include "rlx/compile/passes.h"
#include "rlx/ir/builder.h"
#include "rlx/ir/text.h"

namespace rlx::compile {
namespace {
using namespace ir;

MirModule one_op(OpKind k) {
  GraphBuilder b;
  const ValueId x = b.input("x", DType::F32, Shape{Dim(4), Dim(32)});
  const ValueId r = b.input("r", DType::F32, Shape{Dim(4), Dim(32)});
  const ValueId w = b.param("w", DType::F32, Shape{Dim(16), Dim(32)});
  const ValueId w2 = b.param("w2", DType::F32, Shape{Dim(16), Dim(32)});
  const ValueId bias = b.param("bias", DType::F32, Shape{Dim(16)});
  const ValueId g = b.param("g", DType::F32, Shape{Dim(32)});
  switch (k) {
    case OpKind::FusedMatMulBiasAct:
      b.output(b.op(k, {x, w, bias}, FusedMatMulAttrs{ActKind::Gelu, true, true}), "y");
      break;
    case OpKind::FusedSwiGLU: b.output(b.op(k, {x, w, w2}, FusedSwiGLUAttrs{}), "y"); break;
    case OpKind::FusedResidualRmsNorm:
    case OpKind::FusedResidualLayerNorm: {
      std::vector<ValueId> in{x, r, g};
      if (k == OpKind::FusedResidualLayerNorm) in.push_back(g);
      const ValueId f = b.op(k, in, NormAttrs{1e-5});
      b.output(b.reshape(b.narrow(f, 0, 1, Dim(1)), Shape{Dim(4), Dim(32)}), "normed");
      b.output(b.reshape(b.narrow(f, 0, 0, Dim(1)), Shape{Dim(4), Dim(32)}), "sum");
      break;
    }
    case OpKind::ElementwiseRegion: {
      RegionAttrs ra;
      ra.steps.push_back({OpKind::Activation, static_cast<uint8_t>(ActKind::Silu), DType::F32, {-1}});
      ra.steps.push_back({OpKind::Binary, static_cast<uint8_t>(BinaryKind::Mul), DType::F32, {0, -2}});
      ra.steps.push_back({OpKind::Cast, 0, DType::F16, {1}});
      b.output(b.op(k, {x, r}, ra), "y");
      break;
    }
    case OpKind::Attention: {
      AttentionAttrs a;
      a.n_heads = 4;
      a.n_kv_heads = 2;
      a.head_dim = 8;
      const ValueId kv = b.narrow(r, 1, 0, Dim(16));
      b.output(b.attention(x, kv, kv, a), "y");
      break;
    }
    case OpKind::DequantMatMul: {
      const ValueId wh = b.param("wh", DType::F16, Shape{Dim(16), Dim(32)});
      b.output(b.dequant_matmul(x, wh), "y");
      break;
    }
    case OpKind::Rope: {
      // Neox with partial rotary on the whole row; normal pairs on a column slice.
      const ValueId pos = b.input("pos", DType::I32, Shape{Dim(4)});
      RopeAttrs neox;
      neox.head_dim = 8;
      neox.n_rot = 4;
      neox.layout = RopeLayout::Neox;
      b.output(b.rope(x, pos, neox), "y");
      RopeAttrs pairs;
      pairs.head_dim = 8;
      pairs.n_rot = 8;
      pairs.offset = 8;
      pairs.width = 16;
      b.output(b.rope(x, pos, pairs), "y_slice");
      break;
    }
    case OpKind::FusedLinear: {
      // A k projection of four rows: norm, f32 product, rope, rows written into an f16 cache.
      FusedLinearAttrs a;
      a.norm = a.rope = a.cache_write = true;
      a.rope_attrs.head_dim = a.rope_attrs.n_rot = 8;
      const ValueId w = b.param("wk", DType::F32, Shape{Dim(16), Dim(32)});
      const ValueId pos = b.input("pos", DType::I32, Shape{Dim(4)});
      const ValueId cache = b.handle("cache.k", DType::F16, Shape{Dim(8), Dim(16)});
      const ValueId start = b.input("start", DType::I32, Shape{Dim(1)});
      b.output(b.op(k, {x, w, g, pos, cache, start}, a), "cache");
      break;
    }
    default: ADD_FAILURE() << "no test graph for " << op_name(k);
  }
  auto built = b.build();
  EXPECT_TRUE(built.has_value()) << built.error().to_string();
  return MirModule{std::move(built).value()};
}

class LegalizeFused : public ::testing::TestWithParam<OpKind> {};

TEST_P(LegalizeFused, RewritesToPrimitivesAndVerifies) {
  const OpKind k = GetParam();
  const MirModule m = one_op(k);
  DispatchReport rep;
  OpSet prims = OpSet::primitives();
  prims.remove(k);  // Rope is a primitive of most backends; this fake one lacks it
  auto r = legalize(m, prims, "prims", {}, &rep);
  ASSERT_TRUE(r.has_value()) << r.error().to_string();
  EXPECT_TRUE(verify(r->graph).ok());
  for (const Node& n : r->graph.nodes()) EXPECT_TRUE(prims.contains(n.op)) << op_name(n.op);
  EXPECT_EQ(rep.kinds[k].rewritten, static_cast<int64_t>(m.graph.of_kind(k).size()));
  EXPECT_TRUE(rep.complete());
  // Outputs keep their types.
  for (size_t i = 0; i < m.graph.outputs().size(); ++i)
    EXPECT_EQ(r->graph.node(r->graph.outputs()[i].value).type(), m.graph.node(m.graph.outputs()[i].value).type());
  testing::expect_golden("legalize_" + std::string(op_name(k)) + ".mir", print(*r));
}

INSTANTIATE_TEST_SUITE_P(Kinds, LegalizeFused,
                         ::testing::Values(OpKind::FusedMatMulBiasAct, OpKind::FusedSwiGLU, OpKind::FusedResidualRmsNorm,
                                           OpKind::FusedResidualLayerNorm, OpKind::ElementwiseRegion, OpKind::Attention,
                                           OpKind::DequantMatMul, OpKind::Rope, OpKind::FusedLinear),
                         [](const auto& info) { return std::string(op_name(info.param)); });

TEST(Legalize, NativeKindsStayUnderPreferNative) {
  const MirModule m = one_op(OpKind::FusedSwiGLU);
  DispatchReport rep;
  auto r = legalize(m, OpSet::all_mir(), "cpu", {}, &rep);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(print(*r), print(m));
  EXPECT_EQ(rep.kinds[OpKind::FusedSwiGLU].native, 1);
  EXPECT_NE(rep.to_string().find("fused_swiglu"), std::string::npos);
}

// A claimed fused_linear in a form the target's kernel refuses is rewritten; one it
// takes stays, and a target without a check (the reference backend's) takes every form.
TEST(Legalize, FusedLinearFormTheTargetRefusesIsRewritten) {
  const MirModule m = one_op(OpKind::FusedLinear);
  Target picky("picky");
  picky.fused_linear = [](const FusedLinearQuery& q) -> const char* { return q.rows > 1 ? "one row only" : nullptr; };
  auto r = legalize(m, OpSet::all_mir(), "picky", {}, nullptr, &picky);
  ASSERT_TRUE(r.has_value()) << r.error().to_string();
  EXPECT_TRUE(r->graph.of_kind(OpKind::FusedLinear).empty());
  EXPECT_TRUE(verify(r->graph).ok());
  Target lenient("lenient");
  lenient.fused_linear = [](const FusedLinearQuery&) -> const char* { return nullptr; };
  for (const Target* t : std::initializer_list<const Target*>{&lenient, nullptr}) {
    auto kept = legalize(m, OpSet::all_mir(), "any", {}, nullptr, t);
    ASSERT_TRUE(kept.has_value());
    EXPECT_EQ(kept->graph.of_kind(OpKind::FusedLinear).size(), 1u);
  }
  const Target plain("reference");
  auto ref = legalize(m, OpSet::all_mir(), "reference", {}, nullptr, &plain);
  ASSERT_TRUE(ref.has_value());
  EXPECT_EQ(ref->graph.of_kind(OpKind::FusedLinear).size(), 1u);
}

TEST(Legalize, ForceCommonRewritesClaimedKindsExceptForceNative) {
  const MirModule m = one_op(OpKind::FusedMatMulBiasAct);
  KernelDispatchConfig cfg;
  cfg.policy = KernelDispatchPolicy::ForceCommon;
  auto r = legalize(m, OpSet::all_mir(), "cpu", cfg);
  ASSERT_TRUE(r.has_value());
  EXPECT_TRUE(r->graph.of_kind(OpKind::FusedMatMulBiasAct).empty());
  cfg.force_native.add(OpKind::FusedMatMulBiasAct);
  auto kept = legalize(m, OpSet::all_mir(), "cpu", cfg);
  ASSERT_TRUE(kept.has_value());
  EXPECT_EQ(kept->graph.of_kind(OpKind::FusedMatMulBiasAct).size(), 1u);
  KernelDispatchConfig one;
  one.force_common.add(OpKind::FusedMatMulBiasAct);
  auto forced = legalize(m, OpSet::all_mir(), "cpu", one);
  ASSERT_TRUE(forced.has_value());
  EXPECT_TRUE(forced->graph.of_kind(OpKind::FusedMatMulBiasAct).empty());
}

TEST(Legalize, PackedDequantWithoutKernelIsANamedError) {
  GraphBuilder b;
  const ValueId x = b.input("x", DType::F32, Shape{Dim(2), Dim(32)});
  const ValueId w = b.param("w", DType::Q4_0, Shape{Dim(8), Dim(32)});
  b.label("blk.0.attn_q");
  b.output(b.dequant_matmul(x, w), "y");
  DispatchReport rep;
  auto r = legalize(MirModule{*b.build()}, OpSet::primitives(), "npu", {}, &rep);
  ASSERT_FALSE(r.has_value());
  const std::string msg = r.error().message();
  EXPECT_NE(msg.find("blk.0.attn_q"), std::string::npos) << msg;
  EXPECT_NE(msg.find("dequant_matmul"), std::string::npos);
  EXPECT_NE(msg.find("'npu'"), std::string::npos);
  EXPECT_NE(msg.find("q4_0"), std::string::npos);
  EXPECT_EQ(rep.kinds[OpKind::DequantMatMul].missing, 1);
  EXPECT_FALSE(rep.complete());
  EXPECT_NE(rep.to_string().find("MISSING"), std::string::npos);
}

TEST(Legalize, RopeOfSymbolicWidthIsANamedErrorNotACrash) {
  GraphBuilder b;
  const ValueId x = b.input("x", DType::F32, Shape{Dim(4), Dim::symbol(ir::intern_symbol("HEADS"), 8)});
  RopeAttrs r;
  r.head_dim = 8;
  r.n_rot = 8;
  b.output(b.rope(x, b.input("pos", DType::I32, Shape{Dim(4)}), r), "y");
  OpSet ops = OpSet::primitives();
  ops.remove(OpKind::Rope);
  auto out = legalize(MirModule{*b.build()}, ops, "tiny");
  ASSERT_FALSE(out.has_value());
  EXPECT_NE(out.error().message().find("rope"), std::string::npos) << out.error().message();
}

TEST(Legalize, PrimitiveWithoutRewriteIsAnError) {
  GraphBuilder b;
  b.output(b.softmax(b.input("x", DType::F32, Shape{Dim(4)})), "y");
  OpSet ops = OpSet::primitives();
  ops.remove(OpKind::Softmax);
  auto r = legalize(MirModule{*b.build()}, ops, "tiny");
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().message().find("%1 (softmax)"), std::string::npos) << r.error().message();
  EXPECT_NE(r.error().message().find("no common-IR rewrite"), std::string::npos);
}

}  // namespace
}  // namespace rlx::compile
