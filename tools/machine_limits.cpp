// In-process measurements of read bandwidth and peak FMA / int8 dot throughput.
#include "machine_limits.h"

#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "backends/cpu/kernels/amx_matmul.h"
#include "backends/cpu/kernels/bf16_dot_matmul.h"
#include "backends/cpu/kernels/cpu_features.h"
#include "rlx/base/aligned_buffer.h"
#include "rlx/base/env.h"

namespace rlx::cli {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// Runs fn(i) on `threads` threads and returns the wall time.
template <typename F>
double timed_parallel(int threads, F&& fn) {
  std::vector<std::thread> pool;
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 1; i < threads; ++i) pool.emplace_back([&fn, i] { fn(i); });
  fn(0);
  for (auto& t : pool) t.join();
  return seconds_since(t0);
}

// Sums n words; `ahead` > 0: also prefetches into L2 that many bytes ahead, line by line
// (the decode GEMVs do: on some machines that streams faster than the hardware
// prefetchers alone, and the limit must not read below what the kernels reach).
uint64_t sum_words(const uint64_t* p, size_t n, size_t ahead) {
  uint64_t a = 0, b = 0, c = 0, d = 0;
  for (size_t i = 0; i + 8 <= n; i += 8) {
    if (ahead > 0) __builtin_prefetch(reinterpret_cast<const char*>(p + i) + ahead, 0, 2);
    a += p[i] + p[i + 4];
    b += p[i + 1] + p[i + 5];
    c += p[i + 2] + p[i + 6];
    d += p[i + 3] + p[i + 7];
  }
  return a + b + c + d;
}

__attribute__((target("avx512f"))) float fma_avx512(int64_t iters) {
  __m512 acc[16];
  for (int i = 0; i < 16; ++i) acc[i] = _mm512_set1_ps(0.001f * static_cast<float>(i));
  const __m512 m = _mm512_set1_ps(0.9999f), c = _mm512_set1_ps(1e-6f);
  for (int64_t it = 0; it < iters; ++it)
    for (int i = 0; i < 16; ++i) acc[i] = _mm512_fmadd_ps(acc[i], m, c);
  __m512 s = acc[0];
  for (int i = 1; i < 16; ++i) s = _mm512_add_ps(s, acc[i]);
  float out[16];
  _mm512_storeu_ps(out, s);
  return out[0] + out[15];
}

__attribute__((target("avx2,fma"))) float fma_avx2(int64_t iters) {
  __m256 acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = _mm256_set1_ps(0.001f * static_cast<float>(i));
  const __m256 m = _mm256_set1_ps(0.9999f), c = _mm256_set1_ps(1e-6f);
  for (int64_t it = 0; it < iters; ++it)
    for (int i = 0; i < 12; ++i) acc[i] = _mm256_fmadd_ps(acc[i], m, c);
  __m256 s = acc[0];
  for (int i = 1; i < 12; ++i) s = _mm256_add_ps(s, acc[i]);
  float out[8];
  _mm256_storeu_ps(out, s);
  return out[0] + out[7];
}

// 16 independent vpdpbusd chains: 16 x 64 u8*s8 products per iteration.
__attribute__((target("avx512f,avx512vnni"))) int32_t dpbusd_avx512(int64_t iters) {
  __m512i acc[16];
  for (int i = 0; i < 16; ++i) acc[i] = _mm512_set1_epi32(i);
  const __m512i a = _mm512_set1_epi8(3), b = _mm512_set1_epi8(-2);
  for (int64_t it = 0; it < iters; ++it)
    for (int i = 0; i < 16; ++i) acc[i] = _mm512_dpbusd_epi32(acc[i], a, b);
  __m512i s = acc[0];
  for (int i = 1; i < 16; ++i) s = _mm512_add_epi32(s, acc[i]);
  int32_t out[16];
  _mm512_storeu_si512(out, s);
  return out[0] + out[15];
}

// 8 independent chains of vpmaddubsw + vpmaddwd + vpaddd: 8 x 32 products per iteration.
__attribute__((target("avx2"))) int32_t maddubs_avx2(int64_t iters) {
  __m256i acc[8];
  for (int i = 0; i < 8; ++i) acc[i] = _mm256_set1_epi32(i);
  const __m256i a = _mm256_set1_epi8(3), b = _mm256_set1_epi8(-2), ones = _mm256_set1_epi16(1);
  for (int64_t it = 0; it < iters; ++it)
    for (int i = 0; i < 8; ++i)
      acc[i] = _mm256_add_epi32(acc[i], _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), ones));
  __m256i s = acc[0];
  for (int i = 1; i < 8; ++i) s = _mm256_add_epi32(s, acc[i]);
  return _mm256_extract_epi32(s, 0) + _mm256_extract_epi32(s, 7);
}

bool has_vnni() { return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vnni"); }

}  // namespace

double measure_peak_int8_ops(int threads) {
  threads = std::max(1, threads);
  const bool vnni = has_vnni();
  if (!vnni && !__builtin_cpu_supports("avx2")) return 0;
  const int64_t iters = 20'000'000;
  std::vector<int32_t> sink(static_cast<size_t>(threads));
  double best = 1e30;
  for (int rep = 0; rep < 2; ++rep) {
    const double t = timed_parallel(threads, [&](int i) {
      sink[static_cast<size_t>(i)] = vnni ? dpbusd_avx512(iters) : maddubs_avx2(iters);
    });
    best = std::min(best, t);
  }
  volatile int32_t keep = sink[0];
  (void)keep;
  const double ops_per_iter = vnni ? 16 * 64 * 2 : 8 * 32 * 2;
  return ops_per_iter * static_cast<double>(iters) * threads / best;
}

double measure_peak_amx_bf16_flops(int threads) {
  threads = std::max(1, threads);
  if (!cpu::amx_enabled(cpu::isa_cap_from_name(env_config().cpu_isa))) return 0;
  const int64_t iters = 2'000'000;
  double best = 1e30;
  for (int rep = 0; rep < 2; ++rep)
    best = std::min(best, timed_parallel(threads, [&](int) { cpu::amx_bf16_probe(iters); }));
  return 4 * cpu::kAmxFlopsPerTileOp * static_cast<double>(iters) * threads / best;
}

double measure_peak_bf16_dot_flops(int threads) {
  threads = std::max(1, threads);
  const cpu::IsaLevel cap = cpu::isa_cap_from_name(env_config().cpu_isa);
  if (!cpu::bf16_dot_usable(cap)) return 0;  // (false where the AMX tiles take these matmuls)
  const int64_t iters = 10'000'000;
  double best = 1e30;
  for (int rep = 0; rep < 2; ++rep)
    best = std::min(best, timed_parallel(threads, [&](int) { cpu::bf16_dot_probe(iters); }));
  return 16 * cpu::kBf16DotFlopsPerOp * static_cast<double>(iters) * threads / best;
}

const char* kernel_isa_description() {
  const cpu::IsaLevel level = cpu::resolve_isa(cpu::isa_cap_from_name(env_config().cpu_isa));
  // The quantized matmul kernels take their AVX-512 loops only with VNNI as well; with
  // AMX the matmuls of many rows run on the tiles, everything else on AVX-512.
  if (level == cpu::IsaLevel::kAmx) return cpu::cpu_features().avx512vnni ? "amx+avx512-vnni" : "amx+avx512";
  if (level >= cpu::IsaLevel::kAvx512 && cpu::cpu_features().avx512vnni) return "avx512-vnni";
  return cpu::isa_name(level);
}
Bandwidth measure_read_bandwidth(int threads, int reps) {
  threads = std::max(1, threads);
  const size_t bytes = size_t{1} << 30;
  AlignedBuffer buf(bytes);
  auto* words = reinterpret_cast<uint64_t*>(buf.data());
  const size_t n = bytes / 8;
  // Every word written with non-zero data: pages left zero may be backed by one shared
  // zero page (by the kernel or a hypervisor) and read back far faster than memory.
  for (size_t i = 0; i < n; ++i) words[i] = i * 0x9E3779B97F4A7C15ULL;
  std::vector<uint64_t> sink(static_cast<size_t>(threads));
  std::vector<double> times;
  // Passes alternate between the plain loop and the prefetching one.
  for (int rep = 0; rep < std::max(1, reps); ++rep) {
    const size_t ahead = rep % 2 == 0 ? 0 : 4096;
    times.push_back(timed_parallel(threads, [&](int i) {
      const size_t chunk = n / static_cast<size_t>(threads);
      sink[static_cast<size_t>(i)] += sum_words(words + chunk * static_cast<size_t>(i), chunk, ahead);
    }));
  }
  volatile uint64_t keep = sink[0];
  (void)keep;
  std::sort(times.begin(), times.end());
  return Bandwidth{static_cast<double>(bytes) / times.front(), static_cast<double>(bytes) / times[times.size() / 2]};
}

double measure_peak_flops(int threads) {
  threads = std::max(1, threads);
  const bool avx512 = __builtin_cpu_supports("avx512f");
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  const int64_t iters = 20'000'000;
  std::vector<float> sink(static_cast<size_t>(threads));
  double best = 1e30;
  for (int rep = 0; rep < 2; ++rep) {
    const double t = timed_parallel(threads, [&](int i) {
      sink[static_cast<size_t>(i)] = avx512 ? fma_avx512(iters) : avx2 ? fma_avx2(iters) : 0.0f;
    });
    best = std::min(best, t);
  }
  const double flops_per_iter = avx512 ? 16 * 16 * 2 : avx2 ? 12 * 8 * 2 : 0;
  return flops_per_iter * static_cast<double>(iters) * threads / best;
}

const char* cpu_description() {
  static const std::string text = [] {
    std::ifstream in("/proc/cpuinfo");
    std::string line, model, flags;
    while (std::getline(in, line)) {
      if (model.empty() && line.rfind("model name", 0) == 0) model = line.substr(line.find(':') + 2);
      if (flags.empty() && line.rfind("flags", 0) == 0) flags = line.substr(line.find(':') + 2);
    }
    std::string features;
    for (const char* f : {"avx2", "fma", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_int8",
                          "amx_bf16"})
      if ((" " + flags + " ").find(std::string(" ") + f + " ") != std::string::npos) features += std::string(" ") + f;
    return model + " (" + (features.empty() ? std::string("baseline x86-64") : features.substr(1)) + ")";
  }();
  return text.c_str();
}

}  // namespace rlx::cli
