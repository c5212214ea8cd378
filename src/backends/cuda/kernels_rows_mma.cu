// launch_rows_mma (mmq_kernels.h): a few rows of x (the decode steps of several streams,
// short prompts) times W [N, K] on the tensor cores, with W read once -- for the weights
// launch_kqmma does not take:
// - f16 / bf16 W: mma.sync m16n8k16 with f32 accumulation, x rounded to W's type by the
//   caller (KqMmaParams::xh), the arithmetic of the cuBLASLt path these rows took before.
//   No cuBLASLt plan or kernel is involved: a process's first cuBLASLt use costs tens of
//   milliseconds, which a warm start of an f16 model paid in its compile and again in its
//   first prefill.
// - Q8_0 W in the split layout (K int8 quants a row, then the f16 scales [N, K / 32]):
//   x as llama.cpp's Q8_0 activation blocks (launch_quantize_q8_0), every 32-value block
//   product exact in int32 (mma.sync m16n8k32), scaled by both blocks' scales into f32 --
//   the arithmetic of launch_mmq and of llama.cpp's CPU backend.
//
// A block is eight warps: kg groups along K times 8 / kg groups of 16 weight rows
// (KqMmaParams::k_groups, rows_mma_k_groups). Each warp streams its 16 rows' chunks of
// 128 values of K (and, for Q8_0, their four scales a row) through its own ring of
// kStages stages in shared memory by cp.async (no registers held while in flight; four
// stages, or three where the device's shared memory is smaller), kStages - 1 chunks
// ahead of the one it multiplies, and loads x's fragments for the next chunk while it
// multiplies this one. The k groups' sums are added in group order at the end, so
// results do not depend on scheduling.
//
// The order of K within an mma is free as long as x and W agree. f16: thread t of a quad
// takes the 16-byte pieces t, t + 4, t + 8 and t + 12 of a row's 256 bytes of a chunk,
// and piece i gives it the values of two k-steps. Q8_0: a k-step is one 32-value block
// (one scale), and thread t takes its bytes 8t .. 8t + 7. Pieces are stored XOR-swizzled
// by the row, so the fragment reads are free of bank conflicts.
#include <algorithm>
#include <atomic>

#include "backends/cuda/cuda_common.cuh"
#include "backends/cuda/kqmma_parts.cuh"
#include "backends/cuda/mmq_kernels.h"
#include "backends/cuda/smem_limit.cuh"

namespace rlx::cuda_backend {
namespace {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kChunk = 128;  // values of K a stage holds of each row

template <DT T>
struct Layout {
  static constexpr bool kQ8 = T == DT::Q8_0;
  static constexpr int kRowBytes = kQ8 ? kChunk : 2 * kChunk;  // a row's bytes of a chunk
  static constexpr int kPieces = kRowBytes / 16;              // 16-byte copies a row of a chunk
  static constexpr int kScaleBytes = kQ8 ? 16 * 8 : 0;          // Q8_0: 16 rows x 4 f16 scales
  static constexpr int kStageBytes = 16 * kRowBytes + kScaleBytes;
  // Where row r's piece c of a chunk lives in a stage (a 16-byte slot).
  __device__ static int slot(int r, int c) { return kQ8 ? c ^ ((r & 3) << 1) : c ^ ((r & 1) << 2); }
};

template <DT T, int S>
constexpr int ring_bytes() {
  return kWarps * S * Layout<T>::kStageBytes;
}

template <DT T>
__device__ __forceinline__ void mma16(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                      uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if constexpr (T == DT::F16) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  } else {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  }
#else
  (void)c, (void)a0, (void)a1, (void)a2, (void)a3, (void)b0, (void)b1;  // (RLX_CUDA_ARCHS >= 80)
#endif
}

__device__ __forceinline__ void mma_s8(int (&c)[4], const uint2& top, const uint2& bot, const uint2& b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
      : "r"(top.x), "r"(bot.x), "r"(top.y), "r"(bot.y), "r"(b.x), "r"(b.y));
#else
  (void)c, (void)top, (void)bot, (void)b;
#endif
}

__device__ __forceinline__ uint32_t word(const uint4& v, int i) { return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w; }

// x's A fragments of one chunk, rows 16 mt + gid (r = 0) and + 8 (r = 1), zeros past M and
// K. f16 / bf16: pieces tig + 4 q (uint4). Q8_0: bytes 8 tig .. 8 tig + 7 of block q
// (uint2), and the blocks' scales.
template <DT T, int MT>
struct XFrag {
  uint4 v[MT][2][4];
};
template <int MT>
struct XFrag<DT::Q8_0, MT> {
  uint2 v[MT][2][4];
  float d[MT][2][4];
};

template <DT T, int MT>
__device__ __forceinline__ void load_x(const KqMmaParams& p, int64_t k0, int gid, int tig, XFrag<T, MT>& x) {
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int64_t m = mt * 16 + gid + 8 * r;
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        if constexpr (T == DT::Q8_0) {
          const int64_t k = k0 + 32 * q;
          const bool in = m < p.M && k < p.K;
          x.v[mt][r][q] = in ? __ldg(reinterpret_cast<const uint2*>(p.xq + m * p.K + k + 8 * tig)) : make_uint2(0, 0);
          x.d[mt][r][q] = in ? __ldg(p.xd + m * (p.K / 32) + k / 32) : 0.0f;
        } else {
          const int64_t k = k0 + 8 * (tig + 4 * q);
          x.v[mt][r][q] = m < p.M && k < p.K
                              ? __ldg(reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(p.xh) + m * p.K + k))
                              : make_uint4(0, 0, 0, 0);
        }
      }
    }
  }
}

template <DT T, int MT, int kStages>
__global__ void __launch_bounds__(kThreads, 1) rows_mma_kernel(const KqMmaParams launch) {
  using L = Layout<T>;
  extern __shared__ __align__(16) uint8_t smem[];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int gid = lane >> 2, tig = lane & 3;
  const int kg_n = launch.k_groups, rg_n = kWarps / kg_n;
  const int rg = warp % rg_n, kg = warp / rg_n;
  int64_t bx = blockIdx.x;
  const KqMmaParams p = block_part(launch, rg_n * 16, bx);
  const int64_t n0 = (bx * rg_n + rg) * 16;
  const int64_t chunks = (p.K + kChunk - 1) / kChunk;
  const int64_t count = kg < chunks ? (chunks - kg + kg_n - 1) / kg_n : 0;  // chunks kg, kg + kg_n, ...
  uint8_t* ring = smem + warp * kStages * L::kStageBytes;
  const int64_t row_bytes = L::kQ8 ? p.K : 2 * p.K;  // (Q8_0: the split layout's quants)
  const int64_t blocks = p.K / 32;

  // Chunk i of this warp into stage i % kStages: row r's piece c in slot(r, c); Q8_0: then
  // the rows' four block scales, 8 bytes a row.
  auto issue = [&](int64_t i) {
    uint8_t* dst = ring + (i % kStages) * L::kStageBytes;
    const int64_t k0 = (kg + i * kg_n) * kChunk;
#pragma unroll
    for (int j = 0; j < 16 * L::kPieces / 32; ++j) {
      const int c = lane + 32 * j, r = c / L::kPieces, piece = c % L::kPieces;
      const int64_t k = k0 + piece * (L::kQ8 ? 16 : 8);
      const int64_t n = min(n0 + r, p.N - 1);
      const bool in = k < p.K;
      cp_async<16>(dst + r * L::kRowBytes + 16 * L::slot(r, piece), p.w + n * row_bytes + (in ? (L::kQ8 ? k : 2 * k) : 0),
                   in ? 16 : 0);
    }
    if constexpr (L::kQ8) {
      if (lane < 16) {
        const int64_t n = min(n0 + lane, p.N - 1), b0 = k0 / 32;
        const int64_t valid = blocks - b0 < 4 ? blocks - b0 : 4;
        const __half* d = reinterpret_cast<const __half*>(p.w + p.d_offset) + n * blocks + b0;
        cp_async<8>(dst + 16 * L::kRowBytes + 8 * lane, d, static_cast<int>(2 * valid));
      }
    }
  };
  auto prologue = [&] {
#pragma unroll
    for (int i = 0; i < kStages - 1; ++i) {
      if (i < count) issue(i);
      cp_async_commit();
    }
  };
  // (Weights no kernel writes are requested before the wait for the kernels ahead, so
  // their loads overlap x's rounding or quantization.)
  if (p.w_const) prologue();
  pdl_wait();
  if (!p.w_const) prologue();

  float acc[MT][2][4] = {};
  XFrag<T, MT> xa;
  if (count > 0) load_x<T, MT>(p, kg * kChunk, gid, tig, xa);
  for (int64_t i = 0; i < count; ++i) {
    if (i + kStages - 1 < count) issue(i + kStages - 1);  // into the stage emptied last time round
    cp_async_commit();
    cp_async_wait<kStages - 1>();
    __syncwarp();  // every lane's copies of chunk i have landed
    const uint8_t* st = ring + (i % kStages) * L::kStageBytes;
    if constexpr (L::kQ8) {
      uint2 wq[2][4];
      float wd[2][2][4];  // the scales of columns 2 tig, 2 tig + 1 of each n-tile
#pragma unroll
      for (int nt = 0; nt < 2; ++nt) {
        const int r = nt * 8 + gid;
#pragma unroll
        for (int q = 0; q < 4; ++q)
          wq[nt][q] = *reinterpret_cast<const uint2*>(st + r * L::kRowBytes + 16 * L::slot(r, 2 * q + (tig >> 1)) +
                                                      8 * (tig & 1));
#pragma unroll
        for (int cc = 0; cc < 2; ++cc) {
          const __half* d = reinterpret_cast<const __half*>(st + 16 * L::kRowBytes) + (nt * 8 + 2 * tig + cc) * 4;
#pragma unroll
          for (int q = 0; q < 4; ++q) wd[nt][cc][q] = __half2float(d[q]);
        }
      }
      __syncwarp();  // the stage is free for the copies of the next round
      XFrag<T, MT> xn;
      if (i + 1 < count) load_x<T, MT>(p, (kg + (i + 1) * kg_n) * kChunk, gid, tig, xn);
#pragma unroll
      for (int q = 0; q < 4; ++q) {  // k-step q: block q of the chunk
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
          for (int nt = 0; nt < 2; ++nt) {
            int c[4] = {0, 0, 0, 0};
            mma_s8(c, xa.v[mt][0][q], xa.v[mt][1][q], wq[nt][q]);
#pragma unroll
            for (int e = 0; e < 4; ++e)
              acc[mt][nt][e] += (xa.d[mt][e >> 1][q] * wd[nt][e & 1][q]) * static_cast<float>(c[e]);
          }
        }
      }
      if (i + 1 < count) xa = xn;
    } else {
      uint4 wv[2][4];
#pragma unroll
      for (int nt = 0; nt < 2; ++nt) {
        const int r = nt * 8 + gid;
#pragma unroll
        for (int q = 0; q < 4; ++q)
          wv[nt][q] = *reinterpret_cast<const uint4*>(st + r * L::kRowBytes + 16 * L::slot(r, tig + 4 * q));
      }
      __syncwarp();  // the stage is free for the copies of the next round
      XFrag<T, MT> xn;
      if (i + 1 < count) load_x<T, MT>(p, (kg + (i + 1) * kg_n) * kChunk, gid, tig, xn);
#pragma unroll
      for (int q = 0; q < 4; ++q) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {  // k-step (q, h): words 2h, 2h + 1 of piece q
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
            const uint32_t a0 = word(xa.v[mt][0][q], 2 * h), a1 = word(xa.v[mt][1][q], 2 * h);
            const uint32_t a2 = word(xa.v[mt][0][q], 2 * h + 1), a3 = word(xa.v[mt][1][q], 2 * h + 1);
#pragma unroll
            for (int nt = 0; nt < 2; ++nt)
              mma16<T>(acc[mt][nt], a0, a1, a2, a3, word(wv[nt][q], 2 * h), word(wv[nt][q], 2 * h + 1));
          }
        }
      }
      if (i + 1 < count) xa = xn;
    }
  }
  cp_async_wait<0>();
  pdl_trigger();

  store_k_group_sums<kThreads, MT>(p, reinterpret_cast<float*>(smem), acc, kg, kg_n, rg, rg_n, bx, gid, tig);
}

template <DT T, int MT, int S>
void launch_form(const KqMmaParams& p, unsigned blocks, cudaStream_t s) {
  raise_smem_limit<rows_mma_kernel<T, MT, S>>(ring_bytes<T, S>());
  launch_k(rows_mma_kernel<T, MT, S>, blocks, kThreads, ring_bytes<T, S>(), s, p);
}

// Whether the current device's opt-in shared memory per block holds four stages of the
// largest ring (f16; read once per device).
bool four_stages() {
  static std::atomic<uint64_t> known{0}, four{0};
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || device < 0 || device >= 64) return false;
  const uint64_t bit = uint64_t{1} << device;
  if ((known.load(std::memory_order_acquire) & bit) == 0) {
    int optin = 0;
    if (cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess) return false;
    if (optin >= ring_bytes<DT::F16, 4>()) four.fetch_or(bit, std::memory_order_acq_rel);
    known.fetch_or(bit, std::memory_order_acq_rel);
  }
  return (four.load(std::memory_order_acquire) & bit) != 0;
}

template <DT T>
void launch_type(const KqMmaParams& p, cudaStream_t s) {
  const unsigned blocks = static_cast<unsigned>(part_blocks(p, (kWarps / p.k_groups) * 16));
  const bool four = four_stages();
  if (p.M > 16) four ? launch_form<T, 2, 4>(p, blocks, s) : launch_form<T, 2, 3>(p, blocks, s);
  else four ? launch_form<T, 1, 4>(p, blocks, s) : launch_form<T, 1, 3>(p, blocks, s);
}

}  // namespace

bool rows_mma_supported(DT w) { return w == DT::F16 || w == DT::BF16 || w == DT::Q8_0; }

int rows_mma_k_groups(int64_t N, int64_t K, int sms) {
  // A block holds the whole SM (its ring and registers), so the grid should be one wave
  // that fills the GPU with each warp streaming as many chunks as it can: the fewest
  // groups along K whose blocks (of 128 / kg rows) cover about 70 % of the SMs, while
  // every group keeps a chunk.
  const int64_t chunks = (K + kChunk - 1) / kChunk;
  int kg = 1;
  while (kg < kWarps && 2 * kg <= chunks && 10 * ((N + (kWarps / kg) * 16 - 1) / ((kWarps / kg) * 16)) < 7 * sms) kg *= 2;
  return kg;
}

bool launch_rows_mma(const KqMmaParams& p, cudaStream_t s) {
  if (!rows_mma_supported(p.w_dt) || p.M > kKqMmaMaxRows || p.n_parts > kKqMmaMaxParts) return false;
  if (p.k_groups <= 0 || kWarps % p.k_groups != 0 || !parts_aligned16(p)) return false;
  if (p.w_dt == DT::Q8_0) {
    // the split layout: 16-byte aligned rows of quants, the scales after them
    const int64_t d_offset = p.n_parts > 1 ? p.part_d_offset[0] : p.d_offset;
    if (p.K % 128 != 0 || d_offset <= 0 || p.xq == nullptr || p.xd == nullptr) return false;
    if (reinterpret_cast<uintptr_t>(p.xq) % 16 != 0) return false;
  } else if (p.K % 8 != 0 || reinterpret_cast<uintptr_t>(p.xh) % 16 != 0) {
    return false;
  }
  if (p.M <= 0 || part_blocks(p, 16) <= 0) return true;
  switch (p.w_dt) {
    case DT::F16: launch_type<DT::F16>(p, s); break;
    case DT::BF16: launch_type<DT::BF16>(p, s); break;
    default: launch_type<DT::Q8_0>(p, s); break;
  }
  return true;
}

}  // namespace rlx::cuda_backend
