// CPU kernel microbenchmarks (GEMM, GEMV, attention, rms_norm). Each figure is shown
// next to a limit measured in the same run: peak f32 FMA FLOP/s (register-only AVX-512
// or AVX2 loop on all threads) and read bandwidth (streaming sum over 1 GiB).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <thread>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "backends/cpu/kernels/attention.h"
#include "backends/cpu/kernels/cpu_features.h"
#include "backends/cpu/kernels/gemm.h"
#include "backends/cpu/kernels/norm.h"
#include "backends/cpu/kernels/thread_pool.h"
#include "rlx/base/aligned_buffer.h"
#include "rlx/base/half.h"

namespace {

using namespace rlx;
using namespace rlx::cpu;

int n_threads() { return std::max(1, static_cast<int>(std::thread::hardware_concurrency())); }

ThreadPool& pool() {
  static ThreadPool p(n_threads());
  return p;
}

KernelContext ctx() { return KernelContext{&pool(), IsaLevel::kAvx512}; }

#if defined(__x86_64__)
// 24 independent FMA chains per iteration: 24 * 16 lanes * 2 flops.
__attribute__((target("avx512f"))) float fma_loop_avx512(int64_t iters) {
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
__attribute__((target("avx2,fma"))) float fma_loop_avx2(int64_t iters) {
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
__attribute__((target("avx512f"))) float sum_avx512(const float* p, int64_t n) {
  __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
  for (int64_t i = 0; i + 64 <= n; i += 64) {
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

float sum_scalar(const float* p, int64_t n) {
  float s = 0;
  for (int64_t i = 0; i < n; ++i) s += p[i];
  return s;
}

struct Limits {
  double peak_flops = 0;  // f32 FLOP/s, all threads
  double read_bw = 0;     // bytes/s, all threads
};

const Limits& limits() {
  static const Limits l = [] {
    Limits r;
    const int T = n_threads();
    const bool avx512 = cpu_features().max_isa == IsaLevel::kAvx512;
    const int64_t iters = 20'000'000;
    std::atomic<uint32_t> sink{0};
    double best = 1e30;
    for (int rep = 0; rep < 3; ++rep) {
      const auto t0 = std::chrono::steady_clock::now();
      pool().parallel_for(T, [&](int64_t) {
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
    pool().parallel_for(T, [&](int64_t t) {
      for (int64_t i = n * t / T; i < n * (t + 1) / T; ++i) f[i] = 1.0f;
    });
    best = 1e30;
    for (int rep = 0; rep < 3; ++rep) {
      const auto t0 = std::chrono::steady_clock::now();
      pool().parallel_for(T, [&](int64_t t) {
        const int64_t i0 = (n * t / T) & ~int64_t{63}, i1 = (n * (t + 1) / T) & ~int64_t{63};
#if defined(__x86_64__)
        const float v = avx512 ? sum_avx512(f + i0, i1 - i0) : sum_scalar(f + i0, i1 - i0);
#else
        const float v = sum_scalar(f + i0, i1 - i0);
#endif
        sink.fetch_add(v > 0 ? 1u : 0u);
      });
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    r.read_bw = static_cast<double>(n) * 4 / best;
    std::printf("limits (%d threads, %s): peak f32 %.1f GFLOP/s, read bandwidth %.1f GB/s\n", T,
                describe_cpu_features(cpu_features()).c_str(), r.peak_flops / 1e9, r.read_bw / 1e9);
    return r;
  }();
  return l;
}

// Turns the per-iteration work counters into rates and percent of the measured limits
// once the time per iteration is known.
class PercentReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    std::vector<Run> copy = runs;
    for (Run& r : copy) {
      auto& c = r.counters;
      const double secs = r.GetAdjustedRealTime() / benchmark::GetTimeUnitMultiplier(r.time_unit);
      if (c.count("flop_per_iter")) {
        const double rate = c["flop_per_iter"].value / secs;
        c["GFLOP/s"] = rate / 1e9;
        c["pct_peak"] = 100.0 * rate / limits().peak_flops;
      }
      if (c.count("bytes_per_iter")) {
        const double rate = c["bytes_per_iter"].value / secs;
        c["GB/s"] = rate / 1e9;
        c["pct_bw"] = 100.0 * rate / limits().read_bw;
      }
    }
    ConsoleReporter::ReportRuns(copy);
  }
};

void set_flops(benchmark::State& st, double f) { st.counters["flop_per_iter"] = f; }
void set_bytes(benchmark::State& st, double b) { st.counters["bytes_per_iter"] = b; }

// ---- GEMM: M x K x N, weights [N, K]
void BM_Gemm(benchmark::State& st) {
  const int64_t M = st.range(0), K = st.range(1), N = st.range(2);
  const bool prepacked = st.range(3) != 0;
  std::vector<float> a(M * K, 0.01f), b(N * K, 0.02f), c(M * N);
  GemmParams p;
  p.m = M;
  p.n = N;
  p.k = K;
  const PackedB pb = pack_b(ctx(), K, N, true, 0, b.data(), WeightType::kF32);
  for (auto _ : st) {
    if (prepacked) {
      gemm_prepacked(ctx(), p, a.data(), pb, c.data());
    } else {
      gemm_f32(ctx(), p, a.data(), b.data(), c.data());
    }
    benchmark::ClobberMemory();
  }
  set_flops(st, 2.0 * M * N * K);
}
BENCHMARK(BM_Gemm)
    ->ArgNames({"M", "K", "N", "prepacked"})
    ->Args({512, 2048, 2048, 1})
    ->Args({512, 2048, 2048, 0})
    ->Args({512, 2048, 8192, 1})
    ->Args({512, 2048, 8192, 0})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// ---- GEMV: 1 x K x N, weights [N, K] in f32 / f16 / bf16 (arg 2), unpacked. The
// weights rotate through enough copies (>= 1 GiB) that each call streams from DRAM,
// not from a large last-level cache.
void BM_Gemv(benchmark::State& st) {
  const int64_t K = st.range(0), N = st.range(1);
  const auto wt = static_cast<WeightType>(st.range(2));
  const size_t bytes = static_cast<size_t>(N * K) * weight_type_size(wt);
  const size_t copies = std::max<size_t>(2, ((size_t{1} << 30) + bytes - 1) / bytes);
  std::vector<AlignedBuffer> weights;
  for (size_t i = 0; i < copies; ++i) {
    weights.emplace_back(bytes, 64);
    if (wt == WeightType::kF32) {
      std::fill_n(weights.back().as<float>(), N * K, 0.02f);
    } else {
      std::fill_n(weights.back().as<uint16_t>(), N * K, f32_to_bf16_bits(0.02f));
    }
  }
  std::vector<float> a(K, 0.01f), c(N);
  GemmParams p;
  p.m = 1;
  p.n = N;
  p.k = K;
  size_t i = 0;
  for (auto _ : st) {
    gemm(ctx(), p, a.data(), weights[i].data(), wt, c.data());
    i = (i + 1) % copies;
    benchmark::ClobberMemory();
  }
  set_bytes(st, static_cast<double>(bytes));
}
BENCHMARK(BM_Gemv)
    ->ArgNames({"K", "N", "wtype"})
    ->Args({2048, 8192, 0})
    ->Args({2048, 8192, 1})
    ->Args({2048, 8192, 2})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

// ---- attention: prefill (causal) and decode over a KV cache
void BM_Attention(benchmark::State& st) {
  const int64_t S = st.range(0), T = st.range(1), H = 32, KVH = 8, D = 64;
  std::vector<float> q(S * H * D, 0.1f), k(T * KVH * D, 0.1f), v(T * KVH * D, 0.1f), o(S * H * D);
  AttentionParams p;
  p.seq_q = S;
  p.seq_kv = T;
  p.n_heads = H;
  p.n_kv_heads = KVH;
  p.head_dim = D;
  p.mask = AttnMask::kCausal;
  for (auto _ : st) {
    attention_f32(ctx(), p, q.data(), k.data(), v.data(), o.data());
    benchmark::ClobberMemory();
  }
  // Visible (query, key) pairs under the causal mask, 4 flops per pair per dim.
  double pairs = 0;
  for (int64_t i = 0; i < S; ++i) pairs += static_cast<double>(T - S + i + 1);
  set_flops(st, 4.0 * pairs * D * H);
  if (S == 1) set_bytes(st, 2.0 * T * KVH * D * 4);
}
BENCHMARK(BM_Attention)
    ->ArgNames({"S", "T"})
    ->Args({512, 512})
    ->Args({1, 1024})
    ->Args({1, 16384})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

// ---- rms_norm 512 x 2048 (reads x and w, writes y)
void BM_RmsNorm(benchmark::State& st) {
  const int64_t rows = st.range(0), n = st.range(1);
  std::vector<float> x(rows * n, 0.5f), w(n, 1.0f), y(rows * n);
  for (auto _ : st) {
    rms_norm_f32(ctx(), x.data(), w.data(), y.data(), rows, n, 1e-5f);
    benchmark::ClobberMemory();
  }
  set_bytes(st, 2.0 * rows * n * 4);
}
BENCHMARK(BM_RmsNorm)->ArgNames({"rows", "n"})->Args({512, 2048})->Unit(benchmark::kMicrosecond)->UseRealTime();

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  limits();  // measure the limits before the first benchmark
  PercentReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  return 0;
}
