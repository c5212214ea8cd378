// PagedDeviceMemory (paged_memory.h): a reserved device address range backed chunk by
// chunk through CUDA's virtual memory management.
#include "backends/cuda/paged_memory.h"

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>

#include "backends/cuda/cuda_util.h"

namespace rlx::cuda_backend {
namespace {

// The driver entry points, found once through the runtime (no link against libcuda).
struct DriverVmm {
  decltype(&cuMemGetAllocationGranularity) granularity = nullptr;
  decltype(&cuMemAddressReserve) reserve = nullptr;
  decltype(&cuMemAddressFree) free = nullptr;
  decltype(&cuMemCreate) create = nullptr;
  decltype(&cuMemRelease) release = nullptr;
  decltype(&cuMemMap) map = nullptr;
  decltype(&cuMemUnmap) unmap = nullptr;
  decltype(&cuMemSetAccess) set_access = nullptr;
  decltype(&cuDeviceGet) device_get = nullptr;
  decltype(&cuDeviceGetAttribute) attribute = nullptr;
  bool ok = false;
};

template <class F>
bool find_entry(const char* name, F& fn) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult found{};
  if (cudaGetDriverEntryPointByVersion(name, &p, 12000, cudaEnableDefault, &found) != cudaSuccess ||
      found != cudaDriverEntryPointSuccess || !p)
    return false;
  fn = reinterpret_cast<F>(p);
  return true;
}

const DriverVmm& driver() {
  static const DriverVmm d = [] {
    DriverVmm v;
    v.ok = find_entry("cuMemGetAllocationGranularity", v.granularity) && find_entry("cuMemAddressReserve", v.reserve) &&
           find_entry("cuMemAddressFree", v.free) && find_entry("cuMemCreate", v.create) &&
           find_entry("cuMemRelease", v.release) && find_entry("cuMemMap", v.map) &&
           find_entry("cuMemUnmap", v.unmap) && find_entry("cuMemSetAccess", v.set_access) &&
           find_entry("cuDeviceGet", v.device_get) && find_entry("cuDeviceGetAttribute", v.attribute);
    return v;
  }();
  return d;
}

CUmemAllocationProp device_prop(int ordinal) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = ordinal;
  return prop;
}

Error driver_error(CUresult r, const char* call, const std::string& what) {
  if (r == CUDA_ERROR_OUT_OF_MEMORY)
    return Error::resource_exhausted("cuda backend: {} in {}: the device has no memory left", call, what);
  return Error::internal("cuda backend: {} failed in {} (CUresult {})", call, what, static_cast<int>(r));
}

// Makes `ordinal` the calling thread's device for a scope and restores the one before
// (the model's thread keeps the device its executables set).
class DeviceScope {
 public:
  explicit DeviceScope(int ordinal) {
    if (cudaGetDevice(&before_) != cudaSuccess) before_ = -1;
    ok_ = cudaSetDevice(ordinal) == cudaSuccess;
  }
  ~DeviceScope() {
    if (before_ >= 0) (void)cudaSetDevice(before_);
  }
  bool ok() const { return ok_; }

 private:
  int before_ = -1;
  bool ok_ = false;
};

}  // namespace

bool PagedDeviceMemory::supported(int ordinal) {
  if (!driver().ok) return false;
  CUdevice dev = 0;
  int vmm = 0;
  if (driver().device_get(&dev, ordinal) != CUDA_SUCCESS) return false;
  if (driver().attribute(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev) != CUDA_SUCCESS) return false;
  return vmm != 0;
}

Expected<std::unique_ptr<PagedDeviceMemory>> PagedDeviceMemory::reserve(int64_t bytes, int ordinal,
                                                                        const std::string& what) {
  if (!supported(ordinal))
    return Error::unsupported("cuda backend: device {} has no virtual memory management ({})", ordinal, what);
  const DriverVmm& d = driver();
  std::unique_ptr<PagedDeviceMemory> m(new PagedDeviceMemory());
  m->bytes_ = bytes;
  m->ordinal_ = ordinal;
  m->what_ = what;
  const CUmemAllocationProp prop = device_prop(ordinal);
  size_t gran = 0;
  if (CUresult r = d.granularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM); r != CUDA_SUCCESS || gran == 0)
    return driver_error(r, "cuMemGetAllocationGranularity", what);
  m->granularity_ = gran;
  m->reserved_ = (static_cast<size_t>(std::max<int64_t>(bytes, 1)) + gran - 1) / gran * gran;
  CUdeviceptr base = 0;
  if (CUresult r = d.reserve(&base, m->reserved_, gran, 0, 0); r != CUDA_SUCCESS)
    return driver_error(r, "cuMemAddressReserve", what);
  m->base_ = base;
  m->chunks_.assign(m->reserved_ / gran, 0);
  return m;
}

PagedDeviceMemory::~PagedDeviceMemory() {
  if (!base_) return;
  DeviceScope device(ordinal_);
  if (mapped_ > 0) (void)cudaDeviceSynchronize();
  for (size_t i = 0; i < chunks_.size(); ++i) unmap_chunk(i);
  driver().free(static_cast<CUdeviceptr>(base_), reserved_);
}

Status PagedDeviceMemory::map_chunk(size_t index) {
  const DriverVmm& d = driver();
  const CUmemAllocationProp prop = device_prop(ordinal_);
  CUmemGenericAllocationHandle h = 0;
  if (CUresult r = d.create(&h, granularity_, &prop, 0); r != CUDA_SUCCESS) return driver_error(r, "cuMemCreate", what_);
  const CUdeviceptr at = static_cast<CUdeviceptr>(base_) + index * granularity_;
  if (CUresult r = d.map(at, granularity_, 0, h, 0); r != CUDA_SUCCESS) {
    d.release(h);
    return driver_error(r, "cuMemMap", what_);
  }
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = ordinal_;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  if (CUresult r = d.set_access(at, granularity_, &access, 1); r != CUDA_SUCCESS) {
    d.unmap(at, granularity_);
    d.release(h);
    return driver_error(r, "cuMemSetAccess", what_);
  }
  chunks_[index] = static_cast<unsigned long long>(h);
  mapped_ += static_cast<int64_t>(granularity_);
  DeviceMemoryCount::add(static_cast<int64_t>(granularity_));
  return {};
}

void PagedDeviceMemory::unmap_chunk(size_t index) {
  if (!chunks_[index]) return;
  const DriverVmm& d = driver();
  d.unmap(static_cast<CUdeviceptr>(base_) + index * granularity_, granularity_);
  d.release(static_cast<CUmemGenericAllocationHandle>(chunks_[index]));
  chunks_[index] = 0;
  mapped_ -= static_cast<int64_t>(granularity_);
  DeviceMemoryCount::live().fetch_sub(static_cast<int64_t>(granularity_));
}

Status PagedDeviceMemory::back(int64_t offset, int64_t length) {
  std::lock_guard<std::mutex> lock(mu_);
  managed_ = true;
  if (offset < 0 || length < 0 || offset > bytes_ || length > bytes_ - offset)
    return Error::invalid_argument("back: bytes [{}, +{}) outside {} bytes ({})", offset, length, bytes_, what_);
  if (length == 0) return {};
  const size_t first = static_cast<size_t>(offset) / granularity_;
  const size_t last = (static_cast<size_t>(offset + length) - 1) / granularity_;
  DeviceScope device(ordinal_);
  if (!device.ok()) return Error::internal("cuda backend: cannot select cuda:{} ({})", ordinal_, what_);
  // Map every missing chunk first; on a failure give back what this call mapped, so a
  // failed back leaves nothing behind.
  std::vector<size_t> fresh;
  for (size_t i = first; i <= last; ++i) {
    if (chunks_[i]) continue;
    if (Status st = map_chunk(i); !st.ok()) {
      for (size_t j : fresh) unmap_chunk(j);
      return st;
    }
    fresh.push_back(i);
  }
  if (fresh.empty()) return {};
  // New memory reads as zeros, as the rest of a handle does before it is written; the
  // wait orders the zeroing before any stream's next work.
  cudaError_t e = cudaSuccess;
  for (size_t i : fresh)
    if (e == cudaSuccess) e = cudaMemset(data() + i * granularity_, 0, granularity_);
  const cudaError_t waited = cudaDeviceSynchronize();
  if (e == cudaSuccess) e = waited;
  if (e != cudaSuccess) {
    for (size_t j : fresh) unmap_chunk(j);
    return cuda_error(e, "cudaMemset of new KV memory", what_);
  }
  return {};
}

Status PagedDeviceMemory::release(int64_t offset, int64_t length) {
  std::lock_guard<std::mutex> lock(mu_);
  managed_ = true;
  if (offset < 0 || length < 0 || offset > bytes_ || length > bytes_ - offset)
    return Error::invalid_argument("release: bytes [{}, +{}) outside {} bytes ({})", offset, length, bytes_, what_);
  // Whole chunks inside the range; the range's end at bytes_ covers the last chunk's tail.
  const size_t begin = (static_cast<size_t>(offset) + granularity_ - 1) / granularity_;
  const size_t end_byte = offset + length == bytes_ ? reserved_ : static_cast<size_t>(offset + length);
  const size_t end = end_byte / granularity_;
  bool any = false;
  for (size_t i = begin; i < end; ++i) any = any || chunks_[i] != 0;
  if (!any) return {};
  DeviceScope device(ordinal_);
  RLX_CUDA_TRY(cudaDeviceSynchronize(), what_);
  for (size_t i = begin; i < end; ++i) unmap_chunk(i);
  return {};
}

Status PagedDeviceMemory::back_all_unless_managed() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (managed_) return {};
  }
  TRY(back(0, bytes_));
  return {};
}

int64_t PagedDeviceMemory::resident_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return mapped_;
}

Status PagedDeviceMemory::copy_to_host(void* dst, int64_t n) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (n < 0 || n > bytes_) return Error::internal("{}: {} bytes read of {}", what_, n, bytes_);
  DeviceScope device(ordinal_);
  auto* out = static_cast<uint8_t*>(dst);
  for (size_t i = 0; i < chunks_.size(); ++i) {
    const size_t at = i * granularity_;
    if (static_cast<int64_t>(at) >= n) break;
    const size_t len = std::min(granularity_, static_cast<size_t>(n) - at);
    if (chunks_[i]) RLX_CUDA_TRY(cudaMemcpy(out + at, data() + at, len, cudaMemcpyDeviceToHost), what_);
    else std::memset(out + at, 0, len);
  }
  return {};
}

Status PagedDeviceMemory::copy_from_host(const void* src, int64_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  if (n < 0 || n > bytes_) return Error::internal("{}: {} bytes written to {}", what_, n, bytes_);
  DeviceScope device(ordinal_);
  const auto* in = static_cast<const uint8_t*>(src);
  for (size_t i = 0; i < chunks_.size(); ++i) {
    const size_t at = i * granularity_;
    if (static_cast<int64_t>(at) >= n) break;
    const size_t len = std::min(granularity_, static_cast<size_t>(n) - at);
    if (chunks_[i]) {
      RLX_CUDA_TRY(cudaMemcpy(data() + at, in + at, len, cudaMemcpyHostToDevice), what_);
    } else if (std::any_of(in + at, in + at + len, [](uint8_t b) { return b != 0; })) {
      return Error::invalid_argument("{}: bytes from {} are not backed by memory (a paged handle); back them first",
                                     what_, at);
    }
  }
  return {};
}

}  // namespace rlx::cuda_backend
