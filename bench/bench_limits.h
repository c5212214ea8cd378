// Machine limits for the kernel benchmarks, measured once per run with all threads of
// a pool: peak f32 FMA FLOP/s (register-only AVX-512 / AVX2 loop) and read bandwidth
// (streaming sum over 1 GiB, plain and with a 4 KiB L2 prefetch), plus a console
// reporter that prints each rate next to them.
#pragma once

#include <benchmark/benchmark.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "backends/cpu/kernels/amx_matmul.h"
#include "backends/cpu/kernels/cpu_features.h"
#include "backends/cpu/kernels/thread_pool.h"
#include "rlx/base/aligned_buffer.h"
#include "rlx/base/env.h"

namespace rlx::bench {

#if defined(__x86_64__)
// 24 independent FMA chains per iteration: 24 * 16 lanes * 2 flops.
__attribute__((target("avx512f"))) inline float fma_loop_avx512(int64_t iters) {
  __m512 acc[24];
  for (int i = 0; i < 24; ++i) acc[i] = _mm512_set1_ps(static_cast<float>(i) * 1e-3f);
  const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
  for (int64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 24
    for (int i = 0; i < 24; ++i) acc[i] = _mm512_fmadd_ps(acc[i], a, b);
  }
  __m512 s = acc[0];
  for (int i = 1; i < 24; ++i) s = _mm512_add_ps(s, acc[i]);
  float out[16];
  _mm512_storeu_ps(out, s);
  return out[0];
}
__attribute__((target("avx2,fma"))) inline float fma_loop_avx2(int64_t iters) {
  __m256 acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = _mm256_set1_ps(static_cast<float>(i) * 1e-3f);
  const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
  for (int64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) acc[i] = _mm256_fmadd_ps(acc[i], a, b);
  }
  __m256 s = acc[0];
  for (int i = 1; i < 12; ++i) s = _mm256_add_ps(s, acc[i]);
  float out[8];
  _mm256_storeu_ps(out, s);
  return out[0];
}
// `ahead` > 0: also prefetches into L2 that many bytes ahead, line by line (as the decode
// GEMVs do; the limit must not read below what they reach).
__attribute__((target("avx512f"))) inline float sum_avx512(const float* p, int64_t n, int64_t ahead) {
  __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
  for (int64_t i = 0; i + 64 <= n; i += 64) {
    if (ahead > 0)
      for (int64_t o = 0; o < 256; o += 64) _mm_prefetch(reinterpret_cast<const char*>(p + i) + ahead + o, _MM_HINT_T1);
    s0 = _mm512_add_ps(s0, _mm512_load_ps(p + i));
    s1 = _mm512_add_ps(s1, _mm512_load_ps(p + i + 16));
    s2 = _mm512_add_ps(s2, _mm512_load_ps(p + i + 32));
    s3 = _mm512_add_ps(s3, _mm512_load_ps(p + i + 48));
  }
  float out[16];
  _mm512_storeu_ps(out, _mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3)));
  float r = 0.0f;
  for (float v : out) r += v;
  return r;
}
#endif

inline float sum_scalar(const float* p, int64_t n) {
  float s = 0;
  for (int64_t i = 0; i < n; ++i) s += p[i];
  return s;
}

struct Limits {
  double peak_flops = 0;  // f32 FLOP/s, all threads
  double read_bw = 0;     // bytes/s, all threads
  double amx_bf16_flops = 0;  // AMX-BF16 tile FLOP/s, all threads (0: tiles not in use)
};

/// Measures the limits on the first call (best of 3 each) and prints them.
inline const Limits& limits(cpu::ThreadPool& pool) {
  static const Limits l = [&pool] {
    Limits r;
    const int T = pool.size();
    const bool avx512 = cpu::cpu_features().max_isa >= cpu::IsaLevel::kAvx512;
    const int64_t iters = 20'000'000;
    std::atomic<uint32_t> sink{0};
    double best = 1e30;
    for (int rep = 0; rep < 3; ++rep) {
      const auto t0 = std::chrono::steady_clock::now();
      pool.parallel_for(T, [&](int64_t) {
#if defined(__x86_64__)
        const float v = avx512 ? fma_loop_avx512(iters) : fma_loop_avx2(iters);
#else
        const float v = 0.0f;
#endif
        sink.fetch_add(v > 0 ? 1u : 0u);
      });
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    const double per_iter = avx512 ? 24.0 * 16 * 2 : 12.0 * 8 * 2;
    r.peak_flops = T * static_cast<double>(iters) * per_iter / best;

    const int64_t n = (int64_t{1} << 30) / 4;  // 1 GiB of floats
    AlignedBuffer buf(static_cast<size_t>(n) * 4, 64);
    auto* f = buf.as<float>();
    pool.parallel_for(T, [&](int64_t t) {
      for (int64_t i = n * t / T; i < n * (t + 1) / T; ++i) f[i] = 1.0f;
    });
    best = 1e30;
    for (int rep = 0; rep < 4; ++rep) {  // (AVX-512: plain and prefetching passes alternate)
      const auto t0 = std::chrono::steady_clock::now();
      pool.parallel_for(T, [&](int64_t t) {
        const int64_t i0 = (n * t / T) & ~int64_t{63}, i1 = (n * (t + 1) / T) & ~int64_t{63};
#if defined(__x86_64__)
        const float v = avx512 ? sum_avx512(f + i0, i1 - i0, rep % 2 == 0 ? 0 : 4096) : sum_scalar(f + i0, i1 - i0);
#else
        const float v = sum_scalar(f + i0, i1 - i0);
#endif
        sink.fetch_add(v > 0 ? 1u : 0u);
      });
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    r.read_bw = static_cast<double>(n) * 4 / best;
    if (cpu::amx_enabled(cpu::isa_cap_from_name(env_config().cpu_isa))) {
      const int64_t tile_iters = 2'000'000;
      best = 1e30;
      for (int rep = 0; rep < 2; ++rep) {
        const auto t0 = std::chrono::steady_clock::now();
        pool.parallel_for(T, [&](int64_t) { cpu::amx_bf16_probe(tile_iters); });
        best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      }
      r.amx_bf16_flops = T * 4 * cpu::kAmxFlopsPerTileOp * static_cast<double>(tile_iters) / best;
    }
    std::printf("limits (%d threads, %s): peak f32 %.1f GFLOP/s, read bandwidth %.1f GB/s", T,
                cpu::describe_cpu_features(cpu::cpu_features()).c_str(), r.peak_flops / 1e9, r.read_bw / 1e9);
    if (r.amx_bf16_flops > 0) std::printf(", AMX-BF16 tiles %.1f GFLOP/s", r.amx_bf16_flops / 1e9);
    std::printf("\n");
    return r;
  }();
  return l;
}

/// Turns the per-iteration work counters (`flop_per_iter`, `bytes_per_iter`) into rates
/// and percent of the measured limits once the time per iteration is known.
class PercentReporter : public benchmark::ConsoleReporter {
 public:
  explicit PercentReporter(const Limits& l) : limits_(l) {}
  void ReportRuns(const std::vector<Run>& runs) override {
    std::vector<Run> copy = runs;
    for (Run& r : copy) {
      auto& c = r.counters;
      const double secs = r.GetAdjustedRealTime() / benchmark::GetTimeUnitMultiplier(r.time_unit);
      if (c.count("flop_per_iter")) {
        const double rate = c["flop_per_iter"].value / secs;
        c["GFLOP/s"] = rate / 1e9;
        c["pct_peak"] = 100.0 * rate / limits_.peak_flops;
        if (limits_.amx_bf16_flops > 0) c["pct_amx"] = 100.0 * rate / limits_.amx_bf16_flops;
      }
      if (c.count("bytes_per_iter")) {
        const double rate = c["bytes_per_iter"].value / secs;
        c["GB/s"] = rate / 1e9;
        c["pct_bw"] = 100.0 * rate / limits_.read_bw;
      }
    }
    ConsoleReporter::ReportRuns(copy);
  }

 private:
  const Limits& limits_;
};

inline void set_flops(benchmark::State& st, double f) { st.counters["flop_per_iter"] = f; }
inline void set_bytes(benchmark::State& st, double b) { st.counters["bytes_per_iter"] = b; }

/// One thread per hardware thread (RLX_THREADS, when set), shared by the benchmarks of a
/// program.
inline cpu::ThreadPool& shared_pool() {
  static cpu::ThreadPool pool(env_config().threads > 0 ? env_config().threads
                                                       : std::max(1, static_cast<int>(std::thread::hardware_concurrency())));
  return pool;
}

/// The kernels' ISA cap from RLX_CPU_ISA=scalar|avx2|avx512, as the runtime reads it
/// (default: the best the CPU has).
inline cpu::IsaLevel isa_from_env() { return cpu::isa_cap_from_name(env_config().cpu_isa); }

/// The main() of a benchmark program: measures the limits on `pool` before the first
/// benchmark, then runs the selected benchmarks with their rates next to the limits.
inline int run_benchmarks(int argc, char** argv, cpu::ThreadPool& pool) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  PercentReporter reporter(limits(pool));
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  return 0;
}

}  // namespace rlx::bench
