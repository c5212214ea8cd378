// Block codec round trips on random data: quantize -> dequantize error within a bound
// per format, and dequantize -> quantize -> dequantize stability. Also argument checks
// of the type-dispatched entry points.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "rlx/formats/quant.h"

namespace rlx::formats {
namespace {

std::vector<float> random_values(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(rng);
  return v;
}

std::vector<float> round_trip(GgmlType type, const std::vector<float>& x) {
  const auto n = static_cast<int64_t>(x.size());
  std::vector<uint8_t> packed(static_cast<size_t>(*ggml_bytes_for(type, n)));
  EXPECT_TRUE(quantize_row(type, x.data(), packed.data(), n).ok());
  std::vector<float> y(x.size());
  EXPECT_TRUE(dequantize_row(type, packed.data(), y.data(), n).ok());
  return y;
}

double relative_rmse(const std::vector<float>& a, const std::vector<float>& b) {
  double err = 0, ref = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    err += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    ref += double(a[i]) * a[i];
  }
  return std::sqrt(err / ref);
}

struct Bound {
  GgmlType type;
  double max_relative_rmse;  // on N(0,1) data; measured value is well below
};

class QuantRoundTrip : public ::testing::TestWithParam<Bound> {};

TEST_P(QuantRoundTrip, ErrorWithinFormatBound) {
  const Bound b = GetParam();
  const std::vector<float> x = random_values(4096, 7);
  const std::vector<float> y = round_trip(b.type, x);
  const double err = relative_rmse(x, y);
  EXPECT_LE(err, b.max_relative_rmse) << ggml_type_name(b.type);
  if (b.type != GgmlType::F32) {
    EXPECT_GT(err, 0.0) << ggml_type_name(b.type) << " should lose some precision on random data";
  }
}

TEST_P(QuantRoundTrip, RequantizingDequantizedValuesIsStable) {
  const Bound b = GetParam();
  const std::vector<float> once = round_trip(b.type, random_values(4096, 11));
  const std::vector<float> twice = round_trip(b.type, once);
  // Values already on the format's grid come back (nearly) unchanged: far below one
  // quantization step, i.e. a small fraction of the format's own error bound.
  EXPECT_LE(relative_rmse(once, twice), b.max_relative_rmse / 4) << ggml_type_name(b.type);
  const std::vector<float> thrice = round_trip(b.type, twice);
  EXPECT_LE(relative_rmse(twice, thrice), b.max_relative_rmse / 4) << ggml_type_name(b.type);
}

INSTANTIATE_TEST_SUITE_P(
    AllCodecs, QuantRoundTrip,
    ::testing::Values(Bound{GgmlType::F32, 0.0}, Bound{GgmlType::F16, 1e-3}, Bound{GgmlType::BF16, 5e-3},
                      Bound{GgmlType::Q8_0, 0.01}, Bound{GgmlType::Q8_K, 0.01}, Bound{GgmlType::Q6_K, 0.04},
                      Bound{GgmlType::Q5_0, 0.07}, Bound{GgmlType::Q5_1, 0.07}, Bound{GgmlType::Q5_K, 0.06},
                      Bound{GgmlType::Q4_0, 0.14}, Bound{GgmlType::Q4_1, 0.14}, Bound{GgmlType::Q4_K, 0.12},
                      Bound{GgmlType::Q3_K, 0.25}, Bound{GgmlType::Q2_K, 0.5}),
    [](const ::testing::TestParamInfo<Bound>& info) { return std::string(ggml_type_name(info.param.type)); });

TEST(QuantDispatch, RejectsPartialBlocksAndUnsupportedTypes) {
  std::vector<float> x(40, 1.0f);
  std::vector<uint8_t> packed(256);
  Status s = quantize_row(GgmlType::Q4_0, x.data(), packed.data(), 40);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(s.error().message(), "quantize_row: 40 elements is not a multiple of the Q4_0 block size 32");
  s = dequantize_row(GgmlType::Q8_1, packed.data(), x.data(), 256);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().code(), ErrorCode::kUnsupported);
  EXPECT_EQ(s.error().message(), "dequantize_row: no decoder for type Q8_1");
  s = quantize_row(GgmlType::Q8_1, x.data(), packed.data(), 256);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().message(), "quantize_row: no encoder for type Q8_1");
  EXPECT_TRUE(can_dequantize(GgmlType::Q6_K));
  EXPECT_FALSE(can_quantize(GgmlType::Q8_1));
}

TEST(QuantDispatch, AllZeroBlocksDecodeToZero) {
  for (GgmlType t : {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q8_0, GgmlType::Q2_K,
                     GgmlType::Q3_K, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::Q8_K}) {
    const std::vector<float> y = round_trip(t, std::vector<float>(512, 0.0f));
    for (float v : y) ASSERT_EQ(v, 0.0f) << ggml_type_name(t);
  }
}

TEST(GgmlTypeTable, GeometryAndNames) {
  EXPECT_EQ(ggml_block_bytes(GgmlType::Q4_K), 144);
  EXPECT_EQ(ggml_block_size(GgmlType::Q4_K), 256);
  EXPECT_EQ(ggml_type_from_id(30), GgmlType::BF16);
  EXPECT_FALSE(ggml_type_from_id(4).has_value());
  EXPECT_FALSE(ggml_type_from_id(31).has_value());
  EXPECT_EQ(ggml_type_from_name("q8_0"), GgmlType::Q8_0);
  EXPECT_EQ(ggml_bytes_for(GgmlType::Q8_0, 64), 68);
  EXPECT_FALSE(ggml_bytes_for(GgmlType::Q8_0, 33).has_value());
  EXPECT_FALSE(ggml_bytes_for(GgmlType::F32, int64_t{1} << 62).has_value());
}

}  // namespace
}  // namespace rlx::formats
