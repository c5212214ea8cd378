// Movement drivers: dimension collapsing so copies become long memcpy runs where the
// layout allows, flat-range tasks over the pool, and a cache-tiled 2-D transpose.
#include "backends/cpu/kernels/movement.h"

#include <algorithm>
#include <atomic>
#include <cstring>

namespace rlx::cpu {
namespace {

constexpr int64_t kMinTaskBytes = 64 * 1024;

int64_t tasks_for(const KernelContext& ctx, int64_t bytes) {
  return std::clamp<int64_t>(bytes / kMinTaskBytes, 1, ctx.n_threads() * 4);
}

template <typename Id>
Status gather_impl(const KernelContext& ctx, const void* table, int64_t n_rows, size_t row_bytes, const Id* ids,
                   int64_t n_ids, void* out) {
  std::atomic<int64_t> first_bad{n_ids};
  const int64_t tasks = tasks_for(ctx, n_ids * static_cast<int64_t>(row_bytes));
  parallel_for(ctx, std::min(tasks, std::max<int64_t>(n_ids, 1)), [&](int64_t t) {
    const int64_t i0 = n_ids * t / tasks, i1 = n_ids * (t + 1) / tasks;
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t id = static_cast<int64_t>(ids[i]);
      if (id < 0 || id >= n_rows) {
        int64_t cur = first_bad.load();
        while (i < cur && !first_bad.compare_exchange_weak(cur, i)) {
        }
        continue;
      }
      std::memcpy(static_cast<uint8_t*>(out) + static_cast<size_t>(i) * row_bytes,
                  static_cast<const uint8_t*>(table) + static_cast<size_t>(id) * row_bytes, row_bytes);
    }
  });
  const int64_t bad = first_bad.load();
  if (bad < n_ids)
    return Error::invalid_argument("gather: index {} at position {} is out of range [0, {})",
                                   static_cast<int64_t>(ids[bad]), bad, n_rows);
  return Status();
}

void contiguous_strides(const Dims& d, int64_t* s) {
  int64_t acc = 1;
  for (int i = d.rank - 1; i >= 0; --i) {
    s[i] = acc;
    acc *= d.d[i];
  }
}

template <typename T>
void copy_run(const uint8_t* src, int64_t stride, int64_t len, uint8_t* dst) {
  const T* s = reinterpret_cast<const T*>(src);
  T* d = reinterpret_cast<T*>(dst);
  for (int64_t i = 0; i < len; ++i) d[i] = s[i * stride];
}

void copy_run_bytes(const uint8_t* src, int64_t stride, int64_t len, size_t es, uint8_t* dst) {
  if (stride == 1) {
    std::memcpy(dst, src, static_cast<size_t>(len) * es);
    return;
  }
  switch (es) {
    case 1: return copy_run<uint8_t>(src, stride, len, dst);
    case 2: return copy_run<uint16_t>(src, stride, len, dst);
    case 4: return copy_run<uint32_t>(src, stride, len, dst);
    case 8: return copy_run<uint64_t>(src, stride, len, dst);
    default:
      for (int64_t i = 0; i < len; ++i)
        std::memcpy(dst + static_cast<size_t>(i) * es, src + static_cast<ptrdiff_t>(i * stride) * static_cast<ptrdiff_t>(es), es);
  }
}

// Copies 2-D blocks: dst[b][j][i] = src[b][i][j] for a batch of rows x cols matrices.
template <typename T>
void transpose_2d(const KernelContext& ctx, const T* src, int64_t batch, int64_t rows, int64_t cols, T* dst) {
  constexpr int64_t kTile = 32;
  const int64_t rt = (rows + kTile - 1) / kTile, ct = (cols + kTile - 1) / kTile;
  parallel_for(ctx, batch * rt, [&](int64_t t) {
    const int64_t b = t / rt, i0 = (t % rt) * kTile, i1 = std::min(rows, i0 + kTile);
    const T* s = src + b * rows * cols;
    T* d = dst + b * rows * cols;
    for (int64_t jt = 0; jt < ct; ++jt) {
      const int64_t j0 = jt * kTile, j1 = std::min(cols, j0 + kTile);
      for (int64_t i = i0; i < i1; ++i)
        for (int64_t j = j0; j < j1; ++j) d[j * rows + i] = s[i * cols + j];
    }
  });
}

}  // namespace

Status gather_rows(const KernelContext& ctx, const void* table, int64_t n_rows, size_t row_bytes, const int32_t* ids,
                   int64_t n_ids, void* out) {
  return gather_impl(ctx, table, n_rows, row_bytes, ids, n_ids, out);
}

Status gather_rows(const KernelContext& ctx, const void* table, int64_t n_rows, size_t row_bytes, const int64_t* ids,
                   int64_t n_ids, void* out) {
  return gather_impl(ctx, table, n_rows, row_bytes, ids, n_ids, out);
}

void concat(const KernelContext& ctx, const void* const* inputs, const int64_t* axis_sizes, int n_inputs,
            const Dims& dims, int axis, size_t elem_size, void* out) {
  int64_t outer = 1, inner = 1, total_axis = 0;
  for (int i = 0; i < axis; ++i) outer *= dims.d[i];
  for (int i = axis + 1; i < dims.rank; ++i) inner *= dims.d[i];
  for (int i = 0; i < n_inputs; ++i) total_axis += axis_sizes[i];
  const size_t out_row = static_cast<size_t>(total_axis * inner) * elem_size;
  if (outer == 0 || out_row == 0) return;
  parallel_for(ctx, std::min<int64_t>(outer, tasks_for(ctx, outer * static_cast<int64_t>(out_row))), [&](int64_t t) {
    const int64_t tasks = std::min<int64_t>(outer, tasks_for(ctx, outer * static_cast<int64_t>(out_row)));
    const int64_t o0 = outer * t / tasks, o1 = outer * (t + 1) / tasks;
    for (int64_t o = o0; o < o1; ++o) {
      uint8_t* dst = static_cast<uint8_t*>(out) + static_cast<size_t>(o) * out_row;
      for (int i = 0; i < n_inputs; ++i) {
        const size_t bytes = static_cast<size_t>(axis_sizes[i] * inner) * elem_size;
        std::memcpy(dst, static_cast<const uint8_t*>(inputs[i]) + static_cast<size_t>(o) * bytes, bytes);
        dst += bytes;
      }
    }
  });
}

void copy_strided(const KernelContext& ctx, const void* src, const Dims& dims, const int64_t* strides,
                  size_t elem_size, void* dst) {
  // Collapse dims that are contiguous in the source view; drop size-1 dims.
  int rank = 0;
  int64_t d[kMaxRank], s[kMaxRank];
  int64_t total = 1;
  for (int i = 0; i < dims.rank; ++i) {
    total *= dims.d[i];
    if (dims.d[i] == 1) continue;
    if (rank > 0 && s[rank - 1] == strides[i] * dims.d[i]) {
      d[rank - 1] *= dims.d[i];
      s[rank - 1] = strides[i];
    } else {
      d[rank] = dims.d[i];
      s[rank] = strides[i];
      ++rank;
    }
  }
  if (total == 0) return;
  if (rank == 0) {
    std::memcpy(dst, src, elem_size);
    return;
  }
  const int64_t inner = d[rank - 1], rows = total / inner;
  const int64_t tasks = std::min<int64_t>(rows, tasks_for(ctx, total * static_cast<int64_t>(elem_size)));
  const auto* sb = static_cast<const uint8_t*>(src);
  auto* db = static_cast<uint8_t*>(dst);
  parallel_for(ctx, std::max<int64_t>(tasks, 1), [&](int64_t t) {
    const int64_t tk = std::max<int64_t>(tasks, 1);
    const int64_t r0 = rows * t / tk, r1 = rows * (t + 1) / tk;
    for (int64_t r = r0; r < r1; ++r) {
      int64_t off = 0, idx = r;
      for (int i = rank - 2; i >= 0; --i) {
        off += (idx % d[i]) * s[i];
        idx /= d[i];
      }
      copy_run_bytes(sb + off * static_cast<int64_t>(elem_size), s[rank - 1], inner, elem_size,
                     db + static_cast<size_t>(r * inner) * elem_size);
    }
  });
}

void narrow(const KernelContext& ctx, const void* src, const Dims& dims, int axis, int64_t start, int64_t length,
            size_t elem_size, void* dst) {
  int64_t strides[kMaxRank];
  contiguous_strides(dims, strides);
  Dims view = dims;
  view.d[axis] = length;
  const auto* base = static_cast<const uint8_t*>(src) + static_cast<size_t>(start * strides[axis]) * elem_size;
  copy_strided(ctx, base, view, strides, elem_size, dst);
}

void transpose(const KernelContext& ctx, const void* src, const Dims& dims, const int* perm, size_t elem_size,
               void* dst) {
  int64_t in_strides[kMaxRank], strides[kMaxRank];
  contiguous_strides(dims, in_strides);
  Dims out;
  out.rank = dims.rank;
  for (int i = 0; i < dims.rank; ++i) {
    out.d[i] = dims.d[perm[i]];
    strides[i] = in_strides[perm[i]];
  }
  // Fast path: a batch of 2-D transposes (leading dims untouched, last two swapped
  // after collapsing) with 4- or 2-byte elements.
  bool leading_identity = true;
  for (int i = 0; i + 2 < dims.rank; ++i) leading_identity = leading_identity && perm[i] == i;
  if (dims.rank >= 2 && leading_identity && perm[dims.rank - 2] == dims.rank - 1 &&
      perm[dims.rank - 1] == dims.rank - 2 && (elem_size == 4 || elem_size == 2)) {
    int64_t batch = 1;
    for (int i = 0; i + 2 < dims.rank; ++i) batch *= dims.d[i];
    const int64_t rows = dims.d[dims.rank - 2], cols = dims.d[dims.rank - 1];
    if (batch * rows * cols == 0) return;
    if (elem_size == 4) {
      transpose_2d(ctx, static_cast<const uint32_t*>(src), batch, rows, cols, static_cast<uint32_t*>(dst));
    } else {
      transpose_2d(ctx, static_cast<const uint16_t*>(src), batch, rows, cols, static_cast<uint16_t*>(dst));
    }
    return;
  }
  copy_strided(ctx, src, out, strides, elem_size, dst);
}

Status expand(const KernelContext& ctx, const void* src, const Dims& src_dims, const Dims& dst_dims,
              size_t elem_size, void* dst) {
  if (src_dims.rank > dst_dims.rank)
    return Error::invalid_argument("expand: source rank {} exceeds target rank {}", src_dims.rank, dst_dims.rank);
  int64_t strides[kMaxRank];
  int64_t s = 1;
  for (int i = dst_dims.rank - 1; i >= 0; --i) {
    const int si = src_dims.rank - dst_dims.rank + i;
    if (si < 0 || src_dims.d[si] == 1) {
      strides[i] = 0;
    } else if (src_dims.d[si] == dst_dims.d[i]) {
      strides[i] = s;
    } else {
      return Error::invalid_argument("expand: dim {} of size {} cannot expand to {}", si, src_dims.d[si],
                                     dst_dims.d[i]);
    }
    if (si >= 0) s *= src_dims.d[si];
  }
  copy_strided(ctx, src, dst_dims, strides, elem_size, dst);
  return Status();
}

}  // namespace rlx::cpu
