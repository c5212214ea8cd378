// PagedDeviceMemory: a device address range reserved whole and backed chunk by chunk
// with CUDA's virtual memory management (cuMemAddressReserve / cuMemCreate / cuMemMap),
// for the large handles of an executable (a stacked KV cache [batch, ctx, row]): the
// address never changes (kernels and captured CUDA graphs keep their pointers), while
// memory backs only the rows the model asks for and is given back when it releases
// them. The driver entry points come through the runtime (cudaGetDriverEntryPoint-
// ByVersion), so nothing links libcuda and a machine without a GPU still loads the
// backend.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "rlx/base/status.h"

namespace rlx::cuda_backend {

class PagedDeviceMemory {
 public:
  /// True when device `ordinal` supports virtual memory management (and the driver's
  /// entry points were found); the backend then reserves large handles this way.
  static bool supported(int ordinal);
  /// Reserves `bytes` (rounded up to the allocation granularity) of address space on
  /// device `ordinal`; nothing is backed yet.
  static Expected<std::unique_ptr<PagedDeviceMemory>> reserve(int64_t bytes, int ordinal, const std::string& what);
  ~PagedDeviceMemory();
  PagedDeviceMemory(const PagedDeviceMemory&) = delete;
  PagedDeviceMemory& operator=(const PagedDeviceMemory&) = delete;

  uint8_t* data() const { return reinterpret_cast<uint8_t*>(base_); }
  int64_t bytes() const { return bytes_; }
  /// The allocation granularity: the unit memory backs the range in.
  int64_t page_bytes() const { return static_cast<int64_t>(granularity_); }
  /// Maps memory under every chunk that [offset, offset + length) touches and is not
  /// mapped yet, and zeroes it (kResourceExhausted when the device has no memory left).
  /// Marks the range as managed: run() no longer backs it whole.
  Status back(int64_t offset, int64_t length);
  /// Unmaps the chunks that lie wholly inside [offset, offset + length), after waiting
  /// for the device (a kernel still in flight may read them).
  Status release(int64_t offset, int64_t length);
  /// Backs the whole range unless back() or release() was ever called (a graph run
  /// directly: the storage then behaves as a plain allocation).
  Status back_all_unless_managed();
  int64_t resident_bytes() const;
  /// Copies the first `n` bytes to host memory: mapped chunks as they are, unmapped ones
  /// as zeros.
  Status copy_to_host(void* dst, int64_t n) const;
  /// Copies `n` bytes of host memory over the first `n` bytes: into mapped chunks; where a
  /// chunk is not mapped, `src` must hold zeros (else an error: it would need memory).
  Status copy_from_host(const void* src, int64_t n);

 private:
  PagedDeviceMemory() = default;
  Status map_chunk(size_t index);
  void unmap_chunk(size_t index);

  unsigned long long base_ = 0;  // CUdeviceptr
  int64_t bytes_ = 0;
  size_t reserved_ = 0, granularity_ = 0;
  int ordinal_ = 0;
  std::string what_;
  bool managed_ = false;
  std::vector<unsigned long long> chunks_;  // CUmemGenericAllocationHandle per chunk; 0: not mapped
  int64_t mapped_ = 0;
  mutable std::mutex mu_;
};

}  // namespace rlx::cuda_backend
