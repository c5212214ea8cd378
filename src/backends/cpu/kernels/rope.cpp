// RoPE: frequencies (with llama3/linear scaling) computed in double, one cos/sin table
// per row shared by every head, rows split across the pool.
#include "backends/cpu/kernels/rope.h"

#include <algorithm>
#include <cmath>

namespace rlx::cpu {
namespace {

int64_t rot_dims(const RopeParams& p) { return p.n_rot > 0 ? p.n_rot : p.head_dim; }

double inv_freq_at(const RopeParams& p, int64_t i) {
  const int64_t n_rot = rot_dims(p);
  const double f = std::pow(static_cast<double>(p.theta), -2.0 * static_cast<double>(i) / static_cast<double>(n_rot));
  switch (p.scaling) {
    case RopeScaling::kNone: return f;
    case RopeScaling::kLinear: return f / p.factor;
    case RopeScaling::kLlama3: {
      const double old_ctx = static_cast<double>(p.original_context);
      const double low_wavelen = old_ctx / p.low_freq_factor;
      const double high_wavelen = old_ctx / p.high_freq_factor;
      const double wavelen = 2.0 * M_PI / f;
      if (wavelen < high_wavelen) return f;
      if (wavelen > low_wavelen) return f / p.factor;
      const double smooth = (old_ctx / wavelen - p.low_freq_factor) / (p.high_freq_factor - p.low_freq_factor);
      return (1.0 - smooth) * f / p.factor + smooth * f;
    }
  }
  return f;
}

}  // namespace

void rope_inv_freq(const RopeParams& p, float* inv_freq) {
  const int64_t half = rot_dims(p) / 2;
  for (int64_t i = 0; i < half; ++i) inv_freq[i] = static_cast<float>(inv_freq_at(p, i));
}

void rope_f32(const KernelContext& ctx, const RopeParams& p, const float* x, const int32_t* pos, float* y) {
  const int64_t n_rot = rot_dims(p), half = n_rot / 2, D = p.head_dim, H = p.n_heads;
  const int64_t xs = p.x_stride ? p.x_stride : H * D, ys = p.y_stride ? p.y_stride : H * D;
  if (p.seq <= 0 || H <= 0 || D <= 0) return;
  const int64_t per = std::max<int64_t>(1, 4096 / (H * D));
  const int64_t tasks = (p.seq + per - 1) / per;
  parallel_for(ctx, tasks, [&](int64_t t) {
    auto* tab = static_cast<double*>(thread_scratch(ScratchSlot::kTemp, static_cast<size_t>(3 * half) * sizeof(double)));
    double* freq = tab;
    float* cs = reinterpret_cast<float*>(tab + half);  // cos[half], sin[half]
    float* sn = cs + half;
    for (int64_t i = 0; i < half; ++i) freq[i] = inv_freq_at(p, i);
    const int64_t s1 = std::min(p.seq, (t + 1) * per);
    for (int64_t s = t * per; s < s1; ++s) {
      for (int64_t i = 0; i < half; ++i) {
        const double ang = static_cast<double>(pos[s]) * freq[i];
        cs[i] = static_cast<float>(std::cos(ang));
        sn[i] = static_cast<float>(std::sin(ang));
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
