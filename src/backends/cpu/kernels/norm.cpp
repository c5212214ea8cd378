// Norm drivers: rows split across the pool in blocks, each row handled by the
// per-ISA row kernel (one pass for the statistic, one for the output).
#include "backends/cpu/kernels/norm.h"

#include <algorithm>

#include "backends/cpu/kernels/isa_kernels.h"

namespace rlx::cpu {
namespace {

template <typename Row>
void for_rows(const KernelContext& ctx, int64_t rows, int64_t n, Row row) {
  if (rows <= 0 || n <= 0) return;
  const int64_t per = std::max<int64_t>(1, 8192 / n);
  const int64_t tasks = (rows + per - 1) / per;
  parallel_for(ctx, tasks, [&](int64_t t) {
    const int64_t r1 = std::min(rows, (t + 1) * per);
    for (int64_t r = t * per; r < r1; ++r) row(r * n);
  });
}

}  // namespace

void rms_norm_f32(const KernelContext& ctx, const float* x, const float* w, float* y, int64_t rows, int64_t n,
                  float eps) {
  const detail::IsaKernels& kk = detail::isa_kernels(ctx.isa);
  for_rows(ctx, rows, n, [&](int64_t o) { kk.rms_norm_row(x + o, nullptr, nullptr, w, y + o, n, eps); });
}

void layer_norm_f32(const KernelContext& ctx, const float* x, const float* gamma, const float* beta, float* y,
                    int64_t rows, int64_t n, float eps) {
  const detail::IsaKernels& kk = detail::isa_kernels(ctx.isa);
  for_rows(ctx, rows, n,
           [&](int64_t o) { kk.layer_norm_row(x + o, nullptr, nullptr, gamma, beta, y + o, n, eps); });
}

void add_rms_norm_f32(const KernelContext& ctx, const float* x, const float* residual, float* sum,
                      const float* w, float* y, int64_t rows, int64_t n, float eps) {
  const detail::IsaKernels& kk = detail::isa_kernels(ctx.isa);
  for_rows(ctx, rows, n, [&](int64_t o) { kk.rms_norm_row(x + o, residual + o, sum + o, w, y + o, n, eps); });
}

void add_layer_norm_f32(const KernelContext& ctx, const float* x, const float* residual, float* sum,
                        const float* gamma, const float* beta, float* y, int64_t rows, int64_t n, float eps) {
  const detail::IsaKernels& kk = detail::isa_kernels(ctx.isa);
  for_rows(ctx, rows, n,
           [&](int64_t o) { kk.layer_norm_row(x + o, residual + o, sum + o, gamma, beta, y + o, n, eps); });
}

}  // namespace rlx::cpu
