// The binary LIR form: round trips (every op kind, plan, manifest, symbols) and hostile
// input (every truncation, random byte flips, wrong magic/version) that must yield an
// error naming the byte offset or a verified module, never a crash.
#include "rlx/ir/binary.h"

#include <gtest/gtest.h>

#include <random>

#include "ir_test_util.h"
#include "rlx/ir/text.h"

namespace rlx::ir {
namespace {

using testing::all_ops_graph;
using testing::expect_graphs_equal;
using testing::small_lir;

// all_ops_graph without its HIR nodes: every MIR op kind, as an LIR module.
LirModule all_ops_lir() {
  const Graph all = all_ops_graph();
  LirModule m;
  for (const Node& n : all.nodes())
    if (!is_hir_op(n.op)) m.graph.add_unchecked(n);
  for (const GraphOutput& o : all.outputs())
    if (o.value < m.graph.size()) m.graph.add_output(o.value, o.name);
  return m;
}

TEST(LirBinary, EveryMirOpKindRoundTrips) {
  const LirModule m = all_ops_lir();
  ASSERT_TRUE(verify(m.graph).ok());
  const std::string blob = encode_lir_binary(m);
  auto back = decode_lir_binary(blob);
  ASSERT_TRUE(back.has_value()) << back.error().message();
  expect_graphs_equal(m.graph, back->graph);
  EXPECT_EQ(print(back->graph), print(m.graph));  // labels, attrs and constants too
  EXPECT_EQ(fingerprint(back->graph), fingerprint(m.graph));
  EXPECT_EQ(encode_lir_binary(*back), blob);
}

TEST(LirBinary, PlanManifestAndSymbolsRoundTrip) {
  const LirModule m = small_lir();
  auto back = decode_lir_binary(encode_lir_binary(m));
  ASSERT_TRUE(back.has_value()) << back.error().message();
  testing::expect_lirs_equal(m, *back);
  EXPECT_EQ(print(*back), print(m));
}

TEST(LirBinary, EveryTruncationIsAnError) {
  const std::string blob = encode_lir_binary(small_lir());
  for (size_t n = 0; n < blob.size(); ++n) {
    auto r = decode_lir_binary(std::string_view(blob).substr(0, n));
    ASSERT_FALSE(r.has_value()) << "prefix of " << n << " bytes decoded";
    EXPECT_NE(r.error().message().find("LIR binary"), std::string::npos) << r.error().message();
  }
  auto padded = decode_lir_binary(blob + "x");
  ASSERT_FALSE(padded.has_value());
  EXPECT_NE(padded.error().message().find("trailing"), std::string::npos);
}

TEST(LirBinary, MagicAndVersionAreChecked) {
  std::string blob = encode_lir_binary(small_lir());
  std::string bad = blob;
  bad[0] = 'X';
  EXPECT_NE(decode_lir_binary(bad).error().message().find("magic"), std::string::npos);
  bad = blob;
  bad[6] = static_cast<char>(kLirBinaryVersion + 1);
  EXPECT_NE(decode_lir_binary(bad).error().message().find("version"), std::string::npos);
  // The schema fingerprint follows the one-byte version: a blob from a build with other
  // op / attribute tables is refused, not misread.
  bad = blob;
  bad[7] = static_cast<char>(bad[7] ^ 0x01);  // (the varint's continuation bit kept)
  auto r = decode_lir_binary(bad);
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().message().find("other op / attribute tables"), std::string::npos) << r.error().message();
}

TEST(LirBinary, SchemaFingerprintIsStable) {
  EXPECT_EQ(lir_schema_fingerprint(), lir_schema_fingerprint());
  EXPECT_NE(lir_schema_fingerprint(), 0u);
}

TEST(LirBinary, RandomByteFlipsNeverCrash) {
  const std::string blob = encode_lir_binary(all_ops_lir());
  std::mt19937 rng(20261126);
  int rejected = 0;
  for (int i = 0; i < 3000; ++i) {
    std::string b = blob;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int f = 0; f < flips; ++f) b[rng() % b.size()] = static_cast<char>(rng());
    auto r = decode_lir_binary(b);
    if (!r) {
      ++rejected;
      EXPECT_NE(r.error().message().find("LIR binary"), std::string::npos);
    } else {
      EXPECT_TRUE(verify(r->graph).ok());  // whatever decodes is a verified graph
    }
  }
  EXPECT_GT(rejected, 1500);
}

TEST(LirBinary, HugeCountsDoNotAllocate) {
  // "RLXLIR", version, schema fingerprint, then a node count of 2^62: rejected before
  // any reservation.
  std::string b = "RLXLIR";
  b.push_back(static_cast<char>(kLirBinaryVersion));
  for (uint64_t v = lir_schema_fingerprint();; v >>= 7) {  // LEB128
    b.push_back(static_cast<char>((v & 0x7f) | (v >= 0x80 ? 0x80 : 0)));
    if (v < 0x80) break;
  }
  for (int i = 0; i < 8; ++i) b.push_back(static_cast<char>(0xff));
  b.push_back(0x3f);
  auto r = decode_lir_binary(b);
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().message().find("node count"), std::string::npos) << r.error().message();
}

}  // namespace
}  // namespace rlx::ir
