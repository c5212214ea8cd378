// The decode GEMV's weight-read rate per packed type (not a test: runs when
// RLX_CUDA_BENCH_GEMV is set, e.g. to "q4_k iq4_xs iq2_xxs tq2_0"; "1" takes every type
// below). A chain of L one-row products y = W_l . y over square [D, D] weights (default
// 16 layers of 8192 x 8192, RLX_CUDA_BENCH_GEMV_DIM / _LAYERS), far more bytes than the L2
// cache holds, runs as one executable (graphs on); the figure is the weights' bytes over
// the wall time of a run (x in and y out included); bench/copy_bandwidth.py measures the
// card's limit (device-to-device copy, read + write) for the same call. Weights are 64
// quantized rows tiled down each matrix in another order per layer (so that no two layers
// hold the same bytes, which the runtime would upload once; the codebook encoders are
// too slow for a billion values, and the bytes a kernel reads and decodes are the same).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "cuda_test_util.h"

namespace rlx::cuda_test {
namespace {

int64_t env_int(const char* name, int64_t fallback) {
  const char* v = std::getenv(name);
  return v ? std::atoll(v) : fallback;
}

TEST(CudaBench, PackedGemv) {
  const char* list = std::getenv("RLX_CUDA_BENCH_GEMV");
  if (list == nullptr) GTEST_SKIP() << "RLX_CUDA_BENCH_GEMV is not set: benchmark skipped";
  REQUIRE_CUDA();
  const int64_t D = env_int("RLX_CUDA_BENCH_GEMV_DIM", 8192), L = env_int("RLX_CUDA_BENCH_GEMV_LAYERS", 16);
  ASSERT_TRUE(D >= 256 && D % 256 == 0) << "RLX_CUDA_BENCH_GEMV_DIM must be a positive multiple of 256, not " << D;
  ASSERT_GE(L, 1) << "RLX_CUDA_BENCH_GEMV_LAYERS must be at least 1";
  std::string names = list;
  if (names == "1")
    names = "f16 q8_0 q4_0 q4_k q6_k iq4_xs iq4_nl iq3_s iq3_xxs iq2_s iq2_xs iq2_xxs iq1_s iq1_m tq1_0 tq2_0";
  std::stringstream ss(names);
  for (std::string name; ss >> name;) {
    auto t = ir::parse_dtype(name);
    ASSERT_TRUE(t.has_value()) << name;
    const int64_t tile = 64;
    const PackedWeights part = packed_weights(*t, tile, D, 77);
    const auto row_bytes = ir::dtype_bytes(*t, D);
    ASSERT_TRUE(row_bytes.has_value());
    ir::GraphBuilder b;
    ir::ValueId y = b.input("x", ir::DType::F32, {1, D});
    Case c;
    c.inputs["x"] = f32({1, D}, 5, -0.01f, 0.01f);
    const auto rb = static_cast<size_t>(*row_bytes);
    for (int64_t l = 0; l < L; ++l) {
      std::vector<uint8_t> whole(static_cast<size_t>(D) * rb);
      for (int64_t r = 0; r < D; ++r) {  // row r of layer l: quantized row (r + l) % 64
        const uint8_t* src = part.packed.bytes().data() + static_cast<size_t>((r + l) % tile) * rb;
        std::copy(src, src + rb, whole.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(r) * rb));
      }
      const std::string w = "w" + std::to_string(l);
      y = b.dequant_matmul(y, b.param(w, *t, {D, D}));
      c.params[w] = Tensor(*t, {D, D}, std::move(whole));
    }
    b.output(y, "y");
    auto g = b.build();
    ASSERT_TRUE(g.has_value()) << g.error().to_string();
    auto s = Session::create(Device::cuda());
    ASSERT_TRUE(s.has_value());
    auto cg = s->compile_with(*g, c.opt);
    ASSERT_TRUE(cg.has_value()) << cg.error().to_string();
    for (const auto& [pn, pt] : c.params) ASSERT_TRUE(cg->set_param_typed(pn, pt.bytes(), pt.dtype()).ok());
    const std::vector<NamedTensorView> in = {{"x", c.inputs["x"].view()}};
    for (int w = 0; w < 3; ++w) ASSERT_TRUE(cg->run_typed(in).has_value());
    const int runs = 20;
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < runs; ++i) ASSERT_TRUE(cg->run_typed(in).has_value());
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / runs;
    const double bytes = static_cast<double>(L * D * *row_bytes);
    std::printf("gemv %-7s %lld x [%lld, %lld]: %.1f us a run, %.1f MB of weights: %.0f GB/s\n", name.c_str(),
                static_cast<long long>(L), static_cast<long long>(D), static_cast<long long>(D), sec * 1e6, bytes / 1e6,
                bytes / sec / 1e9);
  }
}

}  // namespace
}  // namespace rlx::cuda_test
