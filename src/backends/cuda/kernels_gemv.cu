// CUDA decode GEMV for linear layers at M <= 8 (launch_gemv): y[m, n] = epilogue(x[m] . W[n])
// for W [N, K] in f32/f16/bf16 or packed GGUF blocks (Q8_0, Q4_0, Q6_K in the split device
// layout, Q4_K, IQ4_XS and IQ4_NL as stored). Each block first stages x in shared memory (rounded to the
// weights' precision for float weights, as the CPU backend and cuBLAS see it; f32 for
// packed weights), padded by one float4 every 2^P floats so that the lanes of a warp read
// it without bank conflicts; then every warp streams one (float) or two (packed) rows of
// W with 16-byte loads, several in flight per lane, and reduces with warp shuffles.
// Packed weights at M = 1 may instead take x in 8 bits (GemvParams::x_int8): each block
// quantizes x while staging it (16 elements a segment: d = max|x| / 127, int8 q = x / d
// rounded, and the sum of the q) and the chunks dot their quants with it by dp4a, four
// products an instruction, with a quarter of the f32 path's shared-memory traffic.
// Epilogues: + bias and an activation, or silu(x . Wg) * (x . Wu) over a second weight.
// Sibling products over the same x (q/k/v, gate/up) can share one launch (n_parts): each
// block finds its part (weights, output, rows) from its index.
// Prologue: an RMS norm (with its residual add) may be computed by every block from the
// norm's inputs instead of read as x (GemvParams::norm), which saves the norm's launch.
// Also the repack kernel that moves the 2-byte block scale of Q8_0 / Q4_0 / Q6_K out of
// every block (launch_repack_split), run once at set_param.
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

// ---- per-type chunk decoders: a chunk is what one lane loads (16 bytes of quants plus
// whatever scales it needs) and dots with x --------------------------------------------

template <typename W>
struct FloatChunk {
  static constexpr int kPad = 5;
  static constexpr int kUnroll = 8;  // chunks per lane and row loaded before use
  static constexpr int kRows = 1;    // rows per warp (one weight matrix)
  static constexpr bool kQ8Act = false;  // x as it is (f32, or 16-element 8-bit segments)
  static constexpr int kElems = 16 / static_cast<int>(sizeof(W));
  struct Regs {
    uint4 q;
  };
  static __device__ __forceinline__ int64_t chunks(int64_t K) { return K / kElems; }
  static __device__ __forceinline__ void load(Regs& r, const uint8_t* row, const uint8_t*, int64_t c) {
    r.q = __ldcs(reinterpret_cast<const uint4*>(row) + c);
  }
  // Dot of the chunk with x (padded, f32).
  static __device__ __forceinline__ float dot(const Regs& r, int64_t c, const float* xs) {
    const float* x = xs + xpad(c * kElems, kPad);
    float s = 0.0f;
    if constexpr (sizeof(W) == 4) {
      const float4 xv = *reinterpret_cast<const float4*>(x);
      s = fmaf(__uint_as_float(r.q.x), xv.x, s);
      s = fmaf(__uint_as_float(r.q.y), xv.y, s);
      s = fmaf(__uint_as_float(r.q.z), xv.z, s);
      s = fmaf(__uint_as_float(r.q.w), xv.w, s);
    } else {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float4 xv = *reinterpret_cast<const float4*>(x + 4 * h);
        float2 a, b;
        const uint32_t w0 = word_of(r.q, 2 * h), w1 = word_of(r.q, 2 * h + 1);
        if constexpr (std::is_same_v<W, __half>) {
          a = __half22float2(*reinterpret_cast<const __half2*>(&w0));
          b = __half22float2(*reinterpret_cast<const __half2*>(&w1));
        } else {
          a = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&w0));
          b = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&w1));
        }
        s = fmaf(a.x, xv.x, s);
        s = fmaf(a.y, xv.y, s);
        s = fmaf(b.x, xv.z, s);
        s = fmaf(b.y, xv.w, s);
      }
    }
    return s;
  }
};

// Q8_0, split: a row is K int8 quants, then (for all rows) one f16 scale per 32.
struct Q8Chunk {
  static constexpr int kPad = 5;
  static constexpr int kUnroll = 4;
  static constexpr int kRows = 2;
  static constexpr bool kQ8Act = true;  // x rounded as llama.cpp rounds it for this type: Q8_0 blocks of 32
  struct Regs {
    uint4 q;
    float d;
  };
  static __device__ __forceinline__ int64_t chunks(int64_t K) { return K / 16; }
  static __device__ __forceinline__ void load(Regs& r, const uint8_t* row, const uint8_t* drow, int64_t c) {
    r.q = __ldcs(reinterpret_cast<const uint4*>(row) + c);
    r.d = __half2float(__ldg(reinterpret_cast<const __half*>(drow) + (c >> 1)));
  }
  static __device__ __forceinline__ float dot(const Regs& r, int64_t c, const float* xs) {
    const float* x = xs + xpad(c * 16, kPad);
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const float4 xv = *reinterpret_cast<const float4*>(x + 4 * k);
      const uint32_t w = word_of(r.q, k) ^ 0x80808080u;  // int8 + 128, as unsigned bytes
      s = fmaf(small_uint_to_float<128>(w & 0xFFu), xv.x, s);
      s = fmaf(small_uint_to_float<128>((w >> 8) & 0xFFu), xv.y, s);
      s = fmaf(small_uint_to_float<128>((w >> 16) & 0xFFu), xv.z, s);
      s = fmaf(small_uint_to_float<128>(w >> 24), xv.w, s);
    }
    return r.d * s;
  }
  static __device__ __forceinline__ int64_t seg_slot(int64_t s, int64_t) { return s; }
  static __device__ __forceinline__ float dot8(const Regs& r, int64_t c, const X8& x) {
    const uint4 xv = x.q[c];
    int s = dp4a(r.q.x, xv.x, 0);
    s = dp4a(r.q.y, xv.y, s);
    s = dp4a(r.q.z, xv.z, s);
    s = dp4a(r.q.w, xv.w, s);
    return r.d * x.meta[c].x * static_cast<float>(s);
  }
};

// Sums of the low and the high nibbles of a 16-byte chunk dotted with the 8-bit x of
// slots lo and hi (nibble values 0..15, so the signed dp4a is exact).
__device__ __forceinline__ void nibble_dots(const uint4& q, const uint4& lo, const uint4& hi, int& il, int& ih) {
  il = dp4a(q.x & kLowNibbles, lo.x, 0);
  il = dp4a(q.y & kLowNibbles, lo.y, il);
  il = dp4a(q.z & kLowNibbles, lo.z, il);
  il = dp4a(q.w & kLowNibbles, lo.w, il);
  ih = dp4a((q.x >> 4) & kLowNibbles, hi.x, 0);
  ih = dp4a((q.y >> 4) & kLowNibbles, hi.y, ih);
  ih = dp4a((q.z >> 4) & kLowNibbles, hi.z, ih);
  ih = dp4a((q.w >> 4) & kLowNibbles, hi.w, ih);
}

// Q4_0, split: a row is K/2 bytes (byte i of a block: element i low nibble, i + 16 high).
struct Q40Chunk {
  static constexpr int kPad = 5;
  static constexpr int kUnroll = 4;
  static constexpr int kRows = 2;
  static constexpr bool kQ8Act = true;  // x rounded as llama.cpp rounds it for this type: Q8_0 blocks of 32
  struct Regs {
    uint4 q;
    float d;
  };
  static __device__ __forceinline__ int64_t chunks(int64_t K) { return K / 32; }
  static __device__ __forceinline__ void load(Regs& r, const uint8_t* row, const uint8_t* drow, int64_t c) {
    r.q = __ldcs(reinterpret_cast<const uint4*>(row) + c);
    r.d = __half2float(__ldg(reinterpret_cast<const __half*>(drow) + c));
  }
  static __device__ __forceinline__ float dot(const Regs& r, int64_t c, const float* xs) {
    const float* x = xs + xpad(c * 32, kPad);
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const float4 lo = *reinterpret_cast<const float4*>(x + 4 * k);
      const float4 hi = *reinterpret_cast<const float4*>(x + 16 + 4 * k);
      const uint32_t w = word_of(r.q, k);
      s = fmaf(small_uint_to_float<8>(w & 0xFu), lo.x, s);
      s = fmaf(small_uint_to_float<8>((w >> 8) & 0xFu), lo.y, s);
      s = fmaf(small_uint_to_float<8>((w >> 16) & 0xFu), lo.z, s);
      s = fmaf(small_uint_to_float<8>((w >> 24) & 0xFu), lo.w, s);
      s = fmaf(small_uint_to_float<8>((w >> 4) & 0xFu), hi.x, s);
      s = fmaf(small_uint_to_float<8>((w >> 12) & 0xFu), hi.y, s);
      s = fmaf(small_uint_to_float<8>((w >> 20) & 0xFu), hi.z, s);
      s = fmaf(small_uint_to_float<8>(w >> 28), hi.w, s);
    }
    return r.d * s;
  }
  // Segments: elements 0..15 of block c (low nibbles), then 16..31 (high nibbles).
  static __device__ __forceinline__ int64_t seg_slot(int64_t s, int64_t nc) { return (s & 1) * nc + (s >> 1); }
  static __device__ __forceinline__ float dot8(const Regs& r, int64_t c, const X8& x) {
    int il, ih;
    nibble_dots(r.q, x.q[c], x.q[x.nc + c], il, ih);
    const float2 ml = x.meta[c], mh = x.meta[x.nc + c];
    return r.d * (ml.x * (static_cast<float>(il) - 8.0f * ml.y) + mh.x * (static_cast<float>(ih) - 8.0f * mh.y));
  }
};

// Q4_K as stored (144-byte blocks: d, dmin, 12 bytes of 6-bit scales/mins, 128 bytes of
// nibbles). Chunk j of a block: qs bytes [16j, 16j + 16): low nibbles are elements
// 64g + 16h + i of sub-block 2g, high nibbles 64g + 32 + 16h + i of sub-block 2g + 1
// (g = j / 2, h = j % 2).
struct Q4KChunk {
  static constexpr int kPad = 6;
  static constexpr int kUnroll = 4;
  static constexpr int kRows = 2;
  static constexpr bool kQ8Act = false;  // x as it is (f32, or 16-element 8-bit segments)
  struct Regs {
    uint4 hdr, q;
  };
  static __device__ __forceinline__ int64_t chunks(int64_t K) { return K / 32; }
  static __device__ __forceinline__ void load(Regs& r, const uint8_t* row, const uint8_t*, int64_t c) {
    const uint4* b = reinterpret_cast<const uint4*>(row + (c >> 3) * 144);
    r.hdr = __ldg(b);
    r.q = __ldcs(b + 1 + (c & 7));
  }
  // Scale and min of sub-block s (0..7) from the header (bytes 4..15 hold them).
  static __device__ __forceinline__ void scale_min(const uint4& h, int s, float& sc, float& m) {
    auto sb = [&](int i) { return (word_of(h, 1 + (i >> 2)) >> (8 * (i & 3))) & 0xFFu; };  // scales byte i
    if (s < 4) {
      sc = static_cast<float>(sb(s) & 63);
      m = static_cast<float>(sb(s + 4) & 63);
    } else {
      sc = static_cast<float>((sb(s + 4) & 0xF) | ((sb(s - 4) >> 6) << 4));
      m = static_cast<float>((sb(s + 4) >> 4) | ((sb(s) >> 6) << 4));
    }
  }
  static __device__ __forceinline__ float dot(const Regs& r, int64_t c, const float* xs) {
    const int j = static_cast<int>(c & 7), g = j >> 1, h = j & 1;
    const float* x = xs + xpad((c >> 3) * 256 + 64 * g + 16 * h, kPad);
    float sq_lo = 0.0f, sq_hi = 0.0f, sx_lo = 0.0f, sx_hi = 0.0f;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const float4 lo = *reinterpret_cast<const float4*>(x + 4 * k);
      const float4 hi = *reinterpret_cast<const float4*>(x + 32 + 4 * k);
      const uint32_t w = word_of(r.q, k);
      sq_lo = fmaf(small_uint_to_float(w & 0xFu), lo.x, sq_lo);
      sq_lo = fmaf(small_uint_to_float((w >> 8) & 0xFu), lo.y, sq_lo);
      sq_lo = fmaf(small_uint_to_float((w >> 16) & 0xFu), lo.z, sq_lo);
      sq_lo = fmaf(small_uint_to_float((w >> 24) & 0xFu), lo.w, sq_lo);
      sq_hi = fmaf(small_uint_to_float((w >> 4) & 0xFu), hi.x, sq_hi);
      sq_hi = fmaf(small_uint_to_float((w >> 12) & 0xFu), hi.y, sq_hi);
      sq_hi = fmaf(small_uint_to_float((w >> 20) & 0xFu), hi.z, sq_hi);
      sq_hi = fmaf(small_uint_to_float(w >> 28), hi.w, sq_hi);
      sx_lo += (lo.x + lo.y) + (lo.z + lo.w);
      sx_hi += (hi.x + hi.y) + (hi.z + hi.w);
    }
    const float d = __half2float(__ushort_as_half(static_cast<unsigned short>(r.hdr.x & 0xFFFFu)));
    const float dmin = __half2float(__ushort_as_half(static_cast<unsigned short>(r.hdr.x >> 16)));
    float sc0, m0, sc1, m1;
    scale_min(r.hdr, 2 * g, sc0, m0);
    scale_min(r.hdr, 2 * g + 1, sc1, m1);
    return d * (sc0 * sq_lo + sc1 * sq_hi) - dmin * (m0 * sx_lo + m1 * sx_hi);
  }
  // Segment w (elements 16 w of a block) = 64 g + 32 half + 16 h: chunk 2 g + h, part half.
  static __device__ __forceinline__ int64_t seg_slot(int64_t s, int64_t nc) {
    const int w = static_cast<int>(s & 15);
    return ((w >> 1) & 1) * nc + (s >> 4) * 8 + 2 * (w >> 2) + (w & 1);
  }
  static __device__ __forceinline__ float dot8(const Regs& r, int64_t c, const X8& x) {
    const int g = static_cast<int>(c & 7) >> 1;
    int il, ih;
    nibble_dots(r.q, x.q[c], x.q[x.nc + c], il, ih);
    const float2 ml = x.meta[c], mh = x.meta[x.nc + c];
    const float d = __half2float(__ushort_as_half(static_cast<unsigned short>(r.hdr.x & 0xFFFFu)));
    const float dmin = __half2float(__ushort_as_half(static_cast<unsigned short>(r.hdr.x >> 16)));
    float sc0, m0, sc1, m1;
    scale_min(r.hdr, 2 * g, sc0, m0);
    scale_min(r.hdr, 2 * g + 1, sc1, m1);
    return d * (sc0 * ml.x * static_cast<float>(il) + sc1 * mh.x * static_cast<float>(ih)) -
           dmin * (m0 * ml.x * ml.y + m1 * mh.x * mh.y);
  }
};

// IQ4_XS / IQ4_NL: four 4-bit indices become the non-linear int8 values at once, by two
// byte permutes over the 16-value table.
__device__ __forceinline__ uint32_t iq4nl_lut4(uint32_t idx) {  // idx: four bytes 0..15
  const uint32_t s = idx & 0x07070707u, f = s | (s >> 4);
  const uint32_t sel = (f & 0xFFu) | ((f >> 8) & 0xFF00u);
  const uint32_t lo = __byte_perm(0xBFAD9881u, 0xF6EADDCFu, sel);   // values 0..7
  const uint32_t hi = __byte_perm(0x26190D01u, 0x71594535u, sel);   // values 8..15
  const uint32_t m = ((idx >> 3) & 0x01010101u) * 0xFFu;
  return (lo & ~m) | (hi & m);
}
__device__ __forceinline__ float sbyte(uint32_t v, int k) { return static_cast<float>(static_cast<int8_t>(v >> (8 * k))); }

// The chunk work shared by IQ4_XS and IQ4_NL: 32 values from 16 bytes of nibbles (low
// nibbles the first 16), dotted with f32 x or 8-bit x and scaled by Chunk::scale(r, c).
template <class Chunk>
struct Iq4Dots {
  static constexpr int kPad = 5;
  static constexpr int kUnroll = 4;
  static constexpr int kRows = 2;
  static constexpr bool kQ8Act = false;
  static __device__ __forceinline__ int64_t chunks(int64_t K) { return K / 32; }
  template <class Regs>
  static __device__ __forceinline__ float dot(const Regs& r, int64_t c, const float* xs) {
    const float* x = xs + xpad(c * 32, kPad);
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const float4 lo = *reinterpret_cast<const float4*>(x + 4 * k);
      const float4 hi = *reinterpret_cast<const float4*>(x + 16 + 4 * k);
      const uint32_t w = word_of(r.q, k);
      const uint32_t vl = iq4nl_lut4(w & kLowNibbles), vh = iq4nl_lut4((w >> 4) & kLowNibbles);
      s = fmaf(sbyte(vl, 0), lo.x, s);
      s = fmaf(sbyte(vl, 1), lo.y, s);
      s = fmaf(sbyte(vl, 2), lo.z, s);
      s = fmaf(sbyte(vl, 3), lo.w, s);
      s = fmaf(sbyte(vh, 0), hi.x, s);
      s = fmaf(sbyte(vh, 1), hi.y, s);
      s = fmaf(sbyte(vh, 2), hi.z, s);
      s = fmaf(sbyte(vh, 3), hi.w, s);
    }
    return Chunk::scale(r, c) * s;
  }
  static __device__ __forceinline__ int64_t seg_slot(int64_t s, int64_t nc) { return (s & 1) * nc + (s >> 1); }
  template <class Regs>
  static __device__ __forceinline__ float dot8(const Regs& r, int64_t c, const X8& x) {
    const uint4 xl = x.q[c], xh = x.q[x.nc + c];
    int il = 0, ih = 0;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const uint32_t w = word_of(r.q, k);
      il = dp4a(iq4nl_lut4(w & kLowNibbles), word_of(xl, k), il);
      ih = dp4a(iq4nl_lut4((w >> 4) & kLowNibbles), word_of(xh, k), ih);
    }
    const float2 ml = x.meta[c], mh = x.meta[x.nc + c];
    return Chunk::scale(r, c) * (ml.x * static_cast<float>(il) + mh.x * static_cast<float>(ih));
  }
};

// IQ4_XS, as stored: 136-byte blocks (f16 d, scales_h, scales_l[4], then 16 bytes of
// nibbles per sub-block of 32), read with 8-byte loads (blocks are 8-aligned). A chunk is
// one sub-block.
struct IQ4XSChunk : Iq4Dots<IQ4XSChunk> {
  struct Regs {
    uint2 hdr;
    uint4 q;
  };
  static __device__ __forceinline__ void load(Regs& r, const uint8_t* row, const uint8_t*, int64_t c) {
    const uint8_t* b = row + (c >> 3) * 136;
    r.hdr = __ldg(reinterpret_cast<const uint2*>(b));
    const uint2* q = reinterpret_cast<const uint2*>(b + 8 + 16 * (c & 7));
    const uint2 a = __ldcs(q), bb = __ldcs(q + 1);
    r.q = make_uint4(a.x, a.y, bb.x, bb.y);
  }
  static __device__ __forceinline__ float scale(const Regs& r, int64_t c) {
    const int g = static_cast<int>(c & 7);
    const int ls = static_cast<int>(((r.hdr.y >> (4 * g)) & 0xFu) | (((r.hdr.x >> (16 + 2 * g)) & 3u) << 4));
    return __half2float(__ushort_as_half(static_cast<unsigned short>(r.hdr.x & 0xFFFFu))) * static_cast<float>(ls - 32);
  }
};

// IQ4_NL, as stored: 18-byte blocks (f16 d, 16 bytes of nibbles as Q4_0's) read with
// 2-byte loads (the blocks are only 2-aligned); values as IQ4_XS's.
struct IQ4NLChunk : Iq4Dots<IQ4NLChunk> {
  struct Regs {
    float d;
    uint4 q;
  };
  static __device__ __forceinline__ void load(Regs& r, const uint8_t* row, const uint8_t*, int64_t c) {
    const unsigned short* p = reinterpret_cast<const unsigned short*>(row + c * 18);
    r.d = __half2float(__ushort_as_half(__ldg(p)));
    uint32_t w[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) w[k] = uint32_t{__ldcs(p + 1 + 2 * k)} | (uint32_t{__ldcs(p + 2 + 2 * k)} << 16);
    r.q = make_uint4(w[0], w[1], w[2], w[3]);
  }
  static __device__ __forceinline__ float scale(const Regs& r, int64_t) { return r.d; }
};

// Q6_K, split: 208-byte blocks (ql[128], qh[64], int8 scales[16]) and one f16 d per
// block after all rows. Chunk t of a block: half n = t / 2, l0 = 16 (t % 2); it covers
// elements 128n + l0 + 32r + i (r = 0..3, i < 16) with scale 8n + t % 2 + 2r.
struct Q6KChunk {
  static constexpr int kPad = 7;
  static constexpr int kUnroll = 2;
  static constexpr int kRows = 2;
  static constexpr bool kQ8Act = false;  // x as it is (f32, or 16-element 8-bit segments)
  struct Regs {
    uint4 qa, qb, qh, sc;
    float d;
  };
  static __device__ __forceinline__ int64_t chunks(int64_t K) { return K / 64; }
  static __device__ __forceinline__ void load(Regs& r, const uint8_t* row, const uint8_t* drow, int64_t c) {
    const int t = static_cast<int>(c & 3), n = t >> 1, l0 = (t & 1) * 16;
    const uint8_t* b = row + (c >> 2) * 208;
    r.qa = __ldcs(reinterpret_cast<const uint4*>(b + 64 * n + l0));
    r.qb = __ldcs(reinterpret_cast<const uint4*>(b + 64 * n + 32 + l0));
    r.qh = __ldcs(reinterpret_cast<const uint4*>(b + 128 + 32 * n + l0));
    r.sc = __ldg(reinterpret_cast<const uint4*>(b + 192));
    r.d = __half2float(__ldg(reinterpret_cast<const __half*>(drow) + (c >> 2)));
  }
  static __device__ __forceinline__ float dot(const Regs& r, int64_t c, const float* xs) {
    const int t = static_cast<int>(c & 3), n = t >> 1, is = t & 1;
    const float* x = xs + xpad((c >> 2) * 256 + 128 * n + 16 * is, kPad);
    float s[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const uint32_t a = word_of(r.qa, k), b = word_of(r.qb, k), h = word_of(r.qh, k);
#pragma unroll
      for (int rr = 0; rr < 4; ++rr) {
        const float4 xv = *reinterpret_cast<const float4*>(x + 32 * rr + 4 * k);
        const uint32_t src = (rr & 1) ? b : a;
        const int lshift = (rr >> 1) * 4, hshift = rr * 2;
        float v[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const uint32_t q = ((src >> (8 * e + lshift)) & 0xFu) | (((h >> (8 * e + hshift)) & 3u) << 4);
          v[e] = small_uint_to_float<32>(q);
        }
        s[rr] = fmaf(v[0], xv.x, fmaf(v[1], xv.y, fmaf(v[2], xv.z, fmaf(v[3], xv.w, s[rr]))));
      }
    }
    // scales 8n + is + 2r: r = 0, 1 in word 2n, r = 2, 3 in word 2n + 1
    const uint32_t w0 = n ? r.sc.z : r.sc.x, w1 = n ? r.sc.w : r.sc.y;
    auto sc = [](uint32_t w, int i) { return static_cast<float>(static_cast<int8_t>((w >> (8 * i)) & 0xFFu)); };
    return r.d * (sc(w0, is) * s[0] + sc(w0, is + 2) * s[1] + sc(w1, is) * s[2] + sc(w1, is + 2) * s[3]);
  }
  // Segment w (elements 16 w of a block) = 128 n + 16 is + 32 r: chunk 2 n + is, part r.
  static __device__ __forceinline__ int64_t seg_slot(int64_t s, int64_t nc) {
    const int w = static_cast<int>(s & 15);
    return ((w >> 1) & 3) * nc + (s >> 4) * 4 + 2 * (w >> 3) + (w & 1);
  }
  static __device__ __forceinline__ float dot8(const Regs& r, int64_t c, const X8& x) {
    const int t = static_cast<int>(c & 3), n = t >> 1, is = t & 1;
    float s[4];
#pragma unroll
    for (int rr = 0; rr < 4; ++rr) {
      const uint4 xv = x.q[rr * x.nc + c];
      const uint4& src = (rr & 1) ? r.qb : r.qa;
      const int lshift = (rr >> 1) * 4, hshift = rr * 2;
      // 6-bit quants 0..63 (the -32 is applied through the segment's sum of q)
      int acc = 0;
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const uint32_t q = ((word_of(src, k) >> lshift) & kLowNibbles) | (((word_of(r.qh, k) >> hshift) & 0x03030303u) << 4);
        acc = dp4a(q, word_of(xv, k), acc);
      }
      const float2 m = x.meta[rr * x.nc + c];
      s[rr] = m.x * (static_cast<float>(acc) - 32.0f * m.y);
    }
    const uint32_t w0 = n ? r.sc.z : r.sc.x, w1 = n ? r.sc.w : r.sc.y;
    auto sc = [](uint32_t w, int i) { return static_cast<float>(static_cast<int8_t>((w >> (8 * i)) & 0xFFu)); };
    return r.d * (sc(w0, is) * s[0] + sc(w0, is + 2) * s[1] + sc(w1, is) * s[2] + sc(w1, is + 2) * s[3]);
  }
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

// Rows a warp computes: one for float weights, two for packed ones, except a SwiGLU over
// K-quants on f32 x, which reads two weights a row: one row a warp keeps the same loads
// in flight (measured on an H100: Q4_K faster with one row, Q8_0 with two; one row for
// products of up to 4096 rows, for more blocks, was slower for Q4_K and Q6_K). On 8-bit
// x two rows are faster for every packed type (q4_k_m decode on an H100: 1235 tok/s vs
// 1165 with one row for the SwiGLU; four rows: slower on an H200).
int rows_per_warp(const GemvParams& p) {
  switch (p.w_dt) {
    case DT::F32: case DT::F16: case DT::BF16: return 1;
    case DT::Q4_K: case DT::Q6_K: return p.swiglu && !gemv_x8(p) ? 1 : 2;
    default: return 2;
  }
}

int64_t gemv_blocks(const GemvParams& p) {
  const int64_t rows_per_block = static_cast<int64_t>(kWarps) * rows_per_warp(p);
  int64_t blocks = 0;
  for (int i = 0; i < (p.n_parts > 1 ? p.n_parts : 1); ++i)
    blocks += ((p.n_parts > 1 ? p.part_N[i] : p.N) + rows_per_block - 1) / rows_per_block;
  return blocks;
}

// Static shared memory of gemv_kernel: the rope / KV-cache epilogue's rows and
// norm_prologue's 32 doubles share the 48 KiB with the dynamic part.
constexpr int64_t kStaticSmem = kRoleSmem + 32 * sizeof(double);

template <typename C, typename X, int R>
void launch_typed(const GemvParams& p, cudaStream_t s) {
  if constexpr (R > 1)
    if (rows_per_warp(p) < R) return launch_typed<C, X, R / 2>(p, s);
  const unsigned grid = static_cast<unsigned>(gemv_blocks(p));
  if constexpr (!std::is_same_v<C, FloatChunk<X>>) {
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

int pad_shift(DT t) { return t == DT::Q4_K ? 6 : t == DT::Q6_K ? 7 : 5; }

// Moves each block's 2-byte scale (at `d_at`) into an array after all blocks.
__global__ void repack_split_kernel(const uint8_t* raw, uint8_t* out, int64_t n_blocks, int block_bytes, int d_at) {
  const int rest = block_bytes - 2;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  uint8_t* dst_d = out + n_blocks * rest;
  for (int64_t b = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; b < n_blocks; b += stride) {
    const uint8_t* src = raw + b * block_bytes;
    uint8_t* dst = out + b * rest;
    int o = 0;
    for (int i = 0; i < block_bytes; ++i) {
      if (i == d_at || i == d_at + 1) continue;
      dst[o++] = src[i];
    }
    dst_d[2 * b] = src[d_at];
    dst_d[2 * b + 1] = src[d_at + 1];
  }
}

}  // namespace

bool packed_split(DT t) { return split_layout(t); }

int64_t gemv_smem_bytes(DT w_dt, int64_t M, int64_t K, bool norm) {
  const int sh = pad_shift(w_dt);
  return (M * (K + ((K >> sh) << 2)) + (norm ? 2 * K : 0)) * static_cast<int64_t>(sizeof(float));
}

bool gemv_x8_type(DT w_dt) {
  return w_dt == DT::Q8_0 || w_dt == DT::Q4_0 || w_dt == DT::Q4_K || w_dt == DT::Q6_K || w_dt == DT::IQ4_XS ||
         w_dt == DT::IQ4_NL;
}


int64_t gemv_x8_smem_bytes(int64_t M, int64_t K) { return M * (K / 16) * static_cast<int64_t>(16 + sizeof(float2)); }

bool gemv_norm_fits(const GemvParams& p) {
  const int64_t dyn = gemv_x8(p) ? gemv_x8_smem_bytes(p.M, p.K) + 8 * p.K : gemv_smem_bytes(p.w_dt, p.M, p.K, true);
  return dyn <= kGemvSmemLimit - kStaticSmem;
}

bool gemv_supported(DT w_dt, int64_t M, int64_t K, bool x8) {
  if (M < 1 || M > kMaxGemvM) return false;
  if (x8 && gemv_x8_type(w_dt) && M > 1) {  // several rows in 8 bits: launches of the rows that fit kGemvX8SmemLimit
    if (gemv_x8_smem_bytes(1, K) > kGemvX8SmemLimit - kStaticSmem) return false;
  } else if (gemv_smem_bytes(w_dt, M, K) > kGemvSmemLimit - kStaticSmem) {
    return false;
  }
  switch (w_dt) {
    case DT::F32: return K % 4 == 0;
    case DT::F16: case DT::BF16: return K % 8 == 0;
    case DT::Q8_0: case DT::Q4_0: case DT::IQ4_NL: return K % 32 == 0;
    case DT::Q4_K: case DT::Q6_K: case DT::IQ4_XS: return K % 256 == 0;
    default: return false;
  }
}

void launch_gemv(const GemvParams& p, cudaStream_t s) {
  if (p.N == 0 || p.M == 0) return;
  switch (p.w_dt) {
    case DT::F32: launch_typed<FloatChunk<float>, float, 1>(p, s); break;
    case DT::F16: launch_typed<FloatChunk<__half>, __half, 1>(p, s); break;
    case DT::BF16: launch_typed<FloatChunk<__nv_bfloat16>, __nv_bfloat16, 1>(p, s); break;
    case DT::Q8_0: launch_typed<Q8Chunk, float, 2>(p, s); break;
    case DT::Q4_0: launch_typed<Q40Chunk, float, 2>(p, s); break;
    case DT::Q4_K: launch_typed<Q4KChunk, float, 2>(p, s); break;
    case DT::Q6_K: launch_typed<Q6KChunk, float, 2>(p, s); break;
    case DT::IQ4_XS: launch_typed<IQ4XSChunk, float, 2>(p, s); break;
    case DT::IQ4_NL: launch_typed<IQ4NLChunk, float, 2>(p, s); break;
    default: break;
  }
}

void launch_repack_split(DT t, const uint8_t* raw, uint8_t* out, int64_t n_blocks, cudaStream_t s) {
  const int bb = packed_block_bytes(t);
  const int d_at = t == DT::Q6_K ? 208 : 0;
  repack_split_kernel<<<grid_for(n_blocks, 256), 256, 0, s>>>(raw, out, n_blocks, bb, d_at);
}

}  // namespace rlx::cuda_backend
