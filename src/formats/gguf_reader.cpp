// Parses GGUF v1/v2/v3 headers from a byte span: metadata, tensor infos, alignment and
// data offset, validating every count, length and offset against the bytes that remain
// before trusting it. Tensor data is never copied; tensors point into the span.
#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>

#include "rlx/formats/gguf.h"

namespace rlx::formats {

std::string_view gguf_value_type_name(GgufValueType type) {
  switch (type) {
    case GgufValueType::kU8: return "u8";
    case GgufValueType::kI8: return "i8";
    case GgufValueType::kU16: return "u16";
    case GgufValueType::kI16: return "i16";
    case GgufValueType::kU32: return "u32";
    case GgufValueType::kI32: return "i32";
    case GgufValueType::kF32: return "f32";
    case GgufValueType::kBool: return "bool";
    case GgufValueType::kString: return "string";
    case GgufValueType::kArray: return "array";
    case GgufValueType::kU64: return "u64";
    case GgufValueType::kI64: return "i64";
    case GgufValueType::kF64: return "f64";
  }
  return "unknown";
}

size_t gguf_scalar_size(GgufValueType type) {
  switch (type) {
    case GgufValueType::kU8:
    case GgufValueType::kI8:
    case GgufValueType::kBool: return 1;
    case GgufValueType::kU16:
    case GgufValueType::kI16: return 2;
    case GgufValueType::kU32:
    case GgufValueType::kI32:
    case GgufValueType::kF32: return 4;
    case GgufValueType::kU64:
    case GgufValueType::kI64:
    case GgufValueType::kF64: return 8;
    case GgufValueType::kString:
    case GgufValueType::kArray: return 0;
  }
  return 0;
}

int64_t GgufTensor::n_elements() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;  // the parser rejected overflowing products
  return n;
}

namespace {

constexpr int kMaxArrayNesting = 8;

bool is_valid_value_type(uint32_t t) { return t <= static_cast<uint32_t>(GgufValueType::kF64); }

}  // namespace

// Reads one GGUF buffer front to back; `name` is the file name used in every message.
class GgufParser {
 public:
  GgufParser(std::span<const uint8_t> bytes, const std::string& name) : bytes_(bytes), name_(name) {}

  Status run(GgufFile& out);

 private:
  uint64_t remaining() const { return bytes_.size() - pos_; }

  template <typename... Args>
  Error fail(uint64_t at, fmt::format_string<Args...> f, Args&&... args) const {
    return Error::invalid_file("{}: byte {}: {}", name_, at, fmt::format(f, std::forward<Args>(args)...));
  }

  // Checks that `n` more bytes exist; `field` names what is being read.
  Status need(uint64_t n, std::string_view field) const {
    if (n > remaining())
      return fail(pos_, "{}: needs {} bytes but only {} remain (file is {} bytes; truncated?)", field, n,
                  remaining(), bytes_.size());
    return {};
  }

  template <typename T>
  Expected<T> read(std::string_view field) {
    TRY(need(sizeof(T), field));
    T v;
    std::memcpy(&v, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  // Sizes and counts are u32 in version 1 and u64 from version 2 on.
  Expected<uint64_t> read_count(std::string_view field) {
    if (version_ == 1) {
      ASSIGN_OR_RETURN(uint32_t v, read<uint32_t>(field));
      return uint64_t{v};
    }
    return read<uint64_t>(field);
  }
  uint64_t count_size() const { return version_ == 1 ? 4 : 8; }

  Expected<std::string_view> read_string(std::string_view field) {
    const uint64_t at = pos_;
    ASSIGN_OR_RETURN(uint64_t len, read_count(field));
    if (len > remaining())
      return fail(at, "{}: string length {} exceeds the {} bytes left in the file", field, len, remaining());
    std::string_view s(reinterpret_cast<const char*>(bytes_.data() + pos_), len);
    pos_ += len;
    return s;
  }

  Expected<GgufValue> read_value(GgufValueType type, const std::string& key, int depth);
  Expected<GgufArray> read_array(const std::string& key, int depth);
  Status read_header(GgufFile& out, uint64_t* n_tensors, uint64_t* n_kv);
  Status read_metadata(GgufFile& out, uint64_t n_kv);
  Status read_tensor_infos(GgufFile& out, uint64_t n_tensors);
  Status resolve_alignment(GgufFile& out);
  Status place_tensors(GgufFile& out);
  Status build_indexes(GgufFile& out);

  std::span<const uint8_t> bytes_;
  const std::string& name_;
  uint64_t pos_ = 0;
  uint32_t version_ = 0;
};

Status GgufParser::read_header(GgufFile& out, uint64_t* n_tensors, uint64_t* n_kv) {
  if (bytes_.size() < 4) return fail(0, "file is {} bytes, too short for the GGUF magic", bytes_.size());
  const uint8_t* m = bytes_.data();
  if (std::memcmp(m, "FUGG", 4) == 0)
    return Error::unsupported("{}: byte 0: big-endian GGUF files are not supported (magic 'FUGG')", name_);
  if (std::memcmp(m, "GGUF", 4) != 0)
    return fail(0, "bad magic {:02x} {:02x} {:02x} {:02x}, expected 'GGUF'", m[0], m[1], m[2], m[3]);
  pos_ = 4;
  ASSIGN_OR_RETURN(uint32_t version, read<uint32_t>("header version"));
  if ((version & 0xffffu) == 0 && version != 0)
    return Error::unsupported("{}: byte 4: version field {:#010x} looks byte-swapped: big-endian GGUF "
                              "files are not supported", name_, version);
  if (version < 1 || version > 3)
    return Error::unsupported("{}: byte 4: GGUF version {} is not supported (1, 2 and 3 are)", name_, version);
  version_ = version;
  out.version_ = version;
  const uint64_t tensors_at = pos_;
  ASSIGN_OR_RETURN(*n_tensors, read_count("header tensor count"));
  const uint64_t kv_at = pos_;
  ASSIGN_OR_RETURN(*n_kv, read_count("header metadata count"));
  // Each entry needs at least a length prefix and a type/dims field: reject counts the
  // remaining bytes cannot possibly hold before looping on them.
  const uint64_t min_kv_bytes = count_size() + 4 + 1;
  const uint64_t min_tensor_bytes = count_size() + 4 + 4 + 8;
  if (*n_kv > remaining() / min_kv_bytes)
    return fail(kv_at, "metadata count {} cannot fit in the {} bytes left", *n_kv, remaining());
  if (*n_tensors > remaining() / min_tensor_bytes)
    return fail(tensors_at, "tensor count {} cannot fit in the {} bytes left", *n_tensors, remaining());
  return {};
}

Expected<GgufArray> GgufParser::read_array(const std::string& key, int depth) {
  const uint64_t at = pos_;
  if (depth >= kMaxArrayNesting)
    return fail(at, "key '{}': arrays nested deeper than {} levels", key, kMaxArrayNesting);
  ASSIGN_OR_RETURN(uint32_t elem_type_id, read<uint32_t>(key));
  if (!is_valid_value_type(elem_type_id))
    return fail(at, "key '{}': unknown array element type {}", key, elem_type_id);
  GgufArray array;
  array.elem_type = static_cast<GgufValueType>(elem_type_id);
  const uint64_t count_at = pos_;
  ASSIGN_OR_RETURN(array.count, read_count(key));
  const size_t elem_size = gguf_scalar_size(array.elem_type);
  // Smallest possible encoding of one element, to bound the count by the bytes left.
  const uint64_t min_elem_bytes = elem_size != 0                             ? elem_size
                                  : array.elem_type == GgufValueType::kString ? count_size()
                                                                              : 4 + count_size();
  if (array.count > remaining() / min_elem_bytes)
    return fail(count_at, "key '{}': array of {} {} elements cannot fit in the {} bytes left", key, array.count,
                gguf_value_type_name(array.elem_type), remaining());
  if (elem_size != 0) {
    array.raw = bytes_.data() + pos_;
    if (array.elem_type == GgufValueType::kBool) {
      for (uint64_t i = 0; i < array.count; ++i) {
        if (array.raw[i] > 1)
          return fail(pos_ + i, "key '{}': bool element {} has value {}, expected 0 or 1", key, i, array.raw[i]);
      }
    }
    pos_ += array.count * elem_size;
  } else if (array.elem_type == GgufValueType::kString) {
    array.strings.reserve(array.count);
    for (uint64_t i = 0; i < array.count; ++i) {
      ASSIGN_OR_RETURN(std::string_view s, read_string(key));
      array.strings.push_back(s);
    }
  } else {
    array.arrays.reserve(array.count);
    for (uint64_t i = 0; i < array.count; ++i) {
      ASSIGN_OR_RETURN(GgufArray inner, read_array(key, depth + 1));
      array.arrays.push_back(std::move(inner));
    }
  }
  return array;
}

Expected<GgufValue> GgufParser::read_value(GgufValueType type, const std::string& key, int depth) {
  GgufValue v;
  v.type = type;
  const uint64_t at = pos_;
  switch (type) {
    case GgufValueType::kU8: { ASSIGN_OR_RETURN(uint8_t x, read<uint8_t>(key)); v.data = uint64_t{x}; break; }
    case GgufValueType::kU16: { ASSIGN_OR_RETURN(uint16_t x, read<uint16_t>(key)); v.data = uint64_t{x}; break; }
    case GgufValueType::kU32: { ASSIGN_OR_RETURN(uint32_t x, read<uint32_t>(key)); v.data = uint64_t{x}; break; }
    case GgufValueType::kU64: { ASSIGN_OR_RETURN(uint64_t x, read<uint64_t>(key)); v.data = x; break; }
    case GgufValueType::kI8: { ASSIGN_OR_RETURN(int8_t x, read<int8_t>(key)); v.data = int64_t{x}; break; }
    case GgufValueType::kI16: { ASSIGN_OR_RETURN(int16_t x, read<int16_t>(key)); v.data = int64_t{x}; break; }
    case GgufValueType::kI32: { ASSIGN_OR_RETURN(int32_t x, read<int32_t>(key)); v.data = int64_t{x}; break; }
    case GgufValueType::kI64: { ASSIGN_OR_RETURN(int64_t x, read<int64_t>(key)); v.data = x; break; }
    case GgufValueType::kF32: { ASSIGN_OR_RETURN(float x, read<float>(key)); v.data = double{x}; break; }
    case GgufValueType::kF64: { ASSIGN_OR_RETURN(double x, read<double>(key)); v.data = x; break; }
    case GgufValueType::kBool: {
      ASSIGN_OR_RETURN(uint8_t x, read<uint8_t>(key));
      if (x > 1) return fail(at, "key '{}': bool value {} is neither 0 nor 1", key, x);
      v.data = x == 1;
      break;
    }
    case GgufValueType::kString: { ASSIGN_OR_RETURN(std::string_view s, read_string(key)); v.data = s; break; }
    case GgufValueType::kArray: { ASSIGN_OR_RETURN(GgufArray a, read_array(key, depth)); v.data = std::move(a); break; }
  }
  return v;
}

Status GgufParser::read_metadata(GgufFile& out, uint64_t n_kv) {
  for (uint64_t i = 0; i < n_kv; ++i) {
    GgufKeyValue kv;
    kv.offset = pos_;
    ASSIGN_OR_RETURN(std::string_view key, read_string(fmt::format("metadata entry #{} key", i)));
    if (key.empty()) return fail(kv.offset, "metadata entry #{} has an empty key", i);
    kv.key = std::string(key);
    const uint64_t type_at = pos_;
    ASSIGN_OR_RETURN(uint32_t type_id, read<uint32_t>(kv.key));
    if (!is_valid_value_type(type_id)) return fail(type_at, "key '{}': unknown value type {}", kv.key, type_id);
    ASSIGN_OR_RETURN(kv.value, read_value(static_cast<GgufValueType>(type_id), kv.key, 0));
    out.metadata_.push_back(std::move(kv));
  }
  return {};
}

Status GgufParser::read_tensor_infos(GgufFile& out, uint64_t n_tensors) {
  for (uint64_t i = 0; i < n_tensors; ++i) {
    GgufTensor t;
    t.info_offset = pos_;
    ASSIGN_OR_RETURN(std::string_view name, read_string(fmt::format("tensor info #{} name", i)));
    if (name.empty()) return fail(t.info_offset, "tensor info #{} has an empty name", i);
    t.name = std::string(name);
    const std::string field = fmt::format("tensor '{}'", t.name);
    const uint64_t dims_at = pos_;
    ASSIGN_OR_RETURN(uint32_t n_dims, read<uint32_t>(field));
    if (n_dims > kGgufMaxDims)
      return fail(dims_at, "tensor '{}': {} dims, max is {}", t.name, n_dims, kGgufMaxDims);
    int64_t n_elements = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const uint64_t dim_at = pos_;
      ASSIGN_OR_RETURN(uint64_t dim, read_count(field));
      if (dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        return fail(dim_at, "tensor '{}': dim {} is {}, which is negative as int64", t.name, d, dim);
      const auto sdim = static_cast<int64_t>(dim);
      if (sdim != 0 && n_elements > std::numeric_limits<int64_t>::max() / sdim)
        return fail(dim_at, "tensor '{}': element count overflows int64 at dim {} ({})", t.name, d, dim);
      n_elements *= sdim;
      t.dims.push_back(sdim);
    }
    const uint64_t type_at = pos_;
    ASSIGN_OR_RETURN(uint32_t type_id, read<uint32_t>(field));
    const std::optional<GgmlType> type = ggml_type_from_id(type_id);
    if (!type) return fail(type_at, "tensor '{}': unknown ggml type id {}", t.name, type_id);
    t.type = *type;
    const int64_t block = ggml_block_size(t.type);
    const int64_t row = t.dims.empty() ? 1 : t.dims[0];
    if (row % block != 0)
      return fail(type_at, "tensor '{}': row length {} is not a multiple of the {} block size {}", t.name, row,
                  ggml_type_name(t.type), block);
    const std::optional<int64_t> n_bytes = ggml_bytes_for(t.type, n_elements);
    if (!n_bytes) return fail(type_at, "tensor '{}': byte size of {} elements overflows", t.name, n_elements);
    t.n_bytes = static_cast<size_t>(*n_bytes);
    ASSIGN_OR_RETURN(t.offset, read<uint64_t>(field));
    out.tensors_.push_back(std::move(t));
  }
  return {};
}

Status GgufParser::resolve_alignment(GgufFile& out) {
  for (const GgufKeyValue& kv : out.metadata_) {
    if (kv.key != "general.alignment") continue;
    if (kv.value.type != GgufValueType::kU32)
      return fail(kv.offset, "key 'general.alignment' has type {}, expected u32",
                  gguf_value_type_name(kv.value.type));
    const uint64_t a = std::get<uint64_t>(kv.value.data);
    if (a == 0 || !std::has_single_bit(a))
      return fail(kv.offset, "key 'general.alignment' is {}, expected a non-zero power of two", a);
    out.alignment_ = static_cast<uint32_t>(a);
  }
  return {};
}

Status GgufParser::place_tensors(GgufFile& out) {
  const uint64_t a = out.alignment_;
  const uint64_t data_offset = (pos_ + a - 1) / a * a;  // pos_ <= size, no overflow for a <= 2^31
  out.data_offset_ = data_offset;
  if (out.tensors_.empty()) return {};
  if (data_offset > bytes_.size())
    return fail(pos_, "tensor data section would start at byte {} (alignment {}), past the end of the file ({} bytes)",
                data_offset, a, bytes_.size());
  const uint64_t data_size = bytes_.size() - data_offset;
  for (GgufTensor& t : out.tensors_) {
    if (t.offset % a != 0)
      return fail(t.info_offset, "tensor '{}': data offset {} is not a multiple of the alignment {}", t.name,
                  t.offset, a);
    if (t.offset > data_size || t.n_bytes > data_size - t.offset)
      return fail(t.info_offset,
                  "tensor '{}': data [{}, +{}) runs past the end of the data section ({} bytes from byte {})",
                  t.name, t.offset, t.n_bytes, data_size, data_offset);
    t.data = bytes_.data() + data_offset + t.offset;
  }
  std::vector<const GgufTensor*> by_offset;
  by_offset.reserve(out.tensors_.size());
  for (const GgufTensor& t : out.tensors_) {
    if (t.n_bytes > 0) by_offset.push_back(&t);
  }
  std::sort(by_offset.begin(), by_offset.end(),
            [](const GgufTensor* x, const GgufTensor* y) { return x->offset < y->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const GgufTensor& prev = *by_offset[i - 1];
    const GgufTensor& cur = *by_offset[i];
    if (cur.offset < prev.offset + prev.n_bytes)
      return fail(cur.info_offset, "tensor '{}': data [{}, +{}) overlaps tensor '{}' at [{}, +{})", cur.name,
                  cur.offset, cur.n_bytes, prev.name, prev.offset, prev.n_bytes);
  }
  return {};
}

Status GgufParser::build_indexes(GgufFile& out) {
  out.key_index_.reserve(out.metadata_.size());
  for (size_t i = 0; i < out.metadata_.size(); ++i) {
    const GgufKeyValue& kv = out.metadata_[i];
    auto [it, inserted] = out.key_index_.emplace(kv.key, i);
    if (!inserted)
      return fail(kv.offset, "duplicate metadata key '{}' (first at byte {})", kv.key,
                  out.metadata_[it->second].offset);
  }
  out.tensor_index_.reserve(out.tensors_.size());
  for (size_t i = 0; i < out.tensors_.size(); ++i) {
    const GgufTensor& t = out.tensors_[i];
    auto [it, inserted] = out.tensor_index_.emplace(t.name, i);
    if (!inserted)
      return fail(t.info_offset, "duplicate tensor name '{}' (first at byte {})", t.name,
                  out.tensors_[it->second].info_offset);
  }
  return {};
}

Status GgufParser::run(GgufFile& out) {
  uint64_t n_tensors = 0;
  uint64_t n_kv = 0;
  TRY(read_header(out, &n_tensors, &n_kv));
  TRY(read_metadata(out, n_kv));
  TRY(read_tensor_infos(out, n_tensors));
  TRY(build_indexes(out));
  TRY(resolve_alignment(out));
  return place_tensors(out);
}

Expected<GgufFile> GgufFile::parse(std::span<const uint8_t> bytes, std::string name) {
  GgufFile file;
  file.name_ = std::move(name);
  GgufParser parser(bytes, file.name_);
  TRY(parser.run(file));
  return file;
}

Expected<GgufFile> GgufFile::open(const std::string& path) {
  ASSIGN_OR_RETURN(MappedFile mapped, MappedFile::open(path));
  auto mapping = std::make_shared<const MappedFile>(std::move(mapped));
  ASSIGN_OR_RETURN(GgufFile file, parse(mapping->bytes(), path));
  file.mapping_ = std::move(mapping);
  return file;
}

}  // namespace rlx::formats
