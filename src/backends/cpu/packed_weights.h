// Matmul weights packed once into the GEMM panel layout (cpu::pack_b) instead of on
// every run. The cache belongs to the CPU backend: every executable that binds the same
// shared, immutable param buffer (the prefill and decode variants of one model, bound
// from one ParamStore) reads one packed copy. Weights an executable owns (set_param)
// are packed per executable, outside the cache, and repacked whenever they are set. A
// param that some other step reads in its own layout is not packed (cpu_backend.cpp).
// With a folder, packed copies of file-mapped weights (ByteView::file_key) are also
// written there, one file each, and a later process maps the file instead of packing:
// a second start of an F16 model reads no source page and packs nothing.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <tuple>

#include "backends/cpu/kernels/gemm.h"
#include "rlx/base/byte_view.h"

namespace rlx::cpu_backend {

/// A weight operand a step can read pre-packed: node input `input`, dense, [N, K] when
/// b_transposed else [K, N]. Step::pack[i] is served into Step::packed[i].
struct PackRequest {
  uint8_t input = 1;
  int64_t k = 0, n = 0;
  bool b_transposed = true;
  cpu::WeightType type = cpu::WeightType::kF32;
};

/// Counters for tests and reports.
struct PackedWeightStats {
  int64_t packs = 0;       ///< weights packed through the cache
  int64_t hits = 0;        ///< requests served by an existing packed copy
  int64_t live = 0;        ///< packed copies alive now
  int64_t live_bytes = 0;  ///< their bytes
  int64_t disk_hits = 0;   ///< packed copies mapped from the folder instead of packed
  int64_t disk_writes = 0; ///< packed copies written to the folder
};

/// Thread-safe. Entries hold the source buffer and the packed copy weakly: a packed
/// copy lives as long as an executable uses it, and a buffer freed and reallocated at
/// the same address is never mistaken for the old one.
class PackedWeightCache {
 public:
  /// `disk_dir`: the folder of packed copies kept across runs (empty: none; made when
  /// first written).
  explicit PackedWeightCache(std::string disk_dir = {}) : disk_dir_(std::move(disk_dir)) {}

  /// The packed form of `req`'s weight at byte `offset` of `source` (a shared param's
  /// bytes, never written while shared), packed for `ctx.isa`: the copy made for the
  /// same bytes (same address, same live owner), offset and layout if one is alive,
  /// else mapped from the folder (file pages with a file_key packed the same way by an
  /// earlier run), else packed now (and written to the folder for the next run). While
  /// packing from file pages (ByteView::file_pages) the weight's pages are released as
  /// they are read (they refault from the file if something reads them again).
  std::shared_ptr<const cpu::PackedB> get(const cpu::KernelContext& ctx, const ByteView& source, int64_t offset,
                                          const PackRequest& req);
  PackedWeightStats stats() const;

  /// Packs `data` (the weight's first byte) without caching.
  static std::shared_ptr<const cpu::PackedB> pack(const cpu::KernelContext& ctx, const uint8_t* data,
                                                  const PackRequest& req);

 private:
  using Key = std::tuple<const uint8_t*, int64_t, int64_t, int64_t, bool, cpu::WeightType, cpu::IsaLevel>;
  struct Entry {
    std::weak_ptr<const void> source;  // the bytes' owner
    bool has_owner = false;            // false: bytes that outlive every holder (no owner)
    std::weak_ptr<const cpu::PackedB> packed;
  };
  // The folder's copy for this key string, or null.
  std::shared_ptr<const cpu::PackedB> load_from_disk(const cpu::KernelContext& ctx, const std::string& key,
                                                     const PackRequest& req);
  // Packs `src` into a new folder file for `key` (on_step as pack_b's done); *kept
  // says whether the file stays in the folder. Null when no file could be made (then
  // nothing is left behind and the caller packs in memory).
  std::shared_ptr<const cpu::PackedB> pack_to_disk(const cpu::KernelContext& ctx, const std::string& key,
                                                   const uint8_t* src, const PackRequest& req,
                                                   const std::function<void(int64_t)>& on_step, bool* kept);

  std::string disk_dir_;
  std::set<std::string> in_use_;  // folder files this cache has mapped (never evicted by it)
  mutable std::mutex mu_;
  std::map<Key, Entry> entries_;
  int64_t packs_ = 0, hits_ = 0, disk_hits_ = 0, disk_writes_ = 0;
};

}  // namespace rlx::cpu_backend
