// GGUF v3 writer: metadata of every value type (nested arrays included) and tensors
// of any GgmlType, laid out with the file's alignment and zero padding. Used by
// tests, `rlx quantize` and `rlx synth`.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "rlx/base/status.h"
#include "rlx/formats/ggml_type.h"
#include "rlx/formats/gguf.h"

namespace rlx::formats {

/// An owned metadata value for writing (GgufValue, by contrast, views a parsed file).
struct GgufMetaValue {
  GgufValueType type = GgufValueType::kU8;
  uint64_t bits = 0;                 ///< scalar payload: integer bits, bool 0/1, or the float's bits
  std::string str;                   ///< kString
  GgufValueType elem_type = GgufValueType::kU8;  ///< kArray: element type
  std::vector<GgufMetaValue> items;  ///< kArray: elements (all of type elem_type)

  static GgufMetaValue u8(uint8_t v);
  static GgufMetaValue i8(int8_t v);
  static GgufMetaValue u16(uint16_t v);
  static GgufMetaValue i16(int16_t v);
  static GgufMetaValue u32(uint32_t v);
  static GgufMetaValue i32(int32_t v);
  static GgufMetaValue u64(uint64_t v);
  static GgufMetaValue i64(int64_t v);
  static GgufMetaValue f32(float v);
  static GgufMetaValue f64(double v);
  static GgufMetaValue boolean(bool v);
  static GgufMetaValue string(std::string v);
  /// An array; every item must have type `elem_type` (checked when written).
  static GgufMetaValue array(GgufValueType elem_type, std::vector<GgufMetaValue> items);
};

/// Collects metadata and tensors, then serializes a GGUF v3 file.
/// Keys and tensor names must be unique and non-empty; add_* report violations.
class GgufWriter {
 public:
  /// Alignment of the data section and of every tensor (power of two, default 32).
  /// A value other than 32 is also recorded as `general.alignment`.
  Status set_alignment(uint32_t alignment);

  /// Adds metadata `key` = `value` (in insertion order). kInvalidArgument on a duplicate
  /// or empty key, or an array whose items do not match its element type.
  Status add(std::string key, GgufMetaValue value);
  Status add_string(std::string key, std::string value) { return add(std::move(key), GgufMetaValue::string(std::move(value))); }
  Status add_u32(std::string key, uint32_t v) { return add(std::move(key), GgufMetaValue::u32(v)); }
  Status add_i32(std::string key, int32_t v) { return add(std::move(key), GgufMetaValue::i32(v)); }
  Status add_u64(std::string key, uint64_t v) { return add(std::move(key), GgufMetaValue::u64(v)); }
  Status add_f32(std::string key, float v) { return add(std::move(key), GgufMetaValue::f32(v)); }
  Status add_bool(std::string key, bool v) { return add(std::move(key), GgufMetaValue::boolean(v)); }
  Status add_string_array(std::string key, const std::vector<std::string>& values);
  Status add_f32_array(std::string key, const std::vector<float>& values);
  Status add_i32_array(std::string key, const std::vector<int32_t>& values);

  /// Adds a tensor of `type` with `dims` innermost first (GGUF "ne" order) and its packed
  /// bytes (moved in). kInvalidArgument for a duplicate/empty name, more than 4 dims, a
  /// row length that is not a multiple of the block size, or a byte count that does not
  /// match ggml_bytes_for(type, n_elements).
  Status add_tensor(std::string name, GgmlType type, std::vector<int64_t> dims, std::vector<uint8_t> data);
  /// As add_tensor, quantizing f32 `values` to `type` first (kUnsupported if no encoder).
  Status add_tensor_f32(std::string name, GgmlType type, std::vector<int64_t> dims, std::span<const float> values);

  /// The complete file image.
  Expected<std::vector<uint8_t>> to_bytes() const;
  /// Writes the file image to `path` (kIo naming the path on failure).
  Status write_file(const std::string& path) const;

 private:
  struct PendingTensor {
    std::string name;
    GgmlType type;
    std::vector<int64_t> dims;
    std::vector<uint8_t> data;
  };
  bool has_key(std::string_view key) const;

  uint32_t alignment_ = kGgufDefaultAlignment;
  std::vector<std::pair<std::string, GgufMetaValue>> metadata_;
  std::vector<PendingTensor> tensors_;
};

}  // namespace rlx::formats
