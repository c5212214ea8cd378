// Reduction drivers: axis grouping (kept/reduced runs), row reductions or row-wise
// accumulation from the ISA tables, softmax/cumsum over [outer, axis, inner] views and
// per-row partial sorts for top-k.
#include "backends/cpu/kernels/reduce.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "backends/cpu/kernels/isa_kernels.h"

namespace rlx::cpu {
namespace {

struct Group {
  int64_t len;
  int64_t stride;  // input element stride
  bool reduced;
};

float identity_of(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kMean: return 0.0f;
    case ReduceOp::kMax: return -std::numeric_limits<float>::infinity();
    case ReduceOp::kMin: return std::numeric_limits<float>::infinity();
  }
  return 0.0f;
}

float combine(ReduceOp op, float a, float b) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kMean: return a + b;
    case ReduceOp::kMax: return b > a || std::isnan(b) ? b : a;
    case ReduceOp::kMin: return b < a || std::isnan(b) ? b : a;
  }
  return a;
}

BinaryOp row_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kMean: return BinaryOp::kAdd;
    case ReduceOp::kMax: return BinaryOp::kMax;
    case ReduceOp::kMin: return BinaryOp::kMin;
  }
  return BinaryOp::kAdd;
}

// Offset of flat index `idx` over groups g[0..n) (row-major).
int64_t offset_of(const Group* g, int n, int64_t idx) {
  int64_t off = 0;
  for (int i = n - 1; i >= 0; --i) {
    off += (idx % g[i].len) * g[i].stride;
    idx /= g[i].len;
  }
  return off;
}

// [outer, axis, inner] view of dims around `axis`.
void split_axis(const Dims& dims, int axis, int64_t* outer, int64_t* len, int64_t* inner) {
  *outer = 1;
  *inner = 1;
  for (int i = 0; i < axis; ++i) *outer *= dims.d[i];
  for (int i = axis + 1; i < dims.rank; ++i) *inner *= dims.d[i];
  *len = dims.d[axis];
}

}  // namespace

void reduce_f32(const KernelContext& ctx, ReduceOp op, const float* x, const Dims& dims, uint32_t axes_mask,
                float* y, const int64_t* x_strides) {
  const detail::IsaKernels& kk = detail::isa_kernels(ctx.isa);
  // Group adjacent axes with the same reduced flag; size-1 axes vanish.
  Group g[kMaxRank];
  int ng = 0;
  int64_t count = 1, out_total = 1;
  int64_t stride = 1;
  int64_t strides[kMaxRank];
  for (int i = dims.rank - 1; i >= 0; --i) {
    strides[i] = x_strides != nullptr ? x_strides[i] : stride;
    stride *= dims.d[i];
  }
  for (int i = 0; i < dims.rank; ++i) {
    const bool red = ((axes_mask >> i) & 1u) != 0;
    if (red) {
      count *= dims.d[i];
    } else {
      out_total *= dims.d[i];
    }
    if (dims.d[i] == 1) continue;
    if (ng > 0 && g[ng - 1].reduced == red && g[ng - 1].stride == strides[i] * dims.d[i]) {
      g[ng - 1].len *= dims.d[i];
      g[ng - 1].stride = strides[i];
    } else {
      g[ng++] = Group{dims.d[i], strides[i], red};
    }
  }
  if (out_total == 0) return;
  const float scale = op == ReduceOp::kMean ? 1.0f / static_cast<float>(count) : 1.0f;
  Group kept[kMaxRank], red[kMaxRank];
  int nk = 0, nr = 0;
  for (int i = 0; i < ng; ++i) (g[i].reduced ? red[nr++] : kept[nk++]) = g[i];
  if (count == 0) {
    const float v = op == ReduceOp::kMean ? std::numeric_limits<float>::quiet_NaN() : identity_of(op);
    std::fill(y, y + out_total, v);
    return;
  }
  int64_t red_outer = 1;
  if (ng > 0 && g[ng - 1].stride != 1) {
    // No unit-stride innermost axis (strided x): element by element.
    int64_t red_total = 1;
    for (int i = 0; i < nr; ++i) red_total *= red[i].len;
    const int64_t tasks = std::min<int64_t>(out_total, ctx.n_threads() * 4);
    parallel_for(ctx, tasks, [&](int64_t t) {
      for (int64_t o = out_total * t / tasks; o < out_total * (t + 1) / tasks; ++o) {
        const int64_t base = offset_of(kept, nk, o);
        float acc = identity_of(op);
        for (int64_t r = 0; r < red_total; ++r) acc = combine(op, acc, x[base + offset_of(red, nr, r)]);
        y[o] = acc * scale;
      }
    });
    return;
  }
  const bool inner_reduced = ng > 0 && g[ng - 1].reduced;
  if (inner_reduced || ng == 0) {
    // Case A: the innermost group is reduced: a row reduction per (kept, reduced-outer) index.
    const int64_t row = ng == 0 ? 1 : red[nr - 1].len;
    for (int i = 0; i + 1 < nr; ++i) red_outer *= red[i].len;
    const int64_t tasks = std::min<int64_t>(out_total, ctx.n_threads() * 4);
    parallel_for(ctx, tasks, [&](int64_t t) {
      const int64_t o0 = out_total * t / tasks, o1 = out_total * (t + 1) / tasks;
      for (int64_t o = o0; o < o1; ++o) {
        const int64_t base = offset_of(kept, nk, o);
        float acc = identity_of(op);
        for (int64_t r = 0; r < red_outer; ++r)
          acc = combine(op, acc, kk.reduce_row(op, x + base + offset_of(red, nr - 1, r), row));
        y[o] = acc * scale;
      }
    });
  } else {
    // Case B: the innermost group is kept (contiguous rows of L outputs): accumulate rows.
    const int64_t L = kept[nk - 1].len;
    for (int i = 0; i < nr; ++i) red_outer *= red[i].len;
    const int64_t out_rows = out_total / L;
    const BinaryOp bop = row_op(op);
    const int64_t tasks = std::min<int64_t>(out_rows, ctx.n_threads() * 4);
    parallel_for(ctx, tasks, [&](int64_t t) {
      const int64_t o0 = out_rows * t / tasks, o1 = out_rows * (t + 1) / tasks;
      for (int64_t o = o0; o < o1; ++o) {
        const int64_t base = offset_of(kept, nk - 1, o);
        float* yr = y + o * L;
        std::fill(yr, yr + L, identity_of(op));
        for (int64_t r = 0; r < red_outer; ++r) kk.binary(bop, yr, x + base + offset_of(red, nr, r), yr, L);
        if (scale != 1.0f) kk.binary_bs(BinaryOp::kMul, yr, scale, yr, L);
      }
    });
  }
}

void softmax_f32(const KernelContext& ctx, const float* x, float* y, int64_t rows, int64_t n) {
  if (rows <= 0 || n <= 0) return;
  const detail::IsaKernels& kk = detail::isa_kernels(ctx.isa);
  const int64_t per = std::max<int64_t>(1, 4096 / n);
  const int64_t tasks = (rows + per - 1) / per;
  parallel_for(ctx, tasks, [&](int64_t t) {
    const int64_t r1 = std::min(rows, (t + 1) * per);
    for (int64_t r = t * per; r < r1; ++r) kk.softmax_row(x + r * n, y + r * n, n);
  });
}

void softmax_axis_f32(const KernelContext& ctx, const float* x, float* y, const Dims& dims, int axis) {
  int64_t outer, len, inner;
  split_axis(dims, axis, &outer, &len, &inner);
  if (inner == 1) return softmax_f32(ctx, x, y, outer, len);
  if (outer * len * inner == 0) return;
  const detail::IsaKernels& kk = detail::isa_kernels(ctx.isa);
  parallel_for(ctx, outer, [&](int64_t o) {
    const float* xo = x + o * len * inner;
    float* yo = y + o * len * inner;
    auto* mx = static_cast<float*>(thread_scratch(ScratchSlot::kTemp, static_cast<size_t>(2 * inner) * sizeof(float)));
    float* sum = mx + inner;
    std::copy(xo, xo + inner, mx);
    for (int64_t a = 1; a < len; ++a) kk.binary(BinaryOp::kMax, mx, xo + a * inner, mx, inner);
    for (int64_t i = 0; i < inner; ++i)  // all -inf column: no distribution, zeros
      if (mx[i] == -std::numeric_limits<float>::infinity()) mx[i] = std::numeric_limits<float>::infinity();
    std::fill(sum, sum + inner, 0.0f);
    for (int64_t a = 0; a < len; ++a) {
      float* yr = yo + a * inner;
      kk.binary(BinaryOp::kSub, xo + a * inner, mx, yr, inner);
      kk.unary(UnaryOp::kExp, yr, yr, inner);
      kk.binary(BinaryOp::kAdd, sum, yr, sum, inner);
    }
    for (int64_t i = 0; i < inner; ++i) sum[i] = sum[i] > 0.0f ? 1.0f / sum[i] : 0.0f;
    for (int64_t a = 0; a < len; ++a) kk.binary(BinaryOp::kMul, yo + a * inner, sum, yo + a * inner, inner);
  });
}

void cumsum_f32(const KernelContext& ctx, const float* x, float* y, const Dims& dims, int axis, bool exclusive,
                bool reverse) {
  int64_t outer, len, inner;
  split_axis(dims, axis, &outer, &len, &inner);
  if (outer * len * inner == 0) return;
  const detail::IsaKernels& kk = detail::isa_kernels(ctx.isa);
  parallel_for(ctx, outer, [&](int64_t o) {
    const float* xo = x + o * len * inner;
    float* yo = y + o * len * inner;
    auto idx = [&](int64_t a) { return reverse ? len - 1 - a : a; };
    if (inner == 1) {
      float s = 0.0f;
      for (int64_t a = 0; a < len; ++a) {
        const float v = xo[idx(a)];
        if (exclusive) {
          yo[idx(a)] = s;
          s += v;
        } else {
          s += v;
          yo[idx(a)] = s;
        }
      }
      return;
    }
    auto* acc = static_cast<float*>(thread_scratch(ScratchSlot::kTemp, static_cast<size_t>(inner) * sizeof(float)));
    std::fill(acc, acc + inner, 0.0f);
    for (int64_t a = 0; a < len; ++a) {
      const float* xr = xo + idx(a) * inner;
      float* yr = yo + idx(a) * inner;
      if (exclusive) {
        kk.binary(BinaryOp::kAdd, acc, xr, acc, inner);  // acc = prefix including a
        kk.binary(BinaryOp::kSub, acc, xr, yr, inner);   // y = prefix before a
      } else {
        kk.binary(BinaryOp::kAdd, acc, xr, acc, inner);
        std::copy(acc, acc + inner, yr);
      }
    }
  });
}

Status topk_f32(const KernelContext& ctx, const float* x, int64_t rows, int64_t n, int64_t k, float* values,
                int32_t* indices) {
  if (k < 0 || k > n)
    return Error::invalid_argument("topk: k = {} is out of range for a last axis of {}", k, n);
  if (n > std::numeric_limits<int32_t>::max())
    return Error::invalid_argument("topk: axis length {} does not fit int32 indices", n);
  if (rows <= 0 || k == 0) return Status();
  parallel_for(ctx, rows, [&](int64_t r) {
    const float* xr = x + r * n;
    auto* idx = static_cast<int32_t*>(thread_scratch(ScratchSlot::kTemp, static_cast<size_t>(n) * sizeof(int32_t)));
    for (int64_t i = 0; i < n; ++i) idx[i] = static_cast<int32_t>(i);
    // "a before b": larger value first (NaN largest), then lower index.
    auto before = [xr](int32_t a, int32_t b) {
      const float va = xr[a], vb = xr[b];
      const bool na = std::isnan(va), nb = std::isnan(vb);
      if (na != nb) return na;
      if (!na && va != vb) return va > vb;
      return a < b;
    };
    std::partial_sort(idx, idx + k, idx + n, before);
    for (int64_t i = 0; i < k; ++i) {
      values[r * k + i] = xr[idx[i]];
      indices[r * k + i] = idx[i];
    }
  });
  return Status();
}

}  // namespace rlx::cpu
