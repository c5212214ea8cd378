// The stable graph fingerprint (graph.cpp): equal for equal structure (rebuilt,
// printed and parsed), blind to labels, sensitive to everything else, and pinned to
// literal values so that any change to the hash scheme is noticed.
#include <gtest/gtest.h>

#include "rlx/base/hash.h"
#include "rlx/ir/text.h"
#include "ir_test_util.h"

namespace rlx::ir {
namespace {

// y = rms_norm(x, g) . W^T ; the knobs change one aspect each.
struct Knobs {
  double eps = 1e-5;
  int64_t d = 64;
  std::string label = "blk.0";
  std::string out = "y";
  float scale = 2.0f;
  bool swap_operands = false;
};

Graph small_graph(const Knobs& k = {}) {
  GraphBuilder b;
  auto x = b.input("x", DType::F32, {Dim::symbol(SEQ), k.d});
  auto g = b.param("g", DType::F32, {k.d});
  auto w = b.param("w", DType::F32, {32, k.d});
  auto n = b.label(k.label).rms_norm(x, g, k.eps);
  auto y = b.linear(n, w);
  auto s = b.scalar(k.scale);
  auto z = k.swap_operands ? b.mul(s, y) : b.mul(y, s);
  b.output(z, k.out);
  return std::move(b.build()).value();
}

TEST(Fingerprint, SameStructureSameValue) {
  EXPECT_EQ(fingerprint(small_graph()), fingerprint(small_graph()));
  const Graph all = testing::all_ops_graph();
  auto parsed = parse_graph(print(all));
  ASSERT_TRUE(parsed.has_value()) << parsed.error().message();
  EXPECT_EQ(fingerprint(*parsed), fingerprint(all));
}

TEST(Fingerprint, LabelsAreNotIncluded) {
  Knobs k;
  k.label = "another.label";
  EXPECT_EQ(fingerprint(small_graph(k)), fingerprint(small_graph()));
}

TEST(Fingerprint, EverythingElseIsIncluded) {
  const uint64_t base = fingerprint(small_graph());
  Knobs eps;
  eps.eps = 1e-6;
  Knobs dim;
  dim.d = 128;
  Knobs out;
  out.out = "z";
  Knobs data;
  data.scale = 3.0f;
  Knobs edges;
  edges.swap_operands = true;
  for (const Knobs& k : {eps, dim, out, data, edges}) EXPECT_NE(fingerprint(small_graph(k)), base);
  // Symbolic vs static dims, and the symbol's name, count.
  GraphBuilder a, b, c;
  a.output(a.input("x", DType::F32, {Dim::symbol(SEQ)}));
  b.output(b.input("x", DType::F32, {Dim::symbol(BATCH)}));
  c.output(c.input("x", DType::F32, {2}));
  const uint64_t fa = fingerprint(std::move(a.build()).value());
  const uint64_t fb = fingerprint(std::move(b.build()).value());
  const uint64_t fc = fingerprint(std::move(c.build()).value());
  EXPECT_NE(fa, fb);
  EXPECT_NE(fa, fc);
  EXPECT_NE(fb, fc);
}

// Recomputes the fingerprint of `input "x" : f32[4]; output %0 "y"` from the scheme
// documented in graph.cpp, so that the definition and the code cannot drift apart.
TEST(Fingerprint, MatchesTheDefinition) {
  GraphBuilder b;
  b.output(b.input("x", DType::F32, {4}), "y");
  const Graph g = std::move(b.build()).value();
  StableHasher h;
  h.str("rlx.graph.v1");
  h.str("input");         // op name
  h.str("type");          // shape, hashed as a field named "type"
  h.u64(1);               //   rank
  h.i64(4);               //   dim coeff
  h.str("");              //   no symbols
  h.str("");
  h.str("f32");           // dtype
  h.u64(0);               // no inputs
  h.str("name");          // attrs: InputAttrs{name}
  h.str("x");
  h.i64(0);               // output value
  h.str("y");             // output name
  EXPECT_EQ(fingerprint(g), h.digest());
}

// Pinned values: if one of these changes, every stored fingerprint (AOT caches)
// changes with it; bump "rlx.graph.v1" and update the literals deliberately.
TEST(Fingerprint, PinnedValues) {
  GraphBuilder b;
  b.output(b.input("x", DType::F32, {4}), "y");
  EXPECT_EQ(fingerprint(std::move(b.build()).value()), 0x632d33b2e09d1525ull);
  EXPECT_EQ(fingerprint(small_graph()), 0xbfedec9163d9a355ull);  // (params' shard fields added)
}

}  // namespace
}  // namespace rlx::ir
