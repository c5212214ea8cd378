// Serializes GgufWriter's metadata and tensors into a GGUF v3 image: header, key/values,
// tensor infos with offsets aligned to the file alignment, zero padding, tensor data.
#include "rlx/formats/gguf_writer.h"

#include <bit>
#include <cstring>
#include <fstream>

#include "rlx/formats/quant.h"

namespace rlx::formats {
namespace {

template <typename T>
uint64_t to_bits(T v) {
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof v);
  return bits;
}

GgufMetaValue scalar(GgufValueType type, uint64_t bits) {
  GgufMetaValue v;
  v.type = type;
  v.bits = bits;
  return v;
}

class ByteSink {
 public:
  template <typename T>
  void put(T v) {
    const size_t at = out_.size();
    out_.resize(at + sizeof v);
    std::memcpy(out_.data() + at, &v, sizeof v);
  }
  void put_bytes(const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    out_.insert(out_.end(), b, b + n);
  }
  void put_string(std::string_view s) {
    put<uint64_t>(s.size());
    put_bytes(s.data(), s.size());
  }
  void pad_to(size_t alignment) { out_.resize((out_.size() + alignment - 1) / alignment * alignment, 0); }
  std::vector<uint8_t>& bytes() { return out_; }

 private:
  std::vector<uint8_t> out_;
};

Status check_value(const std::string& key, const GgufMetaValue& v) {
  if (v.type != GgufValueType::kArray) return {};
  for (const GgufMetaValue& item : v.items) {
    if (item.type != v.elem_type)
      return Error::invalid_argument("gguf writer: key '{}': array of {} holds a {} item", key,
                                     gguf_value_type_name(v.elem_type), gguf_value_type_name(item.type));
    TRY(check_value(key, item));
  }
  return {};
}

void write_payload(ByteSink& sink, const GgufMetaValue& v) {
  switch (v.type) {
    case GgufValueType::kString: sink.put_string(v.str); return;
    case GgufValueType::kArray:
      sink.put<uint32_t>(static_cast<uint32_t>(v.elem_type));
      sink.put<uint64_t>(v.items.size());
      for (const GgufMetaValue& item : v.items) write_payload(sink, item);
      return;
    default: sink.put_bytes(&v.bits, gguf_scalar_size(v.type));  // little-endian host
  }
}

}  // namespace

GgufMetaValue GgufMetaValue::u8(uint8_t v) { return scalar(GgufValueType::kU8, v); }
GgufMetaValue GgufMetaValue::i8(int8_t v) { return scalar(GgufValueType::kI8, to_bits(v)); }
GgufMetaValue GgufMetaValue::u16(uint16_t v) { return scalar(GgufValueType::kU16, v); }
GgufMetaValue GgufMetaValue::i16(int16_t v) { return scalar(GgufValueType::kI16, to_bits(v)); }
GgufMetaValue GgufMetaValue::u32(uint32_t v) { return scalar(GgufValueType::kU32, v); }
GgufMetaValue GgufMetaValue::i32(int32_t v) { return scalar(GgufValueType::kI32, to_bits(v)); }
GgufMetaValue GgufMetaValue::u64(uint64_t v) { return scalar(GgufValueType::kU64, v); }
GgufMetaValue GgufMetaValue::i64(int64_t v) { return scalar(GgufValueType::kI64, to_bits(v)); }
GgufMetaValue GgufMetaValue::f32(float v) { return scalar(GgufValueType::kF32, to_bits(v)); }
GgufMetaValue GgufMetaValue::f64(double v) { return scalar(GgufValueType::kF64, to_bits(v)); }
GgufMetaValue GgufMetaValue::boolean(bool v) { return scalar(GgufValueType::kBool, v ? 1 : 0); }
GgufMetaValue GgufMetaValue::string(std::string v) {
  GgufMetaValue m;
  m.type = GgufValueType::kString;
  m.str = std::move(v);
  return m;
}
GgufMetaValue GgufMetaValue::array(GgufValueType elem_type, std::vector<GgufMetaValue> items) {
  GgufMetaValue m;
  m.type = GgufValueType::kArray;
  m.elem_type = elem_type;
  m.items = std::move(items);
  return m;
}

bool GgufWriter::has_key(std::string_view key) const {
  for (const auto& [k, v] : metadata_) {
    if (k == key) return true;
  }
  return false;
}

Status GgufWriter::set_alignment(uint32_t alignment) {
  if (alignment == 0 || !std::has_single_bit(alignment))
    return Error::invalid_argument("gguf writer: alignment {} is not a non-zero power of two", alignment);
  alignment_ = alignment;
  return {};
}

Status GgufWriter::add(std::string key, GgufMetaValue value) {
  if (key.empty()) return Error::invalid_argument("gguf writer: empty metadata key");
  if (has_key(key)) return Error::invalid_argument("gguf writer: duplicate metadata key '{}'", key);
  if (key == "general.alignment")
    return Error::invalid_argument("gguf writer: set 'general.alignment' through set_alignment()");
  TRY(check_value(key, value));
  metadata_.emplace_back(std::move(key), std::move(value));
  return {};
}

Status GgufWriter::add_string_array(std::string key, const std::vector<std::string>& values) {
  std::vector<GgufMetaValue> items;
  items.reserve(values.size());
  for (const std::string& s : values) items.push_back(GgufMetaValue::string(s));
  return add(std::move(key), GgufMetaValue::array(GgufValueType::kString, std::move(items)));
}

Status GgufWriter::add_f32_array(std::string key, const std::vector<float>& values) {
  std::vector<GgufMetaValue> items;
  items.reserve(values.size());
  for (float v : values) items.push_back(GgufMetaValue::f32(v));
  return add(std::move(key), GgufMetaValue::array(GgufValueType::kF32, std::move(items)));
}

Status GgufWriter::add_i32_array(std::string key, const std::vector<int32_t>& values) {
  std::vector<GgufMetaValue> items;
  items.reserve(values.size());
  for (int32_t v : values) items.push_back(GgufMetaValue::i32(v));
  return add(std::move(key), GgufMetaValue::array(GgufValueType::kI32, std::move(items)));
}

Status GgufWriter::add_tensor(std::string name, GgmlType type, std::vector<int64_t> dims, std::vector<uint8_t> data) {
  if (name.empty()) return Error::invalid_argument("gguf writer: empty tensor name");
  for (const PendingTensor& t : tensors_) {
    if (t.name == name) return Error::invalid_argument("gguf writer: duplicate tensor name '{}'", name);
  }
  if (dims.size() > static_cast<size_t>(kGgufMaxDims))
    return Error::invalid_argument("gguf writer: tensor '{}': {} dims, max is {}", name, dims.size(), kGgufMaxDims);
  int64_t n = 1;
  for (int64_t d : dims) {
    if (d < 0) return Error::invalid_argument("gguf writer: tensor '{}': negative dim {}", name, d);
    n *= d;
  }
  const int64_t row = dims.empty() ? 1 : dims[0];
  if (row % ggml_block_size(type) != 0)
    return Error::invalid_argument("gguf writer: tensor '{}': row length {} is not a multiple of the {} block size {}",
                                   name, row, ggml_type_name(type), ggml_block_size(type));
  const std::optional<int64_t> expected = ggml_bytes_for(type, n);
  if (!expected || static_cast<size_t>(*expected) != data.size())
    return Error::invalid_argument("gguf writer: tensor '{}': {} bytes given, {} {} elements need {}", name,
                                   data.size(), n, ggml_type_name(type), expected.value_or(-1));
  tensors_.push_back({std::move(name), type, std::move(dims), std::move(data)});
  return {};
}

Status GgufWriter::add_tensor_f32(std::string name, GgmlType type, std::vector<int64_t> dims,
                                  std::span<const float> values) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  if (n != static_cast<int64_t>(values.size()))
    return Error::invalid_argument("gguf writer: tensor '{}': {} values given for {} elements", name, values.size(), n);
  const std::optional<int64_t> n_bytes = ggml_bytes_for(type, n);
  if (!n_bytes)
    return Error::invalid_argument("gguf writer: tensor '{}': {} elements do not fill whole {} blocks", name, n,
                                   ggml_type_name(type));
  std::vector<uint8_t> data(static_cast<size_t>(*n_bytes));
  TRY(quantize_row(type, values.data(), data.data(), n));
  return add_tensor(std::move(name), type, std::move(dims), std::move(data));
}

Expected<std::vector<uint8_t>> GgufWriter::to_bytes() const {
  ByteSink sink;
  sink.put_bytes("GGUF", 4);
  sink.put<uint32_t>(3);
  sink.put<uint64_t>(tensors_.size());
  const bool record_alignment = alignment_ != kGgufDefaultAlignment;
  sink.put<uint64_t>(metadata_.size() + (record_alignment ? 1 : 0));
  if (record_alignment) {
    sink.put_string("general.alignment");
    sink.put<uint32_t>(static_cast<uint32_t>(GgufValueType::kU32));
    sink.put<uint32_t>(alignment_);
  }
  for (const auto& [key, value] : metadata_) {
    sink.put_string(key);
    sink.put<uint32_t>(static_cast<uint32_t>(value.type));
    write_payload(sink, value);
  }
  uint64_t offset = 0;
  for (const PendingTensor& t : tensors_) {
    sink.put_string(t.name);
    sink.put<uint32_t>(static_cast<uint32_t>(t.dims.size()));
    for (int64_t d : t.dims) sink.put<uint64_t>(static_cast<uint64_t>(d));
    sink.put<uint32_t>(static_cast<uint32_t>(t.type));
    sink.put<uint64_t>(offset);
    offset = (offset + t.data.size() + alignment_ - 1) / alignment_ * alignment_;
  }
  sink.pad_to(alignment_);
  const size_t data_start = sink.bytes().size();
  for (const PendingTensor& t : tensors_) {
    sink.put_bytes(t.data.data(), t.data.size());
    const size_t rel = sink.bytes().size() - data_start;
    sink.bytes().resize(data_start + (rel + alignment_ - 1) / alignment_ * alignment_, 0);
  }
  return std::move(sink.bytes());
}

Status GgufWriter::write_file(const std::string& path) const {
  ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, to_bytes());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return Error::io("{}: cannot open for writing", path);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) return Error::io("{}: write of {} bytes failed", path, bytes.size());
  return {};
}

}  // namespace rlx::formats
