// CPU steps for the ops over spatial dims. Conv (1d / 2d, groups, stride, padding,
// dilation) is an implicit GEMM: per image and group, a chunk of output positions is
// unfolded (im2col) into scratch as B[K = C/groups*KH*KW, positions] and multiplied by
// the group's weights A[O/groups, K] with the blocked SIMD GEMM, which writes the
// NCHW output rows directly (a 1x1 stride-1 unpadded conv reads the input as B, no
// copy). ConvTranspose: cols = W_g^T . x_g by the same GEMM, then a gather of the columns
// that land on each output element (no write races). GroupNorm: statistics per (image,
// group) in double, then one scaling pass.
// Interpolate: separable (along W into scratch, then along H), taps and weights resolved
// at build time. SAM's window_partition / window_unpartition copy whole channel rows;
// rel_pos_attention calls the kernels library (kernels/rel_pos_attention.h).
#include <algorithm>
#include <cmath>

#include "backends/cpu/cpu_step.h"
#include "backends/cpu/kernels/gemm.h"
#include "backends/cpu/kernels/kernel_context.h"
#include "backends/cpu/kernels/rel_pos_attention.h"

namespace rlx::cpu_backend {
namespace {

using ir::DType;

constexpr int64_t kIm2colBytes = int64_t{8} << 20;  // scratch for one unfolded chunk

// ---- conv ---------------------------------------------------------------------------

struct ConvParams {
  int64_t n = 1, c = 1, h = 1, w = 1;          // input (h = 1 for conv1d)
  int64_t o = 1, cg = 1, og = 1, kh = 1, kw = 1;
  int64_t oh = 1, ow = 1;
  int64_t sh = 1, sw = 1, ph = 0, pw = 0, dh = 1, dw = 1;
  int64_t groups = 1;
  int64_t kdim = 1;   // cg * kh * kw
  int64_t chunk = 1;  // output positions unfolded at a time
  int64_t col_off = 0;
  bool direct = false;  // 1x1 kernel, stride 1, no padding: B is the input itself
  bool has_bias = false;
};

// Unfolds output positions [p0, p0 + pc) of one image and group into col[kdim, pc].
void im2col(const ConvParams& q, const StepCtx& ctx, const float* xg, int64_t p0, int64_t pc, float* col) {
  const int64_t per_channel = q.kh * q.kw;
  parallel_for(ctx, q.kdim, std::max<int64_t>(1, 16384 / std::max<int64_t>(pc, 1)), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t ci = r / per_channel, ky = (r / q.kw) % q.kh, kx = r % q.kw;
      float* dst = col + r * pc;
      int64_t p = p0;
      while (p < p0 + pc) {
        const int64_t oy = p / q.ow, ox0 = p % q.ow;
        const int64_t run = std::min(q.ow - ox0, p0 + pc - p);
        float* d = dst + (p - p0);
        const int64_t iy = oy * q.sh - q.ph + ky * q.dh;
        if (iy < 0 || iy >= q.h) {
          std::fill_n(d, run, 0.0f);
        } else {
          const float* src = xg + (ci * q.h + iy) * q.w;
          const int64_t base = ox0 * q.sw - q.pw + kx * q.dw;  // input column of the run's first output
          if (q.sw == 1) {
            // Valid outputs j: 0 <= base + j < w.
            const int64_t lo = std::clamp<int64_t>(-base, 0, run), hi = std::clamp<int64_t>(q.w - base, lo, run);
            std::fill_n(d, lo, 0.0f);
            if (hi > lo) std::copy(src + base + lo, src + base + hi, d + lo);  // no pointer past the row otherwise
            std::fill(d + hi, d + run, 0.0f);
          } else {
            for (int64_t j = 0; j < run; ++j) {
              const int64_t ix = base + j * q.sw;
              d[j] = ix >= 0 && ix < q.w ? src[ix] : 0.0f;
            }
          }
        }
        p += run;
      }
    }
  });
}

Status conv_fn(const Step& s, const StepCtx& ctx) {
  const ConvParams& q = s.p<ConvParams>();
  const cpu::KernelContext kc{ctx.pool, isa_cap()};
  const float* x = s.inf(0);
  const float* w = s.inf(1);
  const float* bias = q.has_bias ? s.inf(2) : nullptr;
  float* y = s.outf();
  const int64_t positions = q.oh * q.ow;
  float* col = reinterpret_cast<float*>(ctx.scratch + q.col_off);
  for (int64_t n = 0; n < q.n; ++n)
    for (int64_t g = 0; g < q.groups; ++g) {
      const float* xg = x + (n * q.c + g * q.cg) * q.h * q.w;
      const float* wg = w + g * q.og * q.kdim;
      float* yg = y + (n * q.o + g * q.og) * positions;
      for (int64_t p0 = 0; p0 < positions; p0 += q.chunk) {
        const int64_t pc = std::min(q.chunk, positions - p0);
        cpu::GemmParams gp;
        gp.m = q.og;
        gp.n = pc;
        gp.k = q.kdim;
        gp.b_transposed = false;  // B is [K, positions]
        gp.lda = q.kdim;
        gp.ldc = positions;
        const float* b = nullptr;
        if (q.direct) {
          b = xg + p0;
          gp.ldb = positions;
        } else {
          im2col(q, ctx, xg, p0, pc, col);
          b = col;
          gp.ldb = pc;
        }
        cpu::gemm_f32(kc, gp, wg, b, yg + p0);
      }
      if (bias) {
        parallel_for(ctx, q.og, std::max<int64_t>(1, 16384 / std::max<int64_t>(positions, 1)), [&](int64_t o0, int64_t o1) {
          for (int64_t oc = o0; oc < o1; ++oc) {
            const float bv = bias[g * q.og + oc];
            float* row = yg + oc * positions;
            for (int64_t p = 0; p < positions; ++p) row[p] += bv;
          }
        });
      }
    }
  return {};
}

// ---- conv transpose -------------------------------------------------------------------

struct ConvTParams {
  int64_t n = 1, c = 1, h = 1, w = 1;  // input (h = 1 for 1d)
  int64_t o = 1, cg = 1, og = 1, kh = 1, kw = 1, oh = 1, ow = 1;
  int64_t sh = 1, sw = 1, ph = 0, pw = 0, dh = 1, dw = 1;
  int64_t groups = 1;
  bool has_bias = false;
  int64_t wt_off = 0, cols_off = 0;  // scratch: W_g^T [og*kh*kw, cg], cols [og*kh*kw, h*w]
};

// Output taps of one dim: for output index q, the (k, p) pairs with q = p*s - pad + k*d.
template <typename F>
inline void for_taps(int64_t q, int64_t k_len, int64_t s, int64_t pad, int64_t d, int64_t in_len, const F& f) {
  for (int64_t k = 0; k < k_len; ++k) {
    const int64_t t = q + pad - k * d;
    if (t < 0 || t % s != 0) continue;
    const int64_t p = t / s;
    if (p < in_len) f(k, p);
  }
}

Status conv_transpose_fn(const Step& s, const StepCtx& ctx) {
  const ConvTParams& q = s.p<ConvTParams>();
  const cpu::KernelContext kc{ctx.pool, isa_cap()};
  const float* x = s.inf(0);
  const float* w = s.inf(1);
  const float* bias = q.has_bias ? s.inf(2) : nullptr;
  float* y = s.outf();
  const int64_t rows = q.og * q.kh * q.kw, in_pos = q.h * q.w, out_pos = q.oh * q.ow;
  float* wt = reinterpret_cast<float*>(ctx.scratch + q.wt_off);
  float* cols = reinterpret_cast<float*>(ctx.scratch + q.cols_off);
  for (int64_t g = 0; g < q.groups; ++g) {
    // W_g is [cg, rows]; the GEMM wants A = W_g^T [rows, cg].
    const float* wg = w + g * q.cg * rows;
    for (int64_t ci = 0; ci < q.cg; ++ci)
      for (int64_t r = 0; r < rows; ++r) wt[r * q.cg + ci] = wg[ci * rows + r];
    for (int64_t n = 0; n < q.n; ++n) {
      cpu::GemmParams gp;
      gp.m = rows;
      gp.n = in_pos;
      gp.k = q.cg;
      gp.b_transposed = false;  // B = x_g [cg, positions]
      cpu::gemm_f32(kc, gp, wt, x + (n * q.c + g * q.cg) * in_pos, cols);
      float* yg = y + (n * q.o + g * q.og) * out_pos;
      // Gather: each output element sums the columns that land on it (no write races).
      parallel_for(ctx, q.og * q.oh, 1, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
          const int64_t oo = r / q.oh, oy = r % q.oh;
          float* out = yg + r * q.ow;
          const float b = bias ? bias[g * q.og + oo] : 0.0f;
          for (int64_t ox = 0; ox < q.ow; ++ox) {
            float acc = b;
            for_taps(oy, q.kh, q.sh, q.ph, q.dh, q.h, [&](int64_t ky, int64_t py) {
              for_taps(ox, q.kw, q.sw, q.pw, q.dw, q.w, [&](int64_t kx, int64_t px) {
                acc += cols[((oo * q.kh + ky) * q.kw + kx) * in_pos + py * q.w + px];
              });
            });
            out[ox] = acc;
          }
        }
      });
    }
  }
  return {};
}
// ---- group norm ---------------------------------------------------------------------

struct GroupNormParams {
  int64_t n = 1, c = 1, spatial = 1, groups = 1;
  double eps = 1e-5;
  bool has_beta = false;
};

Status group_norm_fn(const Step& s, const StepCtx& ctx) {
  const GroupNormParams& q = s.p<GroupNormParams>();
  const float* x = s.inf(0);
  const float* gamma = s.inf(1);
  const float* beta = q.has_beta ? s.inf(2) : nullptr;
  float* y = s.outf();
  const int64_t cg = q.c / q.groups, count = cg * q.spatial;
  parallel_for(ctx, q.n * q.groups, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t n = t / q.groups, g = t % q.groups;
      const int64_t base = (n * q.c + g * cg) * q.spatial;
      const float* xs = x + base;
      double sum = 0;
      for (int64_t i = 0; i < count; ++i) sum += xs[i];
      const double mean = sum / static_cast<double>(count);
      double sq = 0;
      for (int64_t i = 0; i < count; ++i) {
        const double d = xs[i] - mean;
        sq += d * d;
      }
      const double inv = 1.0 / std::sqrt(sq / static_cast<double>(count) + q.eps);
      for (int64_t ci = 0; ci < cg; ++ci) {
        const int64_t ch = g * cg + ci;
        const auto scale = static_cast<float>(inv * gamma[ch]);
        const float shift = static_cast<float>(-mean * inv * gamma[ch]) + (beta ? beta[ch] : 0.0f);
        const float* xr = xs + ci * q.spatial;
        float* yr = y + base + ci * q.spatial;
        for (int64_t i = 0; i < q.spatial; ++i) yr[i] = xr[i] * scale + shift;
      }
    }
  });
  return {};
}

// ---- interpolate --------------------------------------------------------------------

constexpr int kMaxTaps = 4;

// Input taps of each output index along one dim.
struct AxisTaps {
  int n = 1;                       // taps per output index
  std::vector<int64_t> index;      // [out, n]
  std::vector<float> weight;       // [out, n]
};

float cubic_weight(double t) {
  constexpr double a = -0.75;
  t = std::fabs(t);
  if (t <= 1) return static_cast<float>(((a + 2) * t - (a + 3)) * t * t + 1);
  if (t < 2) return static_cast<float>(((a * t - 5 * a) * t + 8 * a) * t - 4 * a);
  return 0.0f;
}

AxisTaps axis_taps(ir::InterpMode mode, int64_t in, int64_t out, bool align) {
  AxisTaps t;
  t.n = mode == ir::InterpMode::Nearest ? 1 : mode == ir::InterpMode::Bilinear ? 2 : kMaxTaps;
  t.index.resize(static_cast<size_t>(out * t.n));
  t.weight.resize(static_cast<size_t>(out * t.n));
  auto clamp = [&](int64_t j) { return std::clamp<int64_t>(j, 0, in - 1); };
  for (int64_t i = 0; i < out; ++i) {
    int64_t* idx = t.index.data() + i * t.n;
    float* wt = t.weight.data() + i * t.n;
    if (mode == ir::InterpMode::Nearest) {
      const double scale = static_cast<double>(in) / static_cast<double>(out);
      idx[0] = std::min(static_cast<int64_t>(std::floor(static_cast<double>(i) * scale)), in - 1);
      wt[0] = 1.0f;
      continue;
    }
    double src = align ? (out > 1 ? static_cast<double>(i) * static_cast<double>(in - 1) / static_cast<double>(out - 1) : 0.0)
                       : (static_cast<double>(i) + 0.5) * static_cast<double>(in) / static_cast<double>(out) - 0.5;
    if (mode == ir::InterpMode::Bilinear && !align && src < 0) src = 0;
    const auto j = static_cast<int64_t>(std::floor(src));
    const double f = src - static_cast<double>(j);
    if (mode == ir::InterpMode::Bilinear) {
      idx[0] = clamp(j);
      idx[1] = clamp(j + 1);
      wt[0] = static_cast<float>(1 - f);
      wt[1] = static_cast<float>(f);
    } else {
      for (int k = 0; k < kMaxTaps; ++k) {
        idx[k] = clamp(j + k - 1);
        wt[k] = cubic_weight(f - (k - 1));
      }
    }
  }
  return t;
}

struct InterpParams {
  int64_t planes = 1, ih = 1, iw = 1, oh = 1, ow = 1;
  AxisTaps ty, tx;
  int64_t tmp_off = 0;  // scratch: rows resampled along W, [planes, ih, ow]
};

// Separable: every input row resampled along W into scratch, then every output row a
// weighted sum of ty.n of those rows (ty.n + tx.n multiply-adds an output, not their product).
Status interpolate_fn(const Step& s, const StepCtx& ctx) {
  const InterpParams& q = s.p<InterpParams>();
  const float* x = s.inf(0);
  float* y = s.outf();
  float* tmp = reinterpret_cast<float*>(ctx.scratch + q.tmp_off);
  const int64_t* xi = q.tx.index.data();
  const float* xw = q.tx.weight.data();
  const int xn = q.tx.n, yn = q.ty.n;
  const int64_t grain = std::max<int64_t>(1, 4096 / std::max<int64_t>(q.ow, 1));
  parallel_for(ctx, q.planes * q.ih, grain, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* row = x + r * q.iw;
      float* out = tmp + r * q.ow;
      for (int64_t ox = 0; ox < q.ow; ++ox) {
        float acc = 0.0f;
        for (int b = 0; b < xn; ++b) acc += xw[ox * xn + b] * row[xi[ox * xn + b]];
        out[ox] = acc;
      }
    }
  });
  const int64_t* yi = q.ty.index.data();
  const float* yw = q.ty.weight.data();
  parallel_for(ctx, q.planes * q.oh, grain, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t p = r / q.oh, oy = r % q.oh;
      float* out = y + r * q.ow;
      std::fill_n(out, q.ow, 0.0f);
      for (int a = 0; a < yn; ++a) {
        const float wgt = yw[oy * yn + a];
        const float* src = tmp + (p * q.ih + yi[oy * yn + a]) * q.ow;
        for (int64_t ox = 0; ox < q.ow; ++ox) out[ox] += wgt * src[ox];
      }
    }
  });
  return {};
}

// The spatial ops never shrink with a bucket extent: they run only where no value they
// touch has a bucket axis.
void no_extent(const BuildCtx& ctx, Step& step) {
  bool bucketed = ctx.bucket(ctx.id) != -1;
  for (ir::ValueId v : ctx.node().inputs) bucketed = bucketed || ctx.bucket(v) != -1;
  step.extent_ok = !bucketed;
}

Status require_f32(const BuildCtx& ctx) {
  if (ctx.node().dtype != DType::F32) return step_error(ctx, "computes in f32 only, got {}", ir::dtype_name(ctx.node().dtype));
  for (size_t i = 0; i < ctx.node().inputs.size(); ++i)
    if (ctx.input(i).dtype != DType::F32)
      return step_error(ctx, "input {} must be f32, got {}", i, ctx.input(i).type().to_string());
  return {};
}

// ---- SAM windows and relative-position attention -------------------------------------

struct WindowParams {
  int64_t images = 1, height = 1, width = 1, chan = 1, win = 1, nh = 1, nw = 1;
  bool partition = true;  // image -> windows (zero padded), else windows -> image
};

Status window_fn(const Step& s, const StepCtx& ctx) {
  const WindowParams& q = s.p<WindowParams>();
  const float* x = s.inf(0);
  float* y = s.outf();
  const int64_t padded_w = q.nw * q.win, row = q.chan;
  // One task per (image, padded row): each copies its row's channel vectors.
  parallel_for(ctx, q.images * q.nh * q.win, 4, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t b = t / (q.nh * q.win), r = t % (q.nh * q.win);
      for (int64_t c = 0; c < padded_w; ++c) {
        const int64_t w = (b * q.nh + r / q.win) * q.nw + c / q.win;
        const int64_t woff = ((w * q.win + r % q.win) * q.win + c % q.win) * row;
        const int64_t ioff = ((b * q.height + r) * q.width + c) * row;
        const bool inside = r < q.height && c < q.width;
        if (q.partition && inside) std::copy(x + ioff, x + ioff + row, y + woff);
        if (q.partition && !inside) std::fill(y + woff, y + woff + row, 0.0f);
        if (!q.partition && inside) std::copy(x + woff, x + woff + row, y + ioff);
      }
    }
  });
  return {};
}

Status rel_pos_attention_fn(const Step& s, const StepCtx& ctx) {
  const auto& q = s.p<cpu::RelPosAttentionParams>();
  rel_pos_attention_f32(cpu::KernelContext{ctx.pool, isa_cap()}, q, s.inf(0), s.inf(1), s.inf(2), s.inf(3), s.inf(4),
                        s.outf());
  return {};
}

}  // namespace

Status build_window_partition(BuildCtx& ctx, Step& step) {
  TRY(require_f32(ctx));
  const auto& a = ctx.node().attr<ir::WindowAttrs>();
  const bool partition = ctx.node().op == ir::OpKind::WindowPartition;
  const auto d = (partition ? ctx.input(0).shape : ctx.node().shape).static_dims();  // the image side
  auto q = std::make_shared<WindowParams>();
  q->images = d[0];
  q->height = d[1];
  q->width = d[2];
  q->chan = d[3];
  q->win = a.window;
  q->nh = (d[1] + a.window - 1) / a.window;
  q->nw = (d[2] + a.window - 1) / a.window;
  q->partition = partition;
  step.fn = &window_fn;
  step.params = q;
  no_extent(ctx, step);
  return {};
}

Status build_rel_pos_attention(BuildCtx& ctx, Step& step) {
  TRY(require_f32(ctx));
  const auto& a = ctx.node().attr<ir::RelPosAttentionAttrs>();
  auto q = std::make_shared<cpu::RelPosAttentionParams>();
  q->items = ctx.input(0).shape.static_dims()[0];
  q->n_heads = a.n_heads;
  q->head_dim = a.head_dim;
  q->grid_h = a.grid_h;
  q->grid_w = a.grid_w;
  q->scale = static_cast<float>(a.scale);
  step.fn = &rel_pos_attention_fn;
  step.params = q;
  no_extent(ctx, step);
  return {};
}

Status build_conv(BuildCtx& ctx, Step& step) {
  TRY(require_f32(ctx));
  const ir::Node& n = ctx.node();
  const auto& a = n.attr<ir::ConvAttrs>();
  const auto xd = ctx.input(0).shape.static_dims(), wd = ctx.input(1).shape.static_dims(), yd = n.shape.static_dims();
  const bool two_d = xd.size() == 4;
  auto q = std::make_shared<ConvParams>();
  q->n = xd[0];
  q->c = xd[1];
  q->h = two_d ? xd[2] : 1;
  q->w = xd.back();
  q->o = wd[0];
  q->cg = wd[1];
  q->kh = two_d ? wd[2] : 1;
  q->kw = wd.back();
  q->oh = two_d ? yd[2] : 1;
  q->ow = yd.back();
  q->groups = a.groups;
  q->og = q->o / a.groups;
  // Attr lists hold (h, w), or (w) for conv1d; empty means the default.
  auto pick = [&](const std::vector<int64_t>& v, bool h_dim, int64_t fallback) {
    if (v.empty() || (h_dim && !two_d)) return fallback;
    return h_dim ? v[0] : v.back();
  };
  q->sh = pick(a.stride, true, 1);
  q->sw = pick(a.stride, false, 1);
  q->ph = pick(a.padding, true, 0);
  q->pw = pick(a.padding, false, 0);
  q->dh = pick(a.dilation, true, 1);
  q->dw = pick(a.dilation, false, 1);
  q->kdim = q->cg * q->kh * q->kw;
  q->has_bias = n.inputs.size() == 3;
  q->direct = q->kh == 1 && q->kw == 1 && q->sh == 1 && q->sw == 1 && q->ph == 0 && q->pw == 0;
  const int64_t positions = q->oh * q->ow;
  q->chunk = std::clamp<int64_t>(kIm2colBytes / (4 * q->kdim), 1, positions);
  if (q->chunk < positions && q->chunk > 64) q->chunk = q->chunk / 64 * 64;
  if (!q->direct) q->col_off = ctx.scratch(q->kdim * q->chunk * 4);
  step.fn = &conv_fn;
  step.params = q;
  no_extent(ctx, step);
  return {};
}

Status build_conv_transpose(BuildCtx& ctx, Step& step) {
  TRY(require_f32(ctx));
  const ir::Node& n = ctx.node();
  const auto& a = n.attr<ir::ConvTransposeAttrs>();
  const auto xd = ctx.input(0).shape.static_dims(), wd = ctx.input(1).shape.static_dims(), yd = n.shape.static_dims();
  const bool two_d = xd.size() == 4;
  auto q = std::make_shared<ConvTParams>();
  q->n = xd[0];
  q->c = xd[1];
  q->h = two_d ? xd[2] : 1;
  q->w = xd.back();
  q->groups = a.groups;
  q->cg = q->c / a.groups;
  q->og = wd[1];
  q->o = q->og * a.groups;
  q->kh = two_d ? wd[2] : 1;
  q->kw = wd.back();
  q->oh = two_d ? yd[2] : 1;
  q->ow = yd.back();
  auto pick = [&](const std::vector<int64_t>& v, bool h_dim, int64_t fallback) {
    if (v.empty() || (h_dim && !two_d)) return fallback;
    return h_dim ? v[0] : v.back();
  };
  q->sh = pick(a.stride, true, 1);
  q->sw = pick(a.stride, false, 1);
  q->ph = pick(a.padding, true, 0);
  q->pw = pick(a.padding, false, 0);
  q->dh = pick(a.dilation, true, 1);
  q->dw = pick(a.dilation, false, 1);
  q->has_bias = n.inputs.size() == 3;
  const int64_t rows = q->og * q->kh * q->kw;
  q->wt_off = ctx.scratch(rows * q->cg * 4);
  q->cols_off = ctx.scratch(rows * q->h * q->w * 4);
  step.fn = &conv_transpose_fn;
  step.params = q;
  no_extent(ctx, step);
  return {};
}

Status build_group_norm(BuildCtx& ctx, Step& step) {
  TRY(require_f32(ctx));
  const ir::Node& n = ctx.node();
  const auto d = ctx.input(0).shape.static_dims();
  auto q = std::make_shared<GroupNormParams>();
  q->n = d[0];
  q->c = d[1];
  q->spatial = prod(d, 2, d.size());
  q->groups = n.attr<ir::GroupNormAttrs>().groups;
  q->eps = n.attr<ir::GroupNormAttrs>().eps;
  q->has_beta = n.inputs.size() == 3;
  step.fn = &group_norm_fn;
  step.params = q;
  no_extent(ctx, step);
  return {};
}

Status build_interpolate(BuildCtx& ctx, Step& step) {
  TRY(require_f32(ctx));
  const ir::Node& n = ctx.node();
  const auto& a = n.attr<ir::InterpolateAttrs>();
  const auto d = ctx.input(0).shape.static_dims();
  auto q = std::make_shared<InterpParams>();
  q->planes = d[0] * d[1];
  q->ih = d[2];
  q->iw = d[3];
  q->oh = a.size[0];
  q->ow = a.size[1];
  q->ty = axis_taps(a.mode, q->ih, q->oh, a.align_corners);
  q->tx = axis_taps(a.mode, q->iw, q->ow, a.align_corners);
  q->tmp_off = ctx.scratch(q->planes * q->ih * q->ow * 4);
  step.fn = &interpolate_fn;
  step.params = q;
  no_extent(ctx, step);
  return {};
}

}  // namespace rlx::cpu_backend
