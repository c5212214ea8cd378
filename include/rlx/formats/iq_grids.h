// Codebooks of the GGUF i-quant block types (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S,
// IQ1_S, IQ1_M) and the non-linear 4-bit values of IQ4_NL / IQ4_XS. The grids are part of
// the file format: a block stores indices into them. They are kept here in a compact
// form and expanded at compile time:
//   IQ2 grids: 8 values from {8, 25, 43}, 2-bit level codes, value j in bits 2j..2j+1;
//   IQ3_XXS:   4 values from {4, 12, 20, 28, 36, 44, 52, 62}, 3-bit codes;
//   IQ3_S:     4 values from {1, 3, 5, ..., 15}, 3-bit codes;
//   IQ1_S/M:   8 values from {-1, 0, +1}, 2-bit codes.
// An expanded entry holds value j in byte j (little-endian), as the format defines.
#pragma once

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>

#include "rlx/formats/iq_grid_codes.h"

namespace rlx::formats {

namespace iq_codes {
inline constexpr uint16_t kIq2xxsCodes[256] = {RLX_IQ2XXS_CODES};
inline constexpr uint16_t kIq2xsCodes[512] = {RLX_IQ2XS_CODES};
inline constexpr uint16_t kIq2sCodes[1024] = {RLX_IQ2S_CODES};
inline constexpr uint16_t kIq3xxsCodes[256] = {RLX_IQ3XXS_CODES};
inline constexpr uint16_t kIq3sCodes[512] = {RLX_IQ3S_CODES};
inline constexpr uint16_t kIq1sCodes[2048] = {RLX_IQ1S_CODES};
}  // namespace iq_codes

namespace iq_detail {
template <typename T, size_t N, size_t L>
constexpr std::array<T, N> expand(const uint16_t (&codes)[N], const int (&levels)[L], int per_entry, int bits) {
  std::array<T, N> out{};
  for (size_t i = 0; i < N; ++i) {
    T v = 0;
    for (int j = 0; j < per_entry; ++j) {
      const int level = levels[(codes[i] >> (bits * j)) & ((1 << bits) - 1)];
      v |= static_cast<T>(static_cast<uint8_t>(level)) << (8 * j);
    }
    out[i] = v;
  }
  return out;
}
inline constexpr int kIq2Levels[3] = {8, 25, 43};
inline constexpr int kIq3xxsLevels[8] = {4, 12, 20, 28, 36, 44, 52, 62};
inline constexpr int kIq3sLevels[8] = {1, 3, 5, 7, 9, 11, 13, 15};
inline constexpr int kIq1Levels[3] = {-1, 0, 1};
}  // namespace iq_detail

/// IQ2_XXS grid: 256 entries of 8 unsigned magnitudes (byte j = value j).
inline constexpr auto kIq2xxsGrid = iq_detail::expand<uint64_t>(iq_codes::kIq2xxsCodes, iq_detail::kIq2Levels, 8, 2);
/// IQ2_XS grid: 512 entries of 8 magnitudes.
inline constexpr auto kIq2xsGrid = iq_detail::expand<uint64_t>(iq_codes::kIq2xsCodes, iq_detail::kIq2Levels, 8, 2);
/// IQ2_S grid: 1024 entries of 8 magnitudes.
inline constexpr auto kIq2sGrid = iq_detail::expand<uint64_t>(iq_codes::kIq2sCodes, iq_detail::kIq2Levels, 8, 2);
/// IQ3_XXS grid: 256 entries of 4 magnitudes.
inline constexpr auto kIq3xxsGrid =
    iq_detail::expand<uint32_t>(iq_codes::kIq3xxsCodes, iq_detail::kIq3xxsLevels, 4, 3);
/// IQ3_S grid: 512 entries of 4 magnitudes.
inline constexpr auto kIq3sGrid = iq_detail::expand<uint32_t>(iq_codes::kIq3sCodes, iq_detail::kIq3sLevels, 4, 3);
/// IQ1_S / IQ1_M grid: 2048 entries of 8 signed values in {-1, 0, 1} (int8 bytes).
inline constexpr auto kIq1sGrid = iq_detail::expand<uint64_t>(iq_codes::kIq1sCodes, iq_detail::kIq1Levels, 8, 2);

/// IQ4_NL / IQ4_XS: the 16 values a 4-bit index stands for.
inline constexpr int8_t kIq4nlValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

/// IQ1_S / IQ1_M: the shift added to every grid value of a group (its sign is stored).
inline constexpr float kIq1Delta = 0.125f;

/// The sign byte of a 7-bit IQ2 / IQ3 sign index: bit j set = value j negative; bit 7
/// is implied so that the number of negative values in a group of 8 is even.
constexpr uint8_t iq_sign_byte(uint32_t index7) {
  const uint32_t i = index7 & 127u;
  return static_cast<uint8_t>(i | ((static_cast<uint32_t>(std::popcount(i)) & 1u) << 7));
}

}  // namespace rlx::formats
