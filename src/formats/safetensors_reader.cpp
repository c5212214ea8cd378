// Parses one .safetensors buffer: validates the header length, bounds JSON nesting,
// parses the JSON header (rejecting duplicate keys), and checks each tensor's dtype,
// shape, offsets (in range, sized numel*elemsize, non-overlapping) before exposing views.
#include <algorithm>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <unordered_set>

#include "rlx/base/json_limits.h"
#include "rlx/formats/safetensors.h"

namespace rlx::formats {

std::string_view safetensors_dtype_name(SafetensorsDType dtype) {
  switch (dtype) {
    case SafetensorsDType::kF64: return "F64";
    case SafetensorsDType::kF32: return "F32";
    case SafetensorsDType::kF16: return "F16";
    case SafetensorsDType::kBF16: return "BF16";
    case SafetensorsDType::kI64: return "I64";
    case SafetensorsDType::kI32: return "I32";
    case SafetensorsDType::kI16: return "I16";
    case SafetensorsDType::kI8: return "I8";
    case SafetensorsDType::kU8: return "U8";
    case SafetensorsDType::kBool: return "BOOL";
  }
  return "unknown";
}

size_t safetensors_dtype_size(SafetensorsDType dtype) {
  switch (dtype) {
    case SafetensorsDType::kF64:
    case SafetensorsDType::kI64: return 8;
    case SafetensorsDType::kF32:
    case SafetensorsDType::kI32: return 4;
    case SafetensorsDType::kF16:
    case SafetensorsDType::kBF16:
    case SafetensorsDType::kI16: return 2;
    case SafetensorsDType::kI8:
    case SafetensorsDType::kU8:
    case SafetensorsDType::kBool: return 1;
  }
  return 0;
}

int64_t SafetensorsTensor::n_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;  // the parser rejected overflowing products
  return n;
}

namespace {

constexpr int kMaxHeaderDepth = 64;  // a valid header nests 3 levels
constexpr uint64_t kHeaderStart = 8;

std::optional<SafetensorsDType> dtype_from_name(std::string_view s) {
  for (SafetensorsDType d : {SafetensorsDType::kF64, SafetensorsDType::kF32, SafetensorsDType::kF16,
                             SafetensorsDType::kBF16, SafetensorsDType::kI64, SafetensorsDType::kI32,
                             SafetensorsDType::kI16, SafetensorsDType::kI8, SafetensorsDType::kU8,
                             SafetensorsDType::kBool}) {
    if (safetensors_dtype_name(d) == s) return d;
  }
  return std::nullopt;
}

// A SAX pass that finds the first key repeated within one object, at any depth
// (nlohmann::json keeps the last of two equal keys; a header must not have two). Linear:
// one hash set per open object. The DOM parse before it has reported any syntax error.
class DuplicateKeyFinder : public nlohmann::json_sax<nlohmann::json> {
 public:
  std::string duplicate;  ///< the repeated key, empty if none
  std::string tensor;     ///< the top-level key it sits under, empty at the top level
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override {
    keys_.emplace_back();
    return true;
  }
  bool key(string_t& k) override {
    if (keys_.size() == 1) top_ = k;
    if (keys_.back().insert(k).second) return true;
    duplicate = k;
    if (keys_.size() > 1) tensor = top_;
    return false;  // stop at the first
  }
  bool end_object() override {
    keys_.pop_back();
    return true;
  }
  bool start_array(std::size_t) override { return true; }
  bool end_array() override { return true; }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override { return false; }

 private:
  std::vector<std::unordered_set<std::string>> keys_;
  std::string top_;
};

// A non-negative JSON integer as uint64, or nullopt (negative, fractional, not a number).
std::optional<uint64_t> as_unsigned(const nlohmann::json& j) {
  if (j.is_number_unsigned()) return j.get<uint64_t>();
  if (j.is_number_integer() && j.get<int64_t>() >= 0) return static_cast<uint64_t>(j.get<int64_t>());
  return std::nullopt;
}

}  // namespace

// Parses one safetensors buffer; `name` is the file name used in every message.
class SafetensorsParser {
 public:
  SafetensorsParser(std::span<const uint8_t> bytes, const std::string& name) : bytes_(bytes), name_(name) {}

  Status run(SafetensorsFile& out);

 private:
  template <typename... Args>
  Error fail(uint64_t at, fmt::format_string<Args...> f, Args&&... args) const {
    return Error::invalid_file("{}: byte {}: {}", name_, at, fmt::format(f, std::forward<Args>(args)...));
  }
  // Best-effort byte offset of a top-level key in the header (its opening quote). A
  // search through the header: for error messages only, never once per tensor.
  uint64_t key_offset(const std::string& key) const {
    const size_t at = header_.find('"' + key + '"');
    return kHeaderStart + (at == std::string_view::npos ? 0 : at);
  }
  Status read_tensor(const std::string& key, const nlohmann::json& entry, SafetensorsFile& out);
  Status read_metadata(const nlohmann::json& entry, SafetensorsFile& out);

  std::span<const uint8_t> bytes_;
  const std::string& name_;
  std::string_view header_;
  uint64_t data_size_ = 0;
};

Status SafetensorsParser::read_metadata(const nlohmann::json& entry, SafetensorsFile& out) {
  if (!entry.is_object()) return fail(key_offset("__metadata__"), "'__metadata__' is a {}, expected an object", entry.type_name());
  for (const auto& [k, v] : entry.items()) {
    if (!v.is_string())
      return fail(key_offset("__metadata__"), "'__metadata__' entry '{}' is a {}, expected a string", k, v.type_name());
    out.metadata_.emplace(k, v.get<std::string>());
  }
  return {};
}

Status SafetensorsParser::read_tensor(const std::string& key, const nlohmann::json& entry, SafetensorsFile& out) {
  if (key.empty()) return fail(key_offset(key), "tensor with an empty name");
  if (!entry.is_object()) return fail(key_offset(key), "tensor '{}': entry is a {}, expected an object", key, entry.type_name());
  SafetensorsTensor t;
  t.name = key;
  auto dtype_it = entry.find("dtype");
  if (dtype_it == entry.end() || !dtype_it->is_string())
    return fail(key_offset(key), "tensor '{}': missing or non-string 'dtype'", key);
  const std::string& dtype_name = dtype_it->get_ref<const std::string&>();
  const std::optional<SafetensorsDType> dtype = dtype_from_name(dtype_name);
  if (!dtype)
    return Error::unsupported("{}: byte {}: tensor '{}': dtype '{}' is not supported "
                              "(F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL are)", name_, key_offset(key), key, dtype_name);
  t.dtype = *dtype;
  auto shape_it = entry.find("shape");
  if (shape_it == entry.end() || !shape_it->is_array())
    return fail(key_offset(key), "tensor '{}': missing or non-array 'shape'", key);
  int64_t numel = 1;
  for (const nlohmann::json& d : *shape_it) {
    const std::optional<uint64_t> dim = as_unsigned(d);
    if (!dim || *dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      return fail(key_offset(key), "tensor '{}': shape entry {} is not a non-negative integer", key, d.dump());
    const auto sdim = static_cast<int64_t>(*dim);
    if (sdim != 0 && numel > std::numeric_limits<int64_t>::max() / sdim)
      return fail(key_offset(key), "tensor '{}': element count of shape {} overflows int64", key, shape_it->dump());
    numel *= sdim;
    t.shape.push_back(sdim);
  }
  auto offsets_it = entry.find("data_offsets");
  if (offsets_it == entry.end() || !offsets_it->is_array() || offsets_it->size() != 2)
    return fail(key_offset(key), "tensor '{}': 'data_offsets' must be an array of two integers", key);
  const std::optional<uint64_t> begin = as_unsigned((*offsets_it)[0]);
  const std::optional<uint64_t> end = as_unsigned((*offsets_it)[1]);
  if (!begin || !end) return fail(key_offset(key), "tensor '{}': data_offsets {} are not non-negative integers", key, offsets_it->dump());
  if (*begin > *end) return fail(key_offset(key), "tensor '{}': data_offsets [{}, {}] end before they begin", key, *begin, *end);
  if (*end > data_size_)
    return fail(key_offset(key), "tensor '{}': data_offsets [{}, {}] run past the {}-byte data section (file truncated?)", key,
                *begin, *end, data_size_);
  const uint64_t elem = safetensors_dtype_size(t.dtype);
  if (static_cast<uint64_t>(numel) > std::numeric_limits<uint64_t>::max() / elem ||
      static_cast<uint64_t>(numel) * elem != *end - *begin)
    return fail(key_offset(key), "tensor '{}': {} {} elements need {} bytes but data_offsets [{}, {}] hold {}", key, numel,
                dtype_name, static_cast<uint64_t>(numel) * elem, *begin, *end, *end - *begin);
  t.begin = *begin;
  t.n_bytes = static_cast<size_t>(*end - *begin);
  t.data = bytes_.data() + out.data_offset_ + *begin;
  out.tensors_.push_back(std::move(t));
  return {};
}

Status SafetensorsParser::run(SafetensorsFile& out) {
  if (bytes_.size() < kHeaderStart)
    return fail(0, "file is {} bytes, too short for the 8-byte header length", bytes_.size());
  uint64_t header_len;
  std::memcpy(&header_len, bytes_.data(), sizeof header_len);
  if (header_len > kSafetensorsMaxHeaderBytes)
    return fail(0, "header length {} exceeds the {}-byte limit", header_len, kSafetensorsMaxHeaderBytes);
  if (header_len > bytes_.size() - kHeaderStart)
    return fail(0, "header length {} exceeds the {} bytes after the length field (truncated?)", header_len,
                bytes_.size() - kHeaderStart);
  if (header_len < 2) return fail(0, "header length {} is too small for a JSON object", header_len);
  header_ = std::string_view(reinterpret_cast<const char*>(bytes_.data() + kHeaderStart), header_len);
  out.data_offset_ = kHeaderStart + header_len;
  data_size_ = bytes_.size() - out.data_offset_;
  if (const int64_t deep = json_too_deep_at(header_, kMaxHeaderDepth); deep >= 0)
    return fail(kHeaderStart + static_cast<uint64_t>(deep), "JSON header nests deeper than {} levels", kMaxHeaderDepth);

  nlohmann::json header;
  try {
    header = nlohmann::json::parse(header_.begin(), header_.end());
  } catch (const nlohmann::json::parse_error& e) {
    return Error::parse("{}: byte {}: JSON header does not parse: {}", name_, kHeaderStart + e.byte, e.what());
  } catch (const nlohmann::json::exception& e) {  // e.g. a number literal that overflows a double
    return Error::parse("{}: byte {}: JSON header does not parse: {}", name_, kHeaderStart, e.what());
  }
  if (!header.is_object()) return fail(kHeaderStart, "JSON header is a {}, expected an object", header.type_name());
  DuplicateKeyFinder dup;
  (void)nlohmann::json::sax_parse(header_.begin(), header_.end(), &dup);
  if (!dup.duplicate.empty() && dup.tensor.empty())
    return fail(key_offset(dup.duplicate), "duplicate key '{}' in the JSON header", dup.duplicate);
  if (!dup.duplicate.empty())
    return fail(key_offset(dup.tensor), "tensor '{}': duplicate key '{}' in its entry", dup.tensor, dup.duplicate);

  for (const auto& [key, entry] : header.items()) {
    if (key == "__metadata__") {
      TRY(read_metadata(entry, out));
    } else {
      TRY(read_tensor(key, entry, out));
    }
  }
  std::sort(out.tensors_.begin(), out.tensors_.end(),
            [](const SafetensorsTensor& a, const SafetensorsTensor& b) { return a.begin < b.begin; });
  const SafetensorsTensor* prev = nullptr;
  for (const SafetensorsTensor& t : out.tensors_) {
    if (t.n_bytes == 0) continue;
    if (prev != nullptr && t.begin < prev->begin + prev->n_bytes)
      return fail(out.data_offset_ + t.begin, "tensor '{}': data [{}, {}) overlaps tensor '{}' at [{}, {})", t.name,
                  t.begin, t.begin + t.n_bytes, prev->name, prev->begin, prev->begin + prev->n_bytes);
    prev = &t;
  }
  out.index_.reserve(out.tensors_.size());
  for (size_t i = 0; i < out.tensors_.size(); ++i) out.index_.emplace(out.tensors_[i].name, i);
  return {};
}

Expected<SafetensorsFile> SafetensorsFile::parse(std::span<const uint8_t> bytes, std::string name) {
  SafetensorsFile file;
  file.name_ = std::move(name);
  SafetensorsParser parser(bytes, file.name_);
  TRY(parser.run(file));
  return file;
}

Expected<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  ASSIGN_OR_RETURN(MappedFile mapped, MappedFile::open(path));
  auto mapping = std::make_shared<const MappedFile>(std::move(mapped));
  ASSIGN_OR_RETURN(SafetensorsFile file, parse(mapping->bytes(), path));
  file.mapping_ = std::move(mapping);
  return file;
}

const SafetensorsTensor* SafetensorsFile::find(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

Expected<const SafetensorsTensor*> SafetensorsFile::tensor(std::string_view name) const {
  const SafetensorsTensor* t = find(name);
  if (t == nullptr) return Error::not_found("{}: tensor '{}' not found", name_, name);
  return t;
}

}  // namespace rlx::formats
