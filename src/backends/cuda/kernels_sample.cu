// The `sample` op on the device: one 1024-thread block per row of logits picks the token
// that rlx::choose_token defines (base/token_choice.h). The top_k best ranked tokens
// are found by a coarse histogram of their rank keys, a short candidate list and a
// radix select over it (see sample_kernel), then gathered and sorted in shared memory;
// softmax at the temperature (double), the min-p and top-p prefixes and the inverse
// CDF at the row's draw follow. Sums are block reductions and scans in a fixed order:
// the same logits and draw give the same token every run; they can differ from the
// host's sequential sums in the last bits, so a draw within rounding of a
// cumulative-probability boundary may pick the neighbouring token, and a top-p or min-p
// cut within rounding of a prefix sum may keep one token more or less (which rescales
// every draw of that row).
#include <atomic>
#include <cfloat>
#include <climits>

#include "backends/cuda/cuda_common.cuh"

namespace rlx::cuda_backend {
namespace {

constexpr int kSampleThreads = 1024;
constexpr int kSampleMaxK = kSampleMaxTopK;
// Rows of up to 36K tokens keep their rank keys in shared memory (with the histogram,
// the candidate list and the static arrays, ~210 KB of the 227 KB an H100 block may have).
constexpr int64_t kSampleMaxSmemKeys = 144 * 1024;
// The first pass's histogram (top 12 bits of the rank keys) and the candidate list
// (dynamic shared memory, before the keys).
constexpr int kSampleCoarseBits = 12;
constexpr int kSampleCoarseBins = 1 << kSampleCoarseBits;
constexpr int kSampleListCap = 4096;
constexpr int64_t kSampleFixedDynBytes = kSampleCoarseBins * 4 + kSampleListCap * 8;
static_assert(kSampleCoarseBins % kSampleThreads == 0, "coarse bins are split evenly over the threads");

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

// Shared state of one block's selections (static shared memory).
struct SelectShared {
  uint32_t hist[256];
  uint32_t digit, remaining, equal;
};

// The r-th largest (r >= 1) of val(j) over the entries j < n with live(j) whose bits
// under `mask` (a run of top bits) equal `prefix`, 8 bits a pass below the mask: a
// block-wide radix select (every thread calls it). On return *remaining is the rank
// of the answer among the live entries equal to it and *equal how many there are.
template <typename Val, typename Live>
__device__ uint32_t radix_select(int64_t n, Val val, Live live, uint32_t prefix, uint32_t mask, uint32_t r,
                                 SelectShared& sh, uint32_t* remaining, uint32_t* equal) {
  const int tid = threadIdx.x, lane = tid & 31, nthreads = static_cast<int>(blockDim.x);
  uint32_t eq = 0;
  while (mask != 0xFFFFFFFFu) {
    const int covered = __popc(mask);
    const int width = 32 - covered < 8 ? 32 - covered : 8;
    const int shift = 32 - covered - width;
    const uint32_t wmask = (1u << width) - 1u;
    for (int b = tid; b < 256; b += nthreads) sh.hist[b] = 0;
    __syncthreads();
    for (int64_t j = tid; j < n; j += nthreads)
      if (live(j)) {
        const uint32_t v = val(j);
        if ((v & mask) == prefix) atomicAdd(&sh.hist[(v >> shift) & wmask], 1u);
      }
    __syncthreads();
    if (tid < 32) {  // lane l holds bins 255 - 8 l .. 248 - 8 l (largest first)
      uint32_t c[8], sum = 0;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        c[j] = sh.hist[255 - 8 * lane - j];
        sum += c[j];
      }
      uint32_t incl = sum;
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) {
        const uint32_t t = __shfl_up_sync(0xffffffffu, incl, o);
        if (lane >= o) incl += t;
      }
      uint32_t acc = incl - sum;
      if (acc < r && r <= incl) {
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          if (acc < r && r <= acc + c[j]) {
            sh.digit = static_cast<uint32_t>(255 - 8 * lane - j);
            sh.remaining = r - acc;
            sh.equal = c[j];
          }
          acc += c[j];
        }
      }
    }
    __syncthreads();
    prefix |= sh.digit << shift;
    mask |= wmask << shift;
    r = sh.remaining;
    eq = sh.equal;
    __syncthreads();
  }
  *remaining = r;
  *equal = eq;
  return prefix;
}

// kKeysInSmem: the row's rank keys are kept in dynamic shared memory (V of them)
// after the first pass; otherwise every pass reads the logits (large vocabularies).
//  1. One pass over the row: a 4096-bin histogram of the keys' top 12 bits; the bin
//     holding the K-th best key bounds the candidates (every key in a higher bin is one).
//  2. When those bins hold at most kSampleListCap tokens (the usual case: the top of a
//     row of logits is sparse), they are compacted into a list and the rest of the
//     selection runs over the list; otherwise over the whole row.
//  3. The K-th best key by 8-bit radix passes; ties at it by token id (a radix select
//     of the smallest ids); the K candidates gathered, sorted (bitonic) and drawn from.
template <bool kKeysInSmem>
__global__ void __launch_bounds__(kSampleThreads) sample_kernel(const SampleParams p) {
  extern __shared__ uint32_t dyn[];  // [4096] coarse histogram, [kSampleListCap] u64 list, V keys
  uint32_t* coarse = dyn;
  unsigned long long* list = reinterpret_cast<unsigned long long*>(dyn + kSampleCoarseBins);  // key << 32 | id
  uint32_t* row_keys = dyn + kSampleCoarseBins + 2 * kSampleListCap;
  pdl_wait();
  pdl_trigger();
  __shared__ SelectShared sel;
  __shared__ unsigned long long cand[kSampleMaxK];  // rank key << 32 | ~id: descending = rank order
  __shared__ double prob[kSampleMaxK];
  __shared__ double dtmp[32];
  __shared__ uint32_t utmp[32];
  __shared__ uint32_t s_bin, s_above, s_in_bin;
  __shared__ int s_count;
  const int64_t row = blockIdx.x, V = p.len;
  const int tid = threadIdx.x, lane = tid & 31;
  const int nthreads = static_cast<int>(blockDim.x);
  auto logit = [&](int64_t i) { return ld_f(p.logits_dt, p.logits, row * V + i); };
  auto key_at = [&](int64_t i) {
    if constexpr (kKeysInSmem) return row_keys[i];
    else return rank_key(logit(i));
  };
  // The row's parameters, clamped as rlx::read_sample_params.
  const float* prm = p.params + row * kSampleParamCount;
  const double draw = prm[0] >= 0.0f ? fmin(static_cast<double>(prm[0]), 1.0 - 0x1p-53) : 0.0;
  const double t = prm[1], kk = prm[2], tp = prm[3], mp = prm[4];
  const double temperature = t > 0.0 ? t : 1.0;
  const int top_k = !(t > 0.0) ? 1 : (kk >= 1.0 && kk <= kSampleMaxK) ? static_cast<int>(kk) : kSampleMaxK;
  const double top_p = tp > 0.0 ? fmin(tp, 1.0) : DBL_MIN;
  const double min_p = mp >= 0.0 ? fmin(mp, 1.0 - 0x1p-53) : 0.0;
  const int K = static_cast<int>(top_k < V ? top_k : V);

  // 1. Coarse histogram (and the keys, when they stay in shared memory).
  for (int b = tid; b < kSampleCoarseBins; b += nthreads) coarse[b] = 0;
  __syncthreads();
#pragma unroll 4
  for (int64_t i = tid; i < V; i += nthreads) {
    const uint32_t k = rank_key(logit(i));
    if constexpr (kKeysInSmem) row_keys[i] = k;
    atomicAdd(&coarse[k >> (32 - kSampleCoarseBits)], 1u);
  }
  __syncthreads();
  {  // thread t holds bins 4095 - 4 t .. 4092 - 4 t (highest first)
    constexpr int kPer = kSampleCoarseBins / kSampleThreads;
    uint32_t c[kPer], sum = 0;
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      c[j] = coarse[kSampleCoarseBins - 1 - kPer * tid - j];
      sum += c[j];
    }
    const uint32_t incl = block_inclusive_scan(sum, utmp);
    uint32_t acc = incl - sum;
    const uint32_t r = static_cast<uint32_t>(K);
    if (acc < r && r <= incl)
#pragma unroll
      for (int j = 0; j < kPer; ++j) {
        if (acc < r && r <= acc + c[j]) {
          s_bin = static_cast<uint32_t>(kSampleCoarseBins - 1 - kPer * tid - j);
          s_above = acc;
          s_in_bin = c[j];
        }
        acc += c[j];
      }
    __syncthreads();
  }
  const uint32_t bin = s_bin, above = s_above;
  const bool use_list = above + s_in_bin <= static_cast<uint32_t>(kSampleListCap);

  // 2. The candidates' bins as a list (any order: ties are settled by id below).
  if (use_list) {
    if (tid == 0) s_count = 0;
    __syncthreads();
    for (int64_t base = 0; base < V; base += nthreads) {  // uniform trip count: full-warp ballots
      const int64_t i = base + tid;
      uint32_t k = 0;
      const bool take = i < V && ((k = key_at(i)) >> (32 - kSampleCoarseBits)) >= bin;
      const unsigned ballot = __ballot_sync(0xffffffffu, take);
      if (ballot == 0) continue;
      int at = 0;
      if (lane == 0) at = atomicAdd(&s_count, __popc(ballot));
      at = __shfl_sync(0xffffffffu, at, 0) + __popc(ballot & ((1u << lane) - 1u));
      if (take) list[at] = (static_cast<unsigned long long>(k) << 32) | static_cast<uint32_t>(i);
    }
    __syncthreads();
  }
  const int64_t n = use_list ? static_cast<int64_t>(above + s_in_bin) : V;
  auto key_of = [&](int64_t j) { return use_list ? static_cast<uint32_t>(list[j] >> 32) : key_at(j); };
  auto id_of_entry = [&](int64_t j) { return use_list ? static_cast<uint32_t>(list[j]) : static_cast<uint32_t>(j); };

  // 3. The K-th best key, then which of the tokens with that key are candidates: the
  //    first `remaining` by id (the largest values of ~id).
  uint32_t remaining = 0, equal = 0;
  const uint32_t key_k = radix_select(
      n, key_of, [](int64_t) { return true; }, bin << (32 - kSampleCoarseBits), ~0u << (32 - kSampleCoarseBits),
      static_cast<uint32_t>(K) - above, sel, &remaining, &equal);
  uint32_t tie_id = 0xFFFFFFFFu;
  if (remaining < equal) {
    uint32_t r2 = 0, e2 = 0;
    tie_id = ~radix_select(
        n, [&](int64_t j) { return ~id_of_entry(j); }, [&](int64_t j) { return key_of(j) == key_k; }, 0u, 0u,
        remaining, sel, &r2, &e2);
  }

  // 4. Gather the K candidates, then sort them best first (bitonic, in shared memory).
  if (tid == 0) s_count = 0;
  __syncthreads();
  for (int64_t base = 0; base < n; base += nthreads) {
    const int64_t j = base + tid;
    bool take = false;
    uint32_t k = 0, id = 0;
    if (j < n) {
      k = key_of(j);
      id = id_of_entry(j);
      take = k > key_k || (k == key_k && id <= tie_id);
    }
    const unsigned ballot = __ballot_sync(0xffffffffu, take);
    if (ballot == 0) continue;
    int at = 0;
    if (lane == 0) at = atomicAdd(&s_count, __popc(ballot));
    at = __shfl_sync(0xffffffffu, at, 0) + __popc(ballot & ((1u << lane) - 1u));
    if (take && at < kSampleMaxK) cand[at] = (static_cast<unsigned long long>(k) << 32) | (0xFFFFFFFFu - id);
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
  const float l_mine = mine ? logit(id_of(tid)) : 0.0f;
  const double e = mine && !isnan(l_mine) ? exp(static_cast<double>(l_mine - max_l) / temperature) : 0.0;
  const double total = block_inclusive_scan(e, dtmp);  // the last thread's value is the sum
  if (tid == nthreads - 1) dtmp[0] = total;
  __syncthreads();
  const double sum = dtmp[0];
  __syncthreads();
  const double pr = e / sum;
  if (mine) prob[tid] = pr;
  __syncthreads();
  int keep = K;
  if (min_p > 0.0) {
    const double cut = min_p * prob[0];
    keep = 1 + __syncthreads_count(mine && tid >= 1 && pr >= cut);
  }
  const double cum = block_inclusive_scan(mine ? pr : 0.0, dtmp);
  if (top_p < 1.0) {
    // the first prefix reaching top_p (as the host loop: NaN sums never reach it)
    const int below = __syncthreads_count(mine && tid < keep && !(cum >= top_p));
    keep = max(1, min(keep, below + 1));
  }
  if (tid == keep - 1) dtmp[0] = cum;  // the kept probability mass
  __syncthreads();
  const double r = draw * dtmp[0];
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
                               static_cast<int>(kSampleFixedDynBytes + kSampleMaxSmemKeys)) == cudaSuccess)
        raised.fetch_or(bit);
      else
        (void)cudaGetLastError();
      tried.fetch_or(bit);
    }
    if ((raised.load() & bit) != 0) {
      launch_k(sample_kernel<true>, static_cast<unsigned>(p.rows), kSampleThreads,
               static_cast<size_t>(kSampleFixedDynBytes + key_bytes), s, p);
      return;
    }
  }
  static std::atomic<uint64_t> raised_global{0};
  int dev = 0;
  cudaGetDevice(&dev);
  const uint64_t bit = uint64_t{1} << (dev & 63);
  if ((raised_global.load() & bit) == 0) {  // the histogram, list and static arrays exceed 48 KB
    cudaFuncSetAttribute(sample_kernel<false>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                         static_cast<int>(kSampleFixedDynBytes));
    raised_global.fetch_or(bit);
  }
  launch_k(sample_kernel<false>, static_cast<unsigned>(p.rows), kSampleThreads,
           static_cast<size_t>(kSampleFixedDynBytes), s, p);
}

}  // namespace rlx::cuda_backend
