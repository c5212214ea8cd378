// The i-quant and ternary block codecs against a reference written here from the
// format description, reading each field from the raw block bytes by offset (not
// through the block structs): bit-for-bit equal on random blocks. Spot checks of the
// codebooks, the sign rule, and encoder round trips.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "rlx/base/half.h"
#include "rlx/formats/iq_grids.h"
#include "rlx/formats/quant.h"

namespace rlx::formats {
namespace {

uint16_t u16_at(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
uint32_t u32_at(const uint8_t* p) { return u16_at(p) | (static_cast<uint32_t>(u16_at(p + 2)) << 16); }
float f16_at(const uint8_t* p) { return f16_bits_to_f32(u16_at(p)); }
// Magnitude j of a codebook entry; the sign of value j from a sign byte.
int level(uint64_t entry, int j) { return static_cast<int>((entry >> (8 * j)) & 0xFF); }
float sign(uint8_t signs, int j) { return (signs & (1u << j)) ? -1.0f : 1.0f; }
uint8_t sign_byte7(uint32_t seven) {
  seven &= 127;
  int ones = 0;
  for (int b = 0; b < 7; ++b) ones += (seven >> b) & 1;
  return static_cast<uint8_t>(seven | ((ones & 1) << 7));
}

// One 256-value super-block (or a 32-value block for IQ4_NL) of `type` at `p`.
std::vector<float> reference_block(GgmlType type, const uint8_t* p) {
  std::vector<float> y;
  y.reserve(256);
  switch (type) {
    case GgmlType::IQ4_NL: {  // d f16 @0, 16 bytes of nibbles @2
      const float d = f16_at(p);
      std::vector<float> lo, hi;
      for (int j = 0; j < 16; ++j) {
        lo.push_back(d * kIq4nlValues[p[2 + j] & 15]);
        hi.push_back(d * kIq4nlValues[p[2 + j] >> 4]);
      }
      y = lo;
      y.insert(y.end(), hi.begin(), hi.end());
      break;
    }
    case GgmlType::IQ4_XS: {  // d @0, scales_h u16 @2, scales_l[4] @4, qs[128] @8
      const float d = f16_at(p);
      const uint16_t sh = u16_at(p + 2);
      for (int g = 0; g < 8; ++g) {
        const int low = g % 2 == 0 ? (p[4 + g / 2] & 15) : (p[4 + g / 2] >> 4);
        const int ls = low + 16 * ((sh >> (2 * g)) & 3);
        const float dl = d * static_cast<float>(ls - 32);
        for (int j = 0; j < 16; ++j) y.push_back(dl * kIq4nlValues[p[8 + 16 * g + j] & 15]);
        for (int j = 0; j < 16; ++j) y.push_back(dl * kIq4nlValues[p[8 + 16 * g + j] >> 4]);
      }
      break;
    }
    case GgmlType::TQ2_0: {  // qs[64] @0, d @64
      const float d = f16_at(p + 64);
      for (int e = 0; e < 256; ++e) {
        const int byte = 32 * (e / 128) + e % 32, shift = 2 * ((e % 128) / 32);
        y.push_back(static_cast<float>(((p[byte] >> shift) & 3) - 1) * d);
      }
      break;
    }
    case GgmlType::TQ1_0: {  // qs[48] @0, qh[4] @48, d @52
      const float d = f16_at(p + 52);
      // The 5 digits of a byte b: v = floor(b * 243 / 256) read in base 3 would be
      // off by the rounding; the format defines digit n as floor(3 * ((b * 3^n) mod 256) / 256).
      auto digit = [](uint8_t b, int n) {
        int pw = 1;
        for (int i = 0; i < n; ++i) pw *= 3;
        return (3 * ((b * pw) % 256)) / 256;
      };
      for (int e = 0; e < 256; ++e) {
        int t;
        if (e < 160)
          t = digit(p[e % 32], e / 32);
        else if (e < 240)
          t = digit(p[32 + (e - 160) % 16], (e - 160) / 16);
        else
          t = digit(p[48 + (e - 240) % 4], (e - 240) / 4);
        y.push_back(static_cast<float>(t - 1) * d);
      }
      break;
    }
    case GgmlType::IQ2_XXS: {  // d @0, then per group of 32: 4 index bytes, u32 (signs, scale)
      const float d = f16_at(p);
      for (int g = 0; g < 8; ++g) {
        const uint8_t* grp = p + 2 + 8 * g;
        const uint32_t meta = u32_at(grp + 4);
        const float db = d * (0.5f + static_cast<float>(meta >> 28)) * 0.25f;
        for (int r = 0; r < 4; ++r) {
          const uint64_t e = kIq2xxsGrid[grp[r]];
          const uint8_t s = sign_byte7(meta >> (7 * r));
          for (int j = 0; j < 8; ++j) y.push_back(db * static_cast<float>(level(e, j)) * sign(s, j));
        }
      }
      break;
    }
    case GgmlType::IQ2_XS: {  // d @0, u16 qs[32] @2, scales[8] @66
      const float d = f16_at(p);
      for (int r = 0; r < 32; ++r) {
        const uint16_t q = u16_at(p + 2 + 2 * r);
        const int nib = (r % 4) < 2 ? (p[66 + r / 4] & 15) : (p[66 + r / 4] >> 4);
        const float db = d * (0.5f + static_cast<float>(nib)) * 0.25f;
        const uint8_t s = sign_byte7(q >> 9);
        for (int j = 0; j < 8; ++j) y.push_back(db * static_cast<float>(level(kIq2xsGrid[q & 511], j)) * sign(s, j));
      }
      break;
    }
    case GgmlType::IQ2_S: {  // d @0, qs[32] @2, signs[32] @34, qh[8] @66, scales[8] @74
      const float d = f16_at(p);
      for (int r = 0; r < 32; ++r) {
        const int idx = p[2 + r] + 256 * ((p[66 + r / 4] >> (2 * (r % 4))) & 3);
        const int nib = (r % 4) < 2 ? (p[74 + r / 4] & 15) : (p[74 + r / 4] >> 4);
        const float db = d * (0.5f + static_cast<float>(nib)) * 0.25f;
        for (int j = 0; j < 8; ++j) y.push_back(db * static_cast<float>(level(kIq2sGrid[idx], j)) * sign(p[34 + r], j));
      }
      break;
    }
    case GgmlType::IQ3_XXS: {  // d @0, qs[64] @2 (4 values each), u32 per group @66
      const float d = f16_at(p);
      for (int r = 0; r < 32; ++r) {
        const uint32_t meta = u32_at(p + 66 + 4 * (r / 4));
        const float db = d * (0.5f + static_cast<float>(meta >> 28)) * 0.5f;
        const uint8_t s = sign_byte7(meta >> (7 * (r % 4)));
        for (int j = 0; j < 8; ++j) {
          const uint32_t e = kIq3xxsGrid[p[2 + 2 * r + j / 4]];
          y.push_back(db * static_cast<float>(level(e, j % 4)) * sign(s, j));
        }
      }
      break;
    }
    case GgmlType::IQ3_S: {  // d @0, qs[64] @2, qh[8] @66, signs[32] @74, scales[4] @106
      const float d = f16_at(p);
      for (int r = 0; r < 32; ++r) {
        const int g = r / 4;
        const int nib = g % 2 == 0 ? (p[106 + g / 2] & 15) : (p[106 + g / 2] >> 4);
        const float db = d * static_cast<float>(1 + 2 * nib);
        for (int j = 0; j < 8; ++j) {
          const int q = 2 * r + j / 4;  // index byte within the block, 0..63
          const int idx = p[2 + q] + 256 * ((p[66 + q / 8] >> (q % 8)) & 1);
          y.push_back(db * static_cast<float>(level(kIq3sGrid[idx], j % 4)) * sign(p[74 + r], j));
        }
      }
      break;
    }
    case GgmlType::IQ1_S: {  // d @0, qs[32] @2, u16 qh[8] @34
      const float d = f16_at(p);
      for (int r = 0; r < 32; ++r) {
        const uint16_t qh = u16_at(p + 34 + 2 * (r / 4));
        const int idx = p[2 + r] + 256 * ((qh >> (3 * (r % 4))) & 7);
        const float dl = d * static_cast<float>(2 * ((qh >> 12) & 7) + 1);
        const float delta = (qh >> 15) ? -0.125f : 0.125f;
        for (int j = 0; j < 8; ++j)
          y.push_back(dl * (static_cast<float>(static_cast<int8_t>(level(kIq1sGrid[idx], j))) + delta));
      }
      break;
    }
    case GgmlType::IQ1_M: {  // qs[32] @0, qh[16] @32, scales[8] @48 (4 u16)
      uint16_t w[4];
      for (int i = 0; i < 4; ++i) w[i] = u16_at(p + 48 + 2 * i);
      const uint16_t dbits = static_cast<uint16_t>(((w[0] >> 12) & 15) | (((w[1] >> 12) & 15) << 4) |
                                                   (((w[2] >> 12) & 15) << 8) | (((w[3] >> 12) & 15) << 12));
      const float d = f16_bits_to_f32(dbits);
      for (int r = 0; r < 32; ++r) {
        const uint8_t h = static_cast<uint8_t>(p[32 + r / 2] >> (4 * (r % 2)));
        const int idx = p[r] + 256 * (h & 7);
        const int half = r / 2;  // scale per 16 values: 3 bits at 3 * (half % 4) of word half / 4
        const int s = (w[half / 4] >> (3 * (half % 4))) & 7;
        const float dl = d * static_cast<float>(2 * s + 1);
        const float delta = (h & 8) ? -0.125f : 0.125f;
        for (int j = 0; j < 8; ++j)
          y.push_back(dl * (static_cast<float>(static_cast<int8_t>(level(kIq1sGrid[idx], j))) + delta));
      }
      break;
    }
    default:
      ADD_FAILURE() << "no reference for " << ggml_type_name(type);
  }
  return y;
}

const GgmlType kTypes[] = {GgmlType::IQ4_NL,  GgmlType::IQ4_XS, GgmlType::TQ1_0, GgmlType::TQ2_0,
                           GgmlType::IQ2_XXS, GgmlType::IQ2_XS, GgmlType::IQ2_S, GgmlType::IQ3_XXS,
                           GgmlType::IQ3_S,   GgmlType::IQ1_S,  GgmlType::IQ1_M};

// Random block bytes with finite f16 scales (exponent bits kept below the maximum).
std::vector<uint8_t> random_blocks(GgmlType type, int blocks, std::mt19937& rng) {
  const size_t bytes = static_cast<size_t>(ggml_block_bytes(type));
  std::vector<uint8_t> data(bytes * static_cast<size_t>(blocks));
  for (uint8_t& b : data) b = static_cast<uint8_t>(rng());
  auto tame = [&](size_t at) { data[at + 1] = static_cast<uint8_t>((data[at + 1] & 0x83) | 0x30); };
  for (int b = 0; b < blocks; ++b) {
    const size_t at = bytes * static_cast<size_t>(b);
    switch (type) {
      case GgmlType::TQ1_0:
        tame(at + 52);
        break;
      case GgmlType::TQ2_0:
        tame(at + 64);
        break;
      case GgmlType::IQ1_M: {  // the f16 scale's high byte is the top nibbles of words 2, 3
        data[at + 48 + 5] = static_cast<uint8_t>((data[at + 48 + 5] & 0x0F) | 0x30);
        data[at + 48 + 7] = static_cast<uint8_t>((data[at + 48 + 7] & 0x0F) | 0x30);
        break;
      }
      default:
        tame(at);
        break;
    }
  }
  return data;
}

TEST(IQuants, DecodersMatchTheFormatDescriptionBitForBit) {
  std::mt19937 rng(2024);
  for (GgmlType type : kTypes) {
    const int blocks = 6;
    const std::vector<uint8_t> data = random_blocks(type, blocks, rng);
    const int64_t n = ggml_block_size(type) * blocks;
    std::vector<float> got(static_cast<size_t>(n));
    ASSERT_TRUE(dequantize_row(type, data.data(), got.data(), n).ok()) << ggml_type_name(type);
    for (int b = 0; b < blocks; ++b) {
      const std::vector<float> want =
          reference_block(type, data.data() + static_cast<size_t>(ggml_block_bytes(type)) * b);
      ASSERT_EQ(static_cast<int64_t>(want.size()), ggml_block_size(type));
      for (size_t i = 0; i < want.size(); ++i) {
        const float g = got[static_cast<size_t>(b * ggml_block_size(type)) + i];
        uint32_t gb, wb;
        std::memcpy(&gb, &g, 4);
        std::memcpy(&wb, &want[i], 4);
        ASSERT_EQ(gb, wb) << ggml_type_name(type) << " block " << b << " value " << i << ": " << g << " vs " << want[i];
      }
    }
  }
}

TEST(IQuants, CodebookSpotChecks) {
  // Entries as the format lists them.
  EXPECT_EQ(kIq2xxsGrid[0], 0x0808080808080808ULL);
  EXPECT_EQ(kIq2xxsGrid[1], 0x080808080808082bULL);
  EXPECT_EQ(kIq2xxsGrid[2], 0x0808080808081919ULL);
  EXPECT_EQ(kIq1sGrid[0], 0xffffffffffffffffULL);
  for (uint64_t e : kIq1sGrid)
    for (int j = 0; j < 8; ++j) {
      const int v = static_cast<int8_t>(level(e, j));
      ASSERT_TRUE(v >= -1 && v <= 1);
    }
  // Sorted and distinct: the grids are sets listed in increasing order.
  for (size_t i = 1; i < kIq2sGrid.size(); ++i) ASSERT_LT(kIq2sGrid[i - 1], kIq2sGrid[i]);
  for (size_t i = 1; i < kIq3sGrid.size(); ++i) ASSERT_LT(kIq3sGrid[i - 1], kIq3sGrid[i]);
  for (size_t i = 1; i < kIq3xxsGrid.size(); ++i) ASSERT_LT(kIq3xxsGrid[i - 1], kIq3xxsGrid[i]);
  // The implied eighth sign keeps an even count of negatives.
  for (uint32_t i = 0; i < 128; ++i) {
    EXPECT_EQ(iq_sign_byte(i), sign_byte7(i));
    EXPECT_EQ(__builtin_popcount(iq_sign_byte(i)) % 2, 0);
  }
}

// ||x - decode(encode(x))|| / ||x|| for one row of `type`.
double round_trip_rmse(GgmlType type, const std::vector<float>& x) {
  std::vector<uint8_t> packed(static_cast<size_t>(*ggml_bytes_for(type, static_cast<int64_t>(x.size()))));
  EXPECT_TRUE(quantize_row(type, x.data(), packed.data(), static_cast<int64_t>(x.size())).ok());
  std::vector<float> out(x.size());
  EXPECT_TRUE(dequantize_row(type, packed.data(), out.data(), static_cast<int64_t>(x.size())).ok());
  double e = 0, r = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    e += (x[i] - out[i]) * (x[i] - out[i]);
    r += x[i] * x[i];
  }
  return std::sqrt(e / r);
}

TEST(IQuants, EncodersRoundTrip) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(1024);
  for (float& v : x) v = normal(rng);
  auto rmse = [](GgmlType t, const std::vector<float>& in) { return round_trip_rmse(t, in); };
  // 4.5 / 4.25 bits per value on Gaussian data: about Q4_0's error or better.
  EXPECT_LT(rmse(GgmlType::IQ4_NL, x), 0.11);
  EXPECT_LT(rmse(GgmlType::IQ4_XS, x), 0.11);
  // Ternary data is represented exactly (scale = the block's amax, a power of two here).
  std::vector<float> tern(1024);
  for (float& v : tern) v = 0.5f * static_cast<float>(static_cast<int>(rng() % 3) - 1);
  for (size_t b = 0; b < tern.size(); b += 256) tern[b] = 0.5f;
  EXPECT_EQ(rmse(GgmlType::TQ1_0, tern), 0.0);
  EXPECT_EQ(rmse(GgmlType::TQ2_0, tern), 0.0);
  // All-zero blocks stay zero.
  const std::vector<float> zeros(256, 0.0f);
  for (GgmlType t : {GgmlType::IQ4_NL, GgmlType::IQ4_XS, GgmlType::TQ1_0, GgmlType::TQ2_0}) {
    std::vector<uint8_t> packed(static_cast<size_t>(*ggml_bytes_for(t, 256)));
    ASSERT_TRUE(quantize_row(t, zeros.data(), packed.data(), 256).ok());
    std::vector<float> out(256, 1.0f);
    ASSERT_TRUE(dequantize_row(t, packed.data(), out.data(), 256).ok());
    for (float v : out) ASSERT_EQ(std::fabs(v), 0.0f) << ggml_type_name(t);
  }
}

// The codebook encoders invert the decoder on values the format holds: blocks of random
// entries, signs, shifts and group scales (one group at the largest scale, the
// super-block scale a power of two) decode to values that encode back to the same values
// -- exactly when each group reaches its codebook's largest magnitude (then a group's
// scale is what the fit recovers), which most random blocks do.
TEST(IQuants, CodebookEncodersInvertTheDecoder) {
  std::mt19937 rng(11);
  for (GgmlType t : {GgmlType::IQ3_S, GgmlType::IQ3_XXS, GgmlType::IQ2_S, GgmlType::IQ2_XS, GgmlType::IQ2_XXS,
                     GgmlType::IQ1_M, GgmlType::IQ1_S}) {
    SCOPED_TRACE(ggml_type_name(t));
      int exact = 0;
    for (int attempt = 0; attempt < 20; ++attempt) {
      std::vector<uint8_t> block = random_blocks(t, 1, rng);
      // A power-of-two super-block scale (exact in f16), and the largest group scale used.
      const uint16_t d = 0x2C00;  // 2^-4
      switch (t) {
        case GgmlType::IQ3_S: std::memcpy(block.data(), &d, 2); block[106] |= 0x0F; break;          // group 0: s = 15
        case GgmlType::IQ3_XXS: std::memcpy(block.data(), &d, 2); block[2 + 64 + 3] |= 0xF0; break;  // group 0 meta: s = 15
        case GgmlType::IQ2_S: std::memcpy(block.data(), &d, 2); block[74] |= 0x0F; break;
        case GgmlType::IQ2_XS: std::memcpy(block.data(), &d, 2); block[66] |= 0x0F; break;
        case GgmlType::IQ2_XXS: std::memcpy(block.data(), &d, 2); block[2 + 7] |= 0xF0; break;
        case GgmlType::IQ1_S: std::memcpy(block.data(), &d, 2); block[34 + 1] |= 0x70; break;  // qh[0] bits 12..14
        case GgmlType::IQ1_M: {  // d in the top nibbles of the four scale words; group 0's first scale 7
          for (int k = 0; k < 4; ++k) block[48 + 2 * k + 1] = static_cast<uint8_t>((block[48 + 2 * k + 1] & 0x0F) | (((d >> (4 * k)) & 0xF) << 4));
          block[48] |= 0x07;
          break;
        }
        default: break;
      }
      std::vector<float> values(256);
      ASSERT_TRUE(dequantize_row(t, block.data(), values.data(), 256).ok());
      std::vector<uint8_t> again(block.size());
      ASSERT_TRUE(quantize_row(t, values.data(), again.data(), 256).ok());
      std::vector<float> back(256);
      ASSERT_TRUE(dequantize_row(t, again.data(), back.data(), 256).ok());
      int mismatches = 0;
      double e = 0, r = 0;
      for (size_t i = 0; i < 256; ++i) {
        mismatches += back[i] != values[i];
        e += (back[i] - values[i]) * (back[i] - values[i]);
        r += values[i] * values[i];
      }
      exact += mismatches == 0;
      // A group without its codebook's largest magnitude may settle on another scale:
      // then still close.
      EXPECT_LT(std::sqrt(e / r), 0.05) << "block " << attempt << ": " << mismatches << " of 256 values differ";
    }
    EXPECT_GE(exact, 10) << "of 20 blocks";
  }
}

// Quality on Gaussian data: error falls with the bits per value, and every type beats a
// bound well above its measured error. All-zero blocks stay zero.
TEST(IQuants, CodebookEncodersOnGaussianData) {
  std::mt19937 rng(6);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(2048);
  for (float& v : x) v = normal(rng);
  auto rmse = [&](GgmlType t) { return round_trip_rmse(t, x); };
  // Bounds about 10 % above what this encoder measured.
  const std::pair<GgmlType, double> bounds[] = {{GgmlType::IQ3_S, 0.20},  {GgmlType::IQ3_XXS, 0.28},
                                                {GgmlType::IQ2_S, 0.36},  {GgmlType::IQ2_XS, 0.43},
                                                {GgmlType::IQ2_XXS, 0.49}, {GgmlType::IQ1_M, 0.53},
                                                {GgmlType::IQ1_S, 0.58}};
  double previous = 0;
  for (const auto& [t, bound] : bounds) {
    const double e = rmse(t);
    std::printf("%s: relative RMSE %.4f on Gaussian data\n", std::string(ggml_type_name(t)).c_str(), e);
    EXPECT_LT(e, bound) << ggml_type_name(t);
    EXPECT_GE(e, previous * 0.97) << ggml_type_name(t) << " should not beat a type of more bits";
    previous = e;
  }
  const std::vector<float> zeros(256, 0.0f);
  for (const auto& [t, bound] : bounds) {
    std::vector<uint8_t> packed(static_cast<size_t>(*ggml_bytes_for(t, 256)));
    ASSERT_TRUE(quantize_row(t, zeros.data(), packed.data(), 256).ok());
    std::vector<float> out(256, 1.0f);
    ASSERT_TRUE(dequantize_row(t, packed.data(), out.data(), 256).ok());
    for (float v : out) ASSERT_EQ(std::fabs(v), 0.0f) << ggml_type_name(t);
  }
}

}  // namespace
}  // namespace rlx::formats
