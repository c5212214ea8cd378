// Reductions over axis sets, softmax (last and inner axes), cumsum, top-k and the
// norm kernels (plain and fused residual) vs float64 references on every ISA path.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backends/cpu/kernels/norm.h"
#include "backends/cpu/kernels/reduce.h"
#include "cpu_kernels/test_util.h"

namespace rlx::cpu {
namespace {

using test::all_close;
using test::Rng;

std::vector<double> reduce_ref(ReduceOp op, const std::vector<float>& x, const Dims& dims, uint32_t mask) {
  Dims od = dims;
  int64_t count = 1;
  for (int i = 0; i < dims.rank; ++i)
    if ((mask >> i) & 1u) {
      od.d[i] = 1;
      count *= dims.d[i];
    }
  std::vector<double> out(static_cast<size_t>(od.numel()),
                          op == ReduceOp::kMax ? -INFINITY : op == ReduceOp::kMin ? INFINITY : 0.0);
  for (int64_t e = 0; e < dims.numel(); ++e) {
    int64_t rem = e, o = 0, mul = 1;
    for (int d = dims.rank - 1; d >= 0; --d) {
      const int64_t idx = rem % dims.d[d];
      rem /= dims.d[d];
      if (!((mask >> d) & 1u)) o += idx * mul;
      mul *= od.d[d];
    }
    double& r = out[static_cast<size_t>(o)];
    const double v = x[static_cast<size_t>(e)];
    r = op == ReduceOp::kMax ? std::max(r, v) : op == ReduceOp::kMin ? std::min(r, v) : r + v;
  }
  if (op == ReduceOp::kMean)
    for (double& r : out) r /= double(count);
  return out;
}

TEST(Reduce, AxisSets) {
  Rng rng;
  RLX_TRACE_SEED(rng);
  const Dims shapes[] = {{7}, {3, 17}, {4, 1, 33}, {2, 3, 5, 7}, {1}, {100, 3}};
  const ReduceOp ops[] = {ReduceOp::kSum, ReduceOp::kMean, ReduceOp::kMax, ReduceOp::kMin};
  for (const Dims& dims : shapes) {
    const std::vector<float> x = rng.vec(dims.numel());
    for (uint32_t mask = 1; mask < (1u << dims.rank); ++mask)
      for (ReduceOp op : ops) {
        const std::vector<double> want = reduce_ref(op, x, dims, mask);
        for (const KernelContext& ctx : test::contexts()) {
          std::vector<float> y(want.size(), -7.0f);
          reduce_f32(ctx, op, x.data(), dims, mask, y.data());
          ASSERT_TRUE(all_close(y, want, 1e-5, 1e-5))
              << test::describe(ctx) << " op " << int(op) << " mask " << mask << " rank " << dims.rank;
        }
      }
  }
}

TEST(Reduce, EmptyReduction) {
  const Dims dims{3, 0};
  std::vector<float> y(3, 5.0f);
  const KernelContext ctx;
  reduce_f32(ctx, ReduceOp::kSum, nullptr, dims, 2u, y.data());
  EXPECT_EQ(y[0], 0.0f);
  reduce_f32(ctx, ReduceOp::kMax, nullptr, dims, 2u, y.data());
  EXPECT_EQ(y[2], -std::numeric_limits<float>::infinity());
}

std::vector<double> softmax_ref(const std::vector<float>& x, int64_t outer, int64_t len, int64_t inner) {
  std::vector<double> y(x.size());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      double m = -INFINITY, s = 0;
      for (int64_t a = 0; a < len; ++a) m = std::max(m, double(x[(o * len + a) * inner + i]));
      for (int64_t a = 0; a < len; ++a) s += std::exp(x[(o * len + a) * inner + i] - m);
      for (int64_t a = 0; a < len; ++a)
        y[(o * len + a) * inner + i] = m == -INFINITY ? 0.0 : std::exp(x[(o * len + a) * inner + i] - m) / s;
    }
  return y;
}

TEST(Softmax, LastAndInnerAxes) {
  Rng rng;
  RLX_TRACE_SEED(rng);
  for (const Dims& dims : {Dims{5, 1}, Dims{3, 33}, Dims{2, 17, 9}, Dims{64, 1000}}) {
    std::vector<float> x = rng.vec(dims.numel(), -20, 20);
    if (dims.d[dims.rank - 1] > 2) x[1] = -INFINITY;  // masked entry
    for (int axis = 0; axis < dims.rank; ++axis) {
      int64_t outer = 1, inner = 1;
      for (int i = 0; i < axis; ++i) outer *= dims.d[i];
      for (int i = axis + 1; i < dims.rank; ++i) inner *= dims.d[i];
      const std::vector<double> want = softmax_ref(x, outer, dims.d[axis], inner);
      for (const KernelContext& ctx : test::contexts()) {
        std::vector<float> y(x.size());
        softmax_axis_f32(ctx, x.data(), y.data(), dims, axis);
        ASSERT_TRUE(all_close(y, want, 1e-7, 2e-6)) << test::describe(ctx) << " axis " << axis;
      }
    }
  }
  // A fully masked row gives zeros, not NaN.
  std::vector<float> x(4, -INFINITY), y(4, 1.0f);
  softmax_f32(KernelContext{}, x.data(), y.data(), 1, 4);
  for (float v : y) EXPECT_EQ(v, 0.0f);
}

TEST(Cumsum, AxesAndModes) {
  Rng rng;
  RLX_TRACE_SEED(rng);
  const Dims dims{3, 20, 5};
  const std::vector<float> x = rng.vec(dims.numel());
  for (int axis = 0; axis < 3; ++axis)
    for (bool exclusive : {false, true})
      for (bool reverse : {false, true}) {
        int64_t outer = 1, inner = 1;
        for (int i = 0; i < axis; ++i) outer *= dims.d[i];
        for (int i = axis + 1; i < 3; ++i) inner *= dims.d[i];
        const int64_t len = dims.d[axis];
        std::vector<double> want(x.size());
        for (int64_t o = 0; o < outer; ++o)
          for (int64_t i = 0; i < inner; ++i) {
            double s = 0;
            for (int64_t t = 0; t < len; ++t) {
              const int64_t a = reverse ? len - 1 - t : t;
              const size_t at = static_cast<size_t>((o * len + a) * inner + i);
              if (exclusive) {
                want[at] = s;
                s += x[at];
              } else {
                s += x[at];
                want[at] = s;
              }
            }
          }
        for (const KernelContext& ctx : test::contexts()) {
          std::vector<float> y(x.size());
          cumsum_f32(ctx, x.data(), y.data(), dims, axis, exclusive, reverse);
          ASSERT_TRUE(all_close(y, want, 1e-5, 1e-5))
              << test::describe(ctx) << " axis " << axis << " excl " << exclusive << " rev " << reverse;
        }
      }
}

TEST(TopK, SortedWithTiesAndNaN) {
  Rng rng;
  RLX_TRACE_SEED(rng);
  const int64_t rows = 6, n = 50;
  std::vector<float> x(rows * n);
  for (float& v : x) v = static_cast<float>(rng.integer(-5, 5));  // many ties
  x[3] = std::nanf("");
  for (int64_t k : {int64_t{0}, int64_t{1}, int64_t{7}, n}) {
    for (const KernelContext& ctx : test::contexts()) {
      std::vector<float> vals(rows * k);
      std::vector<int32_t> idx(rows * k);
      ASSERT_TRUE(topk_f32(ctx, x.data(), rows, n, k, vals.data(), idx.data()).ok());
      for (int64_t r = 0; r < rows; ++r) {
        std::vector<int32_t> order(n);
        for (int i = 0; i < n; ++i) order[i] = i;
        const float* xr = x.data() + r * n;
        std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
          const bool na = std::isnan(xr[a]), nb = std::isnan(xr[b]);
          if (na || nb) return na && !nb;
          return xr[a] > xr[b];
        });
        for (int64_t i = 0; i < k; ++i) {
          ASSERT_EQ(idx[r * k + i], order[i]) << test::describe(ctx) << " row " << r << " k " << k << " i " << i;
          const float w = xr[order[i]];
          ASSERT_TRUE(vals[r * k + i] == w || (std::isnan(w) && std::isnan(vals[r * k + i])));
        }
      }
    }
  }
  float v;
  int32_t i;
  EXPECT_FALSE(topk_f32(KernelContext{}, x.data(), 1, 3, 4, &v, &i).ok());
}

std::vector<double> norm_ref(const std::vector<float>& x, const float* w, const float* b, int64_t rows, int64_t n,
                             float eps, bool layer) {
  std::vector<double> y(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x.data() + r * n;
    double mean = 0, ss = 0;
    if (layer) {
      for (int64_t i = 0; i < n; ++i) mean += xr[i];
      mean /= double(n);
    }
    for (int64_t i = 0; i < n; ++i) ss += (xr[i] - mean) * (xr[i] - mean);
    const double scale = 1.0 / std::sqrt(ss / double(n) + eps);
    for (int64_t i = 0; i < n; ++i)
      y[r * n + i] = (xr[i] - mean) * scale * (w ? w[i] : 1.0) + (b ? b[i] : 0.0);
  }
  return y;
}

TEST(Norm, RmsAndLayerPlainAndFused) {
  Rng rng;
  RLX_TRACE_SEED(rng);
  for (int64_t n : {int64_t{1}, int64_t{17}, int64_t{64}, int64_t{1000}}) {
    const int64_t rows = 13;
    const std::vector<float> x = rng.vec(rows * n, -3, 3), r = rng.vec(rows * n), w = rng.vec(n), b = rng.vec(n);
    std::vector<float> sum(x.size());
    for (size_t i = 0; i < x.size(); ++i) sum[i] = x[i] + r[i];
    const float eps = 1e-5f;
    for (const KernelContext& ctx : test::contexts()) {
      SCOPED_TRACE(test::describe(ctx) + " n=" + std::to_string(n));
      std::vector<float> y(x.size()), s(x.size());
      rms_norm_f32(ctx, x.data(), w.data(), y.data(), rows, n, eps);
      ASSERT_TRUE(all_close(y, norm_ref(x, w.data(), nullptr, rows, n, eps, false), 1e-5, 1e-5));
      rms_norm_f32(ctx, x.data(), nullptr, y.data(), rows, n, eps);
      ASSERT_TRUE(all_close(y, norm_ref(x, nullptr, nullptr, rows, n, eps, false), 1e-5, 1e-5));
      layer_norm_f32(ctx, x.data(), w.data(), b.data(), y.data(), rows, n, eps);
      ASSERT_TRUE(all_close(y, norm_ref(x, w.data(), b.data(), rows, n, eps, true), 1e-5, 1e-5));
      layer_norm_f32(ctx, x.data(), w.data(), nullptr, y.data(), rows, n, eps);
      ASSERT_TRUE(all_close(y, norm_ref(x, w.data(), nullptr, rows, n, eps, true), 1e-5, 1e-5));
      add_rms_norm_f32(ctx, x.data(), r.data(), s.data(), w.data(), y.data(), rows, n, eps);
      ASSERT_EQ(s, sum);
      ASSERT_TRUE(all_close(y, norm_ref(sum, w.data(), nullptr, rows, n, eps, false), 1e-5, 1e-5));
      std::vector<float> inplace = x;  // sum written over x, y over the sum
      add_layer_norm_f32(ctx, inplace.data(), r.data(), inplace.data(), w.data(), b.data(), inplace.data(), rows, n,
                         eps);
      ASSERT_TRUE(all_close(inplace, norm_ref(sum, w.data(), b.data(), rows, n, eps, true), 1e-5, 1e-5));
    }
  }
}

}  // namespace
}  // namespace rlx::cpu
