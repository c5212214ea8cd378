// The decode GEMV kernel shared by the GEMV translation units (kernels_gemv.cu: float,
// legacy, K-quant and IQ4 weights; kernels_gemv_codebook.cu: the codebook i-quants and
// the ternary types): x staged in shared memory (f32, or 8-bit segments with their
// scales), one warp per one or two weight rows streaming chunks that a per-type chunk
// decoder (C) loads and dots with x, the epilogues (bias and activation, SwiGLU, rope and
// KV-cache rows), the RMS-norm prologue, and launch_typed, which picks the instantiation.
// A chunk type C provides: kPad (x's padding shift), kUnroll and kRows (loads in flight),
// kQ8Act (f32 x rounded to Q8_0 blocks), Regs, chunks(K), load(regs, row, scale_row, c),
// dot(regs, c, x) over f32 x, and, for the 8-bit x path (gemv_x8_type), seg_slot(s, nc)
// and dot8(regs, c, X8). FloatChunk alone declares FloatWeightsTag (no 8-bit path).
// Everything here has internal linkage: each translation unit instantiates its own types.
#pragma once

#include <type_traits>

#include "backends/cuda/cuda_common.cuh"
#include "backends/cuda/smem_limit.cuh"

namespace rlx::cuda_backend {
namespace {
constexpr int kWarps = 8;  // warps per block
constexpr int64_t kRoleSmem = kWarps * 2 * sizeof(float);  // gemv_kernel's rows_s (R <= 2)

__device__ __forceinline__ int64_t xpad(int64_t i, int shift) { return i + ((i >> shift) << 2); }

__device__ __forceinline__ uint32_t word_of(const uint4& v, int w) {
  return w == 0 ? v.x : w == 1 ? v.y : w == 2 ? v.z : v.w;
}
// Exact float of u - kBias for a small non-negative integer u (< 2^23) without an I2F:
// the float 2^23 + u, minus 2^23 + kBias.
template <int kBias = 0>
__device__ __forceinline__ float small_uint_to_float(uint32_t u) {
  return __uint_as_float(0x4B000000u | u) - (8388608.0f + static_cast<float>(kBias));
}

__device__ __forceinline__ float silu(float v) { return v / (1.0f + expf(-v)); }

__device__ __forceinline__ int dp4a(uint32_t a, uint32_t b, int c) {
  return __dp4a(static_cast<int>(a), static_cast<int>(b), c);
}
constexpr uint32_t kLowNibbles = 0x0F0F0F0Fu;
// The layout shared by chunk types whose chunk is one 32-value group with its two 16-value
// halves in 8-bit slots c and nc + c (IQ4_XS / IQ4_NL, the codebook i-quants, TQ1_0 /
// TQ2_0): x as it is (no Q8_0 rounding), two weight rows a warp.
struct Groups32 {
  static constexpr int kPad = 5;
  static constexpr int kRows = 2;
  static constexpr bool kQ8Act = false;
  static __device__ __forceinline__ int64_t chunks(int64_t K) { return K / 32; }
  static __device__ __forceinline__ int64_t seg_slot(int64_t s, int64_t nc) { return (s & 1) * nc + (s >> 1); }
};

// Byte k of v as a signed value.
__device__ __forceinline__ float sbyte(uint32_t v, int k) { return static_cast<float>(static_cast<int8_t>(v >> (8 * k))); }

// 8-bit x in shared memory: 16-element segments in 16-byte slots, and per slot a float2
// (d, sum of the 16 q). A chunk reads 1 (Q8_0), 2 (Q4_0, Q4_K) or 4 (Q6_K) segments;
// segment `part` of chunk c sits in slot part * n_chunks + c, so that consecutive lanes
// (consecutive chunks) read consecutive slots. seg_slot maps the segment at element 16 s
// to its slot.
struct X8 {
  const uint4* q;
  const float2* meta;
  int64_t nc;  // chunks per row
};

template <typename W>
__device__ __forceinline__ float round_x(float v) {
  if constexpr (std::is_same_v<W, __half>) return __half2float(__float2half(v));
  else if constexpr (std::is_same_v<W, __nv_bfloat16>) return __bfloat162float(__float2bfloat16(v));
  else return v;
}

// llama.cpp's Q8_0 activation block (quantize_row_q8_0) from the block's max|x|: the
// scale d = amax / 127 rounded to f16 and 127 / amax, the factor that makes the quants
// (q = round-half-even(x * 127 / amax); __float2int_rn rounds half to even).
struct Q8Scale {
  float d, id;
};
__device__ __forceinline__ Q8Scale q8_0_scale(float amax) {
  return {__half2float(__float2half_rn(amax / 127.0f)), amax > 0.0f ? 127.0f / amax : 0.0f};
}

// Stages the 16-element segments of f32 x (16-byte aligned, K of them x 16) into the
// 8-bit slots of chunk type C: q = round(x * 127 / max|x|) (0 for an all-zero segment),
// d = max|x| / 127 (NaN when the segment holds a NaN or an infinity, so that the outputs
// it meets are not finite, as in f32 math). For C::kQ8Act the max and d are those of the
// 32-element block (two segments, neighbouring lanes), d rounded to f16: llama.cpp's Q8_0
// activations, so that the integer dot products equal its CPU backend's.
// x4(i) returns float4 i of x. Every thread of the block calls it (the trip count is
// uniform, so that the lanes of a warp can exchange their maxima).
template <typename C, typename X4>
__device__ __forceinline__ void stage_x8(const X4& x4, int64_t K, uint4* q, float2* meta) {
  const int64_t nc = C::chunks(K), n_seg = K / 16;
  for (int64_t base = 0; base < n_seg; base += blockDim.x) {
    const int64_t s = base + threadIdx.x;
    const bool on = s < n_seg;
    float4 v[4] = {};
    if (on) {
#pragma unroll
      for (int i = 0; i < 4; ++i) v[i] = x4(4 * s + i);
    }
    float amax = 0.0f, probe = 0.0f;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      amax = fmaxf(amax, fmaxf(fmaxf(fabsf(v[i].x), fabsf(v[i].y)), fmaxf(fabsf(v[i].z), fabsf(v[i].w))));
      probe += ((v[i].x * 0.0f + v[i].y * 0.0f) + (v[i].z * 0.0f + v[i].w * 0.0f));  // NaN unless all finite
    }
    float d, id;
    if constexpr (C::kQ8Act) {  // K is a multiple of 32: both segments of a block are on or off
      amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, 1));
      const Q8Scale sc = q8_0_scale(amax);
      d = sc.d;
      id = sc.id;
    } else {
      d = amax / 127.0f;
      id = amax > 0.0f ? 127.0f / amax : 0.0f;
    }
    if (!on) continue;
    uint32_t w[4];
    int sum = 0;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int a = __float2int_rn(v[i].x * id), b = __float2int_rn(v[i].y * id);
      const int c = __float2int_rn(v[i].z * id), e = __float2int_rn(v[i].w * id);
      sum += (a + b) + (c + e);
      w[i] = (static_cast<uint32_t>(a) & 0xFFu) | ((static_cast<uint32_t>(b) & 0xFFu) << 8) |
             ((static_cast<uint32_t>(c) & 0xFFu) << 16) | (static_cast<uint32_t>(e) << 24);
    }
    const int64_t slot = C::seg_slot(s, nc);
    q[slot] = make_uint4(w[0], w[1], w[2], w[3]);
    meta[slot] = make_float2(d + probe, static_cast<float>(sum));
  }
}

// x rounded to llama.cpp's Q8_0 activations (as stage_x8 quantizes them, then times d),
// for the f32-x path: v is float4 k4 of a row; the 8 float4 of a 32-element block sit in
// 8 neighbouring lanes. Every thread of the warp calls it (off lanes with zeros).
__device__ __forceinline__ float4 round_q8_0_x4(float4 v) {
  float amax = fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w)));
  amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, 1));
  amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, 2));
  amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, 4));
  const Q8Scale sc = q8_0_scale(amax);
  auto r = [&](float e) { return isfinite(e) ? sc.d * static_cast<float>(__float2int_rn(e * sc.id)) : e; };
  return make_float4(r(v.x), r(v.y), r(v.z), r(v.w));
}
// The same for one element per lane: the 32 lanes of a warp hold one block.
__device__ __forceinline__ float round_q8_0_x1(float v) {
  float amax = fabsf(v);
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, o));
  const Q8Scale sc = q8_0_scale(amax);
  return isfinite(v) ? sc.d * static_cast<float>(__float2int_rn(v * sc.id)) : v;
}

// The RMS-norm prologue (GemvParams::norm), first half: x into vs (K floats of shared
// memory) and the norm's scale 1 / sqrt(mean(x^2) + eps), summed in double like
// norm_kernel.
__device__ __forceinline__ float norm_prologue(const GemvParams& p, int64_t K, float* vs) {
  __shared__ double red[32];
  const float4* x4 = static_cast<const float4*>(p.x);
  double ss = 0;
  for (int64_t i = threadIdx.x; i < K / 4; i += blockDim.x) {
    const float4 v = x4[i];
    reinterpret_cast<float4*>(vs)[i] = v;
    ss += static_cast<double>(v.x) * v.x + static_cast<double>(v.y) * v.y + static_cast<double>(v.z) * v.z +
          static_cast<double>(v.w) * v.w;
  }
  ss = block_sum_d(ss, red);  // (its barriers also publish vs)
  return static_cast<float>(1.0 / sqrt(ss / static_cast<double>(K) + p.norm_eps));
}

// gamma as f32 into gs (K floats of shared memory).
__device__ __forceinline__ void stage_gamma(const GemvParams& p, int64_t K, float* gs) {
  if (p.norm_g_dt == DT::F32) {
    const float4* g4 = static_cast<const float4*>(p.norm_gamma);  // (16-byte aligned: fuse_norm_gemv checks)
    for (int64_t i = threadIdx.x; i < K / 4; i += blockDim.x) reinterpret_cast<float4*>(gs)[i] = __ldg(g4 + i);
  } else {
    for (int64_t i = threadIdx.x; i < K; i += blockDim.x) gs[i] = ld_f(p.norm_g_dt, p.norm_gamma, i);
  }
}

// Second half: float4 i of the normed x, v * scale * gamma (norm_kernel's order).
__device__ __forceinline__ float4 normed_x4(const float* vs, const float* gs, float scale, int64_t i) {
  const float4 v = reinterpret_cast<const float4*>(vs)[i], g = reinterpret_cast<const float4*>(gs)[i];
  return make_float4(v.x * scale * g.x, v.y * scale * g.y, v.z * scale * g.z, v.w * scale * g.w);
}

// Output row n of a q / k / v product with a rope / KV-cache role (GemvParams::part_role):
// v is the row's value, partner its rotation partner's (row n ^ 1). The same arithmetic
// as rope_element and rope_kv_kernel, for one row of q and k.
__device__ __forceinline__ void store_rope_kv(const RopeKvParams& k, int role, int64_t n, float v, float partner) {
  if (role == GemvParams::kRoleV) {
    const int64_t vs = ld_i(k.v_start_dt, k.v_start, 0);
    if (vs >= 0 && vs < k.v_len) st_f(k.v_dt, k.v_cache, vs * k.v_width + n, v);
    else if (n == 0) atomicExch(k.err, k.err_code);
    return;
  }
  const RopeParams& r = role == GemvParams::kRoleQ ? k.q : k.k;
  const int64_t c = n % r.head_dim;
  float o = v;
  if (c < r.n_rot) {
    const double pos = static_cast<double>(ld_i(r.pos_dt, r.pos, 0));
    double sn, cs;
    sincos(pos * r.inv_freq[c / 2], &sn, &cs);
    const float cf = static_cast<float>(cs) * r.mscale, sf = static_cast<float>(sn) * r.mscale;
    o = (c & 1) == 0 ? v * cf - partner * sf : partner * sf + v * cf;  // (x0, x1) = (v, partner) or (partner, v)
  }
  if (r.out != nullptr) st_f(r.out_dt, r.out, n, o);
  if (role == GemvParams::kRoleK) {
    const int64_t ks = ld_i(k.k_start_dt, k.k_start, 0);
    if (ks >= 0 && ks < k.k_len) st_f(r.out_dt, k.k_cache, ks * r.width + n, o);
    else if (n == 0) atomicExch(k.err, k.err_code);
  }
}

// One warp per group of R rows; MT: 1 or kMaxGemvM (rows of x, run-time M <= MT).
// X: the type x is rounded to (float weights) or float. kX8 (packed weights): each row
// of x is staged in 8 bits (stage_x8) and the chunks' dot8 take it; a weight chunk
// loaded once serves every row (batched decode of several streams).
template <typename C, typename X, int R, int MT, bool kSwiglu, bool kX8 = false>
__global__ void __launch_bounds__(kWarps * 32) gemv_kernel(const GemvParams p) {
  extern __shared__ float xs[];  // [M][xpad(K)], or per row the 8-bit slots, then per row their (d, sum)
  const int M = MT == 1 ? 1 : static_cast<int>(p.M);
  const int64_t K = p.K, ks = xpad(K, C::kPad);
  const int lane = threadIdx.x & 31;
  // This block's part of a grouped launch: its weights, output, rows and first block.
  const uint8_t* W = p.w;
  void* Y = p.y;
  int64_t N = p.N, d_offset = p.d_offset, block = blockIdx.x;
  int role = p.part_role[0];
  if (p.n_parts > 1) {
    constexpr int64_t kRowsPerBlock = static_cast<int64_t>(kWarps) * R;
#pragma unroll
    for (int i = 0; i < kMaxGemvParts; ++i) {
      if (i >= p.n_parts) break;
      const int64_t blocks = (p.part_N[i] + kRowsPerBlock - 1) / kRowsPerBlock;
      W = p.part_w[i];
      Y = p.part_y[i];
      N = p.part_N[i];
      d_offset = p.part_d_offset[i];
      role = p.part_role[i];
      if (block < blocks) break;
      block -= blocks;
    }
  }
  const int64_t n0 = (block * kWarps + (threadIdx.x >> 5)) * R;
  const bool active = n0 < N;
  const int64_t chunks = C::chunks(K);
  const int64_t nb = K / packed_block_elems(p.w_dt);  // scales per row (split layouts)
  const uint8_t* rows[R][2];
  const uint8_t* drows[R][2];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    int64_t n = n0 + r < N ? n0 + r : N - 1;  // clamp: computed, not stored
    if (n < 0) n = 0;
    rows[r][0] = W + n * p.row_bytes;
    drows[r][0] = W + d_offset + n * nb * 2;
    rows[r][1] = kSwiglu ? p.w2 + n * p.row_bytes : nullptr;
    drows[r][1] = kSwiglu ? p.w2 + p.d_offset + n * nb * 2 : nullptr;
  }
  constexpr int S = kSwiglu ? 2 : 1;
  // Chunk loads in flight per lane: kUnroll * kRows whatever the rows and weights.
  constexpr int U = C::kUnroll * C::kRows / (S * R) > 0 ? C::kUnroll * C::kRows / (S * R) : 1;
  typename C::Regs regs[U][S][R];
  auto load_all = [&](int64_t c0) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t c = c0 + 32 * u;
      if (c < chunks)
#pragma unroll
        for (int s = 0; s < S; ++s)
#pragma unroll
          for (int r = 0; r < R; ++r) C::load(regs[u][s][r], rows[r][s], drows[r][s], c);
    }
  };
  // With the norm prologue, x is computed from the norm's inputs (M = 1, f32, vec4):
  // vs holds the residual sum, gs gamma in f32.
  float* vs = reinterpret_cast<float*>(reinterpret_cast<uint8_t*>(xs) +
                                       (kX8 ? M * (K / 16) * (16 + sizeof(float2)) : M * ks * sizeof(float)));
  float* gs = vs + K;
  // The first weight loads go out before x is staged (and, for weights no kernel writes,
  // before the kernel before this one has finished), so that their latency overlaps it;
  // likewise gamma.
  if (p.w_const && active) load_all(lane);
  if (p.norm && p.norm_gamma_const) stage_gamma(p, K, gs);
  pdl_wait();
  if (!p.w_const && active) load_all(lane);
  pdl_trigger();
  if (p.norm && !p.norm_gamma_const) stage_gamma(p, K, gs);
  const float scale = p.norm ? norm_prologue(p, K, vs) : 1.0f;  // (its barriers publish vs and gs)
  auto x4_at = [&](int64_t i) {
    return p.norm ? normed_x4(vs, gs, scale, i) : __ldg(static_cast<const float4*>(p.x) + i);
  };
  X8 x8[MT] = {};
  if constexpr (kX8) {
    uint4* q = reinterpret_cast<uint4*>(xs);
    float2* meta = reinterpret_cast<float2*>(q + M * (K / 16));
    for (int m = 0; m < M; ++m) {  // (row m's float4 i is float4 m * K / 4 + i of x)
      const int64_t row4 = m * (K / 4);
      stage_x8<C>([&](int64_t i) { return x4_at(row4 + i); }, K, q + m * (K / 16), meta + m * (K / 16));
      x8[m] = X8{q + m * (K / 16), meta + m * (K / 16), chunks};
    }
  } else if (C::kQ8Act && p.x_vec4) {  // uniform trip counts: blocks of 32 are whole warps' lanes
    for (int m = 0; m < M; ++m)
      for (int64_t b4 = 0; b4 < K / 4; b4 += blockDim.x) {
        const int64_t k4 = b4 + threadIdx.x;
        const float4 v = round_q8_0_x4(k4 < K / 4 ? x4_at(m * (K / 4) + k4) : make_float4(0, 0, 0, 0));
        if (k4 < K / 4) *reinterpret_cast<float4*>(xs + m * ks + xpad(4 * k4, C::kPad)) = v;
      }
  } else if (C::kQ8Act) {
    for (int m = 0; m < M; ++m)
      for (int64_t b = 0; b < K; b += blockDim.x) {
        const int64_t k = b + threadIdx.x;
        const float v = round_q8_0_x1(k < K ? ld_f(p.x_dt, p.x, m * K + k) : 0.0f);
        if (k < K) xs[m * ks + xpad(k, C::kPad)] = v;
      }
  } else if (p.x_vec4) {
    for (int m = 0; m < M; ++m) {
#pragma unroll 4
      for (int64_t k4 = threadIdx.x; k4 < K / 4; k4 += blockDim.x) {
        const float4 v = x4_at(m * (K / 4) + k4);
        *reinterpret_cast<float4*>(xs + m * ks + xpad(4 * k4, C::kPad)) =
            make_float4(round_x<X>(v.x), round_x<X>(v.y), round_x<X>(v.z), round_x<X>(v.w));
      }
    }
  } else {
    for (int m = 0; m < M; ++m)
      for (int64_t k = threadIdx.x; k < K; k += blockDim.x)
        xs[m * ks + xpad(k, C::kPad)] = round_x<X>(ld_f(p.x_dt, p.x, m * K + k));
  }
  __syncthreads();
  // (A block with a rope role exchanges rows at the end: all its warps stay.)
  constexpr bool kRoles = !kSwiglu && MT == 1;
  if (!active && (!kRoles || role == 0)) return;
  float acc[S][R][MT];
#pragma unroll
  for (int s = 0; s < S; ++s)
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int m = 0; m < MT; ++m) acc[s][r][m] = 0.0f;
  for (int64_t c0 = lane; active;) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t c = c0 + 32 * u;
      if (c < chunks)
#pragma unroll
        for (int m = 0; m < MT; ++m) {
          if (m >= M) break;
#pragma unroll
          for (int s = 0; s < S; ++s)
#pragma unroll
            for (int r = 0; r < R; ++r) {
              if constexpr (kX8) acc[s][r][m] += C::dot8(regs[u][s][r], c, x8[m]);
              else acc[s][r][m] += C::dot(regs[u][s][r], c, xs + m * ks);
            }
        }
    }
    c0 += 32 * U;
    if (c0 >= chunks) break;
    load_all(c0);
  }
  if constexpr (kRoles) {
    if (role != 0) {
      __shared__ float rows_s[kWarps * R];  // this block's outputs, in row order
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const float v = warp_sum(acc[0][r][0]);
        if (lane == 0) rows_s[(threadIdx.x >> 5) * R + r] = v;
      }
      __syncthreads();
      const int t = threadIdx.x;
      const int64_t n = block * kWarps * R + t;
      if (t < kWarps * R && n < N) store_rope_kv(p.rkv, role, n, rows_s[t], rows_s[t ^ 1]);
      return;
    }
  }
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int64_t n = n0 + r;
#pragma unroll
    for (int m = 0; m < MT; ++m) {
      if (m >= M) break;
      float v = warp_sum(acc[0][r][m]);
      if constexpr (kSwiglu) {
        const float u = warp_sum(acc[S - 1][r][m]);
        v = silu(round_to<float>(p.y_dt, v)) * round_to<float>(p.y_dt, u);
      } else {
        if (p.bias) v += ld_f(p.bias_dt, p.bias, n < N ? n : 0);
        v = act_fn<float>(p.act, v);
      }
      if (lane == 0 && n < N) st_f(p.y_dt, Y, m * N + n, v);
    }
  }
}

// The 8-bit x path: asked for, rows of f32 x with 16-byte alignment, packed weights.
bool gemv_x8(const GemvParams& p) { return p.x_int8 && p.x_vec4 && p.x_dt == DT::F32 && gemv_x8_type(p.w_dt); }

// Blocks of a launch whose warps compute R weight rows each (all parts of a grouped one).
int64_t gemv_blocks(const GemvParams& p, int R) {
  const int64_t rows_per_block = static_cast<int64_t>(kWarps) * R;
  int64_t blocks = 0;
  for (int i = 0; i < (p.n_parts > 1 ? p.n_parts : 1); ++i)
    blocks += ((p.n_parts > 1 ? p.part_N[i] : p.N) + rows_per_block - 1) / rows_per_block;
  return blocks;
}

// Static shared memory of gemv_kernel: the rope / KV-cache epilogue's rows and
// norm_prologue's 32 doubles share the 48 KiB with the dynamic part.
constexpr int64_t kStaticSmem = kRoleSmem + 32 * sizeof(double);

// True for a chunk type that declares FloatWeightsTag (FloatChunk: no 8-bit x path).
template <class C, class = void>
struct FloatWeights : std::false_type {};
template <class C>
struct FloatWeights<C, std::void_t<typename C::FloatWeightsTag>> : std::true_type {};

// Launches gemv_kernel over chunk type C with R weight rows a warp (the caller picks R:
// one for float weights, else two but for launch_gemv's one case of one).
template <typename C, typename X, int R>
void launch_typed(const GemvParams& p, cudaStream_t s) {
  const unsigned grid = static_cast<unsigned>(gemv_blocks(p, R));
  if constexpr (!FloatWeights<C>::value) {
    if (gemv_x8(p)) {
      const size_t smem8 = static_cast<size_t>(gemv_x8_smem_bytes(p.M, p.K) + (p.norm ? p.K * 8 : 0));  // (gemv_norm_fits)
      if (p.M == 1) {
        if (p.swiglu) launch_k(gemv_kernel<C, X, R, 1, true, true>, grid, kWarps * 32, smem8, s, p);
        else launch_k(gemv_kernel<C, X, R, 1, false, true>, grid, kWarps * 32, smem8, s, p);
        return;
      }
      // Several rows may take more than the default 48 KiB, up to kGemvX8SmemLimit: as
      // many rows per launch as fit there (a long K: fewer rows a launch, each launch
      // still reading the weights once for its rows).
      constexpr int kLimit = static_cast<int>(kGemvX8SmemLimit);
      const int64_t fit = std::max<int64_t>(1, (kGemvX8SmemLimit - kStaticSmem) / gemv_x8_smem_bytes(1, p.K));
      const int64_t y_bytes = p.y_dt == DT::F32 ? 4 : 2;
      for (int64_t m0 = 0; m0 < p.M; m0 += fit) {
        GemvParams q = p;
        q.M = std::min<int64_t>(fit, p.M - m0);
        q.x = static_cast<const float*>(p.x) + m0 * p.K;
        q.y = static_cast<uint8_t*>(p.y) + m0 * p.N * y_bytes;
        for (int i = 0; i < p.n_parts && p.n_parts > 1; ++i)  // (a grouped launch: each part's rows)
          q.part_y[i] = static_cast<uint8_t*>(p.part_y[i]) + m0 * p.part_N[i] * y_bytes;
        const size_t smem_q = static_cast<size_t>(gemv_x8_smem_bytes(q.M, q.K));
        if (q.M == 1) {
          if (q.swiglu) launch_k(gemv_kernel<C, X, R, 1, true, true>, grid, kWarps * 32, smem_q, s, q);
          else launch_k(gemv_kernel<C, X, R, 1, false, true>, grid, kWarps * 32, smem_q, s, q);
        } else if (q.swiglu) {
          raise_smem_limit<gemv_kernel<C, X, R, kMaxGemvM, true, true>>(kLimit);
          launch_k(gemv_kernel<C, X, R, kMaxGemvM, true, true>, grid, kWarps * 32, smem_q, s, q);
        } else {
          raise_smem_limit<gemv_kernel<C, X, R, kMaxGemvM, false, true>>(kLimit);
          launch_k(gemv_kernel<C, X, R, kMaxGemvM, false, true>, grid, kWarps * 32, smem_q, s, q);
        }
      }
      return;
    }
  }
  const size_t smem = gemv_smem_bytes(p.w_dt, p.M, p.K, p.norm);
  if (p.M == 1) {
    if (p.swiglu) launch_k(gemv_kernel<C, X, R, 1, true>, grid, kWarps * 32, smem, s, p);
    else launch_k(gemv_kernel<C, X, R, 1, false>, grid, kWarps * 32, smem, s, p);
  } else {
    if (p.swiglu) launch_k(gemv_kernel<C, X, R, kMaxGemvM, true>, grid, kWarps * 32, smem, s, p);
    else launch_k(gemv_kernel<C, X, R, kMaxGemvM, false>, grid, kWarps * 32, smem, s, p);
  }
}

}  // namespace
}  // namespace rlx::cuda_backend
