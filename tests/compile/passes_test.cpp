// Tests of the cleanup passes (DCE, CSE, constant folding per dtype, cast pairs) and of
// the precision pass.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "golden.h"
#include "rlx/base/half.h"
#include "rlx/compile/passes.h"
#include "rlx/ir/builder.h"
#include "rlx/ir/text.h"

namespace rlx::compile {
namespace {
using namespace ir;
using testing::mir;

template <class T>
T element(const MirModule& m, ValueId v, size_t i = 0) {
  const Node& n = m.graph.node(v);
  EXPECT_EQ(n.op, OpKind::Constant);
  T x;
  std::memcpy(&x, n.attr<ConstantAttrs>().data.bytes->data() + i * sizeof(T), sizeof(T));
  return x;
}

ValueId output(const MirModule& m, size_t i = 0) { return m.graph.outputs()[i].value; }

TEST(DeadCode, RemovesUnusedButKeepsInterfaceAndWrites) {
  const MirModule out = eliminate_dead_code(mir(R"(
    %0 = input "x" : f32[4]
    %1 = input "unused" : f32[4]
    %2 = handle "h" : f32[8]
    %3 = constant {data=[0]} : i32[1]
    %4 = update_slice %2, %0, %3 {axis=0}
    %5 = activation.exp %0
    %6 = activation.tanh %0
    output %6 "y"
  )"));
  testing::expect_golden("dce.mir", print(out));
  EXPECT_TRUE(out.graph.of_kind(OpKind::UpdateSlice).size() == 1);
  EXPECT_TRUE(out.graph.of_kind(OpKind::Activation).size() == 1);
}

TEST(CommonSubexpressions, MergesEqualNodesNotWrites) {
  const MirModule out = eliminate_common_subexpressions(mir(R"(
    %0 = input "x" : f32[4]
    %1 = activation.exp %0
    %2 = activation.exp %0
    %3 = activation.exp %0 : f32[4]
    %4 = constant {data=[2]} : f32[]
    %5 = constant {data=[2]} : f32[]
    %6 = binary.mul %1, %4
    %7 = binary.mul %2, %5
    %8 = activation.sin %0
    %9 = binary.add %6, %7
    %10 = binary.add %9, %8
    output %10 "y"
  )"));
  testing::expect_golden("cse.mir", print(out));
  EXPECT_EQ(out.graph.of_kind(OpKind::Binary).size(), 3u);
}

TEST(FoldConstants, F16ConstantsAreReadAsF16) {
  GraphBuilder b;
  const uint16_t h = f32_to_f16_bits(1.5f);
  const ValueId c = b.constant(DType::F16, Shape{Dim(2)}, {uint8_t(h & 0xff), uint8_t(h >> 8), uint8_t(h & 0xff), uint8_t(h >> 8)});
  b.output(b.add(c, c), "y");
  const MirModule out = fold_constants(MirModule{*b.build()});
  EXPECT_EQ(out.graph.size(), 1);
  EXPECT_EQ(f16_bits_to_f32(element<uint16_t>(out, output(out), 1)), 3.0f);
}

TEST(FoldConstants, ExactGeluAndIntegerArithmetic) {
  const MirModule out = fold_constants(mir(R"(
    %0 = constant {data=[1]} : f32[]
    %1 = activation.gelu %0
    %2 = constant {data=[7, -7, 2147483647]} : i32[3]
    %3 = constant {data=[2]} : i32[]
    %4 = binary.div %2, %3
    %5 = binary.mul %2, %3
    %6 = constant {data=[0]} : i32[]
    %7 = binary.div %2, %6
    output %1 "gelu"
    output %4 "div"
    output %5 "mul"
    output %7 "div0"
  )"));
  EXPECT_EQ(element<float>(out, output(out, 0)), static_cast<float>(0.5 * (1 + std::erf(1 / std::sqrt(2.0)))));
  EXPECT_EQ(element<int32_t>(out, output(out, 1), 0), 3);
  EXPECT_EQ(element<int32_t>(out, output(out, 1), 1), -3);
  EXPECT_EQ(element<int32_t>(out, output(out, 2), 2), -2);  // wraps like the i32 kernel
  EXPECT_EQ(out.graph.node(output(out, 3)).op, OpKind::Binary);  // division by zero is left alone
}

TEST(FoldConstants, MovementAndNeverParams) {
  const MirModule out = fold_constants(mir(R"(
    %0 = constant {data=[1, 2, 3, 4, 5, 6]} : f32[2, 3]
    %1 = transpose %0 {perm=[1, 0]}
    %2 = narrow %1 {axis=0, start=1, length=2}
    %3 = param "w" : f32[2, 2]
    %4 = binary.add %2, %3
    %5 = expand %0 {shape=[2, 2, 3]}
    output %4 "y"
    output %5 "e"
  )"));
  testing::expect_golden("fold_movement.mir", print(out));
  EXPECT_EQ(out.graph.node(output(out, 0)).op, OpKind::Binary);
}

TEST(CastPairs, RemovesExactRoundTripsOnly) {
  const MirModule out = remove_cast_pairs(mir(R"(
    %0 = input "h" : f16[4]
    %1 = cast %0 : f32[4]
    %2 = cast %1 : f16[4]
    %3 = input "x" : f32[4]
    %4 = cast %3 : f16[4]
    %5 = cast %4 : f32[4]
    %6 = cast %3 : f32[4]
    %7 = binary.add %5, %6
    output %2 "a"
    output %7 "b"
  )"));
  testing::expect_golden("cast_pairs.mir", print(out));
}

constexpr const char* kBlock = R"(
  %0 = input "x" : f32[8, 32]
  %1 = param "w" : f32[32, 32]
  %2 = param "g" : f32[32]
  %3 = rms_norm %0, %2 {eps=1e-05}
  %4 = fused_matmul_bias_act %3, %1 {act=silu, has_bias=false, transpose_b=true}
  %5 = binary.add %4, %0
  %6 = softmax %5 {axis=-1}
  output %6 "y"
)";

TEST(Precision, AutoMixedKeepsNormsInF32) {
  auto out = apply_precision(mir(kBlock), Precision::F16, MixedPrecision::Auto);
  ASSERT_TRUE(out.has_value()) << out.error().to_string();
  testing::expect_golden("precision_auto_f16.mir", print(*out));
  EXPECT_EQ(out->graph.node(1).dtype, DType::F16);  // matmul weight retyped
  EXPECT_EQ(out->graph.node(2).dtype, DType::F32);  // norm gamma stays
  EXPECT_EQ(out->graph.node(output(*out)).dtype, DType::F32);
}

TEST(Precision, AllBf16CastsAtTheBoundaryOnly) {
  auto out = apply_precision(mir(kBlock), Precision::BF16, MixedPrecision::None);
  ASSERT_TRUE(out.has_value()) << out.error().to_string();
  testing::expect_golden("precision_bf16.mir", print(*out));
  EXPECT_EQ(out->graph.of_kind(OpKind::Cast).size(), 2u);
  EXPECT_EQ(out->graph.node(output(*out)).dtype, DType::F32);
}

TEST(Precision, F32IsIdentity) {
  const MirModule m = mir(kBlock);
  auto out = apply_precision(m, Precision::F32, MixedPrecision::Auto);
  ASSERT_TRUE(out.has_value());
  EXPECT_EQ(print(*out), print(m));
}

}  // namespace
}  // namespace rlx::compile
