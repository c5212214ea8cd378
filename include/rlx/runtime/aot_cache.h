// AOT disk cache: one file per specialized (bound, planned) LIR module, so that a
// later process loads it instead of lowering, running the passes and planning memory.
// ModelCompilePipeline::get_or_specialize_aot (model_pipeline.h) computes the key and
// uses this cache; the backend compile (LIR -> Executable) still runs after a load.
//
// Entry file `<dir>/<base>__<key as 16 hex digits>.rlxaot`: a text header, then the payload.
//
//   RLX-AOT-LIR                 magic
//   format=3                    kAotFormatVersion
//   rlx=0.1.0                   kRlxVersion of the writer
//   device=cpu                  Device::to_string() of the writer
//   key=0123456789abcdef        the entry key (also in the file name)
//   payload=12345               payload bytes that follow the blank line
//   checksum=0123456789abcdef   bulk_checksum (XXH3) of the payload
//   <blank line>
//   payload: text lines `binding SEQ=128`, `extent SEQ 128`, `axes -1 0 0 ...`, then the
//   LIR in its binary form (rlx/ir/binary.h; the text form parsed 8x slower)
//
// Nothing read is trusted: a missing, truncated, corrupt (checksum, decode, plan check),
// stale (format or RLX version) or foreign (device or key) entry is logged at debug
// level and treated as absent, and the caller rebuilds and overwrites it. Writes go to
// a unique temporary file in the same directory, then an atomic rename, so concurrent
// writers and readers never see a partial entry.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

#include "rlx/base/status.h"
#include "rlx/ir/module.h"
#include "rlx/runtime/backend.h"

namespace rlx {

/// The RLX release this library belongs to; stamped into every cache entry and key.
inline constexpr std::string_view kRlxVersion = "0.1.0";
/// Version of the AOT entry layout above; bumped whenever the layout changes.
inline constexpr uint32_t kAotFormatVersion = 3;  // 3: the payload's checksum is XXH3
/// First line of every AOT entry file.
inline constexpr std::string_view kAotMagic = "RLX-AOT-LIR";

/// The build of the code that runs: a digest of the path, size and modification time of
/// the binary (executable or shared library) holding the RLX runtime. Part of every AOT
/// entry key, so that a rebuilt RLX (another pass, another planner) never loads a module
/// an earlier build specialized. Computed once.
std::string_view build_identity();

/// A bound, planned module ready for Backend::compile_with_extent: what one AOT entry
/// stores and what ModelCompilePipeline::specialize returns.
struct SpecializedModel {
  ir::LirModule lir;        ///< no dynamic symbols left; plan sized for `binding`
  ir::DimBinding binding;   ///< the binding it was specialized with
  ExtentInfo extent;        ///< bucket symbol, its bound size and each value's bucket axis
};

/// Parses DimBinding::to_string() output ("BATCH=1,SEQ=128"; "" = empty). Errors name
/// the offending item.
Expected<ir::DimBinding> parse_dim_binding(std::string_view text);

/// The bytes of one entry file (header + payload) for `model`.
std::string encode_aot_entry(uint64_t key, std::string_view device, const SpecializedModel& model);

/// Decodes and checks one entry file's bytes: magic, format and RLX version, device and
/// key equal to the expected ones, payload length, checksum, then the payload (binding,
/// extent, LIR parse + verify, no dynamic symbols, plan invariants). The error says
/// which check failed.
Expected<SpecializedModel> decode_aot_entry(std::string_view bytes, uint64_t key, std::string_view device);

/// The on-disk side: a directory of entry files.
class AotCache {
 public:
  explicit AotCache(std::filesystem::path dir) : dir_(std::move(dir)) {}

  const std::filesystem::path& dir() const { return dir_; }
  /// `<dir>/<base>__<key:016x>.rlxaot`.
  std::filesystem::path path_for(std::string_view base, uint64_t key) const;

  /// The entry, or nullopt when it is absent or rejected. The reason for a rejection
  /// is logged at debug level and stored in `*why` when given (empty when absent).
  std::optional<SpecializedModel> load(std::string_view base, uint64_t key, std::string_view device,
                                       std::string* why = nullptr) const;

  /// Writes the entry atomically (temporary file + rename), creating the directory.
  /// `base` may use letters, digits, '.', '-' and '_' only (it becomes a file name).
  /// Then keeps the folder bounded: past kMaxEntries entries, the least recently
  /// written are removed (entries of earlier builds are never read again).
  Status store(std::string_view base, uint64_t key, std::string_view device, const SpecializedModel& model) const;
  static constexpr size_t kMaxEntries = 256;

 private:
  void prune() const;
  std::filesystem::path dir_;
};

/// True when `base` is a usable entry base name (non-empty, [A-Za-z0-9._-], at most 128 chars).
bool is_valid_aot_base(std::string_view base);

}  // namespace rlx
