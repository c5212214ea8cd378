// Raising a kernel's dynamic shared-memory limit above the default 48 KB once per device,
// so that the launch itself (possibly inside a CUDA graph capture, where the attribute
// call does not belong) only reads it.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

namespace rlx::cuda_backend {

/// Sets cudaFuncAttributeMaxDynamicSharedMemorySize of `Kernel` to `bytes` on the current
/// device the first time it is called there (`bytes` must be the most any launch of it
/// asks for). A failure surfaces at the launch that needed it.
template <auto Kernel>
void raise_smem_limit(int bytes) {
  static std::atomic<uint64_t> raised{0};
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || device < 0) return;
  const uint64_t bit = device < 64 ? uint64_t{1} << device : 0;
  if (bit != 0 && (raised.load(std::memory_order_acquire) & bit) != 0) return;
  if (cudaFuncSetAttribute(Kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes) == cudaSuccess)
    raised.fetch_or(bit, std::memory_order_acq_rel);
}

}  // namespace rlx::cuda_backend
