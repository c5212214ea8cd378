// IEEE binary16 (`f16`) and bfloat16 (`bf16`) storage types with correct
// round-to-nearest-even conversion from f32, including NaN, Inf and subnormals.
#pragma once

#include <cstdint>
#include <cstring>

namespace rlx {

/// Converts f32 to IEEE half bits, rounding to nearest even. NaN stays NaN (quiet).
uint16_t f32_to_f16_bits(float f);
/// Converts IEEE half bits to f32 exactly.
float f16_bits_to_f32(uint16_t h);
/// Converts f32 to bfloat16 bits, rounding to nearest even. NaN stays NaN (quiet).
inline uint16_t f32_to_bf16_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);
  const uint32_t lsb = (u >> 16) & 1u;
  u += 0x7fffu + lsb;
  return static_cast<uint16_t>(u >> 16);
}
/// Converts bfloat16 bits to f32 exactly.
inline float bf16_bits_to_f32(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

/// 16-bit IEEE half-precision value (storage type; arithmetic happens in f32).
struct f16 {
  uint16_t bits = 0;
  f16() = default;
  explicit f16(float f) : bits(f32_to_f16_bits(f)) {}
  static f16 from_bits(uint16_t b) { f16 h; h.bits = b; return h; }
  explicit operator float() const { return f16_bits_to_f32(bits); }
  float to_f32() const { return f16_bits_to_f32(bits); }
};

/// 16-bit brain float value (storage type; arithmetic happens in f32).
struct bf16 {
  uint16_t bits = 0;
  bf16() = default;
  explicit bf16(float f) : bits(f32_to_bf16_bits(f)) {}
  static bf16 from_bits(uint16_t b) { bf16 h; h.bits = b; return h; }
  explicit operator float() const { return bf16_bits_to_f32(bits); }
  float to_f32() const { return bf16_bits_to_f32(bits); }
};

static_assert(sizeof(f16) == 2 && sizeof(bf16) == 2);

}  // namespace rlx
