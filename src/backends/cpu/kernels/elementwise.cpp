// Elementwise drivers: broadcasting (dimension collapsing, flat-range tasks over the
// pool), per-row fast paths from the ISA tables, compare/where loops and casts.
#include "backends/cpu/kernels/elementwise.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "backends/cpu/kernels/isa_kernels.h"
#include "rlx/base/half.h"
#include "rlx/base/status.h"

namespace rlx::cpu {
namespace {

constexpr int64_t kMinTaskElems = 16384;

int64_t n_tasks_for(const KernelContext& ctx, int64_t elems) {
  const int64_t t = std::max<int64_t>(1, elems / kMinTaskElems);
  return std::min<int64_t>(t, ctx.n_threads() * 4);
}

// A broadcast iteration space over up to three operands.
struct Space {
  int rank = 0;
  int64_t dims[kMaxRank] = {};
  int64_t strides[3][kMaxRank] = {};
  int n_ops = 0;
};

// Merges adjacent dims that every operand walks contiguously; drops size-1 dims.
Space collapse(const Dims& out, const int64_t* const* strides, int n_ops) {
  Space s;
  s.n_ops = n_ops;
  for (int d = 0; d < out.rank; ++d) {
    if (out.d[d] == 1) continue;
    bool merge = s.rank > 0;
    for (int o = 0; o < n_ops && merge; ++o)
      merge = s.strides[o][s.rank - 1] == strides[o][d] * out.d[d];
    if (merge) {
      s.dims[s.rank - 1] *= out.d[d];
      for (int o = 0; o < n_ops; ++o) s.strides[o][s.rank - 1] = strides[o][d];
    } else {
      s.dims[s.rank] = out.d[d];
      for (int o = 0; o < n_ops; ++o) s.strides[o][s.rank] = strides[o][d];
      ++s.rank;
    }
  }
  if (s.rank == 0) {  // a scalar
    s.rank = 1;
    s.dims[0] = 1;
    for (int o = 0; o < n_ops; ++o) s.strides[o][0] = 0;
  }
  return s;
}

// Calls row(offsets[3], out_offset, len) over the flat output range in tasks; the
// innermost dim is the row, split at task boundaries.
template <typename Row>
void for_each_row(const KernelContext& ctx, const Space& s, Row row) {
  const int last = s.rank - 1;
  const int64_t inner = s.dims[last];
  int64_t total = 1;
  for (int d = 0; d < s.rank; ++d) total *= s.dims[d];
  if (total == 0) return;
  const int64_t tasks = n_tasks_for(ctx, total);
  parallel_for(ctx, tasks, [&](int64_t t) {
    const int64_t e0 = total * t / tasks, e1 = total * (t + 1) / tasks;
    int64_t e = e0;
    while (e < e1) {
      int64_t r = e / inner;
      const int64_t col = e % inner;
      const int64_t len = std::min(inner - col, e1 - e);
      int64_t off[3] = {0, 0, 0};
      for (int d = last - 1; d >= 0; --d) {
        const int64_t idx = r % s.dims[d];
        r /= s.dims[d];
        for (int o = 0; o < s.n_ops; ++o) off[o] += idx * s.strides[o][d];
      }
      for (int o = 0; o < s.n_ops; ++o) off[o] += col * s.strides[o][last];
      row(off, e, len);
      e += len;
    }
  });
}

float binary_scalar(BinaryOp op, float a, float b) {
  switch (op) {
    case BinaryOp::kAdd: return a + b;
    case BinaryOp::kSub: return a - b;
    case BinaryOp::kMul: return a * b;
    case BinaryOp::kDiv: return a / b;
    case BinaryOp::kMax: return a > b ? a : b;
    case BinaryOp::kMin: return a < b ? a : b;
    case BinaryOp::kPow: return std::pow(a, b);
  }
  return 0.0f;
}

bool compare_scalar(CompareOp op, float a, float b) {
  switch (op) {
    case CompareOp::kEq: return a == b;
    case CompareOp::kNe: return a != b;
    case CompareOp::kLt: return a < b;
    case CompareOp::kLe: return a <= b;
    case CompareOp::kGt: return a > b;
    case CompareOp::kGe: return a >= b;
  }
  return false;
}

// ---- casts
template <typename T>
struct Tag {
  using type = T;
};

template <typename F>
void visit_type(ElemType t, F f) {
  switch (t) {
    case ElemType::kF32: return f(Tag<float>{});
    case ElemType::kF16: return f(Tag<f16>{});
    case ElemType::kBF16: return f(Tag<bf16>{});
    case ElemType::kF64: return f(Tag<double>{});
    case ElemType::kI32: return f(Tag<int32_t>{});
    case ElemType::kI64: return f(Tag<int64_t>{});
    case ElemType::kI8: return f(Tag<int8_t>{});
    case ElemType::kU8: return f(Tag<uint8_t>{});
    case ElemType::kBool: return f(Tag<bool>{});
  }
}

template <typename T>
double to_double(T v) {
  if constexpr (std::is_same_v<T, f16> || std::is_same_v<T, bf16>) {
    return static_cast<double>(v.to_f32());
  } else {
    return static_cast<double>(v);
  }
}

template <typename To>
To from_double(double v) {
  if constexpr (std::is_same_v<To, f16> || std::is_same_v<To, bf16>) {
    return To(static_cast<float>(v));
  } else if constexpr (std::is_same_v<To, bool>) {
    return v != 0.0;
  } else if constexpr (std::is_floating_point_v<To>) {
    return static_cast<To>(v);
  } else {
    if (std::isnan(v)) return To{0};
    constexpr double lo = static_cast<double>(std::numeric_limits<To>::min());
    constexpr double hi = static_cast<double>(std::numeric_limits<To>::max());
    if (v <= lo) return std::numeric_limits<To>::min();
    if (v >= hi) return std::numeric_limits<To>::max();
    return static_cast<To>(v);
  }
}

template <typename From, typename To>
void convert(const From* x, To* y, int64_t n) {
  if constexpr (std::is_same_v<From, To>) {
    std::memcpy(y, x, static_cast<size_t>(n) * sizeof(From));
  } else if constexpr (std::is_same_v<From, int64_t> && std::is_floating_point_v<To>) {
    for (int64_t i = 0; i < n; ++i) y[i] = static_cast<To>(x[i]);  // exact rounding, no double step
  } else {
    for (int64_t i = 0; i < n; ++i) y[i] = from_double<To>(to_double(x[i]));
  }
}

}  // namespace

size_t elem_size(ElemType t) {
  switch (t) {
    case ElemType::kF32:
    case ElemType::kI32: return 4;
    case ElemType::kF16:
    case ElemType::kBF16: return 2;
    case ElemType::kF64:
    case ElemType::kI64: return 8;
    case ElemType::kI8:
    case ElemType::kU8:
    case ElemType::kBool: return 1;
  }
  return 1;
}

UnaryOp activation_op(Activation act) {
  switch (act) {
    case Activation::kIdentity: return UnaryOp::kIdentity;
    case Activation::kRelu: return UnaryOp::kRelu;
    case Activation::kSilu: return UnaryOp::kSilu;
    case Activation::kGelu: return UnaryOp::kGelu;
    case Activation::kGeluTanh: return UnaryOp::kGeluTanh;
  }
  return UnaryOp::kIdentity;
}

void unary_f32(const KernelContext& ctx, UnaryOp op, const float* x, float* y, int64_t n) {
  if (n <= 0) return;
  const detail::IsaKernels& kk = detail::isa_kernels(ctx.isa);
  const int64_t tasks = n_tasks_for(ctx, n);
  parallel_for(ctx, tasks, [&](int64_t t) {
    const int64_t i0 = n * t / tasks, i1 = n * (t + 1) / tasks;
    kk.unary(op, x + i0, y + i0, i1 - i0);
  });
}

Status broadcast_dims(const Dims& a, const Dims& b, Dims* out) {
  const int rank = std::max(a.rank, b.rank);
  Dims r;
  r.rank = rank;
  for (int i = 0; i < rank; ++i) {
    const int ia = a.rank - rank + i, ib = b.rank - rank + i;
    const int64_t da = ia >= 0 ? a.d[ia] : 1, db = ib >= 0 ? b.d[ib] : 1;
    if (da != db && da != 1 && db != 1) {
      auto show = [](const Dims& d) {
        std::string s = "[";
        for (int k = 0; k < d.rank; ++k) s += (k ? ", " : "") + std::to_string(d.d[k]);
        return s + "]";
      };
      return Error::invalid_argument("shapes {} and {} do not broadcast (dim {}: {} vs {})", show(a), show(b), i,
                                     da, db);
    }
    r.d[i] = da == 1 ? db : da;
  }
  *out = r;
  return Status();
}

void broadcast_strides(const Dims& in, const Dims& out, int64_t* strides) {
  int64_t s = 1;
  for (int i = out.rank - 1; i >= 0; --i) {
    const int ii = in.rank - out.rank + i;
    if (ii < 0 || in.d[ii] == 1) {
      strides[i] = 0;
    } else {
      strides[i] = s;
    }
    if (ii >= 0) s *= in.d[ii];
  }
}

void binary_f32_strided(const KernelContext& ctx, BinaryOp op, const Dims& out_dims, const float* a,
                        const int64_t* a_strides, const float* b, const int64_t* b_strides, float* y) {
  const detail::IsaKernels& kk = detail::isa_kernels(ctx.isa);
  int64_t y_strides[kMaxRank];
  broadcast_strides(out_dims, out_dims, y_strides);
  const int64_t* st[3] = {a_strides, b_strides, y_strides};
  const Space s = collapse(out_dims, st, 3);
  const int last = s.rank - 1;
  const int64_t sa = s.strides[0][last], sb = s.strides[1][last];
  for_each_row(ctx, s, [&](const int64_t* off, int64_t, int64_t len) {
    const float* pa = a + off[0];
    const float* pb = b + off[1];
    float* py = y + off[2];
    if (sa == 1 && sb == 1) {
      kk.binary(op, pa, pb, py, len);
    } else if (sa == 1 && sb == 0) {
      kk.binary_bs(op, pa, *pb, py, len);
    } else if (sa == 0 && sb == 1) {
      kk.binary_as(op, *pa, pb, py, len);
    } else {
      for (int64_t i = 0; i < len; ++i) py[i] = binary_scalar(op, pa[i * sa], pb[i * sb]);
    }
  });
}

Status binary_f32(const KernelContext& ctx, BinaryOp op, const float* a, const Dims& a_dims, const float* b,
                  const Dims& b_dims, float* y) {
  Dims out;
  TRY(broadcast_dims(a_dims, b_dims, &out));
  int64_t sa[kMaxRank], sb[kMaxRank];
  broadcast_strides(a_dims, out, sa);
  broadcast_strides(b_dims, out, sb);
  binary_f32_strided(ctx, op, out, a, sa, b, sb, y);
  return Status();
}

Status compare_f32(const KernelContext& ctx, CompareOp op, const float* a, const Dims& a_dims, const float* b,
                   const Dims& b_dims, uint8_t* y) {
  Dims out;
  TRY(broadcast_dims(a_dims, b_dims, &out));
  int64_t sa[kMaxRank], sb[kMaxRank], sy[kMaxRank];
  broadcast_strides(a_dims, out, sa);
  broadcast_strides(b_dims, out, sb);
  broadcast_strides(out, out, sy);
  const int64_t* st[3] = {sa, sb, sy};
  const Space s = collapse(out, st, 3);
  const int64_t ia = s.strides[0][s.rank - 1], ib = s.strides[1][s.rank - 1];
  for_each_row(ctx, s, [&](const int64_t* off, int64_t, int64_t len) {
    const float* pa = a + off[0];
    const float* pb = b + off[1];
    uint8_t* py = y + off[2];
    for (int64_t i = 0; i < len; ++i) py[i] = compare_scalar(op, pa[i * ia], pb[i * ib]) ? 1 : 0;
  });
  return Status();
}

Status where_f32(const KernelContext& ctx, const uint8_t* cond, const Dims& cond_dims, const float* a,
                 const Dims& a_dims, const float* b, const Dims& b_dims, float* y) {
  Dims ab, out;
  TRY(broadcast_dims(a_dims, b_dims, &ab));
  TRY(broadcast_dims(cond_dims, ab, &out));
  int64_t sc[kMaxRank], sa[kMaxRank], sb[kMaxRank], sy[kMaxRank];
  broadcast_strides(cond_dims, out, sc);
  broadcast_strides(a_dims, out, sa);
  broadcast_strides(b_dims, out, sb);
  broadcast_strides(out, out, sy);
  // The row walker carries three operand offsets; y is contiguous, so its offset is the
  // flat index passed to the row callback.
  const int64_t* st[3] = {sc, sa, sb};
  const Space s = collapse(out, st, 3);
  const int last = s.rank - 1;
  const int64_t ic = s.strides[0][last], ia = s.strides[1][last], ib = s.strides[2][last];
  for_each_row(ctx, s, [&](const int64_t* off, int64_t flat, int64_t len) {
    const uint8_t* pc = cond + off[0];
    const float* pa = a + off[1];
    const float* pb = b + off[2];
    float* py = y + flat;
    for (int64_t i = 0; i < len; ++i) py[i] = pc[i * ic] ? pa[i * ia] : pb[i * ib];
  });
  return Status();
}

void cast(const KernelContext& ctx, const void* x, ElemType from, void* y, ElemType to, int64_t n) {
  if (n <= 0) return;
  const detail::IsaKernels& kk = detail::isa_kernels(ctx.isa);
  const size_t fs = elem_size(from), ts = elem_size(to);
  const int64_t tasks = n_tasks_for(ctx, n);
  parallel_for(ctx, tasks, [&](int64_t t) {
    const int64_t i0 = n * t / tasks, i1 = n * (t + 1) / tasks;
    const void* xs = static_cast<const uint8_t*>(x) + static_cast<size_t>(i0) * fs;
    void* ys = static_cast<uint8_t*>(y) + static_cast<size_t>(i0) * ts;
    if (from == ElemType::kF16 && to == ElemType::kF32) {
      kk.f16_to_f32(static_cast<const uint16_t*>(xs), static_cast<float*>(ys), i1 - i0);
      return;
    }
    if (from == ElemType::kBF16 && to == ElemType::kF32) {
      kk.bf16_to_f32(static_cast<const uint16_t*>(xs), static_cast<float*>(ys), i1 - i0);
      return;
    }
    visit_type(from, [&](auto ft) {
      using From = typename decltype(ft)::type;
      visit_type(to, [&](auto tt) {
        using To = typename decltype(tt)::type;
        convert(static_cast<const From*>(xs), static_cast<To*>(ys), i1 - i0);
      });
    });
  });
}

void round_to_half(const KernelContext& ctx, const float* x, float* y, int64_t n, ElemType half) {
  RLX_ASSERT(half == ElemType::kF16 || half == ElemType::kBF16);
  if (n <= 0) return;
  const detail::IsaKernels& kk = detail::isa_kernels(ctx.isa);
  const auto row = half == ElemType::kF16 ? kk.round_to_f16 : kk.round_to_bf16;
  const int64_t tasks = n_tasks_for(ctx, n);
  parallel_for(ctx, tasks, [&](int64_t t) {
    const int64_t i0 = n * t / tasks, i1 = n * (t + 1) / tasks;
    row(x + i0, y + i0, i1 - i0);
  });
}

}  // namespace rlx::cpu
