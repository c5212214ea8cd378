// Device helpers shared by the CUDA backend's kernel files: typed loads/stores by
// run-time dtype, activation/binary/compare functions matching the CPU reference,
// warp/block reductions and the decoder of packed GGUF blocks (32 elements a unit).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <utility>

#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/iquant_decode.cuh"

namespace rlx::cuda_backend {

// ---- programmatic dependent launch (Hopper) -------------------------------------------
// Kernels launched with launch_k may start while the kernel before them in the stream
// is still running (when programmatic_launch() is on: sm_90 and RLX_CUDA_PDL is not 0).
// Every kernel therefore calls pdl_wait() before it touches memory that an earlier
// kernel writes or reads (only immutable data, such as weights, may be read before it),
// and pdl_trigger() once it no longer needs to hold back its successor. Both are no-ops
// for a kernel launched without the attribute and on older GPUs.
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

/// kernel<<<grid, block, smem, s>>>(args...), with the programmatic-serialization
/// attribute when programmatic_launch() is on.
template <typename... Params, typename... Args>
void launch_k(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t s, Args&&... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = programmatic_launch() ? 1 : 0;
  cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);  // errors surface through cudaGetLastError
}

inline int grid_for(int64_t n, int threads, int64_t cap = 65535LL * 16) {
  int64_t b = (n + threads - 1) / threads;
  if (b < 1) b = 1;
  if (b > cap) b = cap;
  return static_cast<int>(b);
}

__device__ __forceinline__ float ld_f(DT t, const void* p, int64_t i) {
  switch (t) {
    case DT::F32: return static_cast<const float*>(p)[i];
    case DT::F16: return __half2float(static_cast<const __half*>(p)[i]);
    case DT::BF16: return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
    case DT::F64: return static_cast<float>(static_cast<const double*>(p)[i]);
    case DT::I8: return static_cast<float>(static_cast<const int8_t*>(p)[i]);
    case DT::U8: case DT::Bool: return static_cast<float>(static_cast<const uint8_t*>(p)[i]);
    case DT::I32: return static_cast<float>(static_cast<const int32_t*>(p)[i]);
    case DT::I64: return static_cast<float>(static_cast<const int64_t*>(p)[i]);
    default: return 0.0f;
  }
}

__device__ __forceinline__ double ld_d(DT t, const void* p, int64_t i) {
  switch (t) {
    case DT::F64: return static_cast<const double*>(p)[i];
    case DT::I32: return static_cast<const int32_t*>(p)[i];
    case DT::I64: return static_cast<double>(static_cast<const int64_t*>(p)[i]);
    default: return ld_f(t, p, i);
  }
}

__device__ __forceinline__ int64_t ld_i(DT t, const void* p, int64_t i) {
  switch (t) {
    case DT::I8: return static_cast<const int8_t*>(p)[i];
    case DT::U8: case DT::Bool: return static_cast<const uint8_t*>(p)[i];
    case DT::I32: return static_cast<const int32_t*>(p)[i];
    case DT::I64: return static_cast<const int64_t*>(p)[i];
    default: return static_cast<int64_t>(ld_d(t, p, i));
  }
}

__device__ __forceinline__ void st_d(DT t, void* p, int64_t i, double v) {
  switch (t) {
    case DT::F32: static_cast<float*>(p)[i] = static_cast<float>(v); break;
    case DT::F16: static_cast<__half*>(p)[i] = __float2half(static_cast<float>(v)); break;
    case DT::BF16: static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16(static_cast<float>(v)); break;
    case DT::F64: static_cast<double*>(p)[i] = v; break;
    case DT::I8: static_cast<int8_t*>(p)[i] = static_cast<int8_t>(v); break;
    case DT::U8: static_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(v); break;
    case DT::Bool: static_cast<uint8_t*>(p)[i] = v != 0 ? 1 : 0; break;
    case DT::I32: static_cast<int32_t*>(p)[i] = static_cast<int32_t>(v); break;
    case DT::I64: static_cast<int64_t*>(p)[i] = static_cast<int64_t>(v); break;
    default: break;
  }
}

__device__ __forceinline__ void st_f(DT t, void* p, int64_t i, float v) {
  switch (t) {
    case DT::F32: static_cast<float*>(p)[i] = v; break;
    case DT::F16: static_cast<__half*>(p)[i] = __float2half(v); break;
    case DT::BF16: static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16(v); break;
    default: st_d(t, p, i, v); break;
  }
}

/// Rounds `v` to what dtype `t` holds (so fused chains match unfused ones).
template <typename T>
__device__ __forceinline__ T round_to(DT t, T v) {
  switch (t) {
    case DT::F16: return static_cast<T>(__half2float(__float2half(static_cast<float>(v))));
    case DT::BF16: return static_cast<T>(__bfloat162float(__float2bfloat16(static_cast<float>(v))));
    case DT::F32: return static_cast<T>(static_cast<float>(v));
    case DT::Bool: return v != T(0) ? T(1) : T(0);
    case DT::I8: case DT::U8: case DT::I32: case DT::I64: return trunc(v);
    default: return v;
  }
}

// ir::ActKind order: Identity Gelu GeluTanh Silu Relu Sigmoid Tanh Exp Log Sqrt Rsqrt Neg Abs Sin Cos Softplus
template <typename T>
__device__ __forceinline__ T act_fn(uint8_t k, T x) {
  switch (k) {
    case 0: return x;
    case 1: return T(0.5) * x * (T(1) + erf(x * T(0.70710678118654752)));
    case 2: return T(0.5) * x * (T(1) + tanh(T(0.7978845608028654) * (x + T(0.044715) * x * x * x)));
    case 3: return x / (T(1) + exp(-x));
    case 4: return x > T(0) ? x : T(0);
    case 5: return T(1) / (T(1) + exp(-x));
    case 6: return tanh(x);
    case 7: return exp(x);
    case 8: return log(x);
    case 9: return sqrt(x);
    case 10: return T(1) / sqrt(x);
    case 11: return -x;
    case 12: return fabs(x);
    case 13: return sin(x);
    case 14: return cos(x);
    case 15: return x > T(20) ? x : log1p(exp(x));
    default: return x;
  }
}

// ir::BinaryKind order: Add Sub Mul Div Max Min Pow
template <typename T>
__device__ __forceinline__ T binary_fn(uint8_t k, T a, T b) {
  switch (k) {
    case 0: return a + b;
    case 1: return a - b;
    case 2: return a * b;
    case 3: return a / b;
    case 4: return a > b ? a : b;
    case 5: return a < b ? a : b;
    case 6: return pow(a, b);
    default: return a;
  }
}

// ir::CompareKind order: Eq Ne Lt Le Gt Ge
template <typename T>
__device__ __forceinline__ T compare_fn(uint8_t k, T a, T b) {
  switch (k) {
    case 0: return a == b;
    case 1: return a != b;
    case 2: return a < b;
    case 3: return a <= b;
    case 4: return a > b;
    case 5: return a >= b;
    default: return T(0);
  }
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ __forceinline__ double warp_sum_d(double v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

/// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets it.
__device__ __forceinline__ double block_sum_d(double v, double* shared32) {
  v = warp_sum_d(v);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();
  if (lane == 0) shared32[warp] = v;
  __syncthreads();
  const int nw = (blockDim.x + 31) >> 5;
  double t = 0;
  for (int i = 0; i < nw; ++i) t += shared32[i];
  return t;
}

// ---- packed GGUF blocks: decode one "unit" of 32 consecutive elements --------------

__device__ __forceinline__ float f16_bits(const uint8_t* p) {
  const uint16_t b = static_cast<uint16_t>(p[0] | (p[1] << 8));
  return __half2float(__ushort_as_half(b));
}

/// Bytes per block and elements per block of the packed types decoded here.
__host__ __device__ constexpr int packed_block_bytes(DT t) {
  return t == DT::Q4_0   ? 18
         : t == DT::Q4_1 ? 20
         : t == DT::Q5_0 ? 22
         : t == DT::Q5_1 ? 24
         : t == DT::Q8_0 ? 34
         : t == DT::Q4_K ? 144
         : t == DT::Q5_K ? 176
         : t == DT::Q6_K ? 210
                         : iq::block_bytes(t);
}
__host__ __device__ constexpr int packed_block_elems(DT t) {
  return (t == DT::Q4_0 || t == DT::Q4_1 || t == DT::Q5_0 || t == DT::Q5_1 || t == DT::Q8_0 || t == DT::IQ4_NL) ? 32
                                                                                                            : 256;
}

__device__ __forceinline__ void k4_scale_min(int j, const uint8_t* q, float& sc, float& m) {
  if (j < 4) {
    sc = static_cast<float>(q[j] & 63);
    m = static_cast<float>(q[j + 4] & 63);
  } else {
    sc = static_cast<float>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    m = static_cast<float>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

/// Decodes elements [32u, 32u+32) of a packed row into y (ggml's layouts, see
/// include/rlx/formats/quant_blocks.h).
template <DT T>
__device__ __forceinline__ void decode_unit(const uint8_t* row, int64_t u, float* y) {
  if constexpr (T == DT::Q8_0) {
    const uint8_t* b = row + u * 34;
    const float d = __half2float(__ushort_as_half(*reinterpret_cast<const uint16_t*>(b)));
    const uint16_t* q16 = reinterpret_cast<const uint16_t*>(b + 2);  // blocks are 2-byte aligned
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      const uint16_t w = q16[i];
      y[2 * i] = d * static_cast<float>(static_cast<int8_t>(w & 0xFF));
      y[2 * i + 1] = d * static_cast<float>(static_cast<int8_t>(w >> 8));
    }
  } else if constexpr (T == DT::Q4_0) {
    const uint8_t* b = row + u * 18;
    const float d = f16_bits(b);
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      const int q = b[2 + i];
      y[i] = d * static_cast<float>((q & 15) - 8);
      y[i + 16] = d * static_cast<float>((q >> 4) - 8);
    }
  } else if constexpr (T == DT::Q4_1) {  // d, m, 16 bytes of nibbles: d * q + m
    const uint8_t* b = row + u * 20;
    const float d = f16_bits(b), m = f16_bits(b + 2);
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      const int q = b[4 + i];
      y[i] = d * static_cast<float>(q & 15) + m;
      y[i + 16] = d * static_cast<float>(q >> 4) + m;
    }
  } else if constexpr (T == DT::Q5_0 || T == DT::Q5_1) {
    // d (, m), 4 bytes of fifth bits (element j's in bit j), 16 bytes of nibbles;
    // Q5_0: d * (q - 16), Q5_1: d * q + m. The blocks are 2-byte aligned only.
    constexpr int kBytes = T == DT::Q5_0 ? 22 : 24, kHigh = T == DT::Q5_0 ? 2 : 4;
    const uint8_t* b = row + u * kBytes;
    const float d = f16_bits(b), m = T == DT::Q5_1 ? f16_bits(b + 2) : 0.0f;
    const uint32_t qh = static_cast<uint32_t>(b[kHigh]) | (static_cast<uint32_t>(b[kHigh + 1]) << 8) |
                        (static_cast<uint32_t>(b[kHigh + 2]) << 16) | (static_cast<uint32_t>(b[kHigh + 3]) << 24);
    const uint8_t* qs = b + kHigh + 4;
    constexpr int kOffset = T == DT::Q5_0 ? 16 : 0;
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      const int lo = (qs[i] & 15) | static_cast<int>(((qh >> i) & 1u) << 4);
      const int hi = (qs[i] >> 4) | static_cast<int>(((qh >> (i + 16)) & 1u) << 4);
      y[i] = d * static_cast<float>(lo - kOffset) + m;
      y[i + 16] = d * static_cast<float>(hi - kOffset) + m;
    }
  } else if constexpr (T == DT::Q4_K || T == DT::Q5_K) {
    constexpr int kBytes = T == DT::Q4_K ? 144 : 176;
    const uint8_t* b = row + (u >> 3) * kBytes;
    const int s = static_cast<int>(u & 7);
    const float d = f16_bits(b), dmin = f16_bits(b + 2);
    float sc, m;
    k4_scale_min(s, b + 4, sc, m);
    const float d1 = d * sc, m1 = dmin * m;
    const uint8_t* qs = b + (T == DT::Q4_K ? 16 : 48) + 32 * (s >> 1);
    const int shift = (s & 1) * 4;
    if constexpr (T == DT::Q4_K) {
      uint4 w[2];
      w[0] = *reinterpret_cast<const uint4*>(qs);
      w[1] = *reinterpret_cast<const uint4*>(qs + 16);
      const uint8_t* q = reinterpret_cast<const uint8_t*>(w);
#pragma unroll
      for (int i = 0; i < 32; ++i) y[i] = d1 * static_cast<float>((q[i] >> shift) & 15) - m1;
    } else {
      const uint8_t* qh = b + 16;
      const int hb = 1 << s;
#pragma unroll
      for (int i = 0; i < 32; ++i)
        y[i] = d1 * static_cast<float>(((qs[i] >> shift) & 15) + ((qh[i] & hb) ? 16 : 0)) - m1;
    }
  } else if constexpr (T == DT::Q6_K) {
    const uint8_t* b = row + (u >> 3) * 210;
    const int s = static_cast<int>(u & 7);
    const int half = s >> 2, quarter = s & 3;
    const uint8_t* ql = b + 64 * half + (quarter & 1) * 32;
    const uint8_t* qh = b + 128 + 32 * half;
    const int8_t* scales = reinterpret_cast<const int8_t*>(b + 192) + 8 * half + 2 * quarter;
    const float d = f16_bits(b + 208);
    const int lshift = (quarter >> 1) * 4, hshift = quarter * 2;
    const float s0 = d * static_cast<float>(scales[0]), s1 = d * static_cast<float>(scales[1]);
#pragma unroll
    for (int i = 0; i < 32; ++i) {
      const int q = ((ql[i] >> lshift) & 15) | (((qh[i] >> hshift) & 3) << 4);
      y[i] = (i < 16 ? s0 : s1) * static_cast<float>(q - 32);
    }
  } else if constexpr (iq::block_bytes(T) != 0) {
    iq::decode_unit<T>(row, u, y);
  }
}

/// Packed types stored in the split device layout (see packed_split in cuda_kernels.h).
__host__ __device__ constexpr bool split_layout(DT t) { return t == DT::Q4_0 || t == DT::Q8_0 || t == DT::Q6_K; }

/// decode_unit for the split layout: `rest` is the row's blocks without their scales,
/// `d` the row's scales (one per block).
template <DT T>
__device__ __forceinline__ void decode_unit_split(const uint8_t* rest, const __half* d, int64_t u, float* y) {
  if constexpr (T == DT::Q8_0) {
    const float dd = __half2float(d[u]);
    const int8_t* q = reinterpret_cast<const int8_t*>(rest + u * 32);
#pragma unroll
    for (int i = 0; i < 32; ++i) y[i] = dd * static_cast<float>(q[i]);
  } else if constexpr (T == DT::Q4_0) {
    const float dd = __half2float(d[u]);
    const uint8_t* q = rest + u * 16;
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      y[i] = dd * static_cast<float>((q[i] & 15) - 8);
      y[i + 16] = dd * static_cast<float>((q[i] >> 4) - 8);
    }
  } else if constexpr (T == DT::Q6_K) {
    const uint8_t* b = rest + (u >> 3) * 208;
    const int s = static_cast<int>(u & 7);
    const int half = s >> 2, quarter = s & 3;
    const uint8_t* ql = b + 64 * half + (quarter & 1) * 32;
    const uint8_t* qh = b + 128 + 32 * half;
    const int8_t* scales = reinterpret_cast<const int8_t*>(b + 192) + 8 * half + 2 * quarter;
    const float dd = __half2float(d[u >> 3]);
    const int lshift = (quarter >> 1) * 4, hshift = quarter * 2;
    const float s0 = dd * static_cast<float>(scales[0]), s1 = dd * static_cast<float>(scales[1]);
#pragma unroll
    for (int i = 0; i < 32; ++i) {
      const int q = ((ql[i] >> lshift) & 15) | (((qh[i] >> hshift) & 3) << 4);
      y[i] = (i < 16 ? s0 : s1) * static_cast<float>(q - 32);
    }
  }
}

/// Unit u of row r of a packed matrix in either layout (d_offset > 0: split).
template <DT T>
__device__ __forceinline__ void decode_row_unit(const uint8_t* w, int64_t row_bytes, int64_t d_offset, int64_t r,
                                                int64_t u, float* y) {
  if constexpr (split_layout(T)) {
    if (d_offset > 0) {
      const int64_t nb = row_bytes / (packed_block_bytes(T) - 2);
      decode_unit_split<T>(w + r * row_bytes, reinterpret_cast<const __half*>(w + d_offset) + r * nb, u, y);
      return;
    }
  }
  decode_unit<T>(w + r * row_bytes, u, y);
}

}  // namespace rlx::cuda_backend
