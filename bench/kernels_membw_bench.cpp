// What caps the read bandwidth of one core (issue 9: the decode GEMVs stream ~15 GB/s per
// core). On 1 and 2 threads: (1) S interleaved sequential streams per thread, each with W
// vpdpbusd per 64-byte line (the instruction work a GEMV spends per line), from DRAM and
// from L2 (the loop's own speed); (2) the GEMV's split: 256 KiB tasks claimed in turn;
// (3) C independent random pointer chases per thread (no prefetcher help: bandwidth grows
// with C until the core's outstanding misses run out; C = 1 is the load latency).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "bench_limits.h"
#include "rlx/base/aligned_buffer.h"

namespace {

using namespace rlx;

constexpr size_t kLine = 64;
constexpr size_t kRegion = size_t{512} << 20;  // bytes each thread reads from DRAM
constexpr size_t kHot = size_t{256} << 10;     // bytes each thread reads from L2

cpu::ThreadPool& pool() { return bench::shared_pool(); }

// One written buffer for all benchmarks: a region per thread of the pool.
uint8_t* region(int t) {
  static AlignedBuffer buf = [] {
    AlignedBuffer b(kRegion * static_cast<size_t>(pool().size()), 4096);
    pool().parallel_for(pool().size(), [&](int64_t i) {
      uint8_t* p = b.data() + kRegion * static_cast<size_t>(i);
      for (size_t o = 0; o < kRegion; o += 8) *reinterpret_cast<uint64_t*>(p + o) = o * 0x9E3779B97F4A7C15ULL;
    });
    return b;
  }();
  return buf.data() + kRegion * static_cast<size_t>(t);
}

// Runs fn(t) on `threads` threads at once (each waits for the others to start, so two
// tasks never run one after the other on the same thread).
template <class F>
void on_threads(int threads, F&& fn) {
  std::atomic<int> started{0};
  pool().parallel_for(threads, [&](int64_t t) {
    started.fetch_add(1);
    while (started.load() < threads) {
    }
    fn(static_cast<int>(t));
  });
}

#if defined(__x86_64__)
// Reads `bytes` at p (any alignment) as `streams` equal parts in lockstep, one line of each part per
// step, with `work` vpdpbusd on every line spread over 8 accumulators (work = 0: one add).
template <int kWork>
__attribute__((target("avx512f,avx512bw,avx512vnni"))) uint32_t read_streams(const uint8_t* p, size_t bytes,
                                                                               int streams) {
  const size_t part = bytes / static_cast<size_t>(streams) / kLine * kLine;
  const __m512i ones = _mm512_set1_epi8(1);
  __m512i acc[8];
  for (__m512i& a : acc) a = _mm512_setzero_si512();
  for (size_t off = 0; off < part; off += kLine) {
    for (int s = 0; s < streams; ++s) {
      const __m512i v = _mm512_loadu_si512(p + static_cast<size_t>(s) * part + off);
      if constexpr (kWork == 0) {
        acc[0] = _mm512_add_epi32(acc[0], v);
      } else {
#pragma GCC unroll 16
        for (int i = 0; i < kWork; ++i) acc[i & 7] = _mm512_dpbusd_epi32(acc[i & 7], ones, v);
      }
    }
  }
  __m512i s = acc[0];
  for (int i = 1; i < 8; ++i) s = _mm512_add_epi32(s, acc[i]);
  alignas(64) uint32_t lanes[16];
  _mm512_store_si512(lanes, s);
  return std::accumulate(lanes, lanes + 16, 0u);
}

using ReadFn = uint32_t (*)(const uint8_t*, size_t, int);
ReadFn read_fn(int work) {
  switch (work) {
    case 0: return &read_streams<0>;
    case 1: return &read_streams<1>;
    case 2: return &read_streams<2>;
    case 4: return &read_streams<4>;
    case 8: return &read_streams<8>;
    default: return &read_streams<12>;
  }
}

// threads, streams per thread, vpdpbusd per line, hot (L2) or DRAM, byte offset of the
// loads (8: every load spans two lines, as the 4-bit GEMV loops' loads do).
void BM_Streams(benchmark::State& st) {
  const int threads = static_cast<int>(st.range(0)), streams = static_cast<int>(st.range(1));
  const int work = static_cast<int>(st.range(2));
  const bool hot = st.range(3) != 0;
  const size_t offset = static_cast<size_t>(st.range(4));
  if (threads > pool().size()) return st.SkipWithError("fewer threads in the pool");
  const ReadFn fn = read_fn(work);
  const size_t bytes = (hot ? kHot : kRegion) - kLine;
  const int reps = hot ? 256 : 1;  // 64 MiB per thread and iteration from L2
  std::atomic<uint32_t> sink{0};
  for (auto _ : st) {
    on_threads(threads, [&](int t) {
      for (int r = 0; r < reps; ++r) sink.fetch_add(fn(region(t) + offset, bytes, streams));
    });
  }
  benchmark::DoNotOptimize(sink.load());
  st.SetLabel(hot ? "L2" : "DRAM");
  bench::set_bytes(st, static_cast<double>(bytes) * reps * threads);
}
BENCHMARK(BM_Streams)
    ->ArgNames({"threads", "streams", "dots", "hot", "offset"})
    ->ArgsProduct({{1, 2}, {1, 4, 8, 12, 16}, {0, 4}, {0}, {0}})
    ->ArgsProduct({{1, 2}, {1}, {1, 2, 8, 12}, {0}, {0}})
    ->ArgsProduct({{1, 2}, {1}, {0, 4}, {0}, {8}})
    ->ArgsProduct({{1}, {1}, {0, 1, 2, 4, 8, 12}, {1}, {0}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// The GEMV's split: both threads claim 256 KiB tasks of one 1 GiB buffer in turn (the
// regions of both threads, back to back), one stream per task.
void BM_Tasks(benchmark::State& st) {
  const int work = static_cast<int>(st.range(0));
  const ReadFn fn = read_fn(work);
  const size_t task = size_t{256} << 10;
  const int64_t n_tasks = static_cast<int64_t>(kRegion * static_cast<size_t>(pool().size()) / task);
  std::atomic<uint32_t> sink{0};
  for (auto _ : st) {
    pool().parallel_for(n_tasks, [&](int64_t i) { sink.fetch_add(fn(region(0) + task * static_cast<size_t>(i), task, 1)); });
  }
  benchmark::DoNotOptimize(sink.load());
  bench::set_bytes(st, static_cast<double>(task) * static_cast<double>(n_tasks));
}
BENCHMARK(BM_Tasks)->ArgNames({"dots"})->Arg(0)->Arg(4)->Unit(benchmark::kMillisecond)->UseRealTime();
#endif

// `chains` independent walks per thread through a random cycle over the lines of the
// thread's region: each step is one dependent load from DRAM.
void BM_Chase(benchmark::State& st) {
  const int threads = static_cast<int>(st.range(0)), chains = static_cast<int>(st.range(1));
  if (threads > pool().size()) return st.SkipWithError("fewer threads in the pool");
  const size_t n = kRegion / kLine;
  static const std::vector<uint32_t> order = [n] {  // a random cycle over the n lines
    std::vector<uint32_t> o(n);
    std::iota(o.begin(), o.end(), 0u);
    std::shuffle(o.begin() + 1, o.end(), std::mt19937(5));
    return o;
  }();
  static const bool linked = [n] {  // line order[i] points at line order[i + 1]
    pool().parallel_for(pool().size(), [&](int64_t t) {
      uint8_t* base = region(static_cast<int>(t));
      for (size_t i = 0; i < n; ++i)
        *reinterpret_cast<uint64_t*>(base + order[i] * kLine) = order[(i + 1) % n] * kLine;
    });
    return true;
  }();
  (void)linked;
  const int64_t steps = 1 << 20;  // per chain and iteration
  std::atomic<uint64_t> sink{0};
  for (auto _ : st) {
    on_threads(threads, [&](int t) {
      const uint8_t* base = region(t);
      uint64_t pos[32];
      for (int c = 0; c < chains; ++c) pos[c] = order[n / static_cast<size_t>(chains) * static_cast<size_t>(c)] * kLine;
      for (int64_t s = 0; s < steps; ++s)
        for (int c = 0; c < chains; ++c) pos[c] = *reinterpret_cast<const uint64_t*>(base + pos[c]);
      uint64_t x = 0;
      for (int c = 0; c < chains; ++c) x += pos[c];
      sink.fetch_add(x);
    });
  }
  benchmark::DoNotOptimize(sink.load());
  st.counters["ns_per_load"] = benchmark::Counter(static_cast<double>(steps) * chains * static_cast<double>(st.iterations()),
                                                  benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  bench::set_bytes(st, static_cast<double>(steps) * chains * threads * kLine);
}
BENCHMARK(BM_Chase)
    ->ArgNames({"threads", "chains"})
    ->ArgsProduct({{1, 2}, {1, 4, 8, 16, 24, 32}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace

int main(int argc, char** argv) {
  region(0);  // written once, before any timing
  return rlx::bench::run_benchmarks(argc, argv, rlx::bench::shared_pool());
}
