// The CUDA check mode's kernel (CudaOptions::check_finite, RLX_CHECK_FINITE=1): after a
// step, scan its floating-point result and record, in stream order, the first step that
// produced a NaN or an infinity and the smallest such element of it.
#include "backends/cuda/cuda_common.cuh"

namespace rlx::cuda_backend {
namespace {

__global__ void check_finite_kernel(const void* data, DT dt, int64_t n, int step, FiniteRecord* rec) {
  pdl_wait();
  // A step before this one already recorded: nothing to add (the record is the first).
  const int seen = *reinterpret_cast<volatile int*>(&rec->step);
  if (seen != 0 && seen != step + 1) return;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float v = ld_f(dt, data, i);
    if (isfinite(v)) continue;
    const int prev = atomicCAS(&rec->step, 0, step + 1);
    if (prev != 0 && prev != step + 1) return;
    const unsigned long long at = i < 0xffffffffLL ? static_cast<unsigned long long>(i) : 0xffffffffull;
    atomicMin(&rec->first, at << 32 | __float_as_uint(v));
  }
  pdl_trigger();
}

}  // namespace

void launch_check_finite(const void* data, DT dt, int64_t n, int step, FiniteRecord* rec, cudaStream_t s) {
  if (n <= 0) return;
  launch_k(check_finite_kernel, grid_for(n, 256, 1024), 256, 0, s, data, dt, n, step, rec);
}

}  // namespace rlx::cuda_backend
