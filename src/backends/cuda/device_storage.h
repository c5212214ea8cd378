// Device memory of the CUDA backend's executables besides their steps: handle storage
// (a block range, or a paged address range for a large handle: PagedDeviceMemory), the
// weights cache shared by every executable that binds the same host bytes, and the run
// memory block the variants of a model share.
#pragma once

#include <compare>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backends/cuda/cuda_util.h"
#include "backends/cuda/paged_memory.h"
#include "rlx/runtime/executable.h"

namespace rlx::cuda_backend {

// A handle's device memory, shared by the executables of one model (share_handle):
// either a range of a block that holds the small handles of the executable that made it
// (one allocation and one memset instead of one each a handle), kept alive by each of
// them, or -- a large handle (a stacked KV cache) -- its own reserved address range that
// memory backs as the model asks (paged: PagedDeviceMemory). (An executable that takes
// shared storage for only some of its handles keeps its whole block; a model's
// executables share every handle, which frees it.)
class DeviceHandle final : public HandleStorage {
 public:
  DeviceHandle(std::shared_ptr<DeviceBuffer> block, int64_t offset, int64_t size, int ordinal)
      : block_(std::move(block)), offset_(offset), size_(size), ordinal(ordinal) {}
  DeviceHandle(std::unique_ptr<PagedDeviceMemory> paged, int ordinal)
      : paged_(std::move(paged)), size_(paged_->bytes()), ordinal(ordinal) {}
  int64_t bytes() const override { return size_; }
  std::string where() const override { return fmt::format("cuda:{}", ordinal); }
  uint8_t* data() const { return paged_ ? paged_->data() : block_->data() + offset_; }
  // Between runs (the scheduler calls it when no run is in flight): a device-to-device
  // copy, waited for, so the next run on any stream sees it.
  Status copy_sequence_rows(int64_t batch, int64_t rows, int64_t src, int64_t dst, int64_t n) override {
    ASSIGN_OR_RETURN(const SequenceRowsSpan span, sequence_rows_span(bytes(), batch, rows, src, dst, n));
    if (span.length == 0) return {};
    const std::string what = fmt::format("copy_sequence_rows on {}", where());
    TRY(ready());
    RLX_CUDA_TRY(cudaSetDevice(ordinal), what);
    RLX_CUDA_TRY(cudaMemcpy(data() + span.dst_offset, data() + span.src_offset, static_cast<size_t>(span.length),
                            cudaMemcpyDeviceToDevice),
                 what);
    RLX_CUDA_TRY(cudaDeviceSynchronize(), what);
    return {};
  }
  int64_t page_bytes() const override { return paged_ ? paged_->page_bytes() : 0; }
  Status back_rows(int64_t batch, int64_t rows, int64_t seq, int64_t first, int64_t n) override {
    ASSIGN_OR_RETURN(const ByteRange r, sequence_row_range(bytes(), batch, rows, seq, first, n));
    return paged_ ? paged_->back(r.offset, r.length) : Status{};
  }
  Status release_rows(int64_t batch, int64_t rows, int64_t seq, int64_t first, int64_t n) override {
    ASSIGN_OR_RETURN(const ByteRange r, sequence_row_range(bytes(), batch, rows, seq, first, n));
    return paged_ ? paged_->release(r.offset, r.length) : Status{};
  }
  int64_t resident_bytes() const override { return paged_ ? paged_->resident_bytes() : size_; }
  // Before a run or a copy: a paged handle nobody manages is backed whole.
  Status ready() const { return paged_ ? paged_->back_all_unless_managed() : Status{}; }
  // The first `n` bytes (at most bytes(): an executable bound to the front of a larger
  // storage reads its own part) to / from host memory; on a paged handle, what is not
  // backed reads as zeros.
  Status read(void* host, int64_t n) const {
    if (n < 0 || n > size_) return Error::internal("{}: {} bytes read of a {}-byte handle", where(), n, size_);
    TRY(ready());
    if (paged_) return paged_->copy_to_host(host, n);
    RLX_CUDA_TRY(cudaSetDevice(ordinal), where());
    RLX_CUDA_TRY(cudaMemcpy(host, data(), static_cast<size_t>(n), cudaMemcpyDeviceToHost), where());
    return {};
  }
  Status write(const void* host, int64_t n) {
    if (n < 0 || n > size_) return Error::internal("{}: {} bytes written to a {}-byte handle", where(), n, size_);
    TRY(ready());
    if (paged_) return paged_->copy_from_host(host, n);
    RLX_CUDA_TRY(cudaSetDevice(ordinal), where());
    RLX_CUDA_TRY(cudaMemcpy(data(), host, static_cast<size_t>(n), cudaMemcpyHostToDevice), where());
    return {};
  }
  bool paged() const { return paged_ != nullptr; }

 private:
  std::shared_ptr<DeviceBuffer> block_;
  std::unique_ptr<PagedDeviceMemory> paged_;
  int64_t offset_ = 0, size_ = 0;

 public:
  int ordinal = 0;
};

// Weights on the device, shared by every executable that binds the same host bytes
// (set_param_shared: a model's variants bind views of one file mapping): one upload per
// weight and device instead of one per executable. Keyed by the view's owner, address,
// size and device layout; an entry holds neither the owner nor the device copy, so it
// lapses with the last executable that uses it (or with the owner: a new owner at the
// same address is another key's miss).
class DeviceWeightCache {
 public:
  struct Key {
    const void* owner = nullptr;
    const void* data = nullptr;
    size_t size = 0;
    int dtype = 0;
    bool split = false;
    int ordinal = 0;
    auto operator<=>(const Key&) const = default;
  };
  static DeviceWeightCache& get();
  std::shared_ptr<DeviceBuffer> find(const Key& key, const std::shared_ptr<const void>& owner) {
    std::lock_guard<std::mutex> lock(mu_);
    const auto it = entries_.find(key);
    if (it == entries_.end() || it->second.owner.lock() != owner) return nullptr;
    return it->second.buf.lock();
  }
  void put(const Key& key, const std::shared_ptr<const void>& owner, const std::shared_ptr<DeviceBuffer>& buf) {
    std::lock_guard<std::mutex> lock(mu_);
    std::erase_if(entries_, [](const auto& kv) { return kv.second.buf.expired() || kv.second.owner.expired(); });
    entries_[key] = Entry{owner, buf};
  }

 private:
  struct Entry {
    std::weak_ptr<const void> owner;
    std::weak_ptr<DeviceBuffer> buf;
  };
  std::mutex mu_;
  std::map<Key, Entry> entries_;
};

// The run memory (arena, step scratch, cuBLASLt workspace) of one or more executables of a
// device: a model's variants, run in turn, share one block as large as the largest. When
// a sharer needs more, the block is replaced and `generation` moves on: each executable
// points its steps at the new block before its next run.
struct RunBlock final : RunMemory {
  DeviceBuffer buf;
  uint64_t generation = 0;
  int ordinal = 0;
  // The sharer whose run was enqueued last and an event after its work: another sharer's
  // run waits for it on its own stream, so runs committed back to back never overlap.
  const void* last_user = nullptr;
  EventPtr done;
  int64_t bytes() const override { return buf.size(); }
};

// Handles from this size up get their own paged address range (when the device has
// virtual memory management and RLX_CUDA_PAGED_HANDLES is not 0): a KV cache reserved for
// every sequence's whole context takes memory only for the rows the model backs.
constexpr int64_t kPagedHandleMinBytes = int64_t{8} << 20;

/// Whether large handles are paged on device `ordinal` (RLX_CUDA_PAGED_HANDLES and the
/// device's virtual memory management).
bool paged_handles_enabled(int ordinal);

/// Handles of the sizes `bytes` (each at least 8): the small ones in one zeroed block on
/// the current device, the large ones paged (nothing backed until asked, or the first run).
Expected<std::vector<std::shared_ptr<DeviceHandle>>> make_handles(const std::vector<int64_t>& bytes, int ordinal,
                                                                  const std::string& what);

/// Replaces `block`'s memory by `bytes` (the old contents are not kept): its generation
/// moves first, so every sharer points its steps at the new memory before its next run,
/// also when this allocation fails (a sharer then tries again itself).
Status grow_run_block(RunBlock& block, int64_t bytes, const std::string& what);

}  // namespace rlx::cuda_backend
