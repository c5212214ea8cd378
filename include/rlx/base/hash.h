// Stable (process- and platform-independent) 64-bit hashing for cache keys and
// fingerprints. Never use std::hash for anything that is stored or compared across runs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace rlx {

/// FNV-1a 64 with a final avalanche mix; incremental.
class StableHasher {
 public:
  void bytes(const void* data, size_t n) {
    const auto* p = static_cast<const uint8_t*>(data);
    for (size_t i = 0; i < n; ++i) {
      h_ ^= p[i];
      h_ *= 0x100000001b3ull;
    }
  }
  void str(std::string_view s) {
    u64(s.size());
    bytes(s.data(), s.size());
  }
  void u64(uint64_t v) { bytes(&v, sizeof v); }
  void i64(int64_t v) { bytes(&v, sizeof v); }
  void f64(double v) { bytes(&v, sizeof v); }
  uint64_t digest() const {
    uint64_t x = h_;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
  }

 private:
  uint64_t h_ = 0xcbf29ce484222325ull;
};

/// Checksum of a large byte range (XXH3, 64 bits; tens of GB/s a core), stable across
/// processes and platforms: what files RLX writes and later trusts carry, such as the
/// packed-weight folder's files. Not for short keys (StableHasher).
uint64_t bulk_checksum(const void* data, size_t n);

inline uint64_t stable_hash(std::string_view s) {
  StableHasher h;
  h.str(s);
  return h.digest();
}

}  // namespace rlx
