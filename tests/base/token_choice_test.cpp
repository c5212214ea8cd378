// choose_token: ranking (ties by id, NaN last), the top-k / min-p / top-p filters and
// the inverse-CDF draw, on rows whose probabilities are worked out by hand.
#include "rlx/base/token_choice.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

namespace rlx {
namespace {

int32_t pick(const std::vector<float>& logits, TokenFilter f, double u) {
  TokenChoiceScratch s;
  return choose_token(logits, f, u, s);
}

std::vector<float> log_of(std::vector<double> p) {
  std::vector<float> l;
  for (double v : p) l.push_back(static_cast<float>(std::log(v)));
  return l;
}

TEST(TokenChoice, RankKeyOrdersLogits) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> ascending = {-inf, -3.5f, -1e-30f, -0.0f, 0.0f, 1e-30f, 2.0f, 1e30f, inf};
  for (size_t i = 0; i + 1 < ascending.size(); ++i)
    EXPECT_LT(logit_rank_key(ascending[i]), logit_rank_key(ascending[i + 1])) << i;
  EXPECT_LT(logit_rank_key(std::nanf("")), logit_rank_key(-inf));
  EXPECT_EQ(logit_rank_key(-std::nanf("")), 0u);
}

// p = 0.5, 0.3, 0.2 in rank order 2, 0, 1: the draw walks the cumulative 0.5, 0.8, 1.
TEST(TokenChoice, InverseCdfInRankOrder) {
  const auto l = log_of({0.3, 0.2, 0.5});
  const TokenFilter f{1.0, 0, 1.0, 0.0};
  EXPECT_EQ(pick(l, f, 0.0), 2);
  EXPECT_EQ(pick(l, f, 0.49), 2);
  EXPECT_EQ(pick(l, f, 0.51), 0);
  EXPECT_EQ(pick(l, f, 0.79), 0);
  EXPECT_EQ(pick(l, f, 0.81), 1);
  EXPECT_EQ(pick(l, f, 0.999999), 1);
}

// Temperature 2 over logits 0 and 2 ln 3: p = 1 : 3.
TEST(TokenChoice, Temperature) {
  const std::vector<float> l = {0.0f, static_cast<float>(2 * std::log(3.0))};
  const TokenFilter f{2.0, 0, 1.0, 0.0};
  EXPECT_EQ(pick(l, f, 0.74), 1);
  EXPECT_EQ(pick(l, f, 0.76), 0);
  const TokenFilter cold{0.01, 0, 1.0, 0.0};  // nearly greedy
  EXPECT_EQ(pick(l, cold, 0.999), 1);
}

// Equal logits rank by id: top_k = 2 over {1, 2, 2, 2, 0} keeps ids 1 and 2, each 1/2.
TEST(TokenChoice, TopKTiesGoToLowerIds) {
  const std::vector<float> l = {1.0f, 2.0f, 2.0f, 2.0f, 0.0f};
  const TokenFilter f{1.0, 2, 1.0, 0.0};
  EXPECT_EQ(pick(l, f, 0.1), 1);
  EXPECT_EQ(pick(l, f, 0.6), 2);
  EXPECT_EQ(pick(l, f, 0.999), 2);
  const TokenFilter one{5.0, 1, 1.0, 0.0};
  for (double u : {0.0, 0.5, 0.99}) EXPECT_EQ(pick(l, one, u), 1);
}

// min-p 0.2 over p = 0.6, 0.3, 0.1: the cut 0.12 drops the 0.1; the draw is rescaled
// to the kept 0.9 (u = 0.95 -> r = 0.855: the second token, never the third).
TEST(TokenChoice, MinP) {
  const auto l = log_of({0.6, 0.3, 0.1});
  const TokenFilter f{1.0, 0, 1.0, 0.2};
  EXPECT_EQ(pick(l, f, 0.95), 1);
  EXPECT_EQ(pick(l, f, 0.6), 0);  // r = 0.54 < 0.6
  EXPECT_EQ(pick(l, TokenFilter{1.0, 0, 1.0, 0.0}, 0.95), 2);
}

// top-p 0.7 over p = 0.5, 0.3, 0.2: the shortest prefix reaching 0.7 is two tokens.
TEST(TokenChoice, TopP) {
  const auto l = log_of({0.5, 0.3, 0.2});
  EXPECT_EQ(pick(l, TokenFilter{1.0, 0, 0.7, 0.0}, 0.99), 1);
  EXPECT_EQ(pick(l, TokenFilter{1.0, 0, 0.7, 0.0}, 0.5), 0);  // r = 0.4
  EXPECT_EQ(pick(l, TokenFilter{1.0, 0, 0.4, 0.0}, 0.99), 0);  // one token reaches 0.4
  EXPECT_EQ(pick(l, TokenFilter{1.0, 0, 0.9, 0.0}, 0.99), 2);
}

// top-k, then min-p and top-p over the top-k normalisation.
TEST(TokenChoice, FiltersCompose) {
  const auto l = log_of({0.1, 0.4, 0.2, 0.3});  // ranks: 1, 3, 2, 0
  // top-2: 0.4 / 0.7 and 0.3 / 0.7; top-p 0.5 keeps only id 1.
  EXPECT_EQ(pick(l, TokenFilter{1.0, 2, 0.5, 0.0}, 0.99), 1);
  // top-3 (0.4, 0.3, 0.2 over 0.9) with min-p 0.6: cut 0.6 * 0.444 = 0.267 keeps two.
  EXPECT_EQ(pick(l, TokenFilter{1.0, 3, 1.0, 0.6}, 0.99), 3);
  EXPECT_EQ(pick(l, TokenFilter{1.0, 3, 1.0, 0.0}, 0.99), 2);
}

TEST(TokenChoice, NonFiniteLogits) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(pick({std::nanf(""), 1.0f, 2.0f}, TokenFilter{1.0, 1, 1.0, 0.0}, 0.5), 2);  // NaN ranks last
  EXPECT_EQ(pick({1.0f, inf, 2.0f}, TokenFilter{1.0, 0, 1.0, 0.0}, 0.9), 1);            // best not finite
  EXPECT_EQ(pick({-inf, -inf, 0.0f}, TokenFilter{1.0, 0, 1.0, 0.0}, 0.999), 2);         // zero mass never drawn
  // A NaN among the candidates has no mass: 2 (p 0.731) and 1 (0.269) share the draw.
  EXPECT_EQ(pick({std::nanf(""), 1.0f, 2.0f}, TokenFilter{1.0, 0, 1.0, 0.0}, 0.999), 1);
  EXPECT_EQ(pick({std::nanf(""), 1.0f, 2.0f}, TokenFilter{1.0, 0, 1.0, 0.0}, 0.5), 2);
  EXPECT_EQ(pick({}, TokenFilter{}, 0.5), 0);
}

// The sample op's parameter rows, clamped: greedy for a temperature <= 0 or NaN, top_k
// into [1, max] (below 1: max), top_p into (0, 1], min_p and the draw into [0, 1).
TEST(TokenChoice, SampleParamsAreClamped) {
  const float ok[5] = {0.25f, 0.8f, 40.0f, 0.95f, 0.05f};
  SampleRow r = read_sample_params(ok, 1024);
  EXPECT_EQ(r.draw, 0.25);
  EXPECT_EQ(r.filter.temperature, static_cast<double>(0.8f));
  EXPECT_EQ(r.filter.top_k, 40);
  EXPECT_EQ(r.filter.top_p, static_cast<double>(0.95f));
  EXPECT_EQ(r.filter.min_p, static_cast<double>(0.05f));
  const float bad[5] = {1.0f, 0.0f, 0.0f, 0.0f, 1.0f};
  r = read_sample_params(bad, 1024);
  EXPECT_LT(r.draw, 1.0);
  EXPECT_GT(r.draw, 0.999);
  EXPECT_EQ(r.filter.top_k, 1);  // temperature 0: greedy
  EXPECT_GT(r.filter.top_p, 0.0);
  EXPECT_LT(r.filter.min_p, 1.0);
  const float nan = std::nanf("");
  const float worse[5] = {nan, 2.0f, nan, 7.0f, nan};
  r = read_sample_params(worse, 1024);
  EXPECT_EQ(r.draw, 0.0);
  EXPECT_EQ(r.filter.top_k, 1024);
  EXPECT_EQ(r.filter.top_p, 1.0);
  EXPECT_EQ(r.filter.min_p, 0.0);
  const float big_k[5] = {0.5f, 1.0f, 5000.0f, 1.0f, 0.0f};
  EXPECT_EQ(read_sample_params(big_k, 1024).filter.top_k, 1024);
  const float greedy_nan[5] = {0.5f, nan, 40.0f, 1.0f, 0.0f};
  EXPECT_EQ(read_sample_params(greedy_nan, 1024).filter.top_k, 1);
}

}  // namespace
}  // namespace rlx
