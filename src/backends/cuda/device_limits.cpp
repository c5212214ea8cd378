// The CUDA backend's device limits for benchmarks: the GPU's name and memory, its
// device-to-device copy bandwidth (the decode roofline) and cuBLASLt's time for an f16
// GEMM (the prefill bound), measured when asked on the backend's own device.
#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_step.h"
#include "backends/cuda/cuda_util.h"
#include "rlx/base/half.h"

namespace rlx::cuda_backend {
namespace {

/// Median time in ms of `timed` calls of `call` on stream `st` (after `warm` untimed ones).
template <typename Call>
Expected<double> median_ms(cudaStream_t st, int warm, int timed, const std::string& what, Call&& call) {
  for (int i = 0; i < warm; ++i) TRY(call(i));
  cudaEvent_t e0 = nullptr, e1 = nullptr;
  RLX_CUDA_TRY(cudaEventCreate(&e0), what);
  EventPtr ev0(e0);
  RLX_CUDA_TRY(cudaEventCreate(&e1), what);
  EventPtr ev1(e1);
  std::vector<float> ms;
  for (int i = 0; i < timed; ++i) {
    RLX_CUDA_TRY(cudaEventRecord(e0, st), what);
    TRY(call(warm + i));
    RLX_CUDA_TRY(cudaEventRecord(e1, st), what);
    RLX_CUDA_TRY(cudaEventSynchronize(e1), what);
    float t = 0;
    RLX_CUDA_TRY(cudaEventElapsedTime(&t, e0, e1), what);
    ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  return static_cast<double>(ms[ms.size() / 2]);
}

Expected<StreamPtr> new_stream(const std::string& what) {
  cudaStream_t raw = nullptr;
  RLX_CUDA_TRY(cudaStreamCreateWithFlags(&raw, cudaStreamNonBlocking), what);
  return StreamPtr(raw);
}

}  // namespace

Expected<DeviceLimits> CudaBackend::measure_device_limits() {
  const std::string what = fmt::format("cuda:{} limits", ordinal_);
  RLX_CUDA_TRY(cudaSetDevice(ordinal_), what);
  cudaDeviceProp prop{};
  RLX_CUDA_TRY(cudaGetDeviceProperties(&prop, ordinal_), what);
  DeviceLimits l;
  l.device_name = prop.name;
  size_t free_bytes = 0, total_bytes = 0;
  RLX_CUDA_TRY(cudaMemGetInfo(&free_bytes, &total_bytes), what);
  l.memory_bytes = static_cast<int64_t>(total_bytes);
  // 1 GiB each way, or less when the model leaves less free: a copy of twice the L2
  // still streams from DRAM.
  const int64_t floor = std::max<int64_t>(int64_t{64} << 20, 2 * static_cast<int64_t>(prop.l2CacheSize));
  const int64_t bytes = std::min<int64_t>(int64_t{1} << 30, static_cast<int64_t>(free_bytes / 4) & ~int64_t{4095});
  if (bytes < floor)
    return Error::unsupported("{}: {} MB free on the device, too little for the copy-bandwidth probe", what,
                              free_bytes >> 20);
  ASSIGN_OR_RETURN(DeviceBuffer src, DeviceBuffer::create(bytes, what));
  ASSIGN_OR_RETURN(DeviceBuffer dst, DeviceBuffer::create(bytes, what));
  RLX_CUDA_TRY(cudaMemset(src.data(), 1, static_cast<size_t>(bytes)), what);
  ASSIGN_OR_RETURN(StreamPtr st, new_stream(what));
  ASSIGN_OR_RETURN(double ms, median_ms(st.get(), 3, 20, what, [&](int) -> Status {
                     RLX_CUDA_TRY(cudaMemcpyAsync(dst.data(), src.data(), static_cast<size_t>(bytes),
                                                  cudaMemcpyDeviceToDevice, st.get()),
                                  what);
                     return {};
                   }));
  l.copy_bytes_per_s = 2.0 * static_cast<double>(bytes) / (ms * 1e-3);
  return l;
}

Expected<double> CudaBackend::measure_gemm_ms(int64_t m, int64_t n, int64_t k, ir::DType out) {
  const std::string what = fmt::format("cuda:{} gemm probe {}x{}x{}", ordinal_, m, n, k);
  if (m < 1 || n < 1 || k < 1) return Error::invalid_argument("{}: every size must be at least 1", what);
  if (out != ir::DType::F32 && out != ir::DType::F16)
    return Error::invalid_argument("{}: the output is f32 or f16, not {}", what, ir::dtype_name(out));
  RLX_CUDA_TRY(cudaSetDevice(ordinal_), what);
  int l2 = 0;
  RLX_CUDA_TRY(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, ordinal_), what);
  // Enough weight copies that a call never finds its weights in the L2 the call before
  // left (twice the L2 between two uses of one copy).
  const int64_t w_bytes = n * k * 2;
  const int copies = static_cast<int>(std::clamp<int64_t>(2 * static_cast<int64_t>(l2) / w_bytes + 1, 2, 64));
  // Values in [-1, 1) from a cheap integer hash (the time of a GEMM does not depend on them).
  std::vector<uint16_t> host(static_cast<size_t>(std::max(m * k, n * k)));
  uint32_t state = 7;
  for (uint16_t& h : host) {
    state = state * 1664525u + 1013904223u;
    h = f32_to_f16_bits(static_cast<float>(state >> 8) * 0x1p-23f - 1.0f);
  }
  ASSIGN_OR_RETURN(DeviceBuffer x, DeviceBuffer::create(m * k * 2, what));
  RLX_CUDA_TRY(cudaMemcpy(x.data(), host.data(), static_cast<size_t>(m * k * 2), cudaMemcpyHostToDevice), what);
  std::vector<DeviceBuffer> w;
  for (int i = 0; i < copies; ++i) {
    ASSIGN_OR_RETURN(DeviceBuffer b, DeviceBuffer::create(w_bytes, what));
    RLX_CUDA_TRY(cudaMemcpy(b.data(), host.data(), static_cast<size_t>(w_bytes), cudaMemcpyHostToDevice), what);
    w.push_back(std::move(b));
  }
  const DT c_dt = out == ir::DType::F32 ? DT::F32 : DT::F16;
  ASSIGN_OR_RETURN(DeviceBuffer c, DeviceBuffer::create(m * n * (c_dt == DT::F32 ? 4 : 2), what));
  const size_t ws_bytes = size_t{32} << 20;
  ASSIGN_OR_RETURN(DeviceBuffer ws, DeviceBuffer::create(static_cast<int64_t>(ws_bytes), what));
  cublasLtHandle_t raw = nullptr;
  RLX_CUBLAS_TRY(cublasLtCreate(&raw), what);
  LtHandlePtr lt(raw);
  ASSIGN_OR_RETURN(StreamPtr st, new_stream(what));
  GemmDesc g;
  g.M = m;
  g.N = n;
  g.K = k;
  g.tb = true;
  g.ab_dt = DT::F16;
  g.c_dt = c_dt;
  ASSIGN_OR_RETURN(LtPlan p, make_lt_plan(lt.get(), g, ws_bytes, what));
  const float alpha = 1.0f, beta = 0.0f;
  return median_ms(st.get(), 5, 30, what, [&](int i) -> Status {
    RLX_CUBLAS_TRY(cublasLtMatmul(lt.get(), p.op, &alpha, w[static_cast<size_t>(i % copies)].data(), p.a, x.data(), p.b,
                                  &beta, c.data(), p.c, c.data(), p.c, &p.algo, ws.data(), ws_bytes, st.get()),
                   what);
    return {};
  });
}

int64_t CudaBackend::peak_device_bytes() const { return DeviceMemoryCount::peak().load(); }

}  // namespace rlx::cuda_backend
