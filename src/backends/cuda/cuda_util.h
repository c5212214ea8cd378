// RAII owners and checked-call helpers for the CUDA backend's host code: device and
// pinned buffers, streams, events, CUDA graphs and the cuBLASLt handle, plus RLX_CUDA_TRY /
// RLX_CUBLAS_TRY, which turn a failed call into an rlx::Error naming the call and
// where it happened (op and node for kernel work).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "rlx/base/status.h"

namespace rlx::cuda_backend {

inline Error cuda_error(cudaError_t e, const char* call, const std::string& where) {
  if (e == cudaErrorMemoryAllocation)  // the device's memory, not a bug: say so
    return Error::resource_exhausted("cuda backend: {} failed{}{}: the device has no memory left ({})", call,
                                     where.empty() ? "" : " in ", where, cudaGetErrorName(e));
  return Error::internal("cuda backend: {} failed{}{}: {} ({})", call, where.empty() ? "" : " in ", where,
                         cudaGetErrorString(e), cudaGetErrorName(e));
}
inline Error cublas_error(cublasStatus_t s, const char* call, const std::string& where) {
  return Error::internal("cuda backend: {} failed{}{}: {}", call, where.empty() ? "" : " in ", where,
                         cublasLtGetStatusString(s));
}

/// Returns an Error from the enclosing function when the CUDA runtime call fails.
#define RLX_CUDA_TRY(call, where)                                              \
  do {                                                                         \
    const cudaError_t rlx_cuda_e_ = (call);                                    \
    if (rlx_cuda_e_ != cudaSuccess) return ::rlx::cuda_backend::cuda_error(rlx_cuda_e_, #call, (where)); \
  } while (0)
/// The same for cuBLASLt calls.
#define RLX_CUBLAS_TRY(call, where)                                            \
  do {                                                                         \
    const cublasStatus_t rlx_cublas_s_ = (call);                               \
    if (rlx_cublas_s_ != CUBLAS_STATUS_SUCCESS) return ::rlx::cuda_backend::cublas_error(rlx_cublas_s_, #call, (where)); \
  } while (0)

/// Device memory the process holds through DeviceBuffer now and at most (all devices
/// together): what `rlx bench` reports as peak device memory.
struct DeviceMemoryCount {
  static std::atomic<int64_t>& live() {
    static std::atomic<int64_t> bytes{0};
    return bytes;
  }
  static std::atomic<int64_t>& peak() {
    static std::atomic<int64_t> bytes{0};
    return bytes;
  }
  static void add(int64_t bytes) {
    const int64_t now = live().fetch_add(bytes) + bytes;
    int64_t seen = peak().load();
    while (now > seen && !peak().compare_exchange_weak(seen, now)) {
    }
  }
};

struct DeviceFree {
  int64_t bytes = 0;
  void operator()(void* p) const {
    cudaFree(p);
    DeviceMemoryCount::live().fetch_sub(bytes);
  }
};
struct HostFree {
  void operator()(void* p) const { cudaFreeHost(p); }
};

/// Device memory (cudaMalloc); `bytes` may be 0 (no allocation).
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  static Expected<DeviceBuffer> create(int64_t bytes, const std::string& what) {
    DeviceBuffer b;
    if (bytes > 0) {
      void* p = nullptr;
      RLX_CUDA_TRY(cudaMalloc(&p, static_cast<size_t>(bytes)), what);
      b.ptr_ = std::unique_ptr<void, DeviceFree>(p, DeviceFree{bytes});
      DeviceMemoryCount::add(bytes);
    }
    b.bytes_ = bytes;
    return b;
  }
  uint8_t* data() const { return static_cast<uint8_t*>(ptr_.get()); }
  int64_t size() const { return bytes_; }

 private:
  std::unique_ptr<void, DeviceFree> ptr_;
  int64_t bytes_ = 0;
};

/// Page-locked host memory (cudaMallocHost) for asynchronous copies.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  static Expected<PinnedBuffer> create(int64_t bytes, const std::string& what) {
    PinnedBuffer b;
    if (bytes > 0) {
      void* p = nullptr;
      RLX_CUDA_TRY(cudaMallocHost(&p, static_cast<size_t>(bytes)), what);
      b.ptr_.reset(p);
    }
    b.bytes_ = bytes;
    return b;
  }
  uint8_t* data() const { return static_cast<uint8_t*>(ptr_.get()); }
  int64_t size() const { return bytes_; }

 private:
  std::unique_ptr<void, HostFree> ptr_;
  int64_t bytes_ = 0;
};

struct StreamDestroy {
  void operator()(CUstream_st* s) const { cudaStreamDestroy(s); }
};
struct EventDestroy {
  void operator()(CUevent_st* e) const { cudaEventDestroy(e); }
};
struct GraphExecDestroy {
  void operator()(CUgraphExec_st* g) const { cudaGraphExecDestroy(g); }
};
struct GraphDestroy {
  void operator()(CUgraph_st* g) const { cudaGraphDestroy(g); }
};
struct LtDestroy {
  void operator()(cublasLtContext* h) const { cublasLtDestroy(h); }
};
using StreamPtr = std::unique_ptr<CUstream_st, StreamDestroy>;
using EventPtr = std::unique_ptr<CUevent_st, EventDestroy>;
using LtHandlePtr = std::unique_ptr<cublasLtContext, LtDestroy>;
using GraphExecPtr = std::unique_ptr<CUgraphExec_st, GraphExecDestroy>;
using GraphPtr = std::unique_ptr<CUgraph_st, GraphDestroy>;

}  // namespace rlx::cuda_backend
