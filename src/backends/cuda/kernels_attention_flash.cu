// CUDA prefill attention on the tensor cores, pipelined (FlashAttention-2's loop on
// mma.sync): K and V are first rounded to f16 into the step's scratch by one small
// kernel, then each block of eight warps (16 query rows a warp) streams 64-key tiles of
// them into shared memory by cp.async, two tiles in flight, reads its fragments with
// ldmatrix (V transposed by ldmatrix.trans, not by scalar stores), and keeps S, the
// online softmax and O in registers. Masks are applied only to the tiles that cross a
// row's visible range. The arithmetic is kernels_attention.cu's tensor-core kernel's:
// q (scaled), K, V and the softmax weights rounded to f16, f32 accumulation and softmax.
#include <climits>

#include "backends/cuda/attention_common.cuh"
#include "backends/cuda/attention_tc_parts.cuh"
#include "backends/cuda/cuda_common.cuh"
#include "backends/cuda/kqmma_parts.cuh"
#include "backends/cuda/smem_limit.cuh"

namespace rlx::cuda_backend {
namespace {

constexpr int kWarps = 8;
constexpr int kBlockRows = 16 * kWarps;  // query rows (of a KV head's group, interleaved) per block
constexpr int kKeys = 64;                // keys per tile
constexpr int kPad = 8;                  // halves of padding per shared row: conflict-free ldmatrix

template <int HD>
constexpr int smem_bytes() {
  return 2 * 2 * kKeys * (HD + kPad) * static_cast<int>(sizeof(__half));  // K and V, two stages
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* p) {
  const uint32_t a = static_cast<uint32_t>(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* p) {
  const uint32_t a = static_cast<uint32_t>(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}

// K and V rows [0, T) of every batch item, as f16, into dst (K's copy, then V's; each
// [batch, T_full, n_kv * hd]). Eight elements a thread.
template <typename T>
__global__ void kv_to_half_kernel(const AttentionParams p, __half* dst) {
  pdl_wait();
  pdl_trigger();
  const int64_t kw = static_cast<int64_t>(p.n_kv) * p.hd;
  const int64_t per_item = p.T * kw / 8, n = 2 * p.batch * per_item;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < n; e += stride) {
    const int which = e >= p.batch * per_item ? 1 : 0;
    const int64_t r = e - which * p.batch * per_item;
    const int64_t b = r / per_item, off = b * p.T_full * kw + (r % per_item) * 8;
    const T* src = static_cast<const T*>(which ? p.v : p.k) + off;
    float f[8];
    if constexpr (std::is_same_v<T, float>) {
      const float4 a = __ldg(reinterpret_cast<const float4*>(src)), c = __ldg(reinterpret_cast<const float4*>(src) + 1);
      f[0] = a.x; f[1] = a.y; f[2] = a.z; f[3] = a.w;
      f[4] = c.x; f[5] = c.y; f[6] = c.z; f[7] = c.w;
    } else {
      unpack16<T>(__ldg(reinterpret_cast<const uint4*>(src)), f);
    }
    const uint4 h = make_uint4(pack_half2(f[0], f[1]), pack_half2(f[2], f[3]), pack_half2(f[4], f[5]), pack_half2(f[6], f[7]));
    *reinterpret_cast<uint4*>(dst + which * p.batch * p.T_full * kw + off) = h;
  }
}

// One block: kBlockRows consecutive (row, head) pairs of KV head blockIdx.x's group
// (G heads a row, interleaved), batch item blockIdx.z. The row tiles run backwards along
// blockIdx.y, the slowest grid dimension but one, so that the blocks with the most keys
// (a causal mask's last rows) of every KV head start first and the short ones fill in.
// kh / vh: f16 K and V [batch, T_full, n_kv * HD].
template <typename Q, int HD>
__global__ void __launch_bounds__(kWarps * 32, HD == 64 ? 2 : 1) attention_flash_kernel(const AttentionParams p, const __half* kh,
                                                                     const __half* vh) {
  pdl_wait();
  pdl_trigger();
  constexpr int KS = HD / 16;    // k-steps of S = Q K^T
  constexpr int DN = HD / 8;     // n-tiles of O
  constexpr int NT = kKeys / 8;  // n-tiles of S
  constexpr int kRow = HD + kPad;
  constexpr int kStage = kKeys * kRow;  // halves of one stage of K (or V)
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __half* k_s = reinterpret_cast<__half*>(smem_raw);  // [2][kKeys][kRow]
  __half* v_s = k_s + 2 * kStage;                     // [2][kKeys][kRow]
  __shared__ int range_s[2];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  const int kvh = blockIdx.x;
  const int64_t b = blockIdx.z;
  const int64_t kw = static_cast<int64_t>(p.n_kv) * HD;
  const int64_t bx = static_cast<int64_t>(gridDim.y) - 1 - blockIdx.y;  // later rows (more keys) first
  const TcRows r = tc_rows(p, bx * kBlockRows + warp * 16 + g, kvh, b);
  if (threadIdx.x == 0) {
    range_s[0] = INT_MAX;
    range_s[1] = 0;
  }
  __syncthreads();
  // The warp's key range [wlo, whi) and the keys every one of its rows sees [full_lo, full_hi).
  int wlo = INT_MAX, whi = 0, full_lo = 0, full_hi = INT_MAX;
#pragma unroll
  for (int i = 0; i < 2; ++i)
    if (r.je[i] > r.jb[i]) {
      wlo = min(wlo, r.jb[i]);
      whi = max(whi, r.je[i]);
      full_lo = max(full_lo, r.jb[i]);
      full_hi = min(full_hi, r.je[i]);
    } else if (r.row[i] < p.S) {
      full_hi = 0;  // a real row that sees nothing: every tile is masked for it
    }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    wlo = min(wlo, __shfl_xor_sync(0xffffffffu, wlo, o));
    whi = max(whi, __shfl_xor_sync(0xffffffffu, whi, o));
    full_lo = max(full_lo, __shfl_xor_sync(0xffffffffu, full_lo, o));
    full_hi = min(full_hi, __shfl_xor_sync(0xffffffffu, full_hi, o));
  }
  if (lane == 0 && whi > 0) {
    atomicMin(&range_s[0], wlo);
    atomicMax(&range_s[1], whi);
  }
  uint32_t qa[KS][4];
  tc_load_q<Q, HD>(p, r, b, t, qa);
  __syncthreads();
  const int lo = range_s[0], hi_key = range_s[1];
  const int n_tiles = hi_key > lo ? (hi_key - lo + kKeys - 1) / kKeys : 0;
  const __half* kg = kh + b * p.T_full * kw + static_cast<int64_t>(kvh) * HD;
  const __half* vg = vh + b * p.T_full * kw + static_cast<int64_t>(kvh) * HD;
  // Tile `it` into stage `st`: 16-byte pieces, keys past T as zeros (their weights are 0,
  // and 0 * a stale value could be NaN).
  auto load_tile = [&](int it, int st) {
    const int t0 = lo + it * kKeys;
    __half* kd = k_s + st * kStage;
    __half* vd = v_s + st * kStage;
    for (int e = threadIdx.x; e < kKeys * (HD / 8); e += kWarps * 32) {
      const int kk = e / (HD / 8), c8 = (e % (HD / 8)) * 8;
      const int64_t j = t0 + kk;
      const bool ok = j < p.T;
      const int64_t src = ok ? j * kw + c8 : 0;
      cp_async<16>(kd + kk * kRow + c8, kg + src, ok ? 16 : 0);
      cp_async<16>(vd + kk * kRow + c8, vg + src, ok ? 16 : 0);
    }
    cp_async_commit();
  };
  float acc[DN][4];
#pragma unroll
  for (int dn = 0; dn < DN; ++dn)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[dn][e] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  if (n_tiles > 0) load_tile(0, 0);
  for (int it = 0; it < n_tiles; ++it) {
    if (it + 1 < n_tiles) load_tile(it + 1, (it + 1) & 1);
    else cp_async_commit();  // (an empty group keeps the wait count uniform)
    cp_async_wait<1>();
    __syncthreads();
    const int t0 = lo + it * kKeys;
    if (whi > wlo && t0 < whi && t0 + kKeys > wlo) {
      const __half* ks_ = k_s + (it & 1) * kStage;
      const __half* vs_ = v_s + (it & 1) * kStage;
      float sc[NT][4];
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) sc[nt][e] = 0.0f;
      // S = Q K^T: an ldmatrix.x4 gives the B fragments of two k-steps of one n-tile.
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int ks = 0; ks < KS; ks += 2) {
          uint32_t bf[4];
          ldmatrix_x4(bf, ks_ + (nt * 8 + (lane & 7)) * kRow + ks * 16 + (lane >> 3) * 8);
          mma_16816(sc[nt], qa[ks], bf[0], bf[1]);
          mma_16816(sc[nt], qa[ks + 1], bf[2], bf[3]);
        }
      tc_softmax_tile<NT, DN>(p, r, t0, t, t0 < full_lo || t0 + kKeys > full_hi, sc, m, l, acc);
      // O += P V: P from registers; an ldmatrix.x4.trans gives the B fragments of two
      // n-tiles of V for one k-step of 16 keys.
#pragma unroll
      for (int j = 0; j < kKeys / 16; ++j) {
        uint32_t a[4];
        tc_weights_a<NT>(sc, j, a);
#pragma unroll
        for (int dn = 0; dn < DN; dn += 2) {
          uint32_t bf[4];
          ldmatrix_x4_trans(bf, vs_ + (j * 16 + ((lane >> 3) & 1) * 8 + (lane & 7)) * kRow + (dn + (lane >> 4)) * 8);
          mma_16816(acc[dn], a, bf[0], bf[1]);
          mma_16816(acc[dn + 1], a, bf[2], bf[3]);
        }
      }
    }
    __syncthreads();  // this stage is refilled by the next iteration's load
  }
  cp_async_wait<0>();
  tc_store_rows<HD>(p, r, b, t, acc, l);
}

template <typename Q, int HD>
void launch_flash(const AttentionParams& p, const __half* kh, const __half* vh, cudaStream_t s) {
  constexpr int smem = smem_bytes<HD>();
  if constexpr (smem > 48 * 1024) raise_smem_limit<attention_flash_kernel<Q, HD>>(smem);
  const int64_t block_rows = p.S * (p.n_heads / p.n_kv);
  const dim3 grid(static_cast<unsigned>(p.n_kv), static_cast<unsigned>((block_rows + kBlockRows - 1) / kBlockRows),
                  static_cast<unsigned>(p.batch));
  launch_k(attention_flash_kernel<Q, HD>, grid, kWarps * 32, smem, s, p, kh, vh);
}

}  // namespace

bool attention_flash_supported(int hd, DT dt) {
  return (hd == 64 || hd == 128) && (dt == DT::F32 || dt == DT::F16 || dt == DT::BF16);
}

int64_t attention_flash_scratch_bytes(int64_t batch, int64_t T_full, int n_kv, int hd) {
  return 2 * batch * T_full * n_kv * static_cast<int64_t>(hd) * static_cast<int64_t>(sizeof(__half));
}

void launch_attention_flash(const AttentionParams& p, cudaStream_t s) {
  if (p.S == 0) return;
  const int64_t kw = static_cast<int64_t>(p.n_kv) * p.hd;
  const __half* kh = static_cast<const __half*>(p.k);
  const __half* vh = static_cast<const __half*>(p.v);
  if (p.dt != DT::F16) {  // K and V rounded to f16 once, not per block
    __half* dst = static_cast<__half*>(p.kv16);
    const int64_t n = 2 * p.batch * p.T * kw / 8;
    if (n > 0) {
      if (p.dt == DT::F32) launch_k(kv_to_half_kernel<float>, grid_for(n, 256), 256, 0, s, p, dst);
      else launch_k(kv_to_half_kernel<__nv_bfloat16>, grid_for(n, 256), 256, 0, s, p, dst);
    }
    kh = dst;
    vh = dst + p.batch * p.T_full * kw;
  }
  auto go = [&](auto tag) {
    using Q = decltype(tag);
    if (p.hd == 64) launch_flash<Q, 64>(p, kh, vh, s);
    else launch_flash<Q, 128>(p, kh, vh, s);
  };
  if (p.dt == DT::F16) go(__half{});
  else if (p.dt == DT::BF16) go(__nv_bfloat16{});
  else go(float{});
}

}  // namespace rlx::cuda_backend
