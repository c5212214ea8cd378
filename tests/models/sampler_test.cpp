// Sampler: greedy ties, determinism per seed, filters (top-k/top-p/min-p) and
// penalties checked against distributions computed by hand.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "rlx/models/sampler.h"

namespace rlx::models {
namespace {

TEST(Sampler, GreedyPicksLowestIdOnTies) {
  Sampler s(SamplingOptions{});
  const std::vector<float> logits{1.0f, 3.0f, 3.0f, -2.0f};
  EXPECT_EQ(s.sample(logits, {}), 1);
}

TEST(Sampler, SameSeedSameTokens) {
  SamplingOptions o;
  o.temperature = 1.0f;
  o.seed = 42;
  std::vector<float> logits(50);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = std::sin(static_cast<float>(i));
  Sampler a(o), b(o);
  std::vector<int32_t> ta, tb;
  for (int i = 0; i < 30; ++i) {
    ta.push_back(a.sample(logits, ta));
    tb.push_back(b.sample(logits, tb));
  }
  EXPECT_EQ(ta, tb);
  o.seed = 43;
  Sampler c(o);
  std::vector<int32_t> tc;
  for (int i = 0; i < 30; ++i) tc.push_back(c.sample(logits, tc));
  EXPECT_NE(ta, tc);
}

TEST(Sampler, TopKOneIsGreedy) {
  SamplingOptions o;
  o.temperature = 5.0f;
  o.top_k = 1;
  Sampler s(o);
  const std::vector<float> logits{0.1f, 0.5f, 0.4f};
  for (int i = 0; i < 20; ++i) EXPECT_EQ(s.sample(logits, {}), 1);
}

TEST(Sampler, FrequenciesFollowSoftmax) {
  SamplingOptions o;
  o.temperature = 1.0f;
  o.seed = 7;
  Sampler s(o);
  const std::vector<float> logits{std::log(0.5f), std::log(0.3f), std::log(0.2f)};
  std::map<int32_t, int> counts;
  const int n = 20000;
  for (int i = 0; i < n; ++i) ++counts[s.sample(logits, {})];
  EXPECT_NEAR(counts[0] / double(n), 0.5, 0.02);
  EXPECT_NEAR(counts[1] / double(n), 0.3, 0.02);
  EXPECT_NEAR(counts[2] / double(n), 0.2, 0.02);
}

TEST(Sampler, TopPCutsTheTail) {
  SamplingOptions o;
  o.temperature = 1.0f;
  o.top_p = 0.75f;  // 0.5 + 0.3 >= 0.75: token 2 (p=0.2) is never drawn
  Sampler s(o);
  const std::vector<float> logits{std::log(0.5f), std::log(0.3f), std::log(0.2f)};
  for (int i = 0; i < 2000; ++i) EXPECT_NE(s.sample(logits, {}), 2);
}

TEST(Sampler, MinPCutsUnlikelyTokens) {
  SamplingOptions o;
  o.temperature = 1.0f;
  o.min_p = 0.5f;  // keep p >= 0.25: tokens 0 (0.5) and 1 (0.3)
  Sampler s(o);
  const std::vector<float> logits{std::log(0.5f), std::log(0.3f), std::log(0.2f)};
  for (int i = 0; i < 2000; ++i) EXPECT_NE(s.sample(logits, {}), 2);
}

TEST(Sampler, PenaltiesDemoteSeenTokens) {
  SamplingOptions o;
  o.repetition_penalty = 2.0f;  // 4.0 -> 2.0 for token 0
  Sampler s(o);
  const std::vector<float> logits{4.0f, 3.0f, 0.0f};
  const std::vector<int32_t> hist{0};
  EXPECT_EQ(s.sample(logits, hist), 1);
  SamplingOptions f;
  f.frequency_penalty = 0.6f;  // token 0 seen twice: 4.0 - 1.2 = 2.8 < 3.0
  Sampler sf(f);
  EXPECT_EQ(sf.sample(logits, std::vector<int32_t>{0, 0}), 1);
  EXPECT_EQ(sf.sample(logits, std::vector<int32_t>{0}), 0);  // 3.4 > 3.0
}

TEST(Sampler, ValidateNamesTheField) {
  SamplingOptions o;
  o.top_p = 0.0f;
  Status st = o.validate();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().message().find("top_p"), std::string::npos);
  o = {};
  o.temperature = -1.0f;
  EXPECT_NE(o.validate().error().message().find("temperature"), std::string::npos);
}

}  // namespace
}  // namespace rlx::models
