// The rope frequency table (ir::rope_inv_freq) against values computed by hand from the
// published rules (Llama 3.1's wavelength bands, YaRN's ramp, per-pair factors), the
// checks of check_rope_attrs, and the text form of the new attributes.
#include <gtest/gtest.h>

#include <cmath>

#include "rlx/ir/op.h"
#include "rlx/ir/text.h"
#include "ir_test_util.h"

namespace rlx::ir {
namespace {

// n_rot 8 at theta 10000: base frequencies 1, 0.1, 0.01, 0.001.
RopeAttrs small() {
  RopeAttrs r;
  r.head_dim = 8;
  r.n_rot = 8;
  r.theta = 10000;
  return r;
}

void expect_table(const RopeAttrs& r, const std::vector<double>& want) {
  const std::vector<double> got = rope_inv_freq(r);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-12 * want[i] + 1e-15) << "pair " << i;
}

TEST(RopeInvFreq, PlainAndLinear) {
  RopeAttrs r = small();
  expect_table(r, {1, 0.1, 0.01, 0.001});
  r.scaling = RopeScaling::Linear;
  r.factor = 4;
  expect_table(r, {0.25, 0.025, 0.0025, 0.00025});
}

// Original context 64, factor 8, bands at wavelengths 16 (64/4) and 64 (64/1): pair 0
// (wavelength 2π) keeps its frequency, pair 1 (wavelength 62.8) is smoothed with
// s = (64/62.83 - 1)/3, pairs 2 and 3 (wavelengths 628, 6283) are divided by 8.
TEST(RopeInvFreq, Llama3Bands) {
  RopeAttrs r = small();
  r.scaling = RopeScaling::Llama3;
  r.factor = 8;
  r.low_freq_factor = 1;
  r.high_freq_factor = 4;
  r.original_context = 64;
  expect_table(r, {1, 0.013042256043820465, 0.00125, 0.000125});
}

// YaRN, original context 64, factor 4, beta_fast 32, beta_slow 1: the correction range
// is pair n_rot·ln(64/(β·2π)) / (2·ln 10000) = -0.497 (floored, clamped: 0) to 1.008
// (ceiled: 2). Pair 0 keeps its frequency, pair 1 is half way (0.1·(0.5/4 + 0.5) =
// 0.0625), pairs 2 and 3 are interpolated (divided by 4). The magnitude scale
// 0.1·ln 4 + 1 is the config reader's job (models/rope_config), not the table's.
TEST(RopeInvFreq, YarnRamp) {
  RopeAttrs r = small();
  r.scaling = RopeScaling::Yarn;
  r.factor = 4;
  r.original_context = 64;
  const auto [low, high] = rope_yarn_range(r);
  EXPECT_EQ(low, 0);
  EXPECT_EQ(high, 2);
  expect_table(r, {1, 0.0625, 0.0025, 0.00025});
  r.ext_factor = 0;  // no extrapolation: plain interpolation everywhere
  expect_table(r, {0.25, 0.025, 0.0025, 0.00025});
}

// Per-pair factors (GGUF rope_freqs, LongRoPE) divide each pair's frequency after the
// scaling rule.
TEST(RopeInvFreq, PerPairFactorsDivide) {
  RopeAttrs r = small();
  r.freq_factors = {1, 2, 4, 8};
  expect_table(r, {1, 0.05, 0.0025, 0.000125});
  r.scaling = RopeScaling::Linear;
  r.factor = 2;
  expect_table(r, {0.5, 0.025, 0.00125, 0.0000625});
}

TEST(RopeAttrsCheck, NamesTheBadField) {
  auto error_of = [](const RopeAttrs& r) {
    Status s = check_rope_attrs(r);
    return s.ok() ? std::string("ok") : s.error().to_string();
  };
  RopeAttrs r = small();
  EXPECT_EQ(error_of(r), "ok");
  r.freq_factors = {1, 2, 3};
  EXPECT_NE(error_of(r).find("freq_factors has 3 entries, n_rot 8 needs 4"), std::string::npos) << error_of(r);
  r.freq_factors = {1, 2, 0, 4};
  EXPECT_NE(error_of(r).find("freq_factors[2] must be positive"), std::string::npos) << error_of(r);
  r.freq_factors = {1, 2, NAN, 4};
  EXPECT_NE(error_of(r).find("freq_factors[2]"), std::string::npos) << error_of(r);
  r = small();
  r.attn_factor = 0;
  EXPECT_NE(error_of(r).find("attn_factor"), std::string::npos) << error_of(r);
  r = small();
  r.scaling = RopeScaling::Yarn;
  r.factor = 4;
  r.original_context = 0;
  EXPECT_NE(error_of(r).find("original_context"), std::string::npos) << error_of(r);
  r.original_context = 64;
  r.beta_fast = -1;
  EXPECT_NE(error_of(r).find("beta_fast"), std::string::npos) << error_of(r);
  r = small();
  r.scaling = RopeScaling::Linear;
  r.factor = INFINITY;
  EXPECT_NE(error_of(r).find("positive factor"), std::string::npos) << error_of(r);
  r = small();
  r.scaling = RopeScaling::Llama3;
  r.low_freq_factor = 4;
  r.high_freq_factor = 1;
  EXPECT_NE(error_of(r).find("low_freq_factor < high_freq_factor"), std::string::npos) << error_of(r);
}

// The new fields print, parse back equal, and a bad table fails the verifier.
TEST(RopeAttrsText, YarnAndFactorsRoundTrip) {
  const std::string text = R"(graph {
  %0 = input "x" : f32[SEQ, 16]
  %1 = input "pos" : i32[SEQ]
  %2 = rope %0, %1 {head_dim=8, n_rot=8, layout=neox, theta=10000, scaling=yarn, factor=4, original_context=64, beta_fast=16, beta_slow=2, ext_factor=0.5, freq_factors=[1, 2.5, 4, 0.125], attn_factor=1.138629436111989} : f32[SEQ, 16]
  output %2 "y"
}
)";
  auto g = parse_graph(text);
  ASSERT_TRUE(g.has_value()) << g.error().to_string();
  const auto& r = g->node(2).attr<RopeAttrs>();
  EXPECT_EQ(r.scaling, RopeScaling::Yarn);
  EXPECT_EQ(r.freq_factors, (std::vector<double>{1, 2.5, 4, 0.125}));
  EXPECT_EQ(r.attn_factor, 1.138629436111989);
  EXPECT_EQ(r.beta_fast, 16);
  EXPECT_EQ(r.beta_slow, 2);
  EXPECT_EQ(r.ext_factor, 0.5);
  auto again = parse_graph(print(*g));
  ASSERT_TRUE(again.has_value()) << again.error().to_string();
  EXPECT_EQ(print(*again), print(*g));

  std::string bad = text;
  bad.replace(bad.find("[1, 2.5, 4, 0.125]"), 18, "[1, 2.5]");
  auto rejected = parse_graph(bad);
  ASSERT_FALSE(rejected.has_value());
  EXPECT_NE(rejected.error().to_string().find("freq_factors has 2 entries"), std::string::npos)
      << rejected.error().to_string();
}

}  // namespace
}  // namespace rlx::ir
