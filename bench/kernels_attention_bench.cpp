// Decode attention as a model runs it: one query row per head against the KV caches of
// 16 layers in turn (separate buffers, 64 MiB at T = 1024 with 8 KV heads of 64), so that
// each layer's K/V rows come from memory rather than from the cache of the previous
// iteration (layers = 1: the same from cache, the compute side of the kernel). Cache rows interleave the KV heads ([T][kv_heads * head_dim]) as in the
// runtime. The rate is K + V bytes read per second, next to the read bandwidth measured in
// the same run (bench_limits.h).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <vector>

#include "backends/cpu/kernels/attention.h"
#include "backends/cpu/kernels/thread_pool.h"
#include "bench_limits.h"
#include "rlx/base/aligned_buffer.h"

namespace {

using namespace rlx;
using namespace rlx::cpu;

KernelContext ctx() { return KernelContext{&bench::shared_pool(), bench::isa_from_env()}; }

void BM_DecodeAttentionLayers(benchmark::State& st) {
  const int64_t T = st.range(0), layers = st.range(1), H = 32, KVH = 8, D = 64;
  const size_t cache_floats = static_cast<size_t>(T * KVH * D);
  std::vector<AlignedBuffer> k, v;
  for (int64_t l = 0; l < layers; ++l) {
    k.emplace_back(cache_floats * sizeof(float));
    v.emplace_back(cache_floats * sizeof(float));
    auto* kf = reinterpret_cast<float*>(k.back().data());
    auto* vf = reinterpret_cast<float*>(v.back().data());
    for (size_t i = 0; i < cache_floats; ++i) {
      kf[i] = static_cast<float>((i * 7 + static_cast<size_t>(l)) % 13) * 0.01f;
      vf[i] = static_cast<float>((i * 5 + static_cast<size_t>(l)) % 11) * 0.01f;
    }
  }
  std::vector<float> q(static_cast<size_t>(H * D), 0.05f), o(static_cast<size_t>(H * D));
  AttentionParams p;
  p.seq_q = 1;
  p.seq_kv = T;
  p.n_heads = H;
  p.n_kv_heads = KVH;
  p.head_dim = D;
  p.mask = AttnMask::kCausal;
  for (auto _ : st) {
    for (int64_t l = 0; l < layers; ++l)
      attention_f32(ctx(), p, q.data(), reinterpret_cast<const float*>(k[l].data()),
                    reinterpret_cast<const float*>(v[l].data()), o.data());
    benchmark::ClobberMemory();
  }
  bench::set_bytes(st, 2.0 * static_cast<double>(layers) * static_cast<double>(cache_floats) * sizeof(float));
}
BENCHMARK(BM_DecodeAttentionLayers)
    ->ArgNames({"T", "layers"})
    ->Args({128, 16})
    ->Args({1024, 16})
    ->Args({4096, 16})
    ->Args({1024, 1})  // one layer: its 4 MiB stay in the last-level cache between iterations
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

}  // namespace

int main(int argc, char** argv) { return rlx::bench::run_benchmarks(argc, argv, rlx::bench::shared_pool()); }
