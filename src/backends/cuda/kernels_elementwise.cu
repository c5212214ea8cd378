// CUDA kernels for elementwise and data-movement ops: the region interpreter (every
// Activation/Binary/Compare/Where/Cast and ElementwiseRegion), strided copies
// (Transpose/Narrow/Expand), UpdateSlice into a handle and Gather (plain tables and
// packed GGUF tables dequantized per row).
#include <atomic>

#include "backends/cuda/cuda_common.cuh"

namespace rlx::cuda_backend {
namespace {

template <typename T>
__device__ T load_t(DT t, const void* p, int64_t i) {
  if constexpr (sizeof(T) == 4) return ld_f(t, p, i);
  else return ld_d(t, p, i);
}

template <typename T>
__global__ void region_kernel(const RegionParams p) {
  pdl_wait();
  pdl_trigger();
  T vals[kMaxRegionSteps];
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < p.total; e += stride) {
    int64_t idx[kMaxRank];
    if (!p.contiguous) {
      int64_t rem = e;
      for (int d = p.rank - 1; d >= 0; --d) {
        idx[d] = rem % p.dims[d];
        rem /= p.dims[d];
      }
    }
    auto input = [&](int a) -> T {
      int64_t off = e;  // contiguous: every input is laid out as the output
      if (!p.contiguous) {
        off = 0;
        for (int d = 0; d < p.rank; ++d) off += idx[d] * p.strides[a][d];
      }
      return load_t<T>(p.in_dt[a], p.in[a], off);
    };
    auto arg = [&](int a) -> T { return a < 0 ? input(-1 - a) : vals[a]; };
    T v = T(0);
    for (int k = 0; k < p.n_steps; ++k) {
      const RegionStepK& st = p.steps[k];
      switch (st.op) {
        case RegionOp::kActivation: v = act_fn<T>(st.kind, arg(st.args[0])); break;
        case RegionOp::kBinary: v = binary_fn<T>(st.kind, arg(st.args[0]), arg(st.args[1])); break;
        case RegionOp::kCompare: v = compare_fn<T>(st.kind, arg(st.args[0]), arg(st.args[1])); break;
        case RegionOp::kWhere: v = arg(st.args[0]) != T(0) ? arg(st.args[1]) : arg(st.args[2]); break;
        case RegionOp::kCast: v = arg(st.args[0]); break;
      }
      v = round_to<T>(st.dtype, v);
      vals[k] = v;
    }
    if constexpr (sizeof(T) == 4) st_f(p.out_dt, p.out, e, v);
    else st_d(p.out_dt, p.out, e, v);
  }
}

// A region of one or two steps (activation, cast or binary) over at most two contiguous
// f32 / f16 / bf16 inputs: the casts of matmul inputs, silu(gate) * up, residual adds.
// The interpreter spends most of its time dispatching; here each thread takes eight
// elements with 16-byte loads and stores, and the arithmetic is the interpreter's own
// (act_fn / binary_fn / round_to), so results are bit for bit the same.
struct FastRegion {
  const void* in[2] = {};
  void* out = nullptr;
  DT in_dt[2] = {DT::F32, DT::F32};
  DT out_dt = DT::F32;
  int n_in = 1, n_steps = 1;
  RegionStepK st[2];
  int64_t total = 0;  // a multiple of 8
};

__device__ __forceinline__ void load8f(DT t, const void* base, int64_t e, float (&f)[8]) {
  if (t == DT::F32) {
    const float4 a = *reinterpret_cast<const float4*>(static_cast<const float*>(base) + e);
    const float4 b = *reinterpret_cast<const float4*>(static_cast<const float*>(base) + e + 4);
    f[0] = a.x; f[1] = a.y; f[2] = a.z; f[3] = a.w;
    f[4] = b.x; f[5] = b.y; f[6] = b.z; f[7] = b.w;
    return;
  }
  const uint4 u = *reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(base) + e);
  const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 v = t == DT::F16 ? __half22float2(*reinterpret_cast<const __half2*>(&w[i]))
                                  : __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&w[i]));
    f[2 * i] = v.x;
    f[2 * i + 1] = v.y;
  }
}

__device__ __forceinline__ void store8f(DT t, void* base, int64_t e, const float (&f)[8]) {
  if (t == DT::F32) {
    *reinterpret_cast<float4*>(static_cast<float*>(base) + e) = make_float4(f[0], f[1], f[2], f[3]);
    *reinterpret_cast<float4*>(static_cast<float*>(base) + e + 4) = make_float4(f[4], f[5], f[6], f[7]);
    return;
  }
  uint32_t w[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if (t == DT::F16) {
      const __half2 h = __floats2half2_rn(f[2 * i], f[2 * i + 1]);
      w[i] = *reinterpret_cast<const uint32_t*>(&h);
    } else {
      const __nv_bfloat162 h = __floats2bfloat162_rn(f[2 * i], f[2 * i + 1]);
      w[i] = *reinterpret_cast<const uint32_t*>(&h);
    }
  }
  *reinterpret_cast<uint4*>(static_cast<uint16_t*>(base) + e) = make_uint4(w[0], w[1], w[2], w[3]);
}

__device__ __forceinline__ float fast_step(const RegionStepK& st, float a, float b) {
  float v = a;
  if (st.op == RegionOp::kActivation) v = act_fn<float>(st.kind, a);
  else if (st.op == RegionOp::kBinary) v = binary_fn<float>(st.kind, a, b);
  return round_to<float>(st.dtype, v);
}

// The programs fast_region_kernel has a form of its own for (the general form
// dispatches each step per element, which makes its code, not memory, the limit).
enum FastForm : int {
  kGeneral = 0,
  kCastOnly = 1,   // one cast of input 0 (a matmul input rounded to f16 / bf16)
  kSiluTimes = 2,  // silu(input 0) * input 1, steps rounded to f32 (a prompt's SwiGLU)
};

template <int kForm>
__global__ void fast_region_kernel(const FastRegion p) {
  pdl_wait();
  pdl_trigger();
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x * 8;
  for (int64_t e = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * 8; e < p.total; e += stride) {
    float x0[8], x1[8], u[8] = {};
    load8f(p.in_dt[0], p.in[0], e, x0);
    if (kForm == kSiluTimes || (kForm == kGeneral && p.n_in > 1)) load8f(p.in_dt[1], p.in[1], e, x1);
    if constexpr (kForm == kCastOnly) {
#pragma unroll
      for (int i = 0; i < 8; ++i) u[i] = x0[i];  // (the store rounds to the output type)
    } else if constexpr (kForm == kSiluTimes) {
#pragma unroll
      for (int i = 0; i < 8; ++i) u[i] = (x0[i] / (1.0f + expf(-x0[i]))) * x1[i];  // act_fn Silu, then Mul
    } else {
      auto arg = [&](int8_t a, int i) { return a == -1 ? x0[i] : a == -2 ? x1[i] : u[i]; };
#pragma unroll
      for (int i = 0; i < 8; ++i) u[i] = fast_step(p.st[0], arg(p.st[0].args[0], i), arg(p.st[0].args[1], i));
      if (p.n_steps > 1) {
        float v[8];
#pragma unroll
        for (int i = 0; i < 8; ++i) v[i] = fast_step(p.st[1], arg(p.st[1].args[0], i), arg(p.st[1].args[1], i));
#pragma unroll
        for (int i = 0; i < 8; ++i) u[i] = v[i];
      }
    }
    store8f(p.out_dt, p.out, e, u);
  }
}

// The form of `f` (see FastForm).
int fast_form(const FastRegion& f) {
  const RegionStepK &s0 = f.st[0], &s1 = f.st[1];
  // A cast (or identity) whose rounding is the output's own: the store rounds once.
  const bool passes = s0.op == RegionOp::kCast || (s0.op == RegionOp::kActivation && s0.kind == 0);
  if (f.n_steps == 1 && passes && s0.args[0] == -1 && (s0.dtype == f.out_dt || s0.dtype == DT::F32)) return kCastOnly;
  if (f.n_steps == 2 && f.n_in == 2 && s0.op == RegionOp::kActivation && s0.kind == 3 && s0.args[0] == -1 &&
      s0.dtype == DT::F32 && s1.op == RegionOp::kBinary && s1.kind == 2 && s1.dtype == DT::F32 &&
      ((s1.args[0] == 0 && s1.args[1] == -2) || (s1.args[0] == -2 && s1.args[1] == 0)))
    return kSiluTimes;
  return kGeneral;
}

// Whether `q` (contiguous) fits fast_region_kernel; fills `f` when it does.
bool fast_region(const RegionParams& q, FastRegion& f) {
  auto half_or_float = [](DT t) { return t == DT::F32 || t == DT::F16 || t == DT::BF16; };
  auto aligned = [](const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; };
  if (!q.contiguous || q.use_double || q.total % 8 != 0 || q.n_in < 1 || q.n_in > 2 || q.n_steps < 1 ||
      q.n_steps > 2 || !half_or_float(q.out_dt) || !aligned(q.out))
    return false;
  for (int a = 0; a < q.n_in; ++a)
    if (!half_or_float(q.in_dt[a]) || !aligned(q.in[a])) return false;
  for (int k = 0; k < q.n_steps; ++k) {
    const RegionStepK& st = q.steps[k];
    if (st.op != RegionOp::kActivation && st.op != RegionOp::kCast && st.op != RegionOp::kBinary) return false;
    if (!half_or_float(st.dtype)) return false;
    const int n_args = st.op == RegionOp::kBinary ? 2 : 1;
    for (int i = 0; i < n_args; ++i) {
      const int8_t a = st.args[i];
      const bool input = a < 0 && -1 - a < q.n_in;
      const bool earlier = k == 1 && a == 0;
      if (!input && !earlier) return false;
    }
  }
  f.n_in = q.n_in;
  f.n_steps = q.n_steps;
  f.total = q.total;
  f.out = q.out;
  f.out_dt = q.out_dt;
  for (int a = 0; a < q.n_in; ++a) {
    f.in[a] = q.in[a];
    f.in_dt[a] = q.in_dt[a];
  }
  for (int k = 0; k < q.n_steps; ++k) f.st[k] = q.steps[k];
  return true;
}

template <typename E>
__global__ void strided_copy_kernel(const StridedCopyParams p) {
  pdl_wait();
  pdl_trigger();
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const E* in = static_cast<const E*>(p.in);
  E* out = static_cast<E*>(p.out);
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < p.total; e += stride) {
    int64_t rem = e, off = p.in_offset;
    for (int d = p.rank - 1; d >= 0; --d) {
      off += (rem % p.dims[d]) * p.in_strides[d];
      rem /= p.dims[d];
    }
    out[e] = in[off];
  }
}

template <typename E>
__global__ void update_slice_kernel(const UpdateSliceParams p) {
  pdl_wait();
  pdl_trigger();
  const int64_t shared_start = ld_i(p.start_dt, p.start, 0);
  if (!p.start_per_outer && (shared_start < 0 || shared_start + p.rows > p.dst_len)) {
    if (blockIdx.x == 0 && threadIdx.x == 0) atomicExch(p.err, p.err_code);
    return;
  }
  const int64_t inner = p.inner_bytes / static_cast<int64_t>(sizeof(E));
  const int64_t total = p.outer * p.rows * inner;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const E* src = reinterpret_cast<const E*>(p.src);
  E* dst = reinterpret_cast<E*>(p.dst);
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += stride) {
    const int64_t i = e % inner, r = (e / inner) % p.rows, o = e / (inner * p.rows);
    const int64_t start = p.start_per_outer ? ld_i(p.start_dt, p.start, o) : shared_start;
    // A slice whose rows would not fit is not written (the others are) and the run
    // fails with the step named.
    if (p.start_per_outer && (start < 0 || start + p.rows > p.dst_len)) {
      atomicExch(p.err, p.err_code);
      continue;
    }
    dst[(o * p.dst_len + start + r) * inner + i] = src[(o * p.src_len + r) * inner + i];
  }
}

template <typename E>
__global__ void gather_kernel(const GatherParams p) {
  pdl_wait();
  pdl_trigger();
  const int64_t inner = p.inner_bytes / static_cast<int64_t>(sizeof(E));
  const int64_t total = p.outer * p.n_idx * inner;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const E* table = reinterpret_cast<const E*>(p.table);
  E* out = reinterpret_cast<E*>(p.out);
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += stride) {
    const int64_t i = e % inner, j = (e / inner) % p.n_idx, o = e / (inner * p.n_idx);
    int64_t r = ld_i(p.idx_dt, p.idx, j);
    if (r < 0 || r >= p.axis_len) {
      atomicExch(p.err, p.err_code);
      r = 0;
    }
    out[e] = table[(o * p.axis_len + r) * inner + i];
  }
}

// One thread per 32-element unit of a gathered packed row.
template <DT T>
__global__ void gather_packed_kernel(const GatherParams p) {
  pdl_wait();
  pdl_trigger();
  const int64_t units = p.row_elems / 32;
  const int64_t total = p.n_idx * units;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += stride) {
    const int64_t u = e % units, j = e / units;
    int64_t r = ld_i(p.idx_dt, p.idx, j);
    if (r < 0 || r >= p.axis_len) {
      atomicExch(p.err, p.err_code);
      r = 0;
    }
    float y[32];
    decode_row_unit<T>(p.table, p.row_bytes, p.d_offset, r, u, y);
    for (int i = 0; i < 32; ++i) st_f(p.out_dt, p.out, j * p.row_elems + u * 32 + i, y[i]);
  }
}

template <DT T>
__global__ void dequant_f16_kernel(const uint8_t* w, __half* out, int64_t N, int64_t K, int64_t row_bytes,
                                   int64_t d_offset) {
  pdl_wait();
  pdl_trigger();
  const int64_t units = K / 32, total = N * units;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += stride) {
    const int64_t u = e % units, n = e / units;
    float y[32];
    decode_row_unit<T>(w, row_bytes, d_offset, n, u, y);
    uint4* o = reinterpret_cast<uint4*>(out + n * K + u * 32);  // 16-byte stores (64-byte aligned unit)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      uint32_t w[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const __half2 h = __floats2half2_rn(y[8 * i + 2 * j], y[8 * i + 2 * j + 1]);
        w[j] = *reinterpret_cast<const uint32_t*>(&h);
      }
      o[i] = make_uint4(w[0], w[1], w[2], w[3]);
    }
  }
}

constexpr int kThreads = 256;

std::atomic<bool> g_programmatic_launch{false};

}  // namespace

void set_programmatic_launch(bool on) { g_programmatic_launch.store(on, std::memory_order_relaxed); }
bool programmatic_launch() { return g_programmatic_launch.load(std::memory_order_relaxed); }

void launch_region(const RegionParams& p, cudaStream_t s) {
  if (p.total == 0) return;
  RegionParams q = p;
  q.contiguous = true;  // no broadcast: no per-element index arithmetic
  for (int a = 0; a < q.n_in && q.contiguous; ++a) {
    int64_t st = 1;
    for (int d = q.rank - 1; d >= 0; --d) {
      if (q.dims[d] != 1 && q.strides[a][d] != st) q.contiguous = false;
      st *= q.dims[d];
    }
  }
  // Large regions (a prompt's rows) only: the interpreter's one element a thread keeps
  // the chain of a decode step's small regions shorter.
  if (FastRegion f; q.total >= (int64_t{1} << 18) && fast_region(q, f)) {
    const int g = grid_for(q.total / 8, kThreads);
    switch (fast_form(f)) {
      case kCastOnly: launch_k(fast_region_kernel<kCastOnly>, g, kThreads, 0, s, f); break;
      case kSiluTimes: launch_k(fast_region_kernel<kSiluTimes>, g, kThreads, 0, s, f); break;
      default: launch_k(fast_region_kernel<kGeneral>, g, kThreads, 0, s, f); break;
    }
    return;
  }
  if (q.use_double) launch_k(region_kernel<double>, grid_for(q.total, kThreads), kThreads, 0, s, q);
  else launch_k(region_kernel<float>, grid_for(q.total, kThreads), kThreads, 0, s, q);
}

void launch_strided_copy(const StridedCopyParams& p, cudaStream_t s) {
  if (p.total == 0) return;
  const int g = grid_for(p.total, kThreads);
  switch (p.elem_bytes) {
    case 1: launch_k(strided_copy_kernel<uint8_t>, g, kThreads, 0, s, p); break;
    case 2: launch_k(strided_copy_kernel<uint16_t>, g, kThreads, 0, s, p); break;
    case 4: launch_k(strided_copy_kernel<uint32_t>, g, kThreads, 0, s, p); break;
    default: launch_k(strided_copy_kernel<uint64_t>, g, kThreads, 0, s, p); break;
  }
}

void launch_update_slice(const UpdateSliceParams& p, cudaStream_t s) {
  const int64_t n = p.outer * p.rows * p.inner_bytes;
  if (p.inner_bytes % 4 == 0) launch_k(update_slice_kernel<uint32_t>, grid_for(n / 4, kThreads), kThreads, 0, s, p);
  else launch_k(update_slice_kernel<uint8_t>, grid_for(n, kThreads), kThreads, 0, s, p);
}

bool packed_supported(DT t) { return packed_block_bytes(t) != 0; }

void launch_gather(const GatherParams& p, cudaStream_t s) {
  if (p.row_elems > 0) {
    const int g = grid_for(p.n_idx * (p.row_elems / 32), kThreads);
    switch (p.table_dt) {
      case DT::Q4_0: launch_k(gather_packed_kernel<DT::Q4_0>, g, kThreads, 0, s, p); break;
      case DT::Q4_1: launch_k(gather_packed_kernel<DT::Q4_1>, g, kThreads, 0, s, p); break;
      case DT::Q5_0: launch_k(gather_packed_kernel<DT::Q5_0>, g, kThreads, 0, s, p); break;
      case DT::Q5_1: launch_k(gather_packed_kernel<DT::Q5_1>, g, kThreads, 0, s, p); break;
      case DT::Q8_0: launch_k(gather_packed_kernel<DT::Q8_0>, g, kThreads, 0, s, p); break;
      case DT::Q4_K: launch_k(gather_packed_kernel<DT::Q4_K>, g, kThreads, 0, s, p); break;
      case DT::Q5_K: launch_k(gather_packed_kernel<DT::Q5_K>, g, kThreads, 0, s, p); break;
      case DT::Q6_K: launch_k(gather_packed_kernel<DT::Q6_K>, g, kThreads, 0, s, p); break;
      case DT::IQ4_NL: launch_k(gather_packed_kernel<DT::IQ4_NL>, g, kThreads, 0, s, p); break;
      case DT::IQ4_XS: launch_k(gather_packed_kernel<DT::IQ4_XS>, g, kThreads, 0, s, p); break;
      case DT::IQ3_S: launch_k(gather_packed_kernel<DT::IQ3_S>, g, kThreads, 0, s, p); break;
      case DT::IQ3_XXS: launch_k(gather_packed_kernel<DT::IQ3_XXS>, g, kThreads, 0, s, p); break;
      case DT::IQ2_S: launch_k(gather_packed_kernel<DT::IQ2_S>, g, kThreads, 0, s, p); break;
      case DT::IQ2_XS: launch_k(gather_packed_kernel<DT::IQ2_XS>, g, kThreads, 0, s, p); break;
      case DT::IQ2_XXS: launch_k(gather_packed_kernel<DT::IQ2_XXS>, g, kThreads, 0, s, p); break;
      case DT::IQ1_S: launch_k(gather_packed_kernel<DT::IQ1_S>, g, kThreads, 0, s, p); break;
      case DT::IQ1_M: launch_k(gather_packed_kernel<DT::IQ1_M>, g, kThreads, 0, s, p); break;
      case DT::TQ1_0: launch_k(gather_packed_kernel<DT::TQ1_0>, g, kThreads, 0, s, p); break;
      case DT::TQ2_0: launch_k(gather_packed_kernel<DT::TQ2_0>, g, kThreads, 0, s, p); break;
      default: break;
    }
    return;
  }
  const int64_t n = p.outer * p.n_idx * p.inner_bytes;
  if (n == 0) return;
  if (p.inner_bytes % 4 == 0) launch_k(gather_kernel<uint32_t>, grid_for(n / 4, kThreads), kThreads, 0, s, p);
  else launch_k(gather_kernel<uint8_t>, grid_for(n, kThreads), kThreads, 0, s, p);
}

void launch_dequant_f16(DT w_dt, const uint8_t* w, void* out_f16, int64_t N, int64_t K, int64_t row_bytes,
                        int64_t d_offset, cudaStream_t s) {
  auto* o = static_cast<__half*>(out_f16);
  const int g = grid_for(N * (K / 32), kThreads);
  switch (w_dt) {
    case DT::Q4_0: launch_k(dequant_f16_kernel<DT::Q4_0>, g, kThreads, 0, s, w, o, N, K, row_bytes, d_offset); break;
    case DT::Q4_1: launch_k(dequant_f16_kernel<DT::Q4_1>, g, kThreads, 0, s, w, o, N, K, row_bytes, d_offset); break;
    case DT::Q5_0: launch_k(dequant_f16_kernel<DT::Q5_0>, g, kThreads, 0, s, w, o, N, K, row_bytes, d_offset); break;
    case DT::Q5_1: launch_k(dequant_f16_kernel<DT::Q5_1>, g, kThreads, 0, s, w, o, N, K, row_bytes, d_offset); break;
    case DT::Q8_0: launch_k(dequant_f16_kernel<DT::Q8_0>, g, kThreads, 0, s, w, o, N, K, row_bytes, d_offset); break;
    case DT::Q4_K: launch_k(dequant_f16_kernel<DT::Q4_K>, g, kThreads, 0, s, w, o, N, K, row_bytes, d_offset); break;
    case DT::Q5_K: launch_k(dequant_f16_kernel<DT::Q5_K>, g, kThreads, 0, s, w, o, N, K, row_bytes, d_offset); break;
    case DT::Q6_K: launch_k(dequant_f16_kernel<DT::Q6_K>, g, kThreads, 0, s, w, o, N, K, row_bytes, d_offset); break;
    case DT::IQ4_NL: launch_k(dequant_f16_kernel<DT::IQ4_NL>, g, kThreads, 0, s, w, o, N, K, row_bytes, d_offset); break;
    case DT::IQ4_XS: launch_k(dequant_f16_kernel<DT::IQ4_XS>, g, kThreads, 0, s, w, o, N, K, row_bytes, d_offset); break;
    case DT::IQ3_S: launch_k(dequant_f16_kernel<DT::IQ3_S>, g, kThreads, 0, s, w, o, N, K, row_bytes, d_offset); break;
    case DT::IQ3_XXS: launch_k(dequant_f16_kernel<DT::IQ3_XXS>, g, kThreads, 0, s, w, o, N, K, row_bytes, d_offset); break;
    case DT::IQ2_S: launch_k(dequant_f16_kernel<DT::IQ2_S>, g, kThreads, 0, s, w, o, N, K, row_bytes, d_offset); break;
    case DT::IQ2_XS: launch_k(dequant_f16_kernel<DT::IQ2_XS>, g, kThreads, 0, s, w, o, N, K, row_bytes, d_offset); break;
    case DT::IQ2_XXS: launch_k(dequant_f16_kernel<DT::IQ2_XXS>, g, kThreads, 0, s, w, o, N, K, row_bytes, d_offset); break;
    case DT::IQ1_S: launch_k(dequant_f16_kernel<DT::IQ1_S>, g, kThreads, 0, s, w, o, N, K, row_bytes, d_offset); break;
    case DT::IQ1_M: launch_k(dequant_f16_kernel<DT::IQ1_M>, g, kThreads, 0, s, w, o, N, K, row_bytes, d_offset); break;
    case DT::TQ1_0: launch_k(dequant_f16_kernel<DT::TQ1_0>, g, kThreads, 0, s, w, o, N, K, row_bytes, d_offset); break;
    case DT::TQ2_0: launch_k(dequant_f16_kernel<DT::TQ2_0>, g, kThreads, 0, s, w, o, N, K, row_bytes, d_offset); break;
    default: break;
  }
}

}  // namespace rlx::cuda_backend
