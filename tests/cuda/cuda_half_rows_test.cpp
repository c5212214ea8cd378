// CUDA products of a few rows (several streams' decode steps, short prompts) over f16 and
// bf16 weights: 2-32 rows take the tensor-core kernel of kernels_rows_mma.cu
// (launch_rows_mma) with x rounded to the weights' type, sibling products of one x in one
// launch. Against float64 math on the same rounded values. Skips without a CUDA device.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "rlx/base/half.h"
#include "cuda_test_util.h"

namespace rlx {
namespace {

using namespace cuda_test;

using ir::DType;
using ir::GraphBuilder;

// `v` rounded to f16 or bf16 (round to nearest even), back in f32.
std::vector<float> rounded(DType t, std::vector<float> v) {
  for (float& f : v) f = t == DType::F16 ? f16_bits_to_f32(f32_to_f16_bits(f)) : bf16_bits_to_f32(f32_to_bf16_bits(f));
  return v;
}

// One product y = x W^T per shape, each op on its own kernel: rows on both sides of the
// 16-row tile and of the kernel's 32 (33 rows: cuBLASLt, which rounds the same way), N
// not a multiple of the 16-row warp tile and wide enough for many blocks, K of one
// 8-value piece, not a multiple of the 128-value chunk, and long enough for every warp
// to stream several chunks; a row of x holding a NaN (its products NaN, the others
// untouched), a row of outliers. The bound is f32 summation; x left in f32 is measurably
// further, so x really was rounded to W's type.
TEST(CudaOps, HalfWeightProductsOfFewRows) {
  REQUIRE_CUDA();
  struct Shape {
    int64_t M, N, K;
  };
  const Shape shapes[] = {{2, 40, 128},   {5, 33, 136},   {8, 520, 8},     {9, 264, 2048},
                          {16, 8200, 256}, {17, 70, 1000}, {32, 130, 4096}, {33, 40, 256}};
  for (DType t : {DType::F16, DType::BF16}) {
    for (const Shape& sh : shapes) {
      const std::string what = fmt::format("{} {}x{}x{}", ir::dtype_name(t), sh.M, sh.N, sh.K);
      SCOPED_TRACE(what);
      GraphBuilder b;
      auto x = b.input("x", DType::F32, {sh.M, sh.K});
      b.output(b.linear(x, b.param("w", t, {sh.N, sh.K})), "y");
      auto g = b.build();
      ASSERT_TRUE(g.has_value()) << g.error().to_string();
      std::vector<float> xv = random_vec(static_cast<size_t>(sh.M * sh.K), 31, -2.0f, 2.0f);
      for (int64_t k = 0; k < sh.K; k += 97) xv[static_cast<size_t>(1 * sh.K + k)] *= 40.0f;  // outliers
      const bool nan_row = sh.M > 3;
      if (nan_row) xv[static_cast<size_t>(3 * sh.K + sh.K / 2)] = NAN;
      const std::vector<float> wv = rounded(t, random_vec(static_cast<size_t>(sh.N * sh.K), 32));
      Case c;
      c.inputs["x"] = Tensor::from_f32(xv, {sh.M, sh.K});
      c.params["w"] = Tensor::from_f32(wv, {sh.N, sh.K});
      auto out = run_on(Device::cuda(), *g, c);
      ASSERT_TRUE(out.has_value()) << out.error().to_string();
      std::vector<float> y = *(*out)[0].to_f32();
      if (nan_row) {
        for (int64_t n = 0; n < sh.N; ++n) {
          EXPECT_TRUE(std::isnan(y[static_cast<size_t>(3 * sh.N + n)])) << "row 3 col " << n;
          y[static_cast<size_t>(3 * sh.N + n)] = 0.0f;
        }
        xv[static_cast<size_t>(3 * sh.K + sh.K / 2)] = 0.0f;
      }
      std::vector<float> ref = reference_product(rounded(t, xv), wv, sh.M, sh.N, sh.K);
      std::vector<float> ref_f32 = reference_product(xv, wv, sh.M, sh.N, sh.K);
      if (nan_row)
        for (int64_t n = 0; n < sh.N; ++n) ref[static_cast<size_t>(3 * sh.N + n)] = ref_f32[static_cast<size_t>(3 * sh.N + n)] = 0;
      const double e = rel_l2(y, ref);
      EXPECT_LE(e, 1e-5) << "relative L2 error " << e;
      EXPECT_GT(rel_l2(y, ref_f32), 10 * e + 1e-7) << "x was not rounded to the weights' type";
    }
  }
}

// Sibling products over one x (q / k / v, gate / up) at a batched step's rows over f16 /
// bf16 weights (dequant_matmul, as the models build them) share one launch: three outputs of different N (one not a multiple of 16),
// K a multiple of the chunk and not; and a SwiGLU silu(x Wg^T) * (x Wu^T), whose gate and
// up leave the GEMV's fused pair at these rows for a group of two.
TEST(CudaDecode, GroupedHalfProductsOfSeveralStreams) {
  REQUIRE_CUDA();
  const int64_t Ns[3] = {96, 24, 37};
  for (DType t : {DType::F16, DType::BF16}) {
    for (int64_t K : {1000, 2048}) {
      std::vector<std::vector<float>> ws;
      for (int i = 0; i < 3; ++i) ws.push_back(rounded(t, random_vec(static_cast<size_t>(Ns[i] * K), 40 + i)));
      auto wt = [&](int i) { return Tensor::from_f32(ws[static_cast<size_t>(i)], {Ns[i], K}); };
      for (int64_t M : {2, 5, 9, 16, 17, 32}) {
        SCOPED_TRACE(testing::Message() << ir::dtype_name(t) << " K=" << K << " M=" << M);
        const Tensor xt = f32({M, K}, 45);
        const std::vector<float> xv = rounded(t, *xt.to_f32());
        {  // three plain products
          GraphBuilder b;
          auto x = b.input("x", DType::F32, {M, K});
          for (int i = 0; i < 3; ++i)
            b.output(b.dequant_matmul(x, b.param(fmt::format("w{}", i), t, {Ns[i], K})), fmt::format("y{}", i));
          auto graph = b.build();
          ASSERT_TRUE(graph.has_value()) << graph.error().to_string();
          compile::FusionReport report;
          auto out = run_graph(Device::cuda(), *graph, {{"w0", wt(0)}, {"w1", wt(1)}, {"w2", wt(2)}}, {{"x", xt}}, &report);
          ASSERT_TRUE(out.has_value()) << out.error().to_string();
          ASSERT_EQ(out->size(), 3u);
          EXPECT_EQ(report.count("linear_group"), 1) << report.to_string();
          for (int i = 0; i < 3; ++i) {
            const std::vector<float> ref = reference_product(xv, ws[static_cast<size_t>(i)], M, Ns[i], K);
            const double e = rel_l2(*(*out)[static_cast<size_t>(i)].to_f32(), ref);
            EXPECT_LE(e, 1e-5) << "output " << i << ": relative L2 error " << e;
          }
        }
        {  // SwiGLU over two of them (the same N)
          GraphBuilder b;
          auto x = b.input("x", DType::F32, {M, K});
          auto gate = b.dequant_matmul(x, b.param("wg", t, {Ns[0], K}));
          auto up = b.dequant_matmul(x, b.param("wu", t, {Ns[0], K}));
          b.output(b.mul(b.activation(ir::ActKind::Silu, gate), up), "y");
          auto graph = b.build();
          ASSERT_TRUE(graph.has_value()) << graph.error().to_string();
          const std::vector<float> wu = rounded(t, random_vec(static_cast<size_t>(Ns[0] * K), 49));
          compile::FusionReport report;
          auto out = run_graph(Device::cuda(), *graph, {{"wg", wt(0)}, {"wu", Tensor::from_f32(wu, {Ns[0], K})}},
                               {{"x", xt}}, &report);
          ASSERT_TRUE(out.has_value()) << out.error().to_string();
          EXPECT_EQ(report.count("linear_group"), 1) << report.to_string();
          const std::vector<float> ref =
              swiglu_reference(reference_product(xv, ws[0], M, Ns[0], K), reference_product(xv, wu, M, Ns[0], K));
          const double e = rel_l2(*(*out)[0].to_f32(), ref);
          EXPECT_LE(e, 1e-5) << "swiglu: relative L2 error " << e;
        }
      }
    }
  }
}

}  // namespace
}  // namespace rlx
