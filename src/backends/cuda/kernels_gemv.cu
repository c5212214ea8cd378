// CUDA decode GEMV for linear layers at M <= 8 (launch_gemv): y[m, n] = epilogue(x[m] . W[n])
// for W [N, K] in f32/f16/bf16 or packed GGUF blocks (Q8_0, Q4_0, Q6_K in the split device
// layout, Q4_K, IQ4_XS and IQ4_NL as stored; the codebook i-quants and ternary types in
// kernels_gemv_codebook.cu). The kernel (gemv_kernel.cuh) first stages x in shared memory
// (rounded to the weights' precision for float weights, as the CPU backend and cuBLAS see
// it; f32 for packed weights), padded by one float4 every 2^P floats so that the lanes of
// a warp read it without bank conflicts; then every warp streams one (float) or two
// (packed) rows of W with 16-byte loads, several in flight per lane, and reduces with warp
// shuffles. This file holds the chunk decoders of its types: what one lane loads and how
// it dots that with x.
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
#include "backends/cuda/gemv_kernel.cuh"

namespace rlx::cuda_backend {
namespace {

// ---- per-type chunk decoders: a chunk is what one lane loads (16 bytes of quants plus
// whatever scales it needs) and dots with x --------------------------------------------

template <typename W>
struct FloatChunk {
  using FloatWeightsTag = void;  // (launch_typed: no 8-bit x path)
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

// The chunk work shared by IQ4_XS and IQ4_NL: 32 values from 16 bytes of nibbles (low
// nibbles the first 16), dotted with f32 x or 8-bit x and scaled by Chunk::scale(r, c).
template <class Chunk>
struct Iq4Dots : Groups32 {
  static constexpr int kUnroll = 4;
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

// Whether a K-quant (Q4_K, Q6_K) product takes one weight row a warp instead of two (float
// weights always take one, other packed types two): a SwiGLU on f32 x, which reads two
// weights a row, so one row a warp keeps the same loads in flight (measured on an H100:
// Q4_K faster with one row, Q8_0 with two; one row for products of up to 4096 rows, for
// more blocks, was slower for Q4_K and Q6_K). On 8-bit x two rows are faster for every
// packed type (q4_k_m decode on an H100: 1235 tok/s vs 1165 with one row for the SwiGLU;
// four rows: slower on an H200).
bool k_quant_one_row(const GemvParams& p) { return p.swiglu && !gemv_x8(p); }

}  // namespace

bool packed_split(DT t) { return split_layout(t); }

int64_t gemv_smem_bytes(DT w_dt, int64_t M, int64_t K, bool norm) {
  const int sh = pad_shift(w_dt);
  return (M * (K + ((K >> sh) << 2)) + (norm ? 2 * K : 0)) * static_cast<int64_t>(sizeof(float));
}

bool gemv_x8_type(DT w_dt) {
  return w_dt == DT::Q8_0 || w_dt == DT::Q4_0 || w_dt == DT::Q4_K || w_dt == DT::Q6_K || w_dt == DT::IQ4_XS ||
         w_dt == DT::IQ4_NL || gemv_codebook_type(w_dt);
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
    default: return gemv_codebook_type(w_dt) && K % 256 == 0;
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
    case DT::Q4_K:
      if (k_quant_one_row(p)) launch_typed<Q4KChunk, float, 1>(p, s);
      else launch_typed<Q4KChunk, float, 2>(p, s);
      break;
    case DT::Q6_K:
      if (k_quant_one_row(p)) launch_typed<Q6KChunk, float, 1>(p, s);
      else launch_typed<Q6KChunk, float, 2>(p, s);
      break;
    case DT::IQ4_XS: launch_typed<IQ4XSChunk, float, 2>(p, s); break;
    case DT::IQ4_NL: launch_typed<IQ4NLChunk, float, 2>(p, s); break;
    default: launch_gemv_codebook(p, s); break;
  }
}

void launch_repack_split(DT t, const uint8_t* raw, uint8_t* out, int64_t n_blocks, cudaStream_t s) {
  const int bb = packed_block_bytes(t);
  const int d_at = t == DT::Q6_K ? 208 : 0;
  repack_split_kernel<<<grid_for(n_blocks, 256), 256, 0, s>>>(raw, out, n_blocks, bb, d_at);
}

}  // namespace rlx::cuda_backend
