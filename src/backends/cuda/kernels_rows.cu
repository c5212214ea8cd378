// CUDA kernels for row-wise ops: RmsNorm / LayerNorm and their fused residual forms,
// Rope, Softmax, Cumsum, TopK and the general Reduce. One block per row (or per
// output element for Reduce), accumulation in double where the CPU reference does.
#include <algorithm>
#include <cfloat>

#include "backends/cuda/cuda_common.cuh"

namespace rlx::cuda_backend {
namespace {

constexpr int kRowThreads = 256;

// x: [rows, d] (+ res) -> out (residual: [2, rows, d], the sum first). PER > 0: the
// row fits the block PER elements a thread, held in registers (one pass over memory);
// PER == 0: any d, re-read from memory each pass. Both sum in the same order.
template <int PER, bool kLateAffine = false>
__global__ void norm_kernel(const NormParams p) {
  __shared__ double red[32];
  const int64_t r = blockIdx.x;
  const int64_t base = r * p.d;
  const int64_t obase = (p.res ? p.rows * p.d : 0) + base;
  const int64_t nt = blockDim.x;
  float gv[PER > 0 ? PER : 1], bv[PER > 0 ? PER : 1];
  auto load_affine = [&] {
#pragma unroll
    for (int i = 0; i < PER; ++i) {
      const int64_t j = threadIdx.x + i * nt;
      gv[i] = j < p.d ? ld_f(p.g_dt, p.gamma, j) : 0.0f;
      bv[i] = j < p.d && p.beta ? ld_f(p.b_dt, p.beta, j) : 0.0f;
    }
  };
  if (PER > 0 && !kLateAffine && p.affine_const) load_affine();  // no kernel writes them: before the wait
  pdl_wait();
  pdl_trigger();
  if constexpr (PER > 0) {
    if (!kLateAffine && !p.affine_const) load_affine();
    float v[PER];
#pragma unroll
    for (int i = 0; i < PER; ++i) {
      const int64_t j = threadIdx.x + i * nt;
      v[i] = 0.0f;
      if (j < p.d) {
        v[i] = ld_f(p.x_dt, p.x, base + j);
        if (p.res) {  // the residual sum, rounded to the output dtype (as the unfused Add stores it)
          v[i] = round_to<float>(p.out_dt, v[i] + ld_f(p.x_dt, p.res, base + j));
          st_f(p.out_dt, p.out, base + j, v[i]);
        }
      }
    }
    double mean = 0;
    if (!p.rms) {
      double s = 0;
#pragma unroll
      for (int i = 0; i < PER; ++i)
        if (threadIdx.x + i * nt < p.d) s += v[i];
      mean = block_sum_d(s, red) / static_cast<double>(p.d);
    }
    double ss = 0;
#pragma unroll
    for (int i = 0; i < PER; ++i)
      if (threadIdx.x + i * nt < p.d) {
        const double c = v[i] - mean;
        ss += c * c;
      }
    ss = block_sum_d(ss, red);
    const float scale = static_cast<float>(1.0 / sqrt(ss / static_cast<double>(p.d) + p.eps));
    const float m = static_cast<float>(mean);
#pragma unroll
    for (int i = 0; i < PER; ++i) {
      const int64_t j = threadIdx.x + i * nt;
      if (j >= p.d) break;
      // (many rows: gamma and beta read here, from cache, not held through the sums)
      float o = (v[i] - m) * scale * (kLateAffine ? ld_f(p.g_dt, p.gamma, j) : gv[i]);
      if (p.beta) o += kLateAffine ? ld_f(p.b_dt, p.beta, j) : bv[i];
      st_f(p.out_dt, p.out, obase + j, o);
    }
    return;
  }
  // Residual sum, rounded to the output dtype (as the unfused Add would store it).
  if (p.res) {
    for (int64_t j = threadIdx.x; j < p.d; j += blockDim.x)
      st_f(p.out_dt, p.out, base + j, ld_f(p.x_dt, p.x, base + j) + ld_f(p.x_dt, p.res, base + j));
    __syncthreads();
  }
  const void* src = p.res ? p.out : p.x;
  const DT sdt = p.res ? p.out_dt : p.x_dt;
  double mean = 0;
  if (!p.rms) {
    double s = 0;
    for (int64_t j = threadIdx.x; j < p.d; j += blockDim.x) s += ld_f(sdt, src, base + j);
    mean = block_sum_d(s, red) / static_cast<double>(p.d);
  }
  double ss = 0;
  for (int64_t j = threadIdx.x; j < p.d; j += blockDim.x) {
    const double c = ld_f(sdt, src, base + j) - mean;
    ss += c * c;
  }
  ss = block_sum_d(ss, red);
  const float scale = static_cast<float>(1.0 / sqrt(ss / static_cast<double>(p.d) + p.eps));
  const float m = static_cast<float>(mean);
  for (int64_t j = threadIdx.x; j < p.d; j += blockDim.x) {
    float v = (ld_f(sdt, src, base + j) - m) * scale * ld_f(p.g_dt, p.gamma, j);
    if (p.beta) v += ld_f(p.b_dt, p.beta, j);
    st_f(p.out_dt, p.out, obase + j, v);
  }
}

constexpr int kRopeHeads = 4;  // heads a rope thread holds at once

__host__ __device__ __forceinline__ int64_t rope_head_groups(const RopeParams& p, int64_t heads_per_unit) {
  return (p.width / p.head_dim + heads_per_unit - 1) / heads_per_unit;
}

// Work units of rope p: (row, group of heads_per_unit heads, i) with i a rotated pair (i <
// n_rot / 2) or a passed-through element, i fastest (adjacent threads, adjacent pairs).
__host__ __device__ __forceinline__ int64_t rope_units(const RopeParams& p, int64_t heads_per_unit) {
  return p.rows * rope_head_groups(p, heads_per_unit) * (p.n_rot / 2 + (p.head_dim - p.n_rot));
}

// Heads a rope unit takes: a decode step's few rows one (many short threads); a prompt's
// rows eight, two chunks of loads in flight a thread and the angle's sine and cosine (in
// double) computed once for the eight.
inline int64_t rope_heads_per_unit(int64_t rows) { return rows >= 256 ? 2 * kRopeHeads : 1; }

// Unit u of rope p: pair (or passed-through element) i of heads_per_unit heads of one
// row, kRopeHeads at a time (a chunk's loads before its stores: they may alias x). The
// results go to p.out (unless null) and, when `cache` is set, to cache[cache_off + o]
// for output index o (a cache row laid out as the output row, same dtype).
__device__ __forceinline__ void rope_unit(const RopeParams& p, int64_t u, int64_t heads_per_unit, void* cache,
                                          int64_t cache_off) {
  const int64_t half = p.n_rot / 2;
  const int64_t per_head = half + (p.head_dim - p.n_rot);
  const int64_t n_heads = p.width / p.head_dim;
  const int64_t groups = rope_head_groups(p, heads_per_unit);
  const int64_t i = u % per_head;
  const int64_t rest = u / per_head;
  const int64_t hg = (rest % groups) * heads_per_unit;  // first head of the unit
  const int64_t r = rest / groups;
  const int64_t he = min(n_heads, hg + heads_per_unit);
  const bool f32 = p.x_dt == DT::F32 && p.out_dt == DT::F32;
  const bool pass = i >= half;  // dims past n_rot pass through
  const int64_t i0 = pass ? p.n_rot + (i - half) : p.neox ? i : 2 * i;
  const int64_t i1 = pass ? i0 : p.neox ? i + half : 2 * i + 1;
  float c = 1.0f, s = 0.0f;
  if (!pass) {
    const double pos = static_cast<double>(ld_i(p.pos_dt, p.pos, r % p.seq));
    double sn, cs;
    sincos(pos * p.inv_freq[i], &sn, &cs);
    c = static_cast<float>(cs) * p.mscale;
    s = static_cast<float>(sn) * p.mscale;
  }
  for (int64_t h0 = hg; h0 < he; h0 += kRopeHeads) {
    const int nh = static_cast<int>(min(static_cast<int64_t>(kRopeHeads), he - h0));
    const int64_t hb = r * p.width + h0 * p.head_dim, xb = r * p.in_width + p.in_offset + h0 * p.head_dim;
    float x0[kRopeHeads], x1[kRopeHeads];
    if (f32) {
      const float* x = static_cast<const float*>(p.x) + xb;
#pragma unroll
      for (int h = 0; h < kRopeHeads; ++h)
        if (h < nh) {
          x0[h] = x[h * p.head_dim + i0];
          x1[h] = x[h * p.head_dim + i1];
        }
    } else {
#pragma unroll
      for (int h = 0; h < kRopeHeads; ++h)
        if (h < nh) {
          x0[h] = ld_f(p.x_dt, p.x, xb + h * p.head_dim + i0);
          x1[h] = ld_f(p.x_dt, p.x, xb + h * p.head_dim + i1);
        }
    }
    float y0[kRopeHeads], y1[kRopeHeads];
#pragma unroll
    for (int h = 0; h < kRopeHeads; ++h) {
      y0[h] = pass ? x0[h] : x0[h] * c - x1[h] * s;
      y1[h] = x0[h] * s + x1[h] * c;
    }
    for (int w = 0; w < 2; ++w) {  // the output, then the cache row
      void* dst = w == 0 ? p.out : cache;
      if (dst == nullptr) continue;
      const int64_t ob = (w == 0 ? 0 : cache_off) + hb;
      if (f32) {
        float* o = static_cast<float*>(dst) + ob;
#pragma unroll
        for (int h = 0; h < kRopeHeads; ++h)
          if (h < nh) {
            o[h * p.head_dim + i0] = y0[h];
            if (!pass) o[h * p.head_dim + i1] = y1[h];
          }
      } else {
#pragma unroll
        for (int h = 0; h < kRopeHeads; ++h)
          if (h < nh) {
            st_f(p.out_dt, dst, ob + h * p.head_dim + i0, y0[h]);
            if (!pass) st_f(p.out_dt, dst, ob + h * p.head_dim + i1, y1[h]);
          }
      }
    }
  }
}

// One thread per rope unit.
__global__ void rope_kernel(const RopeParams p, int64_t heads_per_unit) {
  pdl_wait();
  pdl_trigger();
  const int64_t total = rope_units(p, heads_per_unit);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += stride)
    rope_unit(p, e, heads_per_unit, nullptr, 0);
}

constexpr int kVPiece = 8;  // v elements a thread copies into the cache

// Rope of q and k plus the KV-cache writes of a step: one thread per rope unit of q,
// rope unit of k (written to k's output and its cache row) or piece of kVPiece
// elements of a v row (copied to its cache row). A cache start out of range writes
// nothing to that cache and reports err_code. Several sequences (p.outer > 1): k row R
// is row R % k_rows of sequence R / k_rows, written to that sequence's slice from its
// own start; likewise v.
__global__ void rope_kv_kernel(const RopeKvParams p, int64_t q_hpu, int64_t k_hpu) {
  pdl_wait();
  pdl_trigger();
  const int64_t v_pieces = (p.v_width + kVPiece - 1) / kVPiece;
  const int64_t nq = rope_units(p.q, q_hpu), nk = rope_units(p.k, k_hpu), nv = p.outer * p.v_rows * v_pieces;
  const int64_t k_per_row = nk / (p.k.rows > 0 ? p.k.rows : 1);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  // A start out of range: that slice's rows are not written, the run reports err_code.
  auto start_of = [&](const void* start, DT dt, int64_t o, int64_t rows, int64_t len, bool& ok) {
    const int64_t st = ld_i(dt, start, p.outer > 1 ? o : 0);
    ok = st >= 0 && st + rows <= len;
    return st;
  };
  bool reported = false;
  auto report = [&] {
    if (!reported) atomicExch(p.err, p.err_code);
    reported = true;
  };
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < nq + nk + nv; e += stride) {
    if (e < nq) {
      rope_unit(p.q, e, q_hpu, nullptr, 0);
    } else if (e < nq + nk) {
      const int64_t ek = e - nq;
      const int64_t o = ek / k_per_row / (p.k_rows > 0 ? p.k_rows : 1);  // sequence (one: rows past k_rows stay out)
      bool ok = false;
      const int64_t ks = start_of(p.k_start, p.k_start_dt, o, p.k_rows, p.k_len, ok);
      if (!ok) report();
      const bool to_cache = ok && o < p.outer && p.k_rows > 0;
      // cache row (o len + start + r) for k row R = o k_rows + r: offset from R's own
      rope_unit(p.k, ek, k_hpu, to_cache ? p.k_cache : nullptr, (o * (p.k_len - p.k_rows) + ks) * p.k.width);
    } else {
      const int64_t ev = e - nq - nk;
      const int64_t row = ev / v_pieces, o = row / p.v_rows;
      bool ok = false;
      const int64_t vs = start_of(p.v_start, p.v_start_dt, o, p.v_rows, p.v_len, ok);
      if (!ok) {
        report();
        continue;
      }
      const int64_t c0 = (ev % v_pieces) * kVPiece, n = min(static_cast<int64_t>(kVPiece), p.v_width - c0);
      const int64_t src = row * p.v_width + c0, dst = (o * p.v_len + vs + row % p.v_rows) * p.v_width + c0;
      float v[kVPiece];
#pragma unroll
      for (int j = 0; j < kVPiece; ++j)
        if (j < n) v[j] = ld_f(p.v_dt, p.v, src + j);
#pragma unroll
      for (int j = 0; j < kVPiece; ++j)
        if (j < n) st_f(p.v_dt, p.v_cache, dst + j, v[j]);
    }
  }
}

// One block per (outer, inner) row of the axis.
__global__ void softmax_kernel(const AxisParams p) {
  pdl_wait();
  pdl_trigger();
  __shared__ double red[32];
  __shared__ float mx_s[32];
  const int64_t row = blockIdx.x;
  const int64_t o = row / p.inner, in = row % p.inner;
  const int64_t base = o * p.len * p.inner + in;
  const int64_t n = p.active_len;
  float mx = -FLT_MAX;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) mx = fmaxf(mx, ld_f(p.in_dt, p.x, base + j * p.inner));
  mx = warp_max(mx);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) mx_s[warp] = mx;
  __syncthreads();
  mx = -FLT_MAX;
  for (int i = 0; i < static_cast<int>((blockDim.x + 31) >> 5); ++i) mx = fmaxf(mx, mx_s[i]);
  double s = 0;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) s += exp(ld_f(p.in_dt, p.x, base + j * p.inner) - mx);
  s = block_sum_d(s, red);
  const bool none = s == 0.0;  // a row of -inf only: zeros, as on the CPU (a NaN still spreads)
  const float inv = none ? 0.0f : static_cast<float>(1.0 / s);
  for (int64_t j = threadIdx.x; j < p.len; j += blockDim.x) {
    const float v = j < n && !none ? expf(ld_f(p.in_dt, p.x, base + j * p.inner) - mx) * inv : 0.0f;
    st_f(p.out_dt, p.out, base + j * p.inner, v);
  }
}

// One thread per (outer, inner) row, sequential along the axis.
__global__ void cumsum_kernel(const AxisParams p) {
  pdl_wait();
  pdl_trigger();
  const int64_t rows = p.outer * p.inner;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; row < rows; row += stride) {
    const int64_t base = (row / p.inner) * p.len * p.inner + row % p.inner;
    double acc = 0;
    for (int64_t j = 0; j < p.len; ++j) {
      const double v = ld_d(p.in_dt, p.x, base + j * p.inner);
      if (p.exclusive) {
        st_d(p.out_dt, p.out, base + j * p.inner, acc);
        acc += v;
      } else {
        acc += v;
        st_d(p.out_dt, p.out, base + j * p.inner, acc);
      }
    }
  }
}

// Order of TopK: descending value, ties by lower index, NaN last.
__device__ __forceinline__ bool topk_before(float va, int64_t ia, float vb, int64_t ib) {
  const bool na = isnan(va), nb = isnan(vb);
  if (na != nb) return nb;
  if (!na && va != vb) return va > vb;
  return ia < ib;
}

// k == 1 over f32 rows (16-byte aligned, len % 4 == 0): the argmax of each row (the
// order of topk_before: NaN last, ties -> lowest index) by one 1024-thread block with
// float4 loads, several in flight per thread (the greedy token of a decode step: the
// generic kernel's one 256-thread pass took ~20 us for 32000 logits).
__global__ void __launch_bounds__(1024) argmax_f32_kernel(const AxisParams p) {
  pdl_wait();
  pdl_trigger();
  __shared__ float sv[32];
  __shared__ int si[32];
  const int64_t row = blockIdx.x;
  const float4* x = static_cast<const float4*>(p.x) + row * (p.len / 4);
  const int n4 = static_cast<int>(p.len / 4);
  __shared__ int any_bad;
  if (threadIdx.x == 0) any_bad = 0;
  float bv = 0.0f;
  int bi = -1;
  bool bad = false;  // finite_check: this thread saw a NaN or an infinity
  auto take = [&](float v, int j) {
    bad = bad || !isfinite(v);
    if (bi < 0 || topk_before(v, j, bv, bi)) {
      bv = v;
      bi = j;
    }
  };
#pragma unroll 4
  for (int j = threadIdx.x; j < n4; j += blockDim.x) {
    const float4 v = __ldg(x + j);
    take(v.x, 4 * j);
    take(v.y, 4 * j + 1);
    take(v.z, 4 * j + 2);
    take(v.w, 4 * j + 3);
  }
  __syncthreads();  // any_bad is cleared before any thread sets it
  if (p.finite_check && __any_sync(0xffffffffu, bad) && (threadIdx.x & 31) == 0) atomicOr(&any_bad, 1);
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
    const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
    if (oi >= 0 && (bi < 0 || topk_before(ov, oi, bv, bi))) {
      bv = ov;
      bi = oi;
    }
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) {
    sv[warp] = bv;
    si[warp] = bi;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < static_cast<int>(blockDim.x >> 5); ++w)
      if (si[w] >= 0 && (bi < 0 || topk_before(sv[w], si[w], bv, bi))) {
        bv = sv[w];
        bi = si[w];
      }
    if (p.values) st_f(p.out_dt, p.out, row, bv);
    else st_d(p.out_dt, p.out, row, static_cast<double>(p.finite_check && any_bad ? -1 : bi));
  }
}

// One block per row: k passes, each picks the best element ranked after the last pick.
__global__ void topk_kernel(const AxisParams p) {
  pdl_wait();
  pdl_trigger();
  __shared__ float sv[32];
  __shared__ long long si[32];
  __shared__ float last_v;
  __shared__ long long last_i;
  const int64_t row = blockIdx.x;
  const int64_t base = row * p.len;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int nw = (blockDim.x + 31) >> 5;
  __shared__ int any_bad;  // finite_check (k == 1): a NaN or an infinity in the row
  if (threadIdx.x == 0) any_bad = 0;
  __syncthreads();
  for (int64_t t = 0; t < p.k; ++t) {
    float bv = 0;
    long long bi = -1;
    for (int64_t j = threadIdx.x; j < p.len; j += blockDim.x) {
      const float v = ld_f(p.in_dt, p.x, base + j);
      if (p.finite_check && !isfinite(v)) atomicOr(&any_bad, 1);
      if (t > 0 && !topk_before(last_v, last_i, v, j)) continue;  // already taken
      if (bi < 0 || topk_before(v, j, bv, bi)) {
        bv = v;
        bi = j;
      }
    }
    for (int o = 16; o > 0; o >>= 1) {
      const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
      const long long oi = __shfl_xor_sync(0xffffffffu, bi, o);
      if (oi >= 0 && (bi < 0 || topk_before(ov, oi, bv, bi))) {
        bv = ov;
        bi = oi;
      }
    }
    __syncthreads();
    if (lane == 0) {
      sv[warp] = bv;
      si[warp] = bi;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      float v = 0;
      long long i = -1;
      for (int w = 0; w < nw; ++w)
        if (si[w] >= 0 && (i < 0 || topk_before(sv[w], si[w], v, i))) {
          v = sv[w];
          i = si[w];
        }
      last_v = v;
      last_i = i;
      if (p.values) st_f(p.out_dt, p.out, row * p.k + t, v);
      else st_d(p.out_dt, p.out, row * p.k + t, static_cast<double>(p.finite_check && any_bad ? -1 : i));
    }
    __syncthreads();
  }
}

// One block per output element.
// Block (o, part) reduces part `part` of output o's elements (all of them when splits is 1).
__global__ void reduce_kernel(const ReduceParams p) {
  pdl_wait();
  pdl_trigger();
  __shared__ double red[32];
  __shared__ float mm[32];
  const int64_t o = blockIdx.x / p.splits, part = blockIdx.x % p.splits;
  const int64_t per = (p.n_red_elems + p.splits - 1) / p.splits;
  const int64_t k0 = part * per, k1 = min(p.n_red_elems, k0 + per);
  int64_t base = 0, rem = o;
  for (int d = p.n_kept - 1; d >= 0; --d) {
    base += (rem % p.kept_dims[d]) * p.kept_strides[d];
    rem /= p.kept_dims[d];
  }
  const bool is_max = p.kind == 2, is_min = p.kind == 3;
  double acc = is_max ? -INFINITY : is_min ? INFINITY : 0.0;
  for (int64_t k = k0 + threadIdx.x; k < k1; k += blockDim.x) {
    int64_t off = base, r = k;
    for (int d = p.n_red - 1; d >= 0; --d) {
      off += (r % p.red_dims[d]) * p.red_strides[d];
      r /= p.red_dims[d];
    }
    const double v = ld_d(p.in_dt, p.x, off);
    acc = is_max ? fmax(acc, v) : is_min ? fmin(acc, v) : acc + v;
  }
  double result;
  if (is_max || is_min) {
    float a = static_cast<float>(acc);
    for (int s = 16; s > 0; s >>= 1) {
      const float b = __shfl_xor_sync(0xffffffffu, a, s);
      a = is_max ? fmaxf(a, b) : fminf(a, b);
    }
    if ((threadIdx.x & 31) == 0) mm[threadIdx.x >> 5] = a;
    __syncthreads();
    a = mm[0];
    for (int i = 1; i < static_cast<int>((blockDim.x + 31) >> 5); ++i) a = is_max ? fmaxf(a, mm[i]) : fminf(a, mm[i]);
    result = a;
  } else {
    result = block_sum_d(acc, red);
  }
  if (threadIdx.x != 0) return;
  if (p.splits > 1) {
    p.partial[blockIdx.x] = result;
    return;
  }
  if (p.kind == 1) result /= static_cast<double>(p.mean_count);
  st_d(p.out_dt, p.out, o, result);
}

// The parts of each output (splits > 1) combined: sum (mean: divided), max or min.
__global__ void reduce_combine_kernel(const ReduceParams p) {
  pdl_wait();
  pdl_trigger();
  const int64_t o = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (o >= p.n_out) return;
  const bool is_max = p.kind == 2, is_min = p.kind == 3;
  double acc = p.partial[o * p.splits];
  for (int64_t i = 1; i < p.splits; ++i) {
    const double v = p.partial[o * p.splits + i];
    acc = is_max ? fmax(acc, v) : is_min ? fmin(acc, v) : acc + v;
  }
  if (p.kind == 1) acc /= static_cast<double>(p.mean_count);
  st_d(p.out_dt, p.out, o, acc);
}

int row_threads(int64_t len) {
  int t = 32;
  while (t < kRowThreads && t < len) t *= 2;
  return t;
}

}  // namespace

void launch_norm(const NormParams& p, cudaStream_t s) {
  if (p.rows == 0) return;
  // Few rows (decode): a wide block per row, so that each pass is a short chain of loads.
  int threads = row_threads(p.d);
  if (p.rows < 64)
    while (threads < 1024 && threads < p.d / 2) threads *= 2;
  const int64_t per = (p.d + threads - 1) / threads;
  const unsigned grid = static_cast<unsigned>(p.rows);
  if (p.rows >= 64 && per >= 2 && per <= 8) {  // many rows: fewer registers, more rows in flight
    if (per == 2) launch_k(norm_kernel<2, true>, grid, threads, 0, s, p);
    else if (per <= 4) launch_k(norm_kernel<4, true>, grid, threads, 0, s, p);
    else launch_k(norm_kernel<8, true>, grid, threads, 0, s, p);
    return;
  }
  if (per <= 1) launch_k(norm_kernel<1>, grid, threads, 0, s, p);
  else if (per <= 2) launch_k(norm_kernel<2>, grid, threads, 0, s, p);
  else if (per <= 4) launch_k(norm_kernel<4>, grid, threads, 0, s, p);
  else if (per <= 8) launch_k(norm_kernel<8>, grid, threads, 0, s, p);
  else launch_k(norm_kernel<0>, grid, threads, 0, s, p);
}

void launch_rope(const RopeParams& p, cudaStream_t s) {
  const int64_t hpu = rope_heads_per_unit(p.rows);
  const int64_t total = rope_units(p, hpu);
  if (total == 0) return;
  launch_k(rope_kernel, grid_for(total, 256), 256, 0, s, p, hpu);
}

void launch_rope_kv(const RopeKvParams& p, cudaStream_t s) {
  const int64_t qc = rope_heads_per_unit(p.q.rows), kc = rope_heads_per_unit(p.k.rows);
  const int64_t total =
      rope_units(p.q, qc) + rope_units(p.k, kc) + p.outer * p.v_rows * ((p.v_width + kVPiece - 1) / kVPiece);
  launch_k(rope_kv_kernel, grid_for(std::max<int64_t>(total, 1), 256), 256, 0, s, p, qc, kc);
}

void launch_softmax(const AxisParams& p, cudaStream_t s) {
  if (p.outer * p.inner == 0) return;
  softmax_kernel<<<static_cast<unsigned>(p.outer * p.inner), row_threads(p.len), 0, s>>>(p);
}

void launch_cumsum(const AxisParams& p, cudaStream_t s) {
  if (p.outer * p.inner == 0) return;
  launch_k(cumsum_kernel, grid_for(p.outer * p.inner, 128), 128, 0, s, p);
}

void launch_topk(const AxisParams& p, cudaStream_t s) {
  if (p.outer == 0) return;
  if (p.k == 1 && p.in_dt == DT::F32 && p.len % 4 == 0 && p.len < (int64_t{1} << 30) &&
      reinterpret_cast<uintptr_t>(p.x) % 16 == 0) {
    const int64_t threads = std::min<int64_t>(1024, std::max<int64_t>(32, (p.len / 4 + 31) / 32 * 32));
    launch_k(argmax_f32_kernel, static_cast<unsigned>(p.outer), static_cast<unsigned>(threads), 0, s, p);
    return;
  }
  topk_kernel<<<static_cast<unsigned>(p.outer), row_threads(p.len), 0, s>>>(p);
}

void launch_reduce(const ReduceParams& p, cudaStream_t s) {
  if (p.n_out == 0) return;
  const int64_t per = (p.n_red_elems + p.splits - 1) / p.splits;
  reduce_kernel<<<static_cast<unsigned>(p.n_out * p.splits), row_threads(per), 0, s>>>(p);
  if (p.splits > 1) reduce_combine_kernel<<<static_cast<unsigned>((p.n_out + 255) / 256), 256, 0, s>>>(p);
}

}  // namespace rlx::cuda_backend
