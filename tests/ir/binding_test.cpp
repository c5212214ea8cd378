// Symbolic-dim binding (binding.cpp): specializing a template graph (reshape to
// BATCH*SEQ, concat to 2*SEQ, narrow), binding errors, DimBinding text and hash,
// free symbols and the BindingManifest.
#include <gtest/gtest.h>

#include "rlx/base/hash.h"
#include "rlx/ir/module.h"
#include "ir_test_util.h"

namespace rlx::ir {
namespace {

// x[BATCH, SEQ, 64] -> flat[BATCH*SEQ, 64]; cat[BATCH, 2*SEQ, 64]; head = cat[:, :SEQ];
// tail = x[:, 2:6].
Graph template_graph() {
  GraphBuilder b;
  auto x = b.input("x", DType::F32, {Dim::symbol(BATCH), Dim::symbol(SEQ), 64});
  auto flat = b.label("flat").reshape(x, {*Dim::mul(Dim::symbol(BATCH), Dim::symbol(SEQ)), 64});
  auto cat = b.label("cat").concat({x, x}, 1);
  auto head = b.label("head").narrow(cat, 1, 0, Dim::symbol(SEQ));
  auto tail = b.label("tail").narrow(x, 1, 2, 4);
  b.output(flat, "flat");
  b.output(cat, "cat");
  b.output(head, "head");
  b.output(tail, "tail");
  return std::move(b.build()).value();
}

TEST(Bind, SpecializesEveryShape) {
  const Graph g = template_graph();
  EXPECT_EQ(g.node(1).shape.to_string(), "[BATCH*SEQ, 64]");
  EXPECT_EQ(g.node(2).shape.to_string(), "[BATCH, 2*SEQ, 64]");
  EXPECT_EQ(g.node(3).shape.to_string(), "[BATCH, SEQ, 64]");
  auto bound = bind(g, DimBinding{{BATCH, 2}, {SEQ, 8}});
  ASSERT_TRUE(bound.has_value()) << bound.error().message();
  EXPECT_EQ(bound->node(0).shape, Shape::of({2, 8, 64}));
  EXPECT_EQ(bound->node(1).shape, Shape::of({16, 64}));
  EXPECT_EQ(bound->node(1).attr<ShapeAttrs>().shape, Shape::of({16, 64}));
  EXPECT_EQ(bound->node(2).shape, Shape::of({2, 16, 64}));
  EXPECT_EQ(bound->node(3).shape, Shape::of({2, 8, 64}));
  EXPECT_EQ(bound->node(3).attr<NarrowAttrs>().length, Dim(8));
  EXPECT_EQ(bound->node(4).shape, Shape::of({2, 4, 64}));
  EXPECT_EQ(bound->node(4).label, "tail");
  EXPECT_EQ(bound->outputs().size(), 4u);
  EXPECT_TRUE(verify(*bound).ok());
  EXPECT_TRUE(free_symbols(*bound).empty());
}

TEST(Bind, PartialBindingKeepsOtherSymbols) {
  auto bound = bind(template_graph(), DimBinding{{SEQ, 8}});
  ASSERT_TRUE(bound.has_value()) << bound.error().message();
  EXPECT_EQ(bound->node(1).shape.to_string(), "[8*BATCH, 64]");
  EXPECT_EQ(bound->node(2).shape.to_string(), "[BATCH, 16, 64]");
  EXPECT_EQ(free_symbols(*bound), (std::vector<SymbolId>{BATCH}));
}

TEST(Bind, NarrowOutOfRangeAfterBinding) {
  auto bound = bind(template_graph(), DimBinding{{BATCH, 1}, {SEQ, 3}});
  ASSERT_FALSE(bound.has_value());
  EXPECT_EQ(bound.error().code(), ErrorCode::kVerify);
  EXPECT_EQ(bound.error().message(),
            "binding BATCH=1,SEQ=3: node %4 (narrow 'tail'): narrow [2, 6) exceeds dim 1 of size 3");
}

TEST(Bind, RejectsNegativeAndOverflowingBindings) {
  auto neg = bind(template_graph(), DimBinding{{SEQ, -1}});
  ASSERT_FALSE(neg.has_value());
  EXPECT_EQ(neg.error().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(neg.error().message(), "binding SEQ=-1 is negative");
  auto big = bind(template_graph(), DimBinding{{BATCH, 4}, {SEQ, int64_t{1} << 62}});
  ASSERT_FALSE(big.has_value());
  EXPECT_EQ(big.error().message(), "binding BATCH=4,SEQ=4611686018427387904: %1 (reshape 'flat'): a dim overflows int64");
}

TEST(DimBinding, ApplyAndToStringOrder) {
  const SymbolId zed = intern_symbol("ZED_BIND_TEST");
  const SymbolId alpha = intern_symbol("ALPHA_BIND_TEST");  // interned after ZED, sorts before it
  DimBinding b;
  b.set(SEQ, 128).set(zed, 2).set(BATCH, 1).set("ALPHA_BIND_TEST", 5);
  EXPECT_EQ(b.to_string(), "ALPHA_BIND_TEST=5,BATCH=1,SEQ=128,ZED_BIND_TEST=2");
  EXPECT_TRUE(b.has(alpha));
  EXPECT_EQ(b.get(alpha), 5);
  EXPECT_EQ(b.stable_hash(), stable_hash("ALPHA_BIND_TEST=5,BATCH=1,SEQ=128,ZED_BIND_TEST=2"));
  DimBinding other{{BATCH, 1}, {alpha, 5}, {zed, 2}, {SEQ, 128}};
  EXPECT_EQ(other.stable_hash(), b.stable_hash());
  EXPECT_NE(DimBinding({{SEQ, 127}}).stable_hash(), DimBinding({{SEQ, 128}}).stable_hash());
  EXPECT_EQ(DimBinding().to_string(), "");

  EXPECT_EQ(b.apply(Dim::symbol(SEQ, 3)), Dim(384));
  const DimBinding seq_only{{SEQ, 5}};
  EXPECT_EQ(seq_only.apply(*Dim::mul(Dim::symbol(BATCH), Dim::symbol(SEQ))), Dim::symbol(BATCH, 5));
  EXPECT_EQ(seq_only.apply(Dim::symbol(PAST_SEQ)), Dim::symbol(PAST_SEQ));
  EXPECT_EQ(seq_only.apply(Shape{Dim::symbol(SEQ), 7}), Shape::of({5, 7}));
}

TEST(FreeSymbols, SortedByNameIncludingAttrs) {
  GraphBuilder b;
  auto x = b.input("x", DType::F32, {Dim::symbol("ZZ_FREE_TEST"), 64});
  auto r = b.reshape(x, {Dim::symbol("ZZ_FREE_TEST"), 8, 8});
  b.output(r);
  auto g = b.build();
  ASSERT_TRUE(g.has_value());
  const SymbolId aa = intern_symbol("AA_FREE_TEST");  // interned later, sorts first
  const SymbolId zz = intern_symbol("ZZ_FREE_TEST");
  // A symbol that appears only in attrs (a narrow length) counts too.
  Graph h = *g;
  h.add_unchecked(h.node(1));
  h.mutable_node(2).attrs = NarrowAttrs{0, 0, Dim::symbol(aa)};
  EXPECT_EQ(free_symbols(*g), (std::vector<SymbolId>{zz}));
  EXPECT_EQ(free_symbols(h), (std::vector<SymbolId>{aa, zz}));
}

TEST(BindingManifest, ShapesAndBytesAfterBinding) {
  GraphBuilder b;
  auto x = b.input("tokens", DType::F32, {Dim::symbol(BATCH), Dim::symbol(SEQ), 64});
  auto w = b.param("w", DType::Q4_0, {128, 64});
  auto kv = b.handle("kv", DType::F16, {Dim::symbol(PAST_SEQ), 64});
  auto y = b.dequant_matmul(x, w);
  b.output(y, "logits");
  b.output(kv, "kv");
  auto g = b.build();
  ASSERT_TRUE(g.has_value()) << g.error().message();
  auto m = binding_manifest(*g, DimBinding{{BATCH, 2}, {SEQ, 8}, {PAST_SEQ, 16}});
  ASSERT_TRUE(m.has_value()) << m.error().message();
  ASSERT_EQ(m->inputs.size(), 1u);
  EXPECT_EQ(m->inputs[0].name, "tokens");
  EXPECT_EQ(m->inputs[0].value, x);
  EXPECT_EQ(m->inputs[0].bytes, 2 * 8 * 64 * 4);
  EXPECT_EQ(m->params[0].bytes, 128 * (64 / 32) * 18);
  EXPECT_EQ(m->handles[0].bytes, 16 * 64 * 2);
  EXPECT_EQ(m->outputs[0].type.to_string(), "f32[2, 8, 128]");
  EXPECT_EQ(m->to_string(),
            "input tokens f32[2, 8, 64] (4096 bytes)\n"
            "param w q4_0[128, 64] (4608 bytes)\n"
            "handle kv f16[16, 64] (2048 bytes)\n"
            "output logits f32[2, 8, 128] (8192 bytes)\n"
            "output kv f16[16, 64] (2048 bytes)\n");
  // A symbol left unbound has no byte size yet.
  auto partial = binding_manifest(*g, DimBinding{{BATCH, 2}, {SEQ, 8}});
  ASSERT_TRUE(partial.has_value());
  EXPECT_EQ(partial->handles[0].type.to_string(), "f16[PAST_SEQ, 64]");
  EXPECT_EQ(partial->handles[0].bytes, -1);
  auto bad = binding_manifest(*g, DimBinding{{SEQ, -3}});
  ASSERT_FALSE(bad.has_value());
  EXPECT_EQ(bad.error().message(), "binding SEQ=-3 is negative");
}

}  // namespace
}  // namespace rlx::ir
