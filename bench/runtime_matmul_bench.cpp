// A linear layer through the whole runtime (Session -> CompiledGraph::run_slots on the
// CPU backend), with the weight packed once when it is set (default) or per call
// (BackendOptions::prepack_weights = false): what a model's matmul costs, next to
// OpenBLAS's sgemm/sgemv on the same shape (when built with it) and the limits of
// bench_limits.h. Shapes: M x K x N, weights [N, K] in f32 / f16 / bf16.
#include <benchmark/benchmark.h>

#include <thread>
#include <vector>

#include "bench_limits.h"
#include "rlx/base/half.h"
#include "rlx/rlx.h"

#ifdef RLX_HAVE_OPENBLAS
#include <cblas.h>
#endif

namespace {

using namespace rlx;

int n_threads() { return bench::shared_pool().size(); }

// args: M, K, N, weight dtype (0 f32, 1 f16, 2 bf16), prepack (0/1)
void BM_RuntimeLinear(benchmark::State& st) {
  const int64_t M = st.range(0), K = st.range(1), N = st.range(2);
  const ir::DType dt = st.range(3) == 0 ? ir::DType::F32 : st.range(3) == 1 ? ir::DType::F16 : ir::DType::BF16;
  Session session(Device::cpu(), BackendOptions{n_threads(), st.range(4) != 0});
  ir::GraphBuilder b;
  auto x = b.input("x", ir::DType::F32, {M, K});
  b.output(b.linear(x, b.param("w", dt, {N, K})), "y");
  auto graph = b.build();
  auto cg = graph ? session.compile(*graph) : Expected<CompiledGraph>(graph.error());
  if (!cg) {
    st.SkipWithError(cg.error().to_string().c_str());
    return;
  }
  std::vector<float> w(static_cast<size_t>(N * K), 0.02f);
  if (dt == ir::DType::F32) {
    (void)cg->set_param("w", w);
  } else {
    std::vector<uint16_t> h(w.size(), dt == ir::DType::F16 ? f32_to_f16_bits(0.02f) : f32_to_bf16_bits(0.02f));
    (void)cg->set_param_typed("w", {reinterpret_cast<const uint8_t*>(h.data()), h.size() * 2}, dt);
  }
  std::vector<float> a(static_cast<size_t>(M * K), 0.01f);
  const int64_t shape[] = {M, K};
  const TensorView in[] = {TensorView{ir::DType::F32, shape, a.data()}};
  for (auto _ : st) {
    auto out = cg->run_slots(in);
    if (!out) {
      st.SkipWithError(out.error().to_string().c_str());
      return;
    }
    benchmark::ClobberMemory();
  }
  bench::set_flops(st, 2.0 * M * N * K);
  if (M == 1) bench::set_bytes(st, static_cast<double>(N * K) * (dt == ir::DType::F32 ? 4 : 2));
}
BENCHMARK(BM_RuntimeLinear)
    ->ArgNames({"M", "K", "N", "wtype", "prepack"})
    ->Args({512, 2048, 2048, 0, 1})
    ->Args({512, 2048, 2048, 0, 0})
    ->Args({512, 2048, 8192, 0, 1})
    ->Args({512, 2048, 8192, 0, 0})
    ->Args({512, 2048, 8192, 1, 1})
    ->Args({512, 2048, 8192, 1, 0})
    ->Args({1, 2048, 8192, 0, 1})
    ->Args({1, 2048, 8192, 0, 0})
    ->Args({1, 2048, 8192, 1, 1})
    ->Args({1, 2048, 8192, 1, 0})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

#ifdef RLX_HAVE_OPENBLAS
// The same products through OpenBLAS (f32 weights; sgemv for M = 1).
void BM_OpenBlasLinear(benchmark::State& st) {
  const int64_t M = st.range(0), K = st.range(1), N = st.range(2);
  openblas_set_num_threads(n_threads());
  std::vector<float> a(static_cast<size_t>(M * K), 0.01f), w(static_cast<size_t>(N * K), 0.02f),
      c(static_cast<size_t>(M * N));
  for (auto _ : st) {
    if (M == 1) {
      cblas_sgemv(CblasRowMajor, CblasNoTrans, static_cast<int>(N), static_cast<int>(K), 1.0f, w.data(),
                  static_cast<int>(K), a.data(), 1, 0.0f, c.data(), 1);
    } else {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(M), static_cast<int>(N),
                  static_cast<int>(K), 1.0f, a.data(), static_cast<int>(K), w.data(), static_cast<int>(K), 0.0f,
                  c.data(), static_cast<int>(N));
    }
    benchmark::ClobberMemory();
  }
  bench::set_flops(st, 2.0 * M * N * K);
  if (M == 1) bench::set_bytes(st, static_cast<double>(N * K) * 4);
}
BENCHMARK(BM_OpenBlasLinear)
    ->ArgNames({"M", "K", "N"})
    ->Args({512, 2048, 2048})
    ->Args({512, 2048, 8192})
    ->Args({1, 2048, 8192})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
#endif

}  // namespace

int main(int argc, char** argv) { return rlx::bench::run_benchmarks(argc, argv, rlx::bench::shared_pool()); }
