// DequantMatMul microbenchmarks: decode GEMV 1 x 2048 x 8192 and 1 x 8192 x 2048 (K-quants,
// Q8_0, Q4_0/Q4_1/Q5_0/Q5_1) in bytes/s against the read bandwidth, and prefill 512 x 2048 x 8192
// in effective FLOP/s next to the f32 GEMM of the same shape; limits from bench_limits.h.
// BM_Quantize: the encoders' values a second on one thread.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/kernels/gemm.h"
#include "backends/cpu/kernels/qmatmul.h"
#include "backends/cpu/kernels/thread_pool.h"
#include "bench_limits.h"
#include "rlx/base/aligned_buffer.h"
#include "rlx/base/half.h"
#include "rlx/formats/quant.h"

namespace {

using namespace rlx;
using namespace rlx::cpu;
using formats::GgmlType;

ThreadPool& pool() { return bench::shared_pool(); }

KernelContext ctx() { return KernelContext{&pool(), bench::isa_from_env()}; }

std::vector<float> random_floats(int64_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, 0.02f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(gen);
  return v;
}

// One [n, k] weight matrix quantized to `type` (rows quantized in parallel). Types
// without an encoder (the codebook i-quants) get random blocks with a modest f16 scale.
AlignedBuffer quantized_weights(GgmlType type, int64_t n, int64_t k) {
  const size_t row = static_cast<size_t>(*formats::ggml_bytes_for(type, k));
  AlignedBuffer w(row * static_cast<size_t>(n), 64);
  if (!formats::can_quantize(type)) {
    std::mt19937 gen(7);
    for (size_t i = 0; i < w.size(); ++i) w.data()[i] = static_cast<uint8_t>(gen());
    const size_t bb = static_cast<size_t>(formats::ggml_block_bytes(type));
    const size_t at = type == GgmlType::IQ1_M ? 55 : 1;  // the byte holding the scale's exponent
    for (size_t b = 0; b + bb <= w.size(); b += bb) w.data()[b + at] = static_cast<uint8_t>((w.data()[b + at] & 0x0F) | 0x20);
    return w;
  }
  const std::vector<float> src = random_floats(n * k, 7);
  pool().parallel_for(n, [&](int64_t j) {
    const Status s = formats::quantize_row(type, src.data() + j * k, w.data() + j * row, k);
    if (!s.ok()) std::abort();
  });
  return w;
}

// ---- decode GEMV: 1 x K x N. cold = 1: the weights rotate through enough copies
// (>= 1 GiB) that every call streams them from DRAM, not from the last-level cache;
// cold = 0: one copy, read again each call (from L2 when it fits: the loop's own speed).
void BM_QGemv(benchmark::State& st) {
  const int64_t K = st.range(0), N = st.range(1);
  const auto type = static_cast<GgmlType>(st.range(2));
  const bool cold = st.range(3) != 0;
  const AlignedBuffer first = quantized_weights(type, N, K);
  const size_t bytes = first.size();
  const size_t copies = cold ? std::max<size_t>(2, ((size_t{1} << 30) + bytes - 1) / bytes) : 1;
  std::vector<AlignedBuffer> weights;
  for (size_t i = 0; i < copies; ++i) {
    weights.emplace_back(bytes, 64);
    std::memcpy(weights.back().data(), first.data(), bytes);
  }
  const std::vector<float> x = random_floats(K, 11);
  std::vector<float> y(static_cast<size_t>(N));
  std::vector<uint8_t> scratch(qmatmul_scratch_bytes(type, 1, K, QMatmulPath::kAuto, ctx().isa));
  QMatmulParams p;
  p.m = 1;
  p.n = N;
  p.k = K;
  size_t i = 0;
  for (auto _ : st) {
    const Status s = dequant_matmul(ctx(), p, type, x.data(), weights[i].data(), y.data(),
                                    QMatmulScratch{scratch.data(), scratch.size()});
    if (!s.ok()) st.SkipWithError(s.error().message().c_str());
    i = (i + 1) % copies;
    benchmark::ClobberMemory();
  }
  st.SetLabel(std::string(formats::ggml_type_name(type)) + (cold ? "" : " hot"));
  bench::set_bytes(st, static_cast<double>(bytes));
}
const std::vector<int64_t> kGemvTypes = {
    static_cast<int64_t>(GgmlType::Q4_K), static_cast<int64_t>(GgmlType::Q6_K), static_cast<int64_t>(GgmlType::Q8_0),
    static_cast<int64_t>(GgmlType::Q4_0), static_cast<int64_t>(GgmlType::Q4_1), static_cast<int64_t>(GgmlType::Q5_0),
    static_cast<int64_t>(GgmlType::Q5_1), static_cast<int64_t>(GgmlType::IQ4_XS), static_cast<int64_t>(GgmlType::IQ4_NL),
    static_cast<int64_t>(GgmlType::TQ2_0), static_cast<int64_t>(GgmlType::TQ1_0), static_cast<int64_t>(GgmlType::IQ3_S),
    static_cast<int64_t>(GgmlType::IQ2_XXS), static_cast<int64_t>(GgmlType::IQ1_S), static_cast<int64_t>(GgmlType::IQ1_M)};
BENCHMARK(BM_QGemv)
    ->ArgNames({"K", "N", "type", "cold"})
    ->ArgsProduct({{2048}, {8192}, kGemvTypes, {1}})
    ->ArgsProduct({{8192}, {2048}, kGemvTypes, {1}})
    // 2048 x 512: 0.3-0.9 MB, read from L2 and L3 (tasks go to either thread).
    ->ArgsProduct({{2048}, {512}, kGemvTypes, {0}})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

// ---- prefill: M x K x N with quantized weights, effective 2*M*N*K flops. path 0 = what
// kAuto picks, 1 = integer GEMV tiles (4 rows per weight decode), 2 = f32 panels, 3 = AMX
// tiles, 4 = AVX-512 VNNI register tiles (3 and 4 fail where they are not usable).
void BM_QPrefill(benchmark::State& st) {
  const int64_t M = st.range(0), K = st.range(1), N = st.range(2);
  const auto type = static_cast<GgmlType>(st.range(3));
  const auto path = static_cast<QMatmulPath>(st.range(4));
  const AlignedBuffer w = quantized_weights(type, N, K);
  const std::vector<float> x = random_floats(M * K, 13);
  std::vector<float> y(static_cast<size_t>(M * N));
  std::vector<uint8_t> scratch(qmatmul_scratch_bytes(type, M, K, path, ctx().isa));
  QMatmulParams p;
  p.m = M;
  p.n = N;
  p.k = K;
  p.path = path;
  for (auto _ : st) {
    const Status s =
        dequant_matmul(ctx(), p, type, x.data(), w.data(), y.data(), QMatmulScratch{scratch.data(), scratch.size()});
    if (!s.ok()) st.SkipWithError(s.error().message().c_str());
    benchmark::ClobberMemory();
  }
  static const char* kPathNames[] = {"auto", "int8 gemv tiles", "f32 panels", "amx tiles", "vnni tiles"};
  st.SetLabel(std::string(formats::ggml_type_name(type)) + " " + kPathNames[st.range(4)]);
  bench::set_flops(st, 2.0 * M * N * K);
}
BENCHMARK(BM_QPrefill)
    ->ArgNames({"M", "K", "N", "type", "path"})
    ->ArgsProduct({{512}, {2048, 8192}, {2048, 8192},
                   {static_cast<int64_t>(GgmlType::Q4_K), static_cast<int64_t>(GgmlType::Q6_K),
                    static_cast<int64_t>(GgmlType::Q8_0), static_cast<int64_t>(GgmlType::Q4_0),
                    static_cast<int64_t>(GgmlType::Q4_1), static_cast<int64_t>(GgmlType::Q5_0),
                    static_cast<int64_t>(GgmlType::Q5_1), static_cast<int64_t>(GgmlType::IQ4_XS),
                    static_cast<int64_t>(GgmlType::IQ4_NL)},
                   {0, 1, 2, 3, 4}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// ---- the f32 GEMM of the same shape (weights [N, K] f32; pre-packed and per call).
void BM_F32Gemm(benchmark::State& st) {
  const int64_t M = st.range(0), K = st.range(1), N = st.range(2);
  const bool prepacked = st.range(3) != 0;
  const std::vector<float> a = random_floats(M * K, 13), b = random_floats(N * K, 7);
  std::vector<float> c(static_cast<size_t>(M * N));
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
  bench::set_flops(st, 2.0 * M * N * K);
}
BENCHMARK(BM_F32Gemm)
    ->ArgNames({"M", "K", "N", "prepacked"})
    ->Args({512, 2048, 8192, 1})
    ->Args({512, 2048, 8192, 0})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// ---- f16 / bf16 weights pre-packed (what F16 / BF16 models' prefill runs: the AMX tiles
// where usable, else the f32 micro-tiles converting the weights in registers). cold = 1:
// the weights rotate through copies of >= 1 GiB in all, so every call reads them from
// memory, as a model's prefill does; cold = 0: one copy (in the last-level cache).
void BM_HalfGemm(benchmark::State& st) {
  const int64_t M = st.range(0), K = st.range(1), N = st.range(2);
  const WeightType wt = st.range(3) != 0 ? WeightType::kBF16 : WeightType::kF16;
  const bool cold = st.range(4) != 0;
  const std::vector<float> a = random_floats(M * K, 13), b = random_floats(N * K, 7);
  std::vector<uint16_t> bh(b.size());
  for (size_t i = 0; i < b.size(); ++i) bh[i] = wt == WeightType::kF16 ? f32_to_f16_bits(b[i]) : f32_to_bf16_bits(b[i]);
  std::vector<float> c(static_cast<size_t>(M * N));
  GemmParams p;
  p.m = M;
  p.n = N;
  p.k = K;
  const size_t bytes = bh.size() * sizeof(uint16_t);
  const size_t copies = cold ? std::max<size_t>(2, ((size_t{1} << 30) + bytes - 1) / bytes) : 1;
  std::vector<PackedB> packed;
  for (size_t i = 0; i < copies; ++i) packed.push_back(pack_b(ctx(), K, N, true, 0, bh.data(), wt));
  size_t next = 0;
  for (auto _ : st) {
    gemm_prepacked(ctx(), p, a.data(), packed[next], c.data());
    next = (next + 1) % copies;
    benchmark::ClobberMemory();
  }
  st.SetLabel(std::string(wt == WeightType::kF16 ? "f16" : "bf16") + (cold ? " cold" : ""));
  bench::set_flops(st, 2.0 * M * N * K);
}
BENCHMARK(BM_HalfGemm)
    ->ArgNames({"M", "K", "N", "bf16", "cold"})
    ->ArgsProduct({{64, 256, 512}, {2048}, {8192}, {0, 1}, {0, 1}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// ---- encoding (what `rlx quantize` spends per weight): one thread quantizes 16 rows of
// 4096 Gaussian values; reported as values a second. The codebook i-quants use RLX's
// exact grid search; the others ggml's reference quantizers.
void BM_Quantize(benchmark::State& st) {
  static const GgmlType kTypes[] = {GgmlType::Q8_0,    GgmlType::Q4_K,    GgmlType::IQ4_XS, GgmlType::IQ3_S,
                                    GgmlType::IQ3_XXS, GgmlType::IQ2_S,   GgmlType::IQ2_XS, GgmlType::IQ2_XXS,
                                    GgmlType::IQ1_M,   GgmlType::IQ1_S};
  const GgmlType type = kTypes[st.range(0)];
  constexpr int64_t kRows = 16, kK = 4096;
  const std::vector<float> src = random_floats(kRows * kK, 11);
  const size_t row = static_cast<size_t>(*formats::ggml_bytes_for(type, kK));
  std::vector<uint8_t> out(row * kRows);
  for (auto _ : st) {
    for (int64_t r = 0; r < kRows; ++r)
      if (!formats::quantize_row(type, src.data() + r * kK, out.data() + static_cast<size_t>(r) * row, kK).ok())
        std::abort();
    benchmark::ClobberMemory();
  }
  st.SetLabel(std::string(formats::ggml_type_name(type)));
  st.SetItemsProcessed(st.iterations() * kRows * kK);
}
BENCHMARK(BM_Quantize)->DenseRange(0, 9)->Unit(benchmark::kMillisecond);

}  // namespace

int main(int argc, char** argv) { return rlx::bench::run_benchmarks(argc, argv, rlx::bench::shared_pool()); }
