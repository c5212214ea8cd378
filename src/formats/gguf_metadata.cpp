// GgufFile lookups: metadata by key with typed accessors (strict type checks, plus the
// lenient get_int/get_float for keys whose integer width varies between writers) and
// tensors by name.
#include <limits>

#include "rlx/formats/gguf.h"

namespace rlx::formats {
namespace {

bool is_unsigned(GgufValueType t) {
  return t == GgufValueType::kU8 || t == GgufValueType::kU16 || t == GgufValueType::kU32 || t == GgufValueType::kU64;
}
bool is_signed(GgufValueType t) {
  return t == GgufValueType::kI8 || t == GgufValueType::kI16 || t == GgufValueType::kI32 || t == GgufValueType::kI64;
}

}  // namespace

const GgufKeyValue* GgufFile::find_entry(std::string_view key) const {
  auto it = key_index_.find(key);
  return it == key_index_.end() ? nullptr : &metadata_[it->second];
}

const GgufValue* GgufFile::find(std::string_view key) const {
  const GgufKeyValue* kv = find_entry(key);
  return kv == nullptr ? nullptr : &kv->value;
}

Expected<const GgufKeyValue*> GgufFile::typed_entry(std::string_view key, GgufValueType type) const {
  const GgufKeyValue* kv = find_entry(key);
  if (kv == nullptr) return Error::not_found("{}: metadata key '{}' not found", name_, key);
  if (kv->value.type != type)
    return Error::invalid_file("{}: byte {}: key '{}' has type {}, expected {}", name_, kv->offset, key,
                               gguf_value_type_name(kv->value.type), gguf_value_type_name(type));
  return kv;
}

Expected<std::string_view> GgufFile::get_string(std::string_view key) const {
  ASSIGN_OR_RETURN(const GgufKeyValue* kv, typed_entry(key, GgufValueType::kString));
  return std::get<std::string_view>(kv->value.data);
}

#define RLX_GGUF_UNSIGNED_GETTER(fn, T, tag)                                    \
  Expected<T> GgufFile::fn(std::string_view key) const {                       \
    ASSIGN_OR_RETURN(const GgufKeyValue* kv, typed_entry(key, GgufValueType::tag)); \
    return static_cast<T>(std::get<uint64_t>(kv->value.data));                 \
  }
#define RLX_GGUF_SIGNED_GETTER(fn, T, tag)                                      \
  Expected<T> GgufFile::fn(std::string_view key) const {                       \
    ASSIGN_OR_RETURN(const GgufKeyValue* kv, typed_entry(key, GgufValueType::tag)); \
    return static_cast<T>(std::get<int64_t>(kv->value.data));                  \
  }
RLX_GGUF_UNSIGNED_GETTER(get_u8, uint8_t, kU8)
RLX_GGUF_UNSIGNED_GETTER(get_u16, uint16_t, kU16)
RLX_GGUF_UNSIGNED_GETTER(get_u32, uint32_t, kU32)
RLX_GGUF_UNSIGNED_GETTER(get_u64, uint64_t, kU64)
RLX_GGUF_SIGNED_GETTER(get_i8, int8_t, kI8)
RLX_GGUF_SIGNED_GETTER(get_i16, int16_t, kI16)
RLX_GGUF_SIGNED_GETTER(get_i32, int32_t, kI32)
RLX_GGUF_SIGNED_GETTER(get_i64, int64_t, kI64)
#undef RLX_GGUF_UNSIGNED_GETTER
#undef RLX_GGUF_SIGNED_GETTER

Expected<float> GgufFile::get_f32(std::string_view key) const {
  ASSIGN_OR_RETURN(const GgufKeyValue* kv, typed_entry(key, GgufValueType::kF32));
  return static_cast<float>(std::get<double>(kv->value.data));
}

Expected<double> GgufFile::get_f64(std::string_view key) const {
  ASSIGN_OR_RETURN(const GgufKeyValue* kv, typed_entry(key, GgufValueType::kF64));
  return std::get<double>(kv->value.data);
}

Expected<bool> GgufFile::get_bool(std::string_view key) const {
  ASSIGN_OR_RETURN(const GgufKeyValue* kv, typed_entry(key, GgufValueType::kBool));
  return std::get<bool>(kv->value.data);
}

Expected<int64_t> GgufFile::get_int(std::string_view key) const {
  const GgufKeyValue* kv = find_entry(key);
  if (kv == nullptr) return Error::not_found("{}: metadata key '{}' not found", name_, key);
  if (is_signed(kv->value.type)) return std::get<int64_t>(kv->value.data);
  if (is_unsigned(kv->value.type)) {
    const uint64_t v = std::get<uint64_t>(kv->value.data);
    if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      return Error::invalid_file("{}: byte {}: key '{}' value {} does not fit int64", name_, kv->offset, key, v);
    return static_cast<int64_t>(v);
  }
  return Error::invalid_file("{}: byte {}: key '{}' has type {}, expected an integer", name_, kv->offset, key,
                             gguf_value_type_name(kv->value.type));
}

Expected<double> GgufFile::get_float(std::string_view key) const {
  const GgufKeyValue* kv = find_entry(key);
  if (kv == nullptr) return Error::not_found("{}: metadata key '{}' not found", name_, key);
  if (kv->value.type == GgufValueType::kF32 || kv->value.type == GgufValueType::kF64)
    return std::get<double>(kv->value.data);
  return Error::invalid_file("{}: byte {}: key '{}' has type {}, expected f32 or f64", name_, kv->offset, key,
                             gguf_value_type_name(kv->value.type));
}

Expected<const GgufArray*> GgufFile::get_array(std::string_view key) const {
  ASSIGN_OR_RETURN(const GgufKeyValue* kv, typed_entry(key, GgufValueType::kArray));
  return &std::get<GgufArray>(kv->value.data);
}

namespace {

// Converts a scalar array whose element type is one of `accepted` to std::vector<T>.
template <typename T>
Expected<std::vector<T>> convert_array(const std::string& file, std::string_view key, uint64_t offset,
                                       const GgufArray& a, std::initializer_list<GgufValueType> accepted,
                                       std::string_view expected) {
  bool ok = false;
  for (GgufValueType t : accepted) ok = ok || a.elem_type == t;
  if (!ok)
    return Error::invalid_file("{}: byte {}: key '{}' is an array of {}, expected {}", file, offset, key,
                               gguf_value_type_name(a.elem_type), expected);
  std::vector<T> out(a.count);
  for (uint64_t i = 0; i < a.count; ++i) out[i] = a.scalar_at<T>(i);
  return out;
}

}  // namespace

Expected<std::vector<std::string_view>> GgufFile::get_string_array(std::string_view key) const {
  ASSIGN_OR_RETURN(const GgufArray* a, get_array(key));
  if (a->elem_type != GgufValueType::kString)
    return Error::invalid_file("{}: byte {}: key '{}' is an array of {}, expected string", name_,
                               find_entry(key)->offset, key, gguf_value_type_name(a->elem_type));
  return a->strings;
}

Expected<std::vector<float>> GgufFile::get_f32_array(std::string_view key) const {
  ASSIGN_OR_RETURN(const GgufArray* a, get_array(key));
  return convert_array<float>(name_, key, find_entry(key)->offset, *a, {GgufValueType::kF32}, "f32");
}

Expected<std::vector<int32_t>> GgufFile::get_i32_array(std::string_view key) const {
  ASSIGN_OR_RETURN(const GgufArray* a, get_array(key));
  return convert_array<int32_t>(name_, key, find_entry(key)->offset, *a, {GgufValueType::kI32}, "i32");
}

Expected<std::vector<uint32_t>> GgufFile::get_u32_array(std::string_view key) const {
  ASSIGN_OR_RETURN(const GgufArray* a, get_array(key));
  return convert_array<uint32_t>(name_, key, find_entry(key)->offset, *a, {GgufValueType::kU32}, "u32");
}

Expected<std::vector<int64_t>> GgufFile::get_int_array(std::string_view key) const {
  ASSIGN_OR_RETURN(const GgufArray* a, get_array(key));
  const uint64_t offset = find_entry(key)->offset;
  if (a->elem_type == GgufValueType::kU64) {
    for (uint64_t i = 0; i < a->count; ++i) {
      if (a->scalar_at<uint64_t>(i) > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        return Error::invalid_file("{}: byte {}: key '{}' element {} does not fit int64", name_, offset, key, i);
    }
  }
  return convert_array<int64_t>(name_, key, offset, *a,
                                {GgufValueType::kU8, GgufValueType::kI8, GgufValueType::kU16, GgufValueType::kI16,
                                 GgufValueType::kU32, GgufValueType::kI32, GgufValueType::kU64, GgufValueType::kI64},
                                "an integer type");
}

const GgufTensor* GgufFile::find_tensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

Expected<const GgufTensor*> GgufFile::tensor(std::string_view name) const {
  const GgufTensor* t = find_tensor(name);
  if (t == nullptr) return Error::not_found("{}: tensor '{}' not found", name_, name);
  return t;
}

}  // namespace rlx::formats
