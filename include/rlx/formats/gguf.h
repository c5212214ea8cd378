// GGUF reader (format versions 1, 2 and 3, little-endian): metadata key/values and
// tensor infos, with tensor data exposed as views into a read-only memory mapping.
// Every malformed input yields an Error naming the file, the field and the byte offset.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <variant>
#include <vector>

#include "rlx/base/status.h"
#include "rlx/formats/ggml_type.h"
#include "rlx/formats/mapped_file.h"

namespace rlx::formats {

/// Metadata value types, numbered as in the file.
enum class GgufValueType : uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12,
};

/// "u32", "string", "array", ...
std::string_view gguf_value_type_name(GgufValueType type);
/// Bytes of one element of a fixed-size type (u8..f64, bool); 0 for string and array.
size_t gguf_scalar_size(GgufValueType type);

inline constexpr uint32_t kGgufDefaultAlignment = 32;
inline constexpr int kGgufMaxDims = 4;

/// An array value. Elements are not copied: scalar elements stay as little-endian
/// bytes in the source buffer, strings are views into it. Valid while the owning
/// GgufFile (or, for GgufFile::parse, the caller's buffer) lives.
struct GgufArray {
  GgufValueType elem_type = GgufValueType::kU8;
  uint64_t count = 0;
  const uint8_t* raw = nullptr;             ///< count * gguf_scalar_size(elem_type) bytes (scalar types)
  std::vector<std::string_view> strings;    ///< elem_type == kString
  std::vector<GgufArray> arrays;            ///< elem_type == kArray (nested arrays)

  /// Element `i` of a scalar array converted to T (no range check on the value; i < count).
  template <typename T>
  T scalar_at(uint64_t i) const;
};

template <typename T>
T GgufArray::scalar_at(uint64_t i) const {
  const uint8_t* p = raw + i * gguf_scalar_size(elem_type);
  auto load = [p](auto zero) {
    decltype(zero) v;
    std::memcpy(&v, p, sizeof v);
    return v;
  };
  switch (elem_type) {
    case GgufValueType::kU8: return static_cast<T>(load(uint8_t{}));
    case GgufValueType::kI8: return static_cast<T>(load(int8_t{}));
    case GgufValueType::kU16: return static_cast<T>(load(uint16_t{}));
    case GgufValueType::kI16: return static_cast<T>(load(int16_t{}));
    case GgufValueType::kU32: return static_cast<T>(load(uint32_t{}));
    case GgufValueType::kI32: return static_cast<T>(load(int32_t{}));
    case GgufValueType::kF32: return static_cast<T>(load(float{}));
    case GgufValueType::kBool: return static_cast<T>(load(uint8_t{}) != 0);
    case GgufValueType::kU64: return static_cast<T>(load(uint64_t{}));
    case GgufValueType::kI64: return static_cast<T>(load(int64_t{}));
    case GgufValueType::kF64: return static_cast<T>(load(double{}));
    case GgufValueType::kString:
    case GgufValueType::kArray: break;
  }
  return T{};
}

/// A metadata value: one scalar, a string (view into the source) or an array.
struct GgufValue {
  GgufValueType type = GgufValueType::kU8;
  std::variant<uint64_t, int64_t, double, bool, std::string_view, GgufArray> data;
};

/// One metadata entry, in file order; `offset` is the byte where its key starts.
struct GgufKeyValue {
  std::string key;
  GgufValue value;
  uint64_t offset = 0;
};

/// One tensor: its info from the header and a view of its bytes (never copied).
struct GgufTensor {
  std::string name;
  GgmlType type = GgmlType::F32;
  std::vector<int64_t> dims;   ///< as in the file: innermost (contiguous) dimension first ("ne")
  uint64_t offset = 0;         ///< relative to the data section, as stored in the file
  uint64_t info_offset = 0;    ///< byte where this tensor's info starts (for messages)
  const uint8_t* data = nullptr;
  size_t n_bytes = 0;

  /// Row-major shape: dims reversed (outermost first). A GGUF matrix ne=[in,out] gives {out,in}.
  std::vector<int64_t> shape() const { return {dims.rbegin(), dims.rend()}; }
  int64_t n_elements() const;
  std::span<const uint8_t> bytes() const { return {data, n_bytes}; }
};

/// A parsed GGUF file. Move-only. Opened from a path (memory-mapped, the mapping is
/// owned here and shared through mapping()) or parsed from caller-owned bytes.
class GgufFile {
 public:
  /// Maps and parses `path`. Errors: kNotFound/kIo from the OS, kInvalidFile for a
  /// malformed file, kUnsupported for a big-endian file or an unknown version.
  static Expected<GgufFile> open(const std::string& path);
  /// Parses `bytes` (not copied: the caller keeps them alive while the result is used);
  /// `name` appears in error messages in place of a path.
  static Expected<GgufFile> parse(std::span<const uint8_t> bytes, std::string name);

  GgufFile(GgufFile&&) noexcept = default;
  GgufFile& operator=(GgufFile&&) noexcept = default;

  const std::string& name() const { return name_; }
  uint32_t version() const { return version_; }
  uint32_t alignment() const { return alignment_; }
  /// Absolute byte offset of the tensor data section.
  uint64_t data_offset() const { return data_offset_; }
  /// The mapping behind the views (null for GgufFile::parse); keep a copy to outlive this object.
  const std::shared_ptr<const MappedFile>& mapping() const { return mapping_; }

  const std::vector<GgufKeyValue>& metadata() const { return metadata_; }
  /// The value of `key`, or null if absent.
  const GgufValue* find(std::string_view key) const;
  bool contains(std::string_view key) const { return find(key) != nullptr; }

  // Typed accessors: kNotFound if the key is absent, kInvalidFile if its type differs.
  Expected<std::string_view> get_string(std::string_view key) const;
  Expected<uint8_t> get_u8(std::string_view key) const;
  Expected<int8_t> get_i8(std::string_view key) const;
  Expected<uint16_t> get_u16(std::string_view key) const;
  Expected<int16_t> get_i16(std::string_view key) const;
  Expected<uint32_t> get_u32(std::string_view key) const;
  Expected<int32_t> get_i32(std::string_view key) const;
  Expected<uint64_t> get_u64(std::string_view key) const;
  Expected<int64_t> get_i64(std::string_view key) const;
  Expected<float> get_f32(std::string_view key) const;
  Expected<double> get_f64(std::string_view key) const;
  Expected<bool> get_bool(std::string_view key) const;
  /// Any integer type whose value fits int64 (writers disagree on u32 vs i32 for counts).
  Expected<int64_t> get_int(std::string_view key) const;
  /// f32 or f64, as double.
  Expected<double> get_float(std::string_view key) const;
  /// The array stored at `key` (any element type).
  Expected<const GgufArray*> get_array(std::string_view key) const;
  /// Arrays converted element-wise; kInvalidFile if the element type differs.
  Expected<std::vector<std::string_view>> get_string_array(std::string_view key) const;
  Expected<std::vector<float>> get_f32_array(std::string_view key) const;
  Expected<std::vector<int32_t>> get_i32_array(std::string_view key) const;
  Expected<std::vector<uint32_t>> get_u32_array(std::string_view key) const;
  /// Any integer element type whose values fit int64.
  Expected<std::vector<int64_t>> get_int_array(std::string_view key) const;

  const std::vector<GgufTensor>& tensors() const { return tensors_; }
  /// The tensor named `name`, or null.
  const GgufTensor* find_tensor(std::string_view name) const;
  /// The tensor named `name`, or kNotFound naming the file and tensor.
  Expected<const GgufTensor*> tensor(std::string_view name) const;

 private:
  GgufFile() = default;
  friend class GgufParser;
  const GgufKeyValue* find_entry(std::string_view key) const;
  Expected<const GgufKeyValue*> typed_entry(std::string_view key, GgufValueType type) const;

  std::string name_;
  std::shared_ptr<const MappedFile> mapping_;
  uint32_t version_ = 0;
  uint32_t alignment_ = kGgufDefaultAlignment;
  uint64_t data_offset_ = 0;
  std::vector<GgufKeyValue> metadata_;
  std::vector<GgufTensor> tensors_;
  std::unordered_map<std::string_view, size_t> key_index_;     // views into metadata_[i].key
  std::unordered_map<std::string_view, size_t> tensor_index_;  // views into tensors_[i].name
};

}  // namespace rlx::formats
