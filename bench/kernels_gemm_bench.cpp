// CPU kernel microbenchmarks (GEMM, GEMV, attention, rms_norm). Each figure is shown
// next to a limit measured in the same run: peak f32 FMA FLOP/s (register-only AVX-512
// or AVX2 loop on all threads) and read bandwidth (streaming sum over 1 GiB), from bench_limits.h.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <thread>
#include <vector>

#include "backends/cpu/kernels/attention.h"
#include "backends/cpu/kernels/cpu_features.h"
#include "backends/cpu/kernels/gemm.h"
#include "backends/cpu/kernels/norm.h"
#include "backends/cpu/kernels/thread_pool.h"
#include "rlx/base/aligned_buffer.h"
#include "rlx/base/half.h"
#include "bench_limits.h"

#ifdef RLX_HAVE_OPENBLAS
#include <cblas.h>
#endif

namespace {

using namespace rlx;
using namespace rlx::cpu;

int n_threads() { return bench::shared_pool().size(); }

ThreadPool& pool() { return bench::shared_pool(); }

KernelContext ctx() { return KernelContext{&pool(), bench::isa_from_env()}; }

using bench::set_bytes;
using bench::set_flops;

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

#ifdef RLX_HAVE_OPENBLAS
// ---- the same GEMM and f32 GEMV through OpenBLAS (Debian's libopenblas, pthreads build,
// as many threads as the pool): the library a user could pick instead.
void BM_OpenBlasGemm(benchmark::State& st) {
  const int64_t M = st.range(0), K = st.range(1), N = st.range(2);
  openblas_set_num_threads(n_threads());
  std::vector<float> a(M * K, 0.01f), b(N * K, 0.02f), c(M * N);
  for (auto _ : st) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(M), static_cast<int>(N), static_cast<int>(K),
                1.0f, a.data(), static_cast<int>(K), b.data(), static_cast<int>(K), 0.0f, c.data(), static_cast<int>(N));
    benchmark::ClobberMemory();
  }
  set_flops(st, 2.0 * M * N * K);
}
BENCHMARK(BM_OpenBlasGemm)
    ->ArgNames({"M", "K", "N"})
    ->Args({512, 2048, 2048})
    ->Args({512, 2048, 8192})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

void BM_OpenBlasGemv(benchmark::State& st) {
  const int64_t K = st.range(0), N = st.range(1);
  openblas_set_num_threads(n_threads());
  const size_t bytes = static_cast<size_t>(N * K) * sizeof(float);
  const size_t copies = std::max<size_t>(2, ((size_t{1} << 30) + bytes - 1) / bytes);
  std::vector<AlignedBuffer> weights;
  for (size_t i = 0; i < copies; ++i) {
    weights.emplace_back(bytes, 64);
    std::fill_n(weights.back().as<float>(), N * K, 0.02f);
  }
  std::vector<float> a(K, 0.01f), c(N);
  size_t i = 0;
  for (auto _ : st) {
    cblas_sgemv(CblasRowMajor, CblasNoTrans, static_cast<int>(N), static_cast<int>(K), 1.0f, weights[i].as<float>(),
                static_cast<int>(K), a.data(), 1, 0.0f, c.data(), 1);
    i = (i + 1) % copies;
    benchmark::ClobberMemory();
  }
  set_bytes(st, static_cast<double>(bytes));
}
BENCHMARK(BM_OpenBlasGemv)->ArgNames({"K", "N"})->Args({2048, 8192})->Unit(benchmark::kMicrosecond)->UseRealTime();
#endif

// ---- GEMV: 1 x K x N, weights [N, K] in f32 / f16 / bf16 (arg 2), unpacked (arg 3 = 0)
// or pre-packed into GEMM panels (arg 3 = 1, gemm_prepacked's small-M path: what the
// runtime runs at decode once weights are packed at set_param). The weights rotate
// through enough copies (>= 1 GiB) that each call streams from DRAM, not from a large
// last-level cache.
void BM_Gemv(benchmark::State& st) {
  const int64_t K = st.range(0), N = st.range(1);
  const auto wt = static_cast<WeightType>(st.range(2));
  const bool prepacked = st.range(3) != 0;
  const size_t bytes = static_cast<size_t>(N * K) * weight_type_size(wt);
  const size_t copies = std::max<size_t>(2, ((size_t{1} << 30) + bytes - 1) / bytes);
  std::vector<AlignedBuffer> weights;
  std::vector<PackedB> packed;
  for (size_t i = 0; i < copies; ++i) {
    AlignedBuffer w(bytes, 64);
    if (wt == WeightType::kF32) {
      std::fill_n(w.as<float>(), N * K, 0.02f);
    } else {
      std::fill_n(w.as<uint16_t>(), N * K, f32_to_bf16_bits(0.02f));
    }
    if (prepacked) {
      packed.push_back(pack_b(ctx(), K, N, true, 0, w.data(), wt));
    } else {
      weights.push_back(std::move(w));
    }
  }
  std::vector<float> a(K, 0.01f), c(N);
  GemmParams p;
  p.m = 1;
  p.n = N;
  p.k = K;
  size_t i = 0;
  for (auto _ : st) {
    if (prepacked) {
      gemm_prepacked(ctx(), p, a.data(), packed[i], c.data());
    } else {
      gemm(ctx(), p, a.data(), weights[i].data(), wt, c.data());
    }
    i = (i + 1) % copies;
    benchmark::ClobberMemory();
  }
  set_bytes(st, static_cast<double>(bytes));
}
BENCHMARK(BM_Gemv)
    ->ArgNames({"K", "N", "wtype", "prepacked"})
    ->Args({2048, 8192, 0, 0})
    ->Args({2048, 8192, 0, 1})
    ->Args({2048, 8192, 1, 0})
    ->Args({2048, 8192, 1, 1})
    ->Args({2048, 8192, 2, 0})
    ->Args({2048, 8192, 2, 1})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

// ---- pack_b: what packing a weight costs once (at set_param): K x N, weights [N, K],
// a fresh packed buffer per call (its page faults included). bytes = the weight's.
void BM_PackB(benchmark::State& st) {
  const int64_t K = st.range(0), N = st.range(1);
  const auto wt = static_cast<WeightType>(st.range(2));
  const size_t bytes = static_cast<size_t>(N * K) * weight_type_size(wt);
  AlignedBuffer w(bytes, 64);
  std::fill_n(w.data(), bytes, uint8_t{0x3c});
  for (auto _ : st) {
    const PackedB pb = pack_b(ctx(), K, N, true, 0, w.data(), wt);
    benchmark::DoNotOptimize(pb.data());
  }
  set_bytes(st, static_cast<double>(bytes));
}
BENCHMARK(BM_PackB)
    ->ArgNames({"K", "N", "wtype"})
    ->Args({2048, 8192, 0})
    ->Args({2048, 8192, 1})
    ->Unit(benchmark::kMillisecond)
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

int main(int argc, char** argv) { return rlx::bench::run_benchmarks(argc, argv, rlx::bench::shared_pool()); }
