// safetensors reader: an 8-byte little-endian header length, a JSON header naming each
// tensor's dtype, shape and data offsets, then the raw data. Files are memory-mapped and
// tensors are views; sharded checkpoints are read through model.safetensors.index.json.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "rlx/base/status.h"
#include "rlx/formats/mapped_file.h"

namespace rlx::formats {

enum class SafetensorsDType { kF64, kF32, kF16, kBF16, kI64, kI32, kI16, kI8, kU8, kBool };

/// The dtype's name as written in headers ("F32", "BF16", "BOOL", ...).
std::string_view safetensors_dtype_name(SafetensorsDType dtype);
/// Bytes per element.
size_t safetensors_dtype_size(SafetensorsDType dtype);

/// Largest JSON header accepted (the reference implementation's limit).
inline constexpr uint64_t kSafetensorsMaxHeaderBytes = 100'000'000;

/// One tensor: dtype, row-major shape and a view of its bytes (never copied).
struct SafetensorsTensor {
  std::string name;
  SafetensorsDType dtype = SafetensorsDType::kF32;
  std::vector<int64_t> shape;  ///< row-major, outermost first (PyTorch order)
  uint64_t begin = 0;          ///< data_offsets[0], relative to the data section
  const uint8_t* data = nullptr;
  size_t n_bytes = 0;

  int64_t n_elements() const;
  std::span<const uint8_t> bytes() const { return {data, n_bytes}; }
};

/// One parsed .safetensors file. Move-only.
class SafetensorsFile {
 public:
  /// Maps and parses `path`. kNotFound/kIo from the OS; kInvalidFile (or kParse for bad
  /// JSON, kUnsupported for an unknown dtype) naming the file, tensor and byte offset.
  static Expected<SafetensorsFile> open(const std::string& path);
  /// Parses caller-owned `bytes` (kept alive by the caller); `name` is used in messages.
  static Expected<SafetensorsFile> parse(std::span<const uint8_t> bytes, std::string name);

  SafetensorsFile(SafetensorsFile&&) noexcept = default;
  SafetensorsFile& operator=(SafetensorsFile&&) noexcept = default;

  const std::string& name() const { return name_; }
  /// Tensors sorted by data offset (file order).
  const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }
  /// The `__metadata__` string map (empty if absent).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  /// Absolute byte offset where the data section starts (8 + header length).
  uint64_t data_offset() const { return data_offset_; }
  const std::shared_ptr<const MappedFile>& mapping() const { return mapping_; }

  const SafetensorsTensor* find(std::string_view name) const;
  /// kNotFound naming the file and tensor when absent.
  Expected<const SafetensorsTensor*> tensor(std::string_view name) const;

 private:
  SafetensorsFile() = default;
  friend class SafetensorsParser;

  std::string name_;
  std::shared_ptr<const MappedFile> mapping_;
  uint64_t data_offset_ = 0;
  std::vector<SafetensorsTensor> tensors_;
  std::map<std::string, std::string> metadata_;
  std::unordered_map<std::string_view, size_t> index_;  // views into tensors_[i].name
};

/// A checkpoint of one or more shards. Move-only.
class SafetensorsModel {
 public:
  /// Opens a checkpoint from: a `.safetensors` file (one shard); a
  /// `*.safetensors.index.json` file (its `weight_map` names the shard of every tensor,
  /// shard files sit next to it); or a directory holding `model.safetensors.index.json`
  /// or `model.safetensors`. Each tensor in the weight_map must exist in its shard; shard
  /// names must be plain file names (no path separators) and, after resolving links, stay
  /// inside the index's folder (or the `blobs` folder of a Hugging Face cache snapshot).
  /// The index may nest at most kMaxJsonDepth levels; only regular files are opened.
  static Expected<SafetensorsModel> open(const std::string& path);

  SafetensorsModel(SafetensorsModel&&) noexcept = default;
  SafetensorsModel& operator=(SafetensorsModel&&) noexcept = default;

  const std::vector<SafetensorsFile>& shards() const { return shards_; }
  /// The index's "metadata" object with values as text (strings verbatim, others as JSON).
  const std::map<std::string, std::string>& index_metadata() const { return index_metadata_; }
  /// Every tensor name, sorted.
  std::vector<std::string_view> tensor_names() const;
  const SafetensorsTensor* find(std::string_view name) const;
  /// kNotFound naming the checkpoint and tensor when absent.
  Expected<const SafetensorsTensor*> tensor(std::string_view name) const;

 private:
  SafetensorsModel() = default;

  std::string name_;
  std::vector<SafetensorsFile> shards_;
  std::map<std::string, std::string> index_metadata_;
  std::map<std::string, const SafetensorsTensor*, std::less<>> tensors_;
};

}  // namespace rlx::formats
