// Device storage of the CUDA backend (device_storage.h): paged or block handles, the
// shared weights cache, the shared run memory block.
#include "backends/cuda/device_storage.h"

#include "rlx/base/env.h"

namespace rlx::cuda_backend {

DeviceWeightCache& DeviceWeightCache::get() {
  static DeviceWeightCache cache;
  return cache;
}

bool paged_handles_enabled(int ordinal) {
  return env_config().cuda_paged_handles && PagedDeviceMemory::supported(ordinal);
}

Expected<std::vector<std::shared_ptr<DeviceHandle>>> make_handles(const std::vector<int64_t>& bytes, int ordinal,
                                                                  const std::string& what) {
  std::vector<std::shared_ptr<DeviceHandle>> out(bytes.size());
  if (bytes.empty()) return out;
  const bool paging = paged_handles_enabled(ordinal);
  std::vector<int64_t> offsets(bytes.size(), -1);
  int64_t total = 0;
  for (size_t i = 0; i < bytes.size(); ++i) {
    if (paging && bytes[i] >= kPagedHandleMinBytes) {
      ASSIGN_OR_RETURN(std::unique_ptr<PagedDeviceMemory> m, PagedDeviceMemory::reserve(bytes[i], ordinal, what));
      out[i] = std::make_shared<DeviceHandle>(std::move(m), ordinal);
      continue;
    }
    offsets[i] = total;
    total += (std::max<int64_t>(bytes[i], 8) + 255) / 256 * 256;
  }
  if (total == 0) return out;
  ASSIGN_OR_RETURN(DeviceBuffer buf, DeviceBuffer::create(total, what));
  RLX_CUDA_TRY(cudaMemset(buf.data(), 0, static_cast<size_t>(total)), what);
  auto block = std::make_shared<DeviceBuffer>(std::move(buf));
  for (size_t i = 0; i < bytes.size(); ++i)
    if (offsets[i] >= 0)
      out[i] = std::make_shared<DeviceHandle>(block, offsets[i], std::max<int64_t>(bytes[i], 8), ordinal);
  return out;
}

Status grow_run_block(RunBlock& block, int64_t bytes, const std::string& what) {
  RLX_CUDA_TRY(cudaSetDevice(block.ordinal), what);
  RLX_CUDA_TRY(cudaDeviceSynchronize(), what);  // nothing may still run in the old memory
  ++block.generation;
  const int64_t old = block.buf.size();
  block.buf = DeviceBuffer();
  Expected<DeviceBuffer> grown = DeviceBuffer::create(bytes, what);
  if (!grown) {
    // Keep the sharers that fit able to run: the old size again (freed just now).
    if (old > 0)
      if (Expected<DeviceBuffer> again = DeviceBuffer::create(old, what)) block.buf = std::move(*again);
    return grown.error();
  }
  block.buf = std::move(*grown);
  return {};
}


}  // namespace rlx::cuda_backend
