// RoPE: the caller's pair frequencies (double), one cos/sin table per row shared by
// every head, rows split across the pool.
#include "backends/cpu/kernels/rope.h"

#include <algorithm>
#include <cmath>

namespace rlx::cpu {

void rope_f32(const KernelContext& ctx, const RopeParams& p, const float* x, const int32_t* pos, float* y) {
  const int64_t n_rot = p.n_rot > 0 ? p.n_rot : p.head_dim, half = n_rot / 2, D = p.head_dim, H = p.n_heads;
  const int64_t xs = p.x_stride ? p.x_stride : H * D, ys = p.y_stride ? p.y_stride : H * D;
  if (p.seq <= 0 || H <= 0 || D <= 0) return;
  const int64_t per = std::max<int64_t>(1, 4096 / (H * D));
  const int64_t tasks = (p.seq + per - 1) / per;
  parallel_for(ctx, tasks, [&](int64_t t) {
    auto* cs = static_cast<float*>(thread_scratch(ScratchSlot::kTemp, static_cast<size_t>(2 * half) * sizeof(float)));
    float* sn = cs + half;  // cos[half], sin[half]
    const double* freq = p.inv_freq;
    const int64_t s1 = std::min(p.seq, (t + 1) * per);
    for (int64_t s = t * per; s < s1; ++s) {
      for (int64_t i = 0; i < half; ++i) {
        const double ang = static_cast<double>(pos[s]) * freq[i];
        cs[i] = static_cast<float>(std::cos(ang)) * p.mscale;
        sn[i] = static_cast<float>(std::sin(ang)) * p.mscale;
      }
      const float* xr = x + s * xs;
      float* yr = y + s * ys;
      for (int64_t h = 0; h < H; ++h) {
        const float* xh = xr + h * D;
        float* yh = yr + h * D;
        if (p.layout == RopeLayout::kNormal) {
          for (int64_t i = 0; i < half; ++i) {
            const float a = xh[2 * i], b = xh[2 * i + 1];
            yh[2 * i] = a * cs[i] - b * sn[i];
            yh[2 * i + 1] = a * sn[i] + b * cs[i];
          }
        } else {
          for (int64_t i = 0; i < half; ++i) {
            const float a = xh[i], b = xh[i + half];
            yh[i] = a * cs[i] - b * sn[i];
            yh[i + half] = a * sn[i] + b * cs[i];
          }
        }
        if (yh != xh)
          for (int64_t d = n_rot; d < D; ++d) yh[d] = xh[d];
      }
    }
  });
}

}  // namespace rlx::cpu
