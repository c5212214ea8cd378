// f16/bf16 conversion: every f16 bit pattern against an independent reference
// (long-double arithmetic rounding), plus NaN/Inf/subnormal edge cases.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "rlx/base/half.h"

namespace rlx {
namespace {

// Reference: value of an f16 bit pattern computed with ldexp (no bit tricks).
double ref_f16_value(uint16_t h) {
  const int sign = (h >> 15) ? -1 : 1;
  const int exp = (h >> 10) & 0x1f;
  const int mant = h & 0x3ff;
  if (exp == 0) return sign * std::ldexp(static_cast<double>(mant), -24);
  if (exp == 31) return mant ? std::numeric_limits<double>::quiet_NaN() : sign * INFINITY;
  return sign * std::ldexp(1024.0 + mant, exp - 25);
}

// Reference rounding: pick the nearest f16 by scanning neighbours, ties to even.
uint16_t ref_f32_to_f16(float f) {
  if (std::isnan(f)) return 0x7e00;
  const double x = f;
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  const double ax = std::fabs(x);
  if (ax >= 65520.0) return sign | 0x7c00;
  // Binary search over positive finite patterns 0..0x7bff (monotonic).
  uint16_t lo = 0, hi = 0x7bff;
  while (lo < hi) {
    const uint16_t mid = static_cast<uint16_t>((lo + hi + 1) / 2);
    if (ref_f16_value(mid) <= ax) lo = mid; else hi = static_cast<uint16_t>(mid - 1);
  }
  uint16_t best = lo;
  if (lo < 0x7bff || ax > ref_f16_value(0x7bff)) {
    const double dl = ax - ref_f16_value(lo);
    const double dh = (lo == 0x7bff ? 65536.0 : ref_f16_value(static_cast<uint16_t>(lo + 1))) - ax;
    if (dh < dl || (dh == dl && (lo & 1))) best = static_cast<uint16_t>(lo + 1);
  }
  if (best > 0x7bff) return sign | 0x7c00;
  return sign | best;
}

TEST(Half, EveryF16PatternToF32) {
  for (uint32_t b = 0; b <= 0xffff; ++b) {
    const auto h = static_cast<uint16_t>(b);
    const float f = f16_bits_to_f32(h);
    const double ref = ref_f16_value(h);
    if (std::isnan(ref)) {
      EXPECT_TRUE(std::isnan(f)) << std::hex << b;
    } else {
      EXPECT_EQ(static_cast<double>(f), ref) << std::hex << b;
      EXPECT_EQ(std::signbit(f), (b & 0x8000) != 0) << std::hex << b;
    }
  }
}

TEST(Half, EveryF16PatternRoundTrips) {
  for (uint32_t b = 0; b <= 0xffff; ++b) {
    const auto h = static_cast<uint16_t>(b);
    const float f = f16_bits_to_f32(h);
    if (std::isnan(f)) {
      const uint16_t back = f32_to_f16_bits(f);
      EXPECT_EQ(back & 0x7c00, 0x7c00);
      EXPECT_NE(back & 0x3ff, 0);
      continue;
    }
    EXPECT_EQ(f32_to_f16_bits(f), h) << std::hex << b;
  }
}

TEST(Half, MidpointsRoundToEven) {
  // For every pair of adjacent finite f16 values, the f32 midpoint (exact in f32)
  // must round to the even one, and nudges either side to the nearer one.
  for (uint32_t b = 0; b < 0x7bff; ++b) {
    const float a = f16_bits_to_f32(static_cast<uint16_t>(b));
    const float c = f16_bits_to_f32(static_cast<uint16_t>(b + 1));
    const float mid = static_cast<float>((static_cast<double>(a) + c) / 2);
    const uint16_t even = (b & 1) ? static_cast<uint16_t>(b + 1) : static_cast<uint16_t>(b);
    ASSERT_EQ(f32_to_f16_bits(mid), even) << std::hex << b;
    ASSERT_EQ(f32_to_f16_bits(std::nextafter(mid, 0.0f)), b) << std::hex << b;
    ASSERT_EQ(f32_to_f16_bits(std::nextafter(mid, 1e9f)), b + 1) << std::hex << b;
    ASSERT_EQ(f32_to_f16_bits(-mid), 0x8000 | even) << std::hex << b;
  }
}

TEST(Half, RandomF32AgainstReference) {
  std::mt19937 rng(12345);
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < 200000; ++i) {
    uint32_t u = bits(rng);
    // Focus on the f16 range: exponents 100..150.
    u = (u & 0x807fffffu) | ((100u + (u >> 23) % 51u) << 23);
    float f;
    std::memcpy(&f, &u, 4);
    ASSERT_EQ(f32_to_f16_bits(f), ref_f32_to_f16(f)) << f;
  }
}

TEST(Half, SpecialValues) {
  EXPECT_EQ(f32_to_f16_bits(INFINITY), 0x7c00);
  EXPECT_EQ(f32_to_f16_bits(-INFINITY), 0xfc00);
  EXPECT_EQ(f32_to_f16_bits(65504.0f), 0x7bff);
  EXPECT_EQ(f32_to_f16_bits(65519.99f), 0x7bff);
  EXPECT_EQ(f32_to_f16_bits(65520.0f), 0x7c00);  // ties to even -> Inf
  EXPECT_EQ(f32_to_f16_bits(1e-8f), 0x0000);     // below half the smallest subnormal
  EXPECT_EQ(f32_to_f16_bits(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(f32_to_f16_bits(std::ldexp(1.0f, -25)), 0x0000);  // tie -> even (0)
  EXPECT_EQ(f32_to_f16_bits(std::ldexp(1.5f, -25)), 0x0001);
  EXPECT_EQ(f32_to_f16_bits(-0.0f), 0x8000);
  EXPECT_TRUE(std::isnan(f16_bits_to_f32(f32_to_f16_bits(NAN))));
}

TEST(BFloat16, RoundToNearestEven) {
  EXPECT_EQ(f32_to_bf16_bits(1.0f), 0x3f80);
  // 1 + 2^-8 is exactly halfway between bf16 1.0 and 1.0078125: ties to even (1.0).
  EXPECT_EQ(f32_to_bf16_bits(1.00390625f), 0x3f80);
  // 1.0078125 + 2^-8 is halfway, odd below -> rounds up.
  EXPECT_EQ(f32_to_bf16_bits(1.01171875f), 0x3f82);
  EXPECT_EQ(f32_to_bf16_bits(INFINITY), 0x7f80);
  EXPECT_TRUE(std::isnan(bf16_bits_to_f32(f32_to_bf16_bits(NAN))));
  // Largest finite f32 rounds to Inf in bf16 (beyond the largest bf16 + half ulp).
  EXPECT_EQ(f32_to_bf16_bits(std::numeric_limits<float>::max()), 0x7f80);
  for (uint32_t b = 0; b <= 0xffff; ++b) {
    const float f = bf16_bits_to_f32(static_cast<uint16_t>(b));
    if (!std::isnan(f)) {
      ASSERT_EQ(f32_to_bf16_bits(f), b);
    }
  }
}

}  // namespace
}  // namespace rlx
