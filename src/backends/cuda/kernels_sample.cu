// The `sample` op on the device: one 1024-thread block per row of logits picks the token
// that rlx::choose_token defines (base/token_choice.h) — the top_k best ranked tokens
// found by a radix select on their rank keys (four 8-bit passes of per-warp
// shared-memory histograms), gathered and sorted in shared memory, then softmax at the temperature
// (double), the min-p and top-p prefixes and the inverse CDF at the row's draw. Sums
// are block reductions and scans in a fixed order: the same logits and draw give the
// same token every run; they can differ from the host's sequential sums in the last
// bits, so a draw within rounding of a cumulative-probability boundary may pick the
// neighbouring token.
#include <atomic>
#include <climits>

#include "backends/cuda/cuda_common.cuh"

namespace rlx::cuda_backend {
namespace {

constexpr int kSampleThreads = 1024;
constexpr int kSampleMaxK = 1024;  // ir::kMaxSampleTopK
// Rows of up to 40K tokens keep their rank keys in shared memory (with the per-warp
// histograms and the static arrays, ~210 KB of the 227 KB an H100 block may have).
constexpr int64_t kSampleMaxSmemKeys = 160 * 1024;
// One 256-bin histogram a warp (dynamic shared memory, before the keys).
constexpr int kSampleWarpHistWords = (kSampleThreads / 32) * 256;
constexpr int64_t kSampleWarpHistBytes = kSampleWarpHistWords * 4;

// rlx::logit_rank_key: larger logits rank higher, +0 above -0, NaN lowest.
__device__ __forceinline__ uint32_t rank_key(float v) {
  const uint32_t u = __float_as_uint(v);
  if ((u & 0x7F800000u) == 0x7F800000u && (u & 0x007FFFFFu) != 0) return 0;
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// Inclusive scan of v over the block (1024 threads, every thread calls it); `tmp`
// holds 32 partial sums.
template <typename T>
__device__ __forceinline__ T block_inclusive_scan(T v, T* tmp) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const T t = __shfl_up_sync(0xffffffffu, v, o);
    if (lane >= o) v += t;
  }
  if (lane == 31) tmp[warp] = v;
  __syncthreads();
  if (warp == 0) {
    T w = lane < static_cast<int>(blockDim.x >> 5) ? tmp[lane] : T(0);
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const T t = __shfl_up_sync(0xffffffffu, w, o);
      if (lane >= o) w += t;
    }
    tmp[lane] = w;
  }
  __syncthreads();
  if (warp > 0) v += tmp[warp - 1];
  __syncthreads();  // tmp is free for the next call
  return v;
}

// kKeysInSmem: the row's rank keys are computed once into dynamic shared memory (V
// of them) and every pass reads them there; otherwise each pass reads the logits
// (large vocabularies). Each pass over global logits keeps several loads in flight.
template <bool kKeysInSmem>
__global__ void __launch_bounds__(kSampleThreads) sample_kernel(const SampleParams p) {
  extern __shared__ uint32_t dyn[];  // [32 warps][256] histograms, then (kKeysInSmem) V keys
  uint32_t* warp_hist = dyn + (threadIdx.x >> 5) * 256;
  uint32_t* row_keys = dyn + kSampleWarpHistWords;
  pdl_wait();
  pdl_trigger();
  __shared__ uint32_t hist[256];
  __shared__ unsigned long long cand[kSampleMaxK];  // rank key << 32 | ~id: descending = rank order
  __shared__ double prob[kSampleMaxK];
  __shared__ double dtmp[32];
  __shared__ uint32_t utmp[32];
  __shared__ uint32_t s_digit, s_remaining, s_equal;
  __shared__ int s_count;
  __shared__ long long s_tie_id;
  const int64_t row = blockIdx.x, V = p.len;
  const int tid = threadIdx.x, lane = tid & 31;
  const int nthreads = static_cast<int>(blockDim.x);
  auto logit = [&](int64_t i) { return ld_f(p.logits_dt, p.logits, row * V + i); };
  if constexpr (kKeysInSmem) {
#pragma unroll 8
    for (int64_t i = tid; i < V; i += nthreads) row_keys[i] = rank_key(logit(i));
    __syncthreads();
  }
  auto key_at = [&](int64_t i) {
    if constexpr (kKeysInSmem) return row_keys[i];
    else return rank_key(logit(i));
  };
  const int K = static_cast<int>(p.top_k < V ? p.top_k : V);

  // 1. The rank key of the K-th best token: radix select, 8 bits a pass from the top.
  uint32_t prefix = 0, mask = 0, remaining = static_cast<uint32_t>(K), equal = 0;
  for (int pass = 0; pass < 4; ++pass) {
    const int shift = 24 - 8 * pass;
    for (int b = tid; b < kSampleWarpHistWords; b += nthreads) dyn[b] = 0;
    __syncthreads();
    // Each warp counts into its own histogram (aggregating a warp's equal bins with
    // __match_any_sync first measured slower: 72-96 vs 61-86 us a launch, ncu, H100).
    for (int64_t i = tid; i < V; i += nthreads) {
      const uint32_t k = key_at(i);
      if ((k & mask) == prefix) atomicAdd(&warp_hist[(k >> shift) & 255u], 1u);
    }
    __syncthreads();
    if (tid < 256) {
      uint32_t c = 0;
      for (int w = 0; w < nthreads / 32; ++w) c += dyn[w * 256 + tid];
      hist[tid] = c;
    }
    __syncthreads();
    if (tid < 32) {  // lane l holds bins 255 - 8 l .. 248 - 8 l (best first)
      uint32_t c[8], sum = 0;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        c[j] = hist[255 - 8 * lane - j];
        sum += c[j];
      }
      uint32_t incl = sum;
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) {
        const uint32_t t = __shfl_up_sync(0xffffffffu, incl, o);
        if (lane >= o) incl += t;
      }
      uint32_t acc = incl - sum;
      if (acc < remaining && remaining <= incl) {
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          if (acc < remaining && remaining <= acc + c[j]) {
            s_digit = static_cast<uint32_t>(255 - 8 * lane - j);
            s_remaining = remaining - acc;
            s_equal = c[j];
          }
          acc += c[j];
        }
      }
    }
    __syncthreads();
    prefix |= s_digit << shift;
    mask |= 0xFFu << shift;
    remaining = s_remaining;
    equal = s_equal;
    __syncthreads();
  }
  const uint32_t key_k = prefix;

  // 2. Of the tokens whose key is key_k, the first `remaining` by id are candidates.
  long long tie_id = LLONG_MAX;
  if (remaining < equal) {  // tiles of nthreads ids in order, counted warp by warp
    const int warp = tid >> 5;
    uint32_t seen = 0;
    for (int64_t base = 0; base < V && seen < remaining; base += nthreads) {
      const int64_t i = base + tid;
      const bool match = i < V && key_at(i) == key_k;
      const unsigned ballot = __ballot_sync(0xffffffffu, match);
      if (lane == 0) utmp[warp] = static_cast<uint32_t>(__popc(ballot));
      __syncthreads();
      uint32_t before = seen, tile = 0;
      for (int w = 0; w < nthreads / 32; ++w) {
        if (w < warp) before += utmp[w];
        tile += utmp[w];
      }
      if (match && before + static_cast<uint32_t>(__popc(ballot & ((1u << lane) - 1u))) + 1 == remaining) s_tie_id = i;
      seen += tile;
      __syncthreads();
    }
    tie_id = s_tie_id;
  }

  // 3. Gather the K candidates, then sort them best first (bitonic, in shared memory).
  if (tid == 0) s_count = 0;
  __syncthreads();
  for (int64_t base = 0; base < V; base += nthreads) {
    const int64_t i = base + tid;
    bool take = false;
    uint32_t k = 0;
    if (i < V) {
      k = key_at(i);
      take = k > key_k || (k == key_k && i <= tie_id);
    }
    const unsigned ballot = __ballot_sync(0xffffffffu, take);
    if (ballot == 0) continue;
    int at = 0;
    if (lane == 0) at = atomicAdd(&s_count, __popc(ballot));
    at = __shfl_sync(0xffffffffu, at, 0) + __popc(ballot & ((1u << lane) - 1u));
    if (take && at < kSampleMaxK)
      cand[at] = (static_cast<unsigned long long>(k) << 32) | (0xFFFFFFFFu - static_cast<uint32_t>(i));
  }
  __syncthreads();
  int P = 1;
  while (P < K) P <<= 1;
  for (int j = K + tid; j < P; j += nthreads) cand[j] = 0;  // below every real candidate
  __syncthreads();
  for (int size = 2; size <= P; size <<= 1)
    for (int stride = size >> 1; stride > 0; stride >>= 1) {
      for (int j = tid; j < P; j += nthreads) {
        const int partner = j ^ stride;
        if (partner > j) {
          const bool descending = (j & size) == 0;
          const unsigned long long a = cand[j], b = cand[partner];
          if ((a < b) == descending) {
            cand[j] = b;
            cand[partner] = a;
          }
        }
      }
      __syncthreads();
    }
  auto id_of = [&](int j) { return static_cast<int32_t>(0xFFFFFFFFu - static_cast<uint32_t>(cand[j] & 0xFFFFFFFFu)); };

  // 4. Softmax over the candidates, min-p and top-p prefixes, the draw.
  const float max_l = logit(id_of(0));
  if (!isfinite(max_l)) {
    if (tid == 0) p.out[row] = id_of(0);
    return;
  }
  const bool mine = tid < K;
  const double e = mine ? exp(static_cast<double>(logit(id_of(tid)) - max_l) / p.temperature) : 0.0;
  const double total = block_inclusive_scan(e, dtmp);  // the last thread's value is the sum
  if (tid == nthreads - 1) dtmp[0] = total;
  __syncthreads();
  const double sum = dtmp[0];
  __syncthreads();
  const double pr = e / sum;
  if (mine) prob[tid] = pr;
  __syncthreads();
  int keep = K;
  if (p.min_p > 0.0) {
    const double cut = p.min_p * prob[0];
    keep = 1 + __syncthreads_count(mine && tid >= 1 && pr >= cut);
  }
  const double cum = block_inclusive_scan(mine ? pr : 0.0, dtmp);
  if (p.top_p < 1.0) {
    // the first prefix reaching top_p (as the host loop: NaN sums never reach it)
    const int below = __syncthreads_count(mine && tid < keep && !(cum >= p.top_p));
    keep = max(1, min(keep, below + 1));
  }
  if (tid == keep - 1) dtmp[0] = cum;  // the kept probability mass
  __syncthreads();
  const double r = static_cast<double>(p.draw[row]) * dtmp[0];
  const int at = __syncthreads_count(mine && tid < keep && !(r < cum));  // first with r < cum (NaN: the last)
  if (tid == 0) p.out[row] = id_of(at < keep ? at : keep - 1);
}

}  // namespace

void launch_sample(const SampleParams& p, cudaStream_t s) {
  if (p.rows == 0 || p.len == 0) return;
  const int64_t key_bytes = p.len * static_cast<int64_t>(sizeof(uint32_t));
  if (key_bytes <= kSampleMaxSmemKeys) {
    // The dynamic shared memory limit is raised once per device (before any capture:
    // the first run of a step list is step by step); where that fails, every row takes
    // the kernel that reads its logits from global memory.
    static std::atomic<uint64_t> tried{0}, raised{0};
    int dev = 0;
    cudaGetDevice(&dev);
    const uint64_t bit = uint64_t{1} << (dev & 63);
    if ((tried.load() & bit) == 0) {
      if (cudaFuncSetAttribute(sample_kernel<true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               static_cast<int>(kSampleWarpHistBytes + kSampleMaxSmemKeys)) == cudaSuccess)
        raised.fetch_or(bit);
      else
        (void)cudaGetLastError();
      tried.fetch_or(bit);
    }
    if ((raised.load() & bit) != 0) {
      launch_k(sample_kernel<true>, static_cast<unsigned>(p.rows), kSampleThreads,
               static_cast<size_t>(kSampleWarpHistBytes + key_bytes), s, p);
      return;
    }
  }
  static std::atomic<uint64_t> raised_global{0};
  int dev = 0;
  cudaGetDevice(&dev);
  const uint64_t bit = uint64_t{1} << (dev & 63);
  if ((raised_global.load() & bit) == 0) {  // the histograms and static arrays exceed 48 KB
    cudaFuncSetAttribute(sample_kernel<false>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                         static_cast<int>(kSampleWarpHistBytes));
    raised_global.fetch_or(bit);
  }
  launch_k(sample_kernel<false>, static_cast<unsigned>(p.rows), kSampleThreads,
           static_cast<size_t>(kSampleWarpHistBytes), s, p);
}

}  // namespace rlx::cuda_backend
