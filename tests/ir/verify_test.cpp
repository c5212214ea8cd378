// The verifier (graph.cpp): each invariant it checks, broken on purpose through
// Graph::add_unchecked, must be rejected with a message naming the node.
#include <gtest/gtest.h>

#include "ir_test_util.h"

namespace rlx::ir {
namespace {

using testing::ty;

Node node(OpKind op, std::vector<ValueId> inputs, Attrs attrs, const std::string& type, std::string label = {}) {
  Node n;
  n.op = op;
  n.inputs = std::move(inputs);
  n.attrs = std::move(attrs);
  const TensorType t = ty(type);
  n.dtype = t.dtype;
  n.shape = t.shape;
  n.label = std::move(label);
  return n;
}

// x: input f32[SEQ, 64]; y = silu(x); output y.
Graph valid_graph() {
  Graph g;
  g.add_unchecked(node(OpKind::Input, {}, InputAttrs{"x"}, "f32[SEQ, 64]"));
  g.add_unchecked(node(OpKind::Activation, {0}, ActivationAttrs{ActKind::Silu}, "f32[SEQ, 64]", "act"));
  g.add_output(1, "y");
  return g;
}

void expect_rejected(const Graph& g, const std::string& message, bool allow_hir = false) {
  Status s = verify(g, allow_hir);
  ASSERT_FALSE(s.ok()) << "expected: " << message;
  EXPECT_EQ(s.error().code(), ErrorCode::kVerify);
  EXPECT_EQ(s.error().message(), message);
}

TEST(Verify, AcceptsValidGraph) {
  EXPECT_TRUE(verify(valid_graph()).ok());
  EXPECT_TRUE(verify(testing::all_ops_graph(), /*allow_hir=*/true).ok());
}

TEST(Verify, UseBeforeDef) {
  Graph g;
  g.add_unchecked(node(OpKind::Activation, {1}, ActivationAttrs{}, "f32[4]"));
  g.add_unchecked(node(OpKind::Input, {}, InputAttrs{"x"}, "f32[4]"));
  g.add_output(0);
  expect_rejected(g, "%0 (activation): input %1 is not defined before its use");
  Graph self;
  self.add_unchecked(node(OpKind::Input, {}, InputAttrs{"x"}, "f32[4]"));
  self.add_unchecked(node(OpKind::Activation, {1}, ActivationAttrs{}, "f32[4]", "loop"));
  self.add_output(1);
  expect_rejected(self, "%1 (activation 'loop'): input %1 is not defined before its use");
  Graph negative = valid_graph();
  negative.mutable_node(1).inputs = {-5};
  expect_rejected(negative, "%1 (activation 'act'): input %-5 is not defined before its use");
}

TEST(Verify, Arity) {
  Graph g = valid_graph();
  g.mutable_node(1).inputs = {0, 0};
  expect_rejected(g, "%1 (activation 'act'): activation takes 1..1 inputs, got 2");
  Graph c;
  c.add_unchecked(node(OpKind::Concat, {}, AxisAttrs{0}, "f32[1]"));
  c.add_output(0);
  expect_rejected(c, "%0 (concat): concat takes at least 1 inputs, got 0");
}

TEST(Verify, WrongAttrsKind) {
  Graph g = valid_graph();
  g.mutable_node(1).attrs = BinaryAttrs{};
  expect_rejected(g, "%1 (activation 'act'): activation has attributes of the wrong kind");
}

TEST(Verify, StoredTypeDiffersFromInferred) {
  Graph g = valid_graph();
  g.mutable_node(1).shape = ty("f32[SEQ, 65]").shape;
  expect_rejected(g, "%1 (activation 'act'): stored type f32[SEQ, 65] but inputs give f32[SEQ, 64]");
  Graph d = valid_graph();
  d.mutable_node(1).dtype = DType::F16;
  expect_rejected(d, "%1 (activation 'act'): stored type f16[SEQ, 64] but inputs give f32[SEQ, 64]");
}

TEST(Verify, InferenceFailureNamesNode) {
  Graph g = valid_graph();
  g.add_unchecked(node(OpKind::Softmax, {1}, SoftmaxAttrs{4}, "f32[SEQ, 64]", "probs"));
  expect_rejected(g, "%2 (softmax 'probs'): softmax axis out of range");
}

TEST(Verify, DuplicateBoundaryNames) {
  Graph g = valid_graph();
  g.add_unchecked(node(OpKind::Input, {}, InputAttrs{"x"}, "f32[2]"));
  expect_rejected(g, "%2 (input 'x'): duplicate input name 'x'");
  // The same name on different boundary kinds is allowed.
  Graph ok = valid_graph();
  ok.add_unchecked(node(OpKind::Param, {}, ParamAttrs{"x"}, "f32[2]"));
  EXPECT_TRUE(verify(ok).ok());
  Graph p = valid_graph();
  p.add_unchecked(node(OpKind::Param, {}, ParamAttrs{"w"}, "f32[2]"));
  p.add_unchecked(node(OpKind::Param, {}, ParamAttrs{"w"}, "f32[3]"));
  expect_rejected(p, "%3 (param 'w'): duplicate param name 'w'");
}

TEST(Verify, BoundaryNeedsName) {
  Graph g = valid_graph();
  g.add_unchecked(node(OpKind::Handle, {}, HandleAttrs{""}, "f32[2]"));
  expect_rejected(g, "%2 (handle): boundary node needs a name");
}

TEST(Verify, Outputs) {
  Graph none = valid_graph();
  none.set_outputs({});
  expect_rejected(none, "graph has no outputs");
  Graph missing = valid_graph();
  missing.add_output(9, "z");
  expect_rejected(missing, "output 'z' refers to missing value %9");
  Graph dup = valid_graph();
  dup.add_output(0, "y");
  expect_rejected(dup, "duplicate output name 'y'");
}

TEST(Verify, HirOpInMir) {
  Graph g;
  g.add_unchecked(node(OpKind::Input, {}, InputAttrs{"x"}, "f32[SEQ, 64]"));
  g.add_unchecked(node(OpKind::Param, {}, ParamAttrs{"g"}, "f32[64]"));
  g.add_unchecked(node(OpKind::HirRmsNorm, {0, 1}, NormAttrs{}, "f32[SEQ, 64]", "blk.0.norm"));
  g.add_output(2);
  expect_rejected(g, "%2 (hir.rms_norm 'blk.0.norm'): HIR op in a MIR graph (lower it first)");
  EXPECT_TRUE(verify(g, /*allow_hir=*/true).ok());
}

TEST(Verify, BuilderReportsFirstErrorAndIgnoresLaterCalls) {
  GraphBuilder b;
  auto x = b.input("x", DType::F32, {Dim::symbol(SEQ), 64});
  auto w = b.param("w", DType::F32, {128, 32});
  auto y = b.label("blk.1.q").linear(x, w);
  EXPECT_EQ(y, kNoValue);
  EXPECT_EQ(b.softmax(y), kNoValue);
  b.output(y, "y");
  auto g = b.build();
  ASSERT_FALSE(g.has_value());
  EXPECT_EQ(g.error().message(),
            "node %2 (fused_matmul_bias_act 'blk.1.q'): inner dims differ: input f32[SEQ, 64] vs weight f32[128, 32] "
            "(weight is [N, K])");
}

TEST(Verify, DescribeNamesValues) {
  const Graph g = valid_graph();
  EXPECT_EQ(g.describe(0), "%0 (input 'x')");
  EXPECT_EQ(g.describe(1), "%1 (activation 'act')");
  EXPECT_EQ(g.describe(7), "%7 (out of range)");
  EXPECT_EQ(g.use_counts(), (std::vector<int32_t>{1, 1}));
  EXPECT_EQ(g.inputs(), (std::vector<ValueId>{0}));
}

}  // namespace
}  // namespace rlx::ir
