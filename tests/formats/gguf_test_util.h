// Test helper: builds raw GGUF byte images field by field, so tests can write both
// valid files of any version and deliberately broken ones.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace rlx::formats::testing {

class RawGguf {
 public:
  /// Starts a file with magic "GGUF" and `version`; v1 uses 32-bit counts and lengths.
  explicit RawGguf(uint32_t version = 3) : version_(version) {
    bytes_ = {'G', 'G', 'U', 'F'};
    u32(version);
  }
  RawGguf& u8(uint8_t v) { return put(v); }
  RawGguf& u32(uint32_t v) { return put(v); }
  RawGguf& u64(uint64_t v) { return put(v); }
  RawGguf& i32(int32_t v) { return put(v); }
  RawGguf& f32(float v) { return put(v); }
  /// A count/length field: u32 in v1, u64 later.
  RawGguf& count(uint64_t v) { return version_ == 1 ? put(static_cast<uint32_t>(v)) : put(v); }
  RawGguf& str(std::string_view s) {
    count(s.size());
    bytes_.insert(bytes_.end(), s.begin(), s.end());
    return *this;
  }
  /// Key + type id (the value follows through the other calls).
  RawGguf& key(std::string_view k, uint32_t type) { return str(k).u32(type); }
  /// Tensor info: name, dims (innermost first), ggml type id, data offset.
  RawGguf& tensor(std::string_view name, const std::vector<uint64_t>& dims, uint32_t type, uint64_t offset) {
    str(name).u32(static_cast<uint32_t>(dims.size()));
    for (uint64_t d : dims) count(d);
    return u32(type).u64(offset);
  }
  RawGguf& pad_to(size_t alignment) {
    bytes_.resize((bytes_.size() + alignment - 1) / alignment * alignment, 0);
    return *this;
  }
  RawGguf& zeros(size_t n) {
    bytes_.resize(bytes_.size() + n, 0);
    return *this;
  }
  size_t size() const { return bytes_.size(); }
  const std::vector<uint8_t>& bytes() const { return bytes_; }

 private:
  template <typename T>
  RawGguf& put(T v) {
    const size_t at = bytes_.size();
    bytes_.resize(at + sizeof v);
    std::memcpy(bytes_.data() + at, &v, sizeof v);
    return *this;
  }
  uint32_t version_;
  std::vector<uint8_t> bytes_;
};

}  // namespace rlx::formats::testing
