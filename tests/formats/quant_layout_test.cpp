// Hand-built blocks with known scales and bits, checking that each decoder reads the
// GGUF bit layout (values worked out by hand in the comments), and the exact rounding
// rules of the reference and activation quantizers.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "rlx/formats/quant.h"

namespace rlx::formats {
namespace {

constexpr uint16_t kHalfOne = 0x3C00;      // f16 1.0
constexpr uint16_t kHalfHalf = 0x3800;     // f16 0.5
constexpr uint16_t kHalfQuarter = 0x3400;  // f16 0.25
constexpr uint16_t kHalfTwo = 0x4000;      // f16 2.0
constexpr uint16_t kHalfMinusOne = 0xBC00; // f16 -1.0

TEST(QuantLayout, Q4_0) {
  BlockQ4_0 b{};
  b.d = kHalfHalf;
  for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  float y[32];
  dequantize_row_q4_0(&b, y, 32);
  EXPECT_EQ(y[0], -4.0f);    // (0 - 8) * 0.5
  EXPECT_EQ(y[15], 3.5f);    // (15 - 8) * 0.5
  EXPECT_EQ(y[16], 3.5f);    // high nibble of qs[0] = 15
  EXPECT_EQ(y[31], -4.0f);   // high nibble of qs[15] = 0
}

TEST(QuantLayout, Q4_1) {
  BlockQ4_1 b{};
  b.d = kHalfQuarter;
  b.m = kHalfMinusOne;
  b.qs[3] = 0xA4;  // low 4, high 10
  float y[32];
  dequantize_row_q4_1(&b, y, 32);
  EXPECT_EQ(y[3], 0.0f);     // 4 * 0.25 - 1
  EXPECT_EQ(y[19], 1.5f);    // 10 * 0.25 - 1
  EXPECT_EQ(y[0], -1.0f);
}

TEST(QuantLayout, Q5_0) {
  BlockQ5_0 b{};
  b.d = kHalfOne;
  b.qs[2] = 0x31;                  // low nibble 1 (element 2), high nibble 3 (element 18)
  const uint32_t qh = (1u << 2) | (1u << 18);  // fifth bit of elements 2 and 18
  std::memcpy(b.qh, &qh, 4);
  float y[32];
  dequantize_row_q5_0(&b, y, 32);
  EXPECT_EQ(y[2], 1.0f);     // (1 | 16) - 16
  EXPECT_EQ(y[18], 3.0f);    // (3 | 16) - 16
  EXPECT_EQ(y[0], -16.0f);   // 0 - 16
}

TEST(QuantLayout, Q5_1) {
  BlockQ5_1 b{};
  b.d = kHalfTwo;
  b.m = kHalfHalf;
  b.qs[31 - 16] = 0xF0;            // element 31 low bits = 15
  const uint32_t qh = 1u << 31;
  std::memcpy(b.qh, &qh, 4);
  float y[32];
  dequantize_row_q5_1(&b, y, 32);
  EXPECT_EQ(y[31], 62.5f);   // 31 * 2 + 0.5
  EXPECT_EQ(y[15], 0.5f);
}

TEST(QuantLayout, Q8_0) {
  BlockQ8_0 b{};
  b.d = kHalfTwo;
  for (int j = 0; j < 32; ++j) b.qs[j] = static_cast<int8_t>(j - 16);
  float y[32];
  dequantize_row_q8_0(&b, y, 32);
  EXPECT_EQ(y[0], -32.0f);
  EXPECT_EQ(y[31], 30.0f);
}

TEST(QuantLayout, Q2_K) {
  BlockQ2_K b{};
  b.d = kHalfOne;
  b.dmin = kHalfHalf;
  b.scales[0] = 0x21;   // sub-block 0: scale 1, min 2
  b.scales[1] = 0x03;   // sub-block 1: scale 3, min 0
  b.scales[2] = 0x12;   // sub-block 2: scale 2, min 1
  b.scales[14] = 0x45;  // sub-block 14: scale 5, min 4
  b.qs[0] = 0xE4;       // 2-bit fields 0,1,2,3 for elements 0, 32, 64, 96
  b.qs[16] = 0x03;      // element 16 = 3
  b.qs[32] = 0xC0;      // element 128+96 = 3
  float y[256];
  dequantize_row_q2_k(&b, y, 256);
  EXPECT_EQ(y[0], -1.0f);    // 1*1*0 - 0.5*2
  EXPECT_EQ(y[16], 9.0f);    // 1*3*3 - 0
  EXPECT_EQ(y[32], 1.5f);    // 1*2*1 - 0.5*1
  EXPECT_EQ(y[224], 13.0f);  // 1*5*3 - 0.5*4
}

TEST(QuantLayout, Q3_K) {
  BlockQ3_K b{};
  b.d = kHalfOne;
  b.scales[0] = 0x01;   // low 4 bits of sub-block 0 scale (sub-block 8: 0)
  b.scales[8] = 0x02;   // high 2 bits of sub-block 0 scale: (1 | 2<<4) - 32 = 1; sub-block 8: -32
  b.qs[0] = 0x02;       // element 0: low bits 2
  b.hmask[0] = 0x11;    // element 0 (bit 0) and element 128 (bit 4) have the high bit set
  b.qs[32] = 0x01;      // element 128: low bits 1
  float y[256];
  dequantize_row_q3_k(&b, y, 256);
  EXPECT_EQ(y[0], 2.0f);      // 1 * 1 * 2
  EXPECT_EQ(y[1], -4.0f);     // high bit clear: 0 - 4
  EXPECT_EQ(y[128], -32.0f);  // -32 * 1
  EXPECT_EQ(y[129], 128.0f);  // -32 * (0 - 4)
}

TEST(QuantLayout, Q4_K) {
  BlockQ4_K b{};
  b.d = kHalfOne;
  b.dmin = kHalfOne;
  b.scales[0] = 0x42;   // sc0 = 2; top bits 01 -> sc4 += 16
  b.scales[4] = 0x83;   // m0 = 3; top bits 10 -> m4 += 32
  b.scales[1] = 5;      // sc1
  b.scales[5] = 1;      // m1
  b.scales[8] = 0x51;   // sc4 low = 1, m4 low = 5 -> sc4 = 17, m4 = 37
  b.qs[0] = 0x7A;       // element 0 = 10, element 32 = 7
  b.qs[64] = 0x03;      // element 128 = 3
  float y[256];
  dequantize_row_q4_k(&b, y, 256);
  EXPECT_EQ(y[0], 17.0f);     // 2*10 - 3
  EXPECT_EQ(y[32], 34.0f);    // 5*7 - 1
  EXPECT_EQ(y[128], 14.0f);   // 17*3 - 37
}

TEST(QuantLayout, Q5_K) {
  BlockQ5_K b{};
  b.d = kHalfOne;
  b.dmin = kHalfOne;
  b.scales[0] = 0x42;
  b.scales[4] = 0x83;
  b.scales[1] = 5;
  b.scales[5] = 1;
  b.scales[8] = 0x51;
  b.qs[0] = 0x7A;
  b.qs[64] = 0x03;
  b.qh[0] = 0x11;       // fifth bit for element 0 (bit 0) and element 128 (bit 4)
  float y[256];
  dequantize_row_q5_k(&b, y, 256);
  EXPECT_EQ(y[0], 49.0f);     // 2*(10+16) - 3
  EXPECT_EQ(y[32], 34.0f);    // 5*7 - 1 (bit 1 clear)
  EXPECT_EQ(y[128], 286.0f);  // 17*(3+16) - 37
}

TEST(QuantLayout, Q6_K) {
  BlockQ6_K b{};
  b.d = kHalfHalf;
  b.scales[0] = 2;
  b.scales[2] = -1;
  b.scales[8] = 4;
  b.ql[0] = 0x05;       // element 0 low bits 5; element 64 low bits 0
  b.qh[0] = 0x02;       // element 0 high bits 2 -> 5 | 32 = 37
  b.ql[64] = 0x0F;      // element 128 low bits 15
  b.qh[32] = 0x03;      // element 128 high bits 3 -> 63
  float y[256];
  dequantize_row_q6_k(&b, y, 256);
  EXPECT_EQ(y[0], 5.0f);      // 0.5*2*(37-32)
  EXPECT_EQ(y[32], 16.0f);    // 0.5*(-1)*(0-32)
  EXPECT_EQ(y[128], 62.0f);   // 0.5*4*(63-32)
}

TEST(QuantLayout, Q8_K) {
  BlockQ8_K b{};
  b.d = 0.25f;
  b.qs[5] = -4;
  float y[256];
  dequantize_row_q8_k(&b, y, 256);
  EXPECT_EQ(y[5], -1.0f);
  EXPECT_EQ(y[6], 0.0f);
}

TEST(QuantRounding, Q8_0ReferenceRoundsHalfAwayFromZero) {
  std::vector<float> x(32, 0.0f);
  x[0] = 127.0f;  // d = 1, 1/d = 1
  x[1] = 2.5f;
  x[2] = -2.5f;
  BlockQ8_0 b;
  quantize_row_q8_0(x.data(), &b, 32);
  EXPECT_EQ(b.d, kHalfOne);
  EXPECT_EQ(b.qs[0], 127);
  EXPECT_EQ(b.qs[1], 3);
  EXPECT_EQ(b.qs[2], -3);
}

TEST(QuantRounding, Q8_0ActivationRoundsHalfToEven) {
  std::vector<float> x(32, 0.0f);
  x[0] = -127.0f;
  x[1] = 2.5f;
  x[2] = 3.5f;
  BlockQ8_0 b;
  quantize_activation_q8_0(x.data(), &b, 32);
  EXPECT_EQ(b.d, kHalfOne);  // fp16(127 / 127)
  EXPECT_EQ(b.qs[0], -127);
  EXPECT_EQ(b.qs[1], 2);
  EXPECT_EQ(b.qs[2], 4);
}

TEST(QuantRounding, Q8_KUsesSignedMaxAndBsums) {
  std::vector<float> x(256, 0.0f);
  x[0] = 127.0f;   // max = +127 -> iscale = -1, d = -1
  x[1] = 2.5f;     // nearest_int(-2.5) = -2 (ties to even)
  x[17] = -3.0f;   // -> 3
  BlockQ8_K b;
  quantize_activation_q8_k(x.data(), &b, 256);
  EXPECT_EQ(b.d, -1.0f);
  EXPECT_EQ(b.qs[0], -127);
  EXPECT_EQ(b.qs[1], -2);
  EXPECT_EQ(b.qs[17], 3);
  EXPECT_EQ(b.bsums[0], -129);
  EXPECT_EQ(b.bsums[1], 3);
  float y[256];
  dequantize_row_q8_k(&b, y, 256);
  EXPECT_EQ(y[0], 127.0f);
  EXPECT_EQ(y[1], 2.0f);
}

}  // namespace
}  // namespace rlx::formats
