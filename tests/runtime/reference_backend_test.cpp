// The reference backend checked on its own, so that the oracle of backend_ops_test is
// not trusted blindly: a few ops against values worked out by hand (matmul 2x2, softmax
// of [0, ln 2], rms_norm of [3, 4], a Q8_0 block built byte by byte, ...), the errors it
// must report, and the Executable interface (params, handles, clones, extents, devices).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "rlx/base/half.h"
#include "rlx/formats/quant_blocks.h"
#include "rlx/ir/custom_op.h"
#include "rlx/rlx.h"

namespace rlx {
namespace {

using ir::DType;
using ir::GraphBuilder;
using ir::ValueId;

CompiledGraph compile_reference(const ir::Graph& g) {
  compile::CompileOptions o;
  o.fusion.skip = true;
  o.constant_folding = false;
  auto c = Session(Device::reference()).compile_with(g, o);
  EXPECT_TRUE(c.has_value()) << c.error().to_string();
  return std::move(c).value();
}

CompiledGraph compile_reference(GraphBuilder& b) {
  auto g = b.build();
  EXPECT_TRUE(g.has_value()) << g.error().to_string();
  return compile_reference(*g);
}

// Runs with f32 inputs (converted to the declared dtypes) and returns output 0 as f32.
std::vector<float> run_f32(CompiledGraph& g, std::initializer_list<NamedF32> inputs) {
  auto out = g.run(inputs);
  EXPECT_TRUE(out.has_value()) << out.error().to_string();
  return out ? (*out)[0].to_f32().value() : std::vector<float>{};
}

TEST(ReferenceBackend, IsADeviceClaimingEveryMirKindButCustomAndCollectives) {
  EXPECT_EQ(Device::parse("reference")->kind, DeviceKind::kReference);
  EXPECT_EQ(*Device::parse("ref"), Device::reference());
  EXPECT_EQ(Device::reference().to_string(), "reference");
  EXPECT_TRUE(is_available(Device::reference()));
  EXPECT_FALSE(Session::create(Device{DeviceKind::kReference, 1}).has_value());
  Session s(Device::reference());
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s.backend()->name(), "reference");
  // (Collectives run on the ranks of a group, cpu:0,1 or cuda:0,1, not on the oracle.)
  EXPECT_EQ(s.backend()->supported_ops(), compile::OpSet::all_mir()
                                              .remove(ir::OpKind::Custom)
                                              .remove(ir::OpKind::AllReduce)
                                              .remove(ir::OpKind::AllGather))
      << s.backend()->supported_ops().to_string();
}

TEST(ReferenceOps, MatMul2x2) {
  GraphBuilder b;
  b.output(b.matmul(b.input("a", DType::F32, {2, 2}), b.input("b", DType::F32, {2, 2})), "c");
  CompiledGraph g = compile_reference(b);
  const float a[] = {1, 2, 3, 4}, c[] = {5, 6, 7, 8};
  const int64_t shape[] = {2, 2};
  EXPECT_EQ(run_f32(g, {{"a", a, shape}, {"b", c, shape}}), (std::vector<float>{19, 22, 43, 50}));
}

TEST(ReferenceOps, SoftmaxOfZeroAndLn2IsAThirdAndTwoThirds) {
  GraphBuilder b;
  b.output(b.softmax(b.input("x", DType::F32, {2})), "y");
  CompiledGraph g = compile_reference(b);
  const float x[] = {0.0f, static_cast<float>(std::log(2.0))};
  const int64_t shape[] = {2};
  const std::vector<float> y = run_f32(g, {{"x", x, shape}});
  ASSERT_EQ(y.size(), 2u);
  EXPECT_NEAR(y[0], 1.0 / 3.0, 1e-7);
  EXPECT_NEAR(y[1], 2.0 / 3.0, 1e-7);
}

TEST(ReferenceOps, RmsNormAndLayerNormOfKnownVectors) {
  GraphBuilder b;
  ValueId x = b.input("x", DType::F32, {2}), g = b.param("g", DType::F32, {2});
  b.output(b.rms_norm(x, g, 0.0), "rms");  // rms([3, 4]) = sqrt(12.5)
  ValueId z = b.input("z", DType::F32, {3});
  b.output(b.layer_norm(z, b.param("ones", DType::F32, {3}), std::nullopt, 0.0), "ln");  // var([1,2,3]) = 2/3
  CompiledGraph cg = compile_reference(b);
  ASSERT_TRUE(cg.set_param("g", std::vector<float>{1, 2}).ok());
  ASSERT_TRUE(cg.set_param("ones", std::vector<float>{1, 1, 1}).ok());
  const float xv[] = {3, 4}, zv[] = {1, 2, 3};
  const int64_t s2[] = {2}, s3[] = {3};
  auto out = cg.run({{"x", xv, s2}, {"z", zv, s3}});
  ASSERT_TRUE(out.has_value()) << out.error().to_string();
  const auto rms = (*out)[0].to_f32().value(), ln = (*out)[1].to_f32().value();
  EXPECT_NEAR(rms[0], 3 / std::sqrt(12.5), 1e-6);
  EXPECT_NEAR(rms[1], 8 / std::sqrt(12.5), 1e-6);
  EXPECT_NEAR(ln[0], -std::sqrt(1.5), 1e-6);
  EXPECT_NEAR(ln[1], 0.0, 1e-7);
  EXPECT_NEAR(ln[2], std::sqrt(1.5), 1e-6);
}

TEST(ReferenceOps, AttentionWeighsKeysBySoftmaxAndAlignsMasksBottomRight) {
  ir::AttentionAttrs a;
  a.n_heads = a.n_kv_heads = 1;
  a.head_dim = 2;
  a.scale = 1.0;
  a.mask = ir::MaskKind::None;
  GraphBuilder b;
  ValueId q = b.input("q", DType::F32, {1, 2}), k = b.input("k", DType::F32, {2, 2}),
          v = b.input("v", DType::F32, {2, 2});
  b.output(b.attention(q, k, v, a), "none");
  a.mask = ir::MaskKind::Causal;  // two queries on two keys: the first sees key 0 only
  ValueId q2 = b.input("q2", DType::F32, {2, 2});
  b.output(b.attention(q2, k, v, a), "causal");
  CompiledGraph g = compile_reference(b);
  const float qv[] = {1, 0}, kv[] = {1, 0, 0, 1}, vv[] = {10, 0, 0, 10}, q2v[] = {1, 0, 1, 0};
  const int64_t s12[] = {1, 2}, s22[] = {2, 2};
  auto out = g.run({{"q", qv, s12}, {"k", kv, s22}, {"v", vv, s22}, {"q2", q2v, s22}});
  ASSERT_TRUE(out.has_value()) << out.error().to_string();
  const double e = std::exp(1.0);  // scores [1, 0]: weights e/(1+e), 1/(1+e)
  const auto none = (*out)[0].to_f32().value(), causal = (*out)[1].to_f32().value();
  EXPECT_NEAR(none[0], 10 * e / (1 + e), 1e-5);
  EXPECT_NEAR(none[1], 10 / (1 + e), 1e-5);
  EXPECT_EQ(causal[0], 10.0f);
  EXPECT_EQ(causal[1], 0.0f);
  EXPECT_NEAR(causal[2], 10 * e / (1 + e), 1e-5);
}

TEST(ReferenceOps, RopeTurnsTheFirstPairByThePosition) {
  ir::RopeAttrs r;  // pair 0 always has frequency theta^0 = 1: angle = pos
  r.head_dim = r.n_rot = 2;
  r.attn_factor = 2.0;
  GraphBuilder b;
  b.output(b.rope(b.input("x", DType::F32, {1, 2}), b.input("pos", DType::I32, {1}), r), "y");
  CompiledGraph g = compile_reference(b);
  const float x[] = {1, 0}, pos[] = {1};
  const int64_t sx[] = {1, 2}, sp[] = {1};
  const std::vector<float> y = run_f32(g, {{"x", x, sx}, {"pos", pos, sp}});
  ASSERT_EQ(y.size(), 2u);
  EXPECT_NEAR(y[0], 2 * std::cos(1.0), 1e-6);
  EXPECT_NEAR(y[1], 2 * std::sin(1.0), 1e-6);
}

TEST(ReferenceOps, CastsTruncateSaturateAndRoundToHalf) {
  GraphBuilder b;
  ValueId x = b.input("x", DType::F32, {4});
  b.output(b.cast(x, DType::I32), "i");
  b.output(b.cast(x, DType::F16), "h");
  CompiledGraph g = compile_reference(b);
  const float xv[] = {-2.5f, 2.5f, 3e9f, 1.0f / 3.0f};
  const int64_t shape[] = {4};
  auto out = g.run_typed(std::vector<NamedTensorView>{{"x", TensorView::f32(xv, shape)}});
  ASSERT_TRUE(out.has_value()) << out.error().to_string();
  const auto i = (*out)[0].as<int32_t>();
  EXPECT_EQ(std::vector<int32_t>(i.begin(), i.end()), (std::vector<int32_t>{-2, 2, 2147483647, 0}));
  EXPECT_EQ((*out)[1].as<uint16_t>()[3], 0x3555);  // 1/3 in binary16: 0.333251953125
}

TEST(ReferenceOps, DequantMatMulOfQ8_0BlocksBuiltByHand) {
  // Row 0: d = 0.5, q = i - 16; row 1: d = 0.25, q = 1. With x = ones: 0.5 * (496 - 512) and 0.25 * 32.
  formats::BlockQ8_0 blocks[2];
  blocks[0].d = f32_to_f16_bits(0.5f);
  blocks[1].d = f32_to_f16_bits(0.25f);
  for (int i = 0; i < 32; ++i) {
    blocks[0].qs[i] = static_cast<int8_t>(i - 16);
    blocks[1].qs[i] = 1;
  }
  std::vector<uint8_t> bytes(sizeof(blocks));
  std::memcpy(bytes.data(), blocks, sizeof(blocks));
  GraphBuilder b;
  b.output(b.dequant_matmul(b.input("x", DType::F32, {1, 32}), b.param("w", DType::Q8_0, {2, 32})), "y");
  CompiledGraph g = compile_reference(b);
  ASSERT_TRUE(g.set_param_typed("w", bytes, DType::Q8_0).ok());
  const std::vector<float> x(32, 1.0f);
  const int64_t shape[] = {1, 32};
  EXPECT_EQ(run_f32(g, {{"x", x, shape}}), (std::vector<float>{-8, 8}));
}

TEST(ReferenceOps, TopKBreaksTiesByIndexAndSampleAtZeroTemperatureIsGreedy) {
  GraphBuilder b;
  ValueId x = b.input("x", DType::F32, {1, 4});
  b.output(b.topk(x, 2), "top");
  b.output(b.sample(x, b.input("p", DType::F32, {1, ir::kSampleParams})), "token");
  CompiledGraph g = compile_reference(b);
  const float xv[] = {1, 3, 3, 2}, pv[] = {0.9f, 0.0f, 0, 1, 0};
  const int64_t sx[] = {1, 4}, sp[] = {1, ir::kSampleParams};
  auto out = g.run({{"x", xv, sx}, {"p", pv, sp}});
  ASSERT_TRUE(out.has_value()) << out.error().to_string();
  EXPECT_EQ((*out)[0].as<int32_t>()[0], 1);
  EXPECT_EQ((*out)[0].as<int32_t>()[1], 2);
  EXPECT_EQ((*out)[1].as<int32_t>()[0], 1);
}

TEST(ReferenceOps, UpdateSliceWritesTheHandleAndRefusesRowsOutside) {
  GraphBuilder b;
  ValueId cache = b.handle("cache", DType::F32, {4, 2});
  b.output(b.update_slice(cache, b.input("src", DType::F32, {2, 2}), b.input("start", DType::I32, {1})), "u");
  CompiledGraph g = compile_reference(b);
  const float src[] = {1, 2, 3, 4};
  const int64_t ss[] = {2, 2}, s1[] = {1};
  const float start1[] = {1}, start3[] = {3};
  EXPECT_EQ(run_f32(g, {{"src", src, ss}, {"start", start1, s1}}), (std::vector<float>{0, 0, 1, 2, 3, 4, 0, 0}));
  EXPECT_EQ(g.read_handle("cache")->to_f32().value(), (std::vector<float>{0, 0, 1, 2, 3, 4, 0, 0}));
  auto bad = g.run({{"src", src, ss}, {"start", start3, s1}});
  ASSERT_FALSE(bad.has_value());
  EXPECT_NE(bad.error().message().find("writing 2 rows at 3 exceeds the handle's 4 rows"), std::string::npos)
      << bad.error().to_string();
}

TEST(ReferenceOps, GatherOutOfRangeIsAnErrorNamingTheIndex) {
  GraphBuilder b;
  b.output(b.gather(b.input("t", DType::F32, {3, 2}), b.input("i", DType::I32, {2})), "g");
  CompiledGraph g = compile_reference(b);
  const float t[] = {1, 2, 3, 4, 5, 6}, idx[] = {2, 5};
  const int64_t st[] = {3, 2}, si[] = {2};
  auto out = g.run({{"t", t, st}, {"i", idx, si}});
  ASSERT_FALSE(out.has_value());
  EXPECT_NE(out.error().message().find("index 5 at position 1 is out of range [0, 3)"), std::string::npos)
      << out.error().to_string();
}

TEST(ReferenceOps, CustomOpsAreRefusedByName) {
  ir::CustomOpDef def;
  def.name = "reference_test_twice";
  def.min_inputs = def.max_inputs = 1;
  def.infer = [](const std::vector<ir::TensorType>& in, const std::string&) -> Expected<ir::TensorType> {
    return in[0];
  };
  ir::register_custom_op(def);
  GraphBuilder b;
  ValueId x = b.input("x", DType::F32, {2});
  b.output(b.op(ir::OpKind::Custom, {x}, ir::CustomAttrs{"reference_test_twice", ""}, b.type(x)), "y");
  auto graph = b.build();
  ASSERT_TRUE(graph.has_value()) << graph.error().to_string();
  auto g = Session(Device::reference()).compile(*graph);
  ASSERT_FALSE(g.has_value());
  EXPECT_EQ(g.error().code(), ErrorCode::kUnsupported);
  EXPECT_NE(g.error().message().find("custom"), std::string::npos) << g.error().to_string();
  EXPECT_NE(g.error().message().find("reference"), std::string::npos) << g.error().to_string();
}

TEST(ReferenceExecutable, ParamsConvertHandlesShareClonesStayApart) {
  GraphBuilder b;
  ValueId x = b.input("x", DType::F16, {3});
  ValueId w = b.param("w", DType::F16, {3});
  ValueId cache = b.handle("cache", DType::F32, {2, 3});
  ValueId u = b.update_slice(cache, b.reshape(b.cast(b.add(x, w), DType::F32), {1, 3}), b.input("at", DType::I32, {1}));
  b.output(u, "u");
  auto graph = b.build();
  ASSERT_TRUE(graph.has_value()) << graph.error().to_string();
  CompiledGraph g = compile_reference(*graph);
  ASSERT_TRUE(g.set_param("w", std::vector<float>{0.1f, 0.2f, 0.3f}).ok());  // converted to f16 once
  const float xv[] = {1, 2, 3}, row0[] = {0}, row1[] = {1};
  const int64_t s3[] = {3}, s1[] = {1};
  auto h = [](float v) { return f16_bits_to_f32(f32_to_f16_bits(v)); };
  const std::vector<float> sums{h(1 + h(0.1f)), h(2 + h(0.2f)), h(3 + h(0.3f))};
  ASSERT_FALSE(run_f32(g, {{"x", xv, s3}, {"at", row0, s1}}).empty());

  auto c = g.clone();  // own handles: a write through the clone leaves g's cache alone
  ASSERT_TRUE(c.has_value()) << c.error().to_string();
  ASSERT_FALSE(run_f32(*c, {{"x", xv, s3}, {"at", row1, s1}}).empty());
  EXPECT_EQ(g.read_handle("cache")->to_f32().value(), (std::vector<float>{sums[0], sums[1], sums[2], 0, 0, 0}));
  EXPECT_EQ(c->read_handle("cache")->to_f32().value(),
            (std::vector<float>{sums[0], sums[1], sums[2], sums[0], sums[1], sums[2]}));

  CompiledGraph other = compile_reference(*graph);  // shared handles: one cache for both
  auto shared = other.share_handles_with(g);
  ASSERT_TRUE(shared.has_value()) << shared.error().to_string();
  EXPECT_EQ(*shared, 1u);
  ASSERT_TRUE(other.set_param("w", std::vector<float>{0, 0, 0}).ok());
  ASSERT_FALSE(run_f32(other, {{"x", xv, s3}, {"at", row1, s1}}).empty());
  EXPECT_EQ(g.read_handle("cache")->to_f32().value(), (std::vector<float>{sums[0], sums[1], sums[2], 1, 2, 3}));

  EXPECT_TRUE(g.executable().set_active_extent(4, 4).ok());
  const Status partial = g.executable().set_active_extent(2, 4);
  ASSERT_FALSE(partial.ok());
  EXPECT_EQ(partial.error().code(), ErrorCode::kUnsupported);
  EXPECT_NE(partial.error().message().find("reference backend"), std::string::npos) << partial.error().to_string();
}

TEST(ReferenceExecutable, AParamNeverSetIsAnError) {
  GraphBuilder b;
  b.output(b.add(b.input("x", DType::F32, {2}), b.param("w", DType::F32, {2})), "y");
  CompiledGraph g = compile_reference(b);
  const float x[] = {1, 2};
  const int64_t s[] = {2};
  auto out = g.run({{"x", x, s}});
  ASSERT_FALSE(out.has_value());
  EXPECT_NE(out.error().message().find("'w'"), std::string::npos) << out.error().to_string();
}

}  // namespace
}  // namespace rlx
