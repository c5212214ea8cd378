// Golden tests of fuse_linear (decode-layer MIR in -> fused_linear MIR out) under a test
// target whose check stands in for a backend's GEMV kernel: one-row products, normal
// rope only, norm prologues for up to 4096 output columns, groups of up to 4 products
// over one weight dtype without SwiGLU.
#include <gtest/gtest.h>

#include <map>

#include "golden.h"
#include "rlx/compile/passes.h"
#include "rlx/ir/text.h"

namespace rlx::compile {
namespace {
using namespace ir;
using testing::mir;

Target gemv_target() {
  Target t("test-gemv");
  t.fused_linear = [](const FusedLinearQuery& q) -> const char* {
    if (q.rows != 1) return "more than one row";
    if (q.attrs.rope && q.attrs.rope_attrs.layout != RopeLayout::Normal) return "neox rope";
    if (q.attrs.norm && q.norm_readers_n > 4096) return "too many rows recompute the norm";
    return nullptr;
  };
  t.fused_linear_group = [](const std::vector<FusedLinearQuery>& qs) -> const char* {
    if (qs.size() > 4) return "more than 4 parts";
    for (const FusedLinearQuery& q : qs)
      if (q.attrs.swiglu || q.w_dtype != qs[0].w_dtype) return "mixed parts";
    return nullptr;
  };
  return t;
}

// One Llama decode layer: norm -> q/k/v -> rope(q), rope(k) -> f16 k cache (through a
// cast), f32 v cache -> attention -> o + residual -> norm -> SwiGLU -> down + residual.
constexpr const char* kDecodeLayer = R"(
  %0 = input "x" : f32[1, 64]
  %1 = input "pos" : i32[1]
  %2 = param "attn_norm" : f32[64]
  %3 = rms_norm %0, %2 {eps=1e-05}
  %4 = param "wq" : q8_0[64, 64]
  %5 = param "wk" : q8_0[32, 64]
  %6 = param "wv" : q8_0[32, 64]
  %7 = handle "cache.k" : f16[8, 32]
  %8 = handle "cache.v" : f16[8, 32]
  %9 = dequant_matmul %3, %4
  %10 = dequant_matmul %3, %5
  %11 = dequant_matmul %3, %6
  %12 = rope %9, %1 {head_dim=32, n_rot=32, layout=normal, theta=10000}
  %13 = rope %10, %1 {head_dim=32, n_rot=32, layout=normal, theta=10000}
  %14 = narrow %1 {axis=0, start=0, length=1}
  %15 = cast %13 : f16[1, 32]
  %16 = update_slice %7, %15, %14 {axis=0}
  %17 = cast %11 : f16[1, 32]
  %18 = update_slice %8, %17, %14 {axis=0}
  %19 = cast %12 : f16[1, 64]
  %20 = attention %19, %16, %18, %1 {n_heads=2, n_kv_heads=1, head_dim=32, mask=causal}
  %21 = cast %20 : f32[1, 64]
  %22 = param "wo" : q8_0[64, 64]
  %23 = dequant_matmul %21, %22
  %24 = binary.add %0, %23
  %25 = param "ffn_norm" : f32[64]
  %26 = rms_norm %24, %25 {eps=1e-05}
  %27 = param "wg" : q8_0[128, 64]
  %28 = param "wu" : q8_0[128, 64]
  %29 = param "wd" : q8_0[64, 128]
  %30 = dequant_matmul %26, %27
  %31 = dequant_matmul %26, %28
  %32 = activation.silu %30
  %33 = binary.mul %32, %31
  %34 = dequant_matmul %33, %29
  %35 = binary.add %34, %24
  output %35 "y"
)";

TEST(FuseLinear, DecodeLayer) {
  FusionReport r;
  const MirModule out = fuse_linear(mir(kDecodeLayer), gemv_target(), &r);
  ASSERT_TRUE(verify(out.graph).ok()) << verify(out.graph).error().to_string();
  testing::expect_golden("linear_decode_layer.mir", print(out));
  // The text form (which leaves out the fields of absent epilogues) parses back to it.
  const MirModule again = mir(print(out).c_str());
  EXPECT_EQ(print(again), print(out));
  ASSERT_EQ(again.graph.size(), out.graph.size());
  for (ValueId v = 0; v < out.graph.size(); ++v)
    EXPECT_TRUE(attrs_equal(again.graph.node(v).attrs, out.graph.node(v).attrs)) << out.graph.describe(v);
  EXPECT_EQ(r.count("linear_norm"), 4);  // q, k, v; the SwiGLU
  EXPECT_EQ(r.count("linear_swiglu"), 1);
  EXPECT_EQ(r.count("linear_residual"), 2);
  EXPECT_EQ(r.count("linear_rope"), 2);
  EXPECT_EQ(r.count("linear_cache_write"), 2);
  EXPECT_EQ(r.count("linear_group"), 1);
  EXPECT_TRUE(r.clean()) << r.to_string();
  int fused = 0, norms = 0;
  for (const Node& n : out.graph.nodes()) {
    fused += n.op == OpKind::FusedLinear;
    norms += n.op == OpKind::RmsNorm;
  }
  EXPECT_EQ(fused, 6);  // q, k, v, o, gate/up, down
  EXPECT_EQ(norms, 0);
}

TEST(FuseLinear, NeoxRopeAndTwoRowsAreMissesNotFusions) {
  std::string text = kDecodeLayer;
  for (size_t at = text.find("layout=normal"); at != std::string::npos; at = text.find("layout=normal", at))
    text.replace(at, 13, "layout=neox");
  FusionReport r;
  const MirModule out = fuse_linear(mir(text.c_str()), gemv_target(), &r);
  ASSERT_TRUE(verify(out.graph).ok());
  EXPECT_EQ(r.count("linear_rope"), 0);
  EXPECT_EQ(r.count("linear_cache_write"), 1);  // v only: k's write follows its rope
  int ropes = 0;
  for (const Node& n : out.graph.nodes()) ropes += n.op == OpKind::Rope;
  EXPECT_EQ(ropes, 2);
  bool missed_rope = false;
  for (const MissedFusion& m : r.missed) missed_rope |= m.pattern == "linear_rope" && m.reason == "neox rope";
  EXPECT_TRUE(missed_rope) << r.to_string();

  // Two rows: the target takes nothing, and the graph is unchanged.
  FusionReport r2;
  const MirModule two = mir(R"(
    %0 = input "x" : f32[2, 64]
    %1 = param "g" : f32[64]
    %2 = rms_norm %0, %1 {eps=1e-05}
    %3 = param "w" : q8_0[32, 64]
    %4 = dequant_matmul %2, %3
    output %4 "y"
  )");
  EXPECT_EQ(print(fuse_linear(two, gemv_target(), &r2)), print(two));
  EXPECT_TRUE(r2.fused.empty());
}

TEST(FuseLinear, NormWithAnotherReaderStaysANorm) {
  FusionReport r;
  const MirModule out = fuse_linear(mir(R"(
    %0 = input "x" : f32[1, 64]
    %1 = param "g" : f32[64]
    %2 = rms_norm %0, %1 {eps=1e-05}
    %3 = param "w" : f32[32, 64]
    %4 = matmul %2, %3 {transpose_b=true}
    %5 = input "r" : f32[1, 32]
    %6 = binary.add %4, %5
    output %6 "y"
    output %2 "normed"
  )"), gemv_target(), &r);
  ASSERT_TRUE(verify(out.graph).ok());
  testing::expect_golden("linear_norm_other_reader.mir", print(out));
  EXPECT_EQ(r.count("linear_norm"), 0);
  EXPECT_EQ(r.count("linear_residual"), 1);
  ASSERT_EQ(r.missed.size(), 1u);
  EXPECT_EQ(r.missed[0].pattern, "linear_norm");
}

// The f32-weight forms the Direct lowering emits: a linear as fused_matmul_bias_act
// without bias or activation, the SwiGLU as fused_swiglu. A target that refuses the
// SwiGLU leaves that node whole, and the norm it reads with it.
TEST(FuseLinear, DirectLoweringFormsAndARefusedSwiGLU) {
  const char* text = R"(
    %0 = input "x" : f32[1, 32]
    %1 = param "g" : f32[32]
    %2 = rms_norm %0, %1 {eps=1e-05}
    %3 = param "wg" : f32[48, 32]
    %4 = param "wu" : f32[48, 32]
    %5 = fused_swiglu %2, %3, %4 {transpose_b=true}
    %6 = param "wd" : f32[32, 48]
    %7 = fused_matmul_bias_act %5, %6 {act=identity, has_bias=false, transpose_b=true}
    %8 = binary.add %7, %0
    output %8 "y"
  )";
  FusionReport r;
  const MirModule out = fuse_linear(mir(text), gemv_target(), &r);
  ASSERT_TRUE(verify(out.graph).ok());
  testing::expect_golden("linear_direct_forms.mir", print(out));
  EXPECT_EQ(r.count("linear_norm"), 1);
  EXPECT_EQ(r.count("linear_swiglu"), 1);
  EXPECT_EQ(r.count("linear_residual"), 1);

  Target no_swiglu = gemv_target();
  no_swiglu.fused_linear = [](const FusedLinearQuery& q) -> const char* {
    return q.attrs.swiglu ? "no SwiGLU epilogue" : nullptr;
  };
  FusionReport r2;
  const MirModule kept = fuse_linear(mir(text), no_swiglu, &r2);
  ASSERT_TRUE(verify(kept.graph).ok());
  int swiglus = 0, norms = 0;
  for (const Node& n : kept.graph.nodes()) {
    swiglus += n.op == OpKind::FusedSwiGLU;
    norms += n.op == OpKind::RmsNorm;
  }
  EXPECT_EQ(swiglus, 1);
  EXPECT_EQ(norms, 1);
  EXPECT_EQ(r2.count("linear_residual"), 1);  // the down product still takes its residual
  EXPECT_EQ(r2.count("linear_norm"), 0);
}

// Several rows (a batched step) under a target whose few-row kernel takes plain products
// only, in groups: q / k / v over one x are one group; the SwiGLU it refuses leaves its
// gate and up products, which still share x and so form a group of two (the up product
// planned on its own once the gate's chain dropped the SwiGLU); silu * up stays.
TEST(FuseLinear, FewRowsGroupPlainProductsAndTheGateAndUpOfARefusedSwiGLU) {
  Target t("test-few-rows");
  t.fused_linear = [](const FusedLinearQuery& q) -> const char* {
    const FusedLinearAttrs& a = q.attrs;
    return a.norm || a.swiglu || a.residual || a.rope || a.cache_write ? "plain products only" : nullptr;
  };
  t.fused_linear_group = gemv_target().fused_linear_group;
  const char* text = R"(
    %0 = input "x" : f32[4, 64]
    %1 = param "attn_norm" : f32[64]
    %2 = rms_norm %0, %1 {eps=1e-05}
    %3 = param "wq" : q4_k[64, 256]
    %4 = param "wk" : q4_k[32, 256]
    %5 = param "wv" : q4_k[32, 256]
    %6 = param "wg" : q4_k[128, 256]
    %7 = param "wu" : q4_k[128, 256]
    %8 = input "h" : f32[4, 256]
    %9 = dequant_matmul %8, %3
    %10 = dequant_matmul %8, %4
    %11 = dequant_matmul %8, %5
    %12 = dequant_matmul %8, %6
    %13 = dequant_matmul %8, %7
    %14 = activation.silu %12
    %15 = binary.mul %14, %13
    output %9 "q"
    output %10 "k"
    output %11 "v"
    output %15 "y"
    output %2 "n"
  )";
  FusionReport r;
  const MirModule out = fuse_linear(mir(text), t, &r);
  ASSERT_TRUE(verify(out.graph).ok()) << verify(out.graph).error().to_string();
  EXPECT_EQ(r.count("linear_group"), 1) << r.to_string();  // all five share x: at most four a group
  std::map<int64_t, int> groups;
  int fused = 0, silus = 0, muls = 0;
  for (const Node& n : out.graph.nodes()) {
    if (n.op == OpKind::FusedLinear) {
      ++fused;
      ++groups[n.attr<FusedLinearAttrs>().group];
    }
    silus += n.op == OpKind::Activation;
    muls += n.op == OpKind::Binary;
  }
  EXPECT_EQ(fused, 4) << print(out);  // the first four of the five (the group check's limit)
  EXPECT_EQ(groups.size(), 1u) << print(out);
  EXPECT_EQ(silus, 1);
  EXPECT_EQ(muls, 1);
  bool missed_swiglu = false;
  for (const MissedFusion& m : r.missed) missed_swiglu |= m.pattern == "linear_swiglu";
  EXPECT_TRUE(missed_swiglu) << r.to_string();

  // Gate and up alone over their x: a group of two.
  const char* ffn = R"(
    %0 = input "h" : f32[4, 256]
    %1 = param "wg" : q4_k[128, 256]
    %2 = param "wu" : q4_k[128, 256]
    %3 = dequant_matmul %0, %1
    %4 = dequant_matmul %0, %2
    %5 = activation.silu %3
    %6 = binary.mul %5, %4
    output %6 "y"
  )";
  FusionReport r2;
  const MirModule pair = fuse_linear(mir(ffn), t, &r2);
  ASSERT_TRUE(verify(pair.graph).ok());
  EXPECT_EQ(r2.count("linear_group"), 1) << r2.to_string();
  int pair_fused = 0;
  for (const Node& n : pair.graph.nodes()) pair_fused += n.op == OpKind::FusedLinear;
  EXPECT_EQ(pair_fused, 2) << print(pair);
}

TEST(FuseLinear, TargetWithoutAKernelChangesNothing) {
  const MirModule in = mir(kDecodeLayer);
  EXPECT_EQ(print(fuse_linear(in, Target("cpu"))), print(in));
}

}  // namespace
}  // namespace rlx::compile
