// quantize_row_weighted: with an importance vector every block type that takes one must
// lower the importance-weighted error against its reference quantizer (what an imatrix
// is for), must not be much worse on plain error when the importance is flat, and
// without one must equal quantize_row byte for byte. Bad importance values are refused.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <vector>

#include "rlx/formats/ggml_type.h"
#include "rlx/formats/quant.h"

namespace rlx::formats {
namespace {

constexpr int64_t kRows = 24;
constexpr int64_t kCols = 512;

const GgmlType kWeighted[] = {GgmlType::Q4_0, GgmlType::Q4_1,   GgmlType::Q5_0,  GgmlType::Q5_1,
                              GgmlType::Q2_K, GgmlType::Q3_K,   GgmlType::Q4_K,  GgmlType::Q5_K,
                              GgmlType::Q6_K, GgmlType::IQ4_NL, GgmlType::IQ4_XS, GgmlType::IQ3_S,
                              GgmlType::IQ3_XXS, GgmlType::IQ2_S, GgmlType::IQ2_XS, GgmlType::IQ2_XXS,
                              GgmlType::IQ1_M, GgmlType::IQ1_S};

// Weights with a heavy-tailed spread, as trained matrices have.
std::vector<float> weights(uint32_t seed) {
  std::mt19937 rng(seed);
  std::student_t_distribution<float> t(4.0f);
  std::vector<float> w(static_cast<size_t>(kRows * kCols));
  for (float& v : w) v = 0.02f * t(rng);
  return w;
}

// An importance per column: a few columns matter far more than the rest (outlier
// features of real activations).
std::vector<float> skewed_importance(uint32_t seed) {
  std::mt19937 rng(seed);
  std::lognormal_distribution<float> spread(0.0f, 1.5f);
  std::vector<float> imp(static_cast<size_t>(kCols));
  for (float& v : imp) v = spread(rng);
  return imp;
}

// Σ importance (x - q)^2 over every row (importance repeats per row); flat when null.
double weighted_error(GgmlType type, const std::vector<float>& x, const std::vector<uint8_t>& packed,
                      const std::vector<float>* importance) {
  std::vector<float> q(x.size());
  EXPECT_TRUE(dequantize_row(type, packed.data(), q.data(), static_cast<int64_t>(q.size())).ok());
  double e = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double d = static_cast<double>(x[i]) - q[i];
    e += (importance ? (*importance)[i % kCols] : 1.0) * d * d;
  }
  return e;
}

std::vector<uint8_t> quantize(GgmlType type, const std::vector<float>& x, const std::vector<float>* importance) {
  const int64_t row_bytes = *ggml_bytes_for(type, kCols);
  std::vector<uint8_t> out(static_cast<size_t>(row_bytes * kRows));
  for (int64_t r = 0; r < kRows; ++r) {
    const Status s = quantize_row_weighted(type, x.data() + r * kCols, out.data() + r * row_bytes, kCols,
                                           importance ? importance->data() : nullptr);
    EXPECT_TRUE(s.ok()) << s.error().to_string();
  }
  return out;
}

TEST(QuantWeighted, ImportanceLowersTheWeightedError) {
  const std::vector<float> x = weights(7), imp = skewed_importance(11);
  for (GgmlType type : kWeighted) {
    SCOPED_TRACE(ggml_type_name(type));
    ASSERT_TRUE(takes_importance(type));
    const double plain = weighted_error(type, x, quantize(type, x, nullptr), &imp);
    const double weighted = weighted_error(type, x, quantize(type, x, &imp), &imp);
    EXPECT_LT(weighted, 0.9 * plain) << "weighted " << weighted << " vs reference " << plain;
    std::printf("%s: importance-weighted error %.3f of the reference quantizer's\n",
                std::string(ggml_type_name(type)).c_str(), weighted / plain);
  }
}

TEST(QuantWeighted, FlatImportanceKeepsThePlainErrorClose) {
  const std::vector<float> x = weights(3);
  const std::vector<float> flat(static_cast<size_t>(kCols), 1.0f);
  for (GgmlType type : kWeighted) {
    SCOPED_TRACE(ggml_type_name(type));
    const double plain = weighted_error(type, x, quantize(type, x, nullptr), nullptr);
    const double weighted = weighted_error(type, x, quantize(type, x, &flat), nullptr);
    EXPECT_LT(weighted, 1.1 * plain) << "flat importance " << weighted << " vs reference " << plain;
  }
}

TEST(QuantWeighted, NoImportanceIsTheReferenceQuantizer) {
  const std::vector<float> x = weights(5), imp = skewed_importance(2);
  for (GgmlType type : {GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::Q8_0, GgmlType::IQ4_XS, GgmlType::TQ2_0}) {
    SCOPED_TRACE(ggml_type_name(type));
    const int64_t bytes = *ggml_bytes_for(type, kCols);
    std::vector<uint8_t> ref(static_cast<size_t>(bytes)), got(ref.size());
    ASSERT_TRUE(quantize_row(type, x.data(), ref.data(), kCols).ok());
    ASSERT_TRUE(quantize_row_weighted(type, x.data(), got.data(), kCols, nullptr).ok());
    EXPECT_EQ(got, ref);
    if (!takes_importance(type)) {  // Q8_0 and the ternary types ignore an importance, as ggml does
      ASSERT_TRUE(quantize_row_weighted(type, x.data(), got.data(), kCols, imp.data()).ok());
      EXPECT_EQ(got, ref);
    }
  }
}

TEST(QuantWeighted, BadImportanceIsAnError) {
  const std::vector<float> x = weights(1);
  std::vector<uint8_t> out(static_cast<size_t>(*ggml_bytes_for(GgmlType::Q4_K, kCols)));
  for (float bad : {-1.0f, std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    std::vector<float> imp(static_cast<size_t>(kCols), 1.0f);
    imp[300] = bad;
    const Status s = quantize_row_weighted(GgmlType::Q4_K, x.data(), out.data(), kCols, imp.data());
    ASSERT_FALSE(s.ok()) << bad;
    EXPECT_NE(s.error().message().find("element 300"), std::string::npos) << s.error().to_string();
  }
  std::vector<float> imp(static_cast<size_t>(kCols), 1.0f);
  EXPECT_FALSE(quantize_row_weighted(GgmlType::Q4_K, x.data(), out.data(), 100, imp.data()).ok());  // not whole blocks
}

}  // namespace
}  // namespace rlx::formats
