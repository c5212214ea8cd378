// Reference kernels for the ops over spatial dims: conv and conv_transpose (1d / 2d,
// groups, stride, padding, dilation), group_norm, interpolate (nearest, bilinear, bicubic),
// SAM's window_partition / window_unpartition and rel_pos_attention, each a direct
// transcription of its definition in include/rlx/ir/op.h, in double.
#include <algorithm>
#include <cmath>

#include "backends/reference/reference_kernels.h"

namespace rlx::reference_backend {
namespace {

// Spatial extents as two dims (H, W); a 1-d op has H = 1.
struct Spatial2 {
  int64_t h = 1, w = 1;
};
Spatial2 spatial_of(const std::vector<int64_t>& dims) {
  if (dims.size() == 3) return {1, dims[2]};
  return {dims[2], dims[3]};
}

// Keys' cubic convolution weight of distance t (|t| < 2) with a = -0.75.
double cubic_weight(double t) {
  constexpr double a = -0.75;
  t = std::fabs(t);
  if (t <= 1) return ((a + 2) * t - (a + 3)) * t * t + 1;
  if (t < 2) return ((a * t - 5 * a) * t + 8 * a) * t - 4 * a;
  return 0;
}

// Source coordinate of output index i (input length in, output length out).
double source_coord(int64_t i, int64_t in, int64_t out, bool align_corners) {
  if (align_corners) return out > 1 ? static_cast<double>(i) * static_cast<double>(in - 1) / static_cast<double>(out - 1) : 0.0;
  return (static_cast<double>(i) + 0.5) * static_cast<double>(in) / static_cast<double>(out) - 0.5;
}

// The input taps and weights of output index i along one dim.
std::vector<std::pair<int64_t, double>> taps(ir::InterpMode mode, int64_t i, int64_t in, int64_t out, bool align) {
  std::vector<std::pair<int64_t, double>> t;
  auto clamp = [&](int64_t j) { return std::clamp<int64_t>(j, 0, in - 1); };
  if (mode == ir::InterpMode::Nearest) {
    const double scale = static_cast<double>(in) / static_cast<double>(out);
    t.emplace_back(std::min(static_cast<int64_t>(std::floor(static_cast<double>(i) * scale)), in - 1), 1.0);
    return t;
  }
  double s = source_coord(i, in, out, align);
  if (mode == ir::InterpMode::Bilinear) {
    if (!align && s < 0) s = 0;
    const auto j = static_cast<int64_t>(std::floor(s));
    const double f = s - static_cast<double>(j);
    t.emplace_back(clamp(j), 1 - f);
    t.emplace_back(clamp(j + 1), f);
    return t;
  }
  const auto j = static_cast<int64_t>(std::floor(s));
  const double f = s - static_cast<double>(j);
  for (int64_t k = -1; k <= 2; ++k) t.emplace_back(clamp(j + k), cubic_weight(f - static_cast<double>(k)));
  return t;
}

}  // namespace

Status run_conv(const RefCall& call) {
  const auto& a = call.attr<ir::ConvAttrs>();
  ASSIGN_OR_RETURN(std::vector<double> x, read_values(call.in[0]));
  ASSIGN_OR_RETURN(std::vector<double> w, read_values(call.in[1]));
  std::vector<double> bias;
  if (call.in.size() == 3) {
    ASSIGN_OR_RETURN(bias, read_values(call.in[2]));
  }
  const auto& xd = call.in[0].dims;
  const auto& wd = call.in[1].dims;
  const auto& yd = call.out.dims;
  const bool two_d = xd.size() == 4;
  const int64_t n_batch = xd[0], c = xd[1], o = wd[0], cg = wd[1], og = o / a.groups;
  const Spatial2 in = spatial_of(xd), k = spatial_of(wd), out = spatial_of(yd);
  // Per-dim attrs as (h, w); a 1-d conv's list holds the w entry only.
  auto at = [&](const std::vector<int64_t>& v, int dim, int64_t fallback) {
    if (v.empty()) return fallback;
    if (!two_d) return dim == 0 ? fallback : v[0];
    return v[static_cast<size_t>(dim)];
  };
  const int64_t sh = at(a.stride, 0, 1), sw = at(a.stride, 1, 1), ph = at(a.padding, 0, 0), pw = at(a.padding, 1, 0);
  const int64_t dh = at(a.dilation, 0, 1), dw = at(a.dilation, 1, 1);
  std::vector<double> y(static_cast<size_t>(element_count(yd)), 0.0);
  for (int64_t n = 0; n < n_batch; ++n)
    for (int64_t oc = 0; oc < o; ++oc) {
      const int64_t g = oc / og;
      for (int64_t oy = 0; oy < out.h; ++oy)
        for (int64_t ox = 0; ox < out.w; ++ox) {
          double acc = bias.empty() ? 0.0 : bias[static_cast<size_t>(oc)];
          for (int64_t ci = 0; ci < cg; ++ci)
            for (int64_t ky = 0; ky < k.h; ++ky) {
              const int64_t iy = oy * sh - ph + ky * dh;
              if (iy < 0 || iy >= in.h) continue;
              for (int64_t kx = 0; kx < k.w; ++kx) {
                const int64_t ix = ox * sw - pw + kx * dw;
                if (ix < 0 || ix >= in.w) continue;
                const int64_t xi = ((n * c + g * cg + ci) * in.h + iy) * in.w + ix;
                const int64_t wi = ((oc * cg + ci) * k.h + ky) * k.w + kx;
                acc += x[static_cast<size_t>(xi)] * w[static_cast<size_t>(wi)];
              }
            }
          y[static_cast<size_t>(((n * o + oc) * out.h + oy) * out.w + ox)] = acc;
        }
    }
  write_values(call.out, y);
  return {};
}

Status run_conv_transpose(const RefCall& call) {
  const auto& a = call.attr<ir::ConvTransposeAttrs>();
  ASSIGN_OR_RETURN(std::vector<double> x, read_values(call.in[0]));
  ASSIGN_OR_RETURN(std::vector<double> w, read_values(call.in[1]));
  std::vector<double> bias;
  if (call.in.size() == 3) {
    ASSIGN_OR_RETURN(bias, read_values(call.in[2]));
  }
  const auto& xd = call.in[0].dims;
  const auto& wd = call.in[1].dims;
  const bool two_d = xd.size() == 4;
  const int64_t n_batch = xd[0], c = xd[1], og = wd[1], o = og * a.groups, cg = c / a.groups;
  const Spatial2 in = spatial_of(xd), k = spatial_of(wd), out = spatial_of(call.out.dims);
  auto at = [&](const std::vector<int64_t>& v, int dim, int64_t fallback) {
    if (v.empty()) return fallback;
    if (!two_d) return dim == 0 ? fallback : v[0];
    return v[static_cast<size_t>(dim)];
  };
  const int64_t sh = at(a.stride, 0, 1), sw = at(a.stride, 1, 1), ph = at(a.padding, 0, 0), pw = at(a.padding, 1, 0);
  const int64_t dh = at(a.dilation, 0, 1), dw = at(a.dilation, 1, 1);
  std::vector<double> y(static_cast<size_t>(element_count(call.out.dims)), 0.0);
  for (int64_t n = 0; n < n_batch; ++n)
    for (int64_t oc = 0; oc < o; ++oc)
      for (int64_t i = 0; i < out.h * out.w; ++i)
        y[static_cast<size_t>((n * o + oc) * out.h * out.w + i)] = bias.empty() ? 0.0 : bias[static_cast<size_t>(oc)];
  // Every input element scatters through every kernel tap.
  for (int64_t n = 0; n < n_batch; ++n)
    for (int64_t ci = 0; ci < c; ++ci) {
      const int64_t g = ci / cg;
      for (int64_t iy = 0; iy < in.h; ++iy)
        for (int64_t ix = 0; ix < in.w; ++ix) {
          const double xv = x[static_cast<size_t>(((n * c + ci) * in.h + iy) * in.w + ix)];
          for (int64_t oo = 0; oo < og; ++oo)
            for (int64_t ky = 0; ky < k.h; ++ky) {
              const int64_t qy = iy * sh - ph + ky * dh;
              if (qy < 0 || qy >= out.h) continue;
              for (int64_t kx = 0; kx < k.w; ++kx) {
                const int64_t qx = ix * sw - pw + kx * dw;
                if (qx < 0 || qx >= out.w) continue;
                const double wv = w[static_cast<size_t>(((ci * og + oo) * k.h + ky) * k.w + kx)];
                y[static_cast<size_t>(((n * o + g * og + oo) * out.h + qy) * out.w + qx)] += xv * wv;
              }
            }
        }
    }
  write_values(call.out, y);
  return {};
}

Status run_group_norm(const RefCall& call) {
  const auto& a = call.attr<ir::GroupNormAttrs>();
  ASSIGN_OR_RETURN(std::vector<double> x, read_values(call.in[0]));
  ASSIGN_OR_RETURN(std::vector<double> gamma, read_values(call.in[1]));
  std::vector<double> beta;
  if (call.in.size() == 3) {
    ASSIGN_OR_RETURN(beta, read_values(call.in[2]));
  }
  const auto& d = call.in[0].dims;
  const int64_t n_batch = d[0], c = d[1], cg = c / a.groups;
  int64_t spatial = 1;
  for (size_t i = 2; i < d.size(); ++i) spatial *= d[i];
  std::vector<double> y(x.size());
  for (int64_t n = 0; n < n_batch; ++n)
    for (int64_t g = 0; g < a.groups; ++g) {
      const int64_t base = (n * c + g * cg) * spatial, count = cg * spatial;
      double mean = 0;
      for (int64_t i = 0; i < count; ++i) mean += x[static_cast<size_t>(base + i)];
      mean /= static_cast<double>(count);
      double var = 0;
      for (int64_t i = 0; i < count; ++i) {
        const double v = x[static_cast<size_t>(base + i)] - mean;
        var += v * v;
      }
      var /= static_cast<double>(count);
      const double inv = 1.0 / std::sqrt(var + a.eps);
      for (int64_t i = 0; i < count; ++i) {
        const auto ch = static_cast<size_t>(g * cg + i / spatial);
        double v = (x[static_cast<size_t>(base + i)] - mean) * inv * gamma[ch];
        if (!beta.empty()) v += beta[ch];
        y[static_cast<size_t>(base + i)] = v;
      }
    }
  write_values(call.out, y);
  return {};
}

Status run_interpolate(const RefCall& call) {
  const auto& a = call.attr<ir::InterpolateAttrs>();
  ASSIGN_OR_RETURN(std::vector<double> x, read_values(call.in[0]));
  const auto& d = call.in[0].dims;
  const int64_t planes = d[0] * d[1], ih = d[2], iw = d[3], oh = a.size[0], ow = a.size[1];
  std::vector<double> y(static_cast<size_t>(planes * oh * ow), 0.0);
  for (int64_t p = 0; p < planes; ++p)
    for (int64_t oy = 0; oy < oh; ++oy) {
      const auto ty = taps(a.mode, oy, ih, oh, a.align_corners);
      for (int64_t ox = 0; ox < ow; ++ox) {
        const auto tx = taps(a.mode, ox, iw, ow, a.align_corners);
        double acc = 0;
        for (const auto& [yi, wy] : ty)
          for (const auto& [xi, wx] : tx) acc += wy * wx * x[static_cast<size_t>((p * ih + yi) * iw + xi)];
        y[static_cast<size_t>((p * oh + oy) * ow + ox)] = acc;
      }
    }
  write_values(call.out, y);
  return {};
}

// Element (b, y, x, c) of the [B, H, W, C] image and (w, r, s, c) of its windows, with
// nh x nw windows of side `win` per image: both directions share this index map.
struct WindowMap {
  int64_t height, width, chan, win, nh, nw;
  // Window-tensor offset of image pixel (b, y, x), channel 0.
  int64_t window_offset(int64_t b, int64_t y, int64_t x) const {
    const int64_t w = (b * nh + y / win) * nw + x / win;
    return ((w * win + y % win) * win + x % win) * chan;
  }
};

Status run_window_partition(const RefCall& call) {
  const auto& a = call.attr<ir::WindowAttrs>();
  ASSIGN_OR_RETURN(std::vector<double> x, read_values(call.in[0]));
  const auto& d = call.in[0].dims;
  const WindowMap m{d[1], d[2], d[3], a.window, (d[1] + a.window - 1) / a.window, (d[2] + a.window - 1) / a.window};
  std::vector<double> y(static_cast<size_t>(d[0] * m.nh * m.nw * a.window * a.window * m.chan), 0.0);
  for (int64_t b = 0; b < d[0]; ++b)
    for (int64_t r = 0; r < m.height; ++r)
      for (int64_t c = 0; c < m.width; ++c)
        for (int64_t ch = 0; ch < m.chan; ++ch)
          y[static_cast<size_t>(m.window_offset(b, r, c) + ch)] =
              x[static_cast<size_t>(((b * m.height + r) * m.width + c) * m.chan + ch)];
  write_values(call.out, y);
  return {};
}

Status run_window_unpartition(const RefCall& call) {
  const auto& a = call.attr<ir::WindowAttrs>();
  ASSIGN_OR_RETURN(std::vector<double> x, read_values(call.in[0]));
  const auto& d = call.in[0].dims;
  const WindowMap m{a.height, a.width, d[3], a.window, (a.height + a.window - 1) / a.window,
                    (a.width + a.window - 1) / a.window};
  const int64_t images = d[0] / (m.nh * m.nw);
  std::vector<double> y(static_cast<size_t>(images * m.height * m.width * m.chan));
  for (int64_t b = 0; b < images; ++b)
    for (int64_t r = 0; r < m.height; ++r)
      for (int64_t c = 0; c < m.width; ++c)
        for (int64_t ch = 0; ch < m.chan; ++ch)
          y[static_cast<size_t>(((b * m.height + r) * m.width + c) * m.chan + ch)] =
              x[static_cast<size_t>(m.window_offset(b, r, c) + ch)];
  write_values(call.out, y);
  return {};
}

Status run_rel_pos_attention(const RefCall& call) {
  const auto& a = call.attr<ir::RelPosAttentionAttrs>();
  std::vector<double> t[5];
  for (size_t i = 0; i < 5; ++i) {
    ASSIGN_OR_RETURN(t[i], read_values(call.in[i]));
  }
  const std::vector<double>&q = t[0], &k = t[1], &v = t[2], &rh = t[3], &rw = t[4];
  const int64_t n_items = call.in[0].dims[0], T = a.grid_h * a.grid_w, H = a.n_heads, D = a.head_dim;
  const double scale = a.scale > 0 ? a.scale : 1.0 / std::sqrt(static_cast<double>(D));
  auto dot = [&](const std::vector<double>& x, int64_t xo, const std::vector<double>& y, int64_t yo) {
    double s = 0;
    for (int64_t c = 0; c < D; ++c) s += x[static_cast<size_t>(xo + c)] * y[static_cast<size_t>(yo + c)];
    return s;
  };
  std::vector<double> o(q.size(), 0.0), s(static_cast<size_t>(T));
  for (int64_t n = 0; n < n_items; ++n)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < T; ++i) {
        const int64_t qo = (n * T + i) * H * D + h * D, yi = i / a.grid_w, xi = i % a.grid_w;
        double mx = -INFINITY;
        for (int64_t j = 0; j < T; ++j) {
          const int64_t yj = j / a.grid_w, xj = j % a.grid_w;
          s[static_cast<size_t>(j)] = scale * dot(q, qo, k, (n * T + j) * H * D + h * D) +
                                      dot(q, qo, rh, (yi - yj + a.grid_h - 1) * D) +
                                      dot(q, qo, rw, (xi - xj + a.grid_w - 1) * D);
          mx = std::max(mx, s[static_cast<size_t>(j)]);
        }
        double sum = 0;
        for (double& e : s) sum += (e = std::exp(e - mx));
        for (int64_t j = 0; j < T; ++j)
          for (int64_t c = 0; c < D; ++c)
            o[static_cast<size_t>(qo + c)] +=
                s[static_cast<size_t>(j)] / sum * v[static_cast<size_t>((n * T + j) * H * D + h * D + c)];
      }
  write_values(call.out, o);
  return {};
}

}  // namespace rlx::reference_backend
