// CUDA products of several streams' rows (a batched decode step) over K-quant and Q8_0
// weights: the siblings of one x share one int8 tensor-core launch. Skips without a CUDA
// device.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "cuda_test_util.h"

namespace rlx {
namespace {

using namespace cuda_test;

using ir::DType;
using ir::GraphBuilder;

// Sibling products over one x (q / k / v, gate / up) at the row counts of a batched step
// over K-quants (2-32 rows: the int8 tensor-core product, launch_kqmma) are one launch:
// x quantized to Q8_K blocks once, every part's product in one grouped launch; the same
// over Q8_0 (launch_rows_mma, x as Q8_0 blocks). Three
// outputs of different N (one not a multiple of 16), K of two and eight super-blocks,
// each against float64 math on the Q8_K-rounded x; and a SwiGLU silu(x Wg^T) * (x Wu^T),
// whose gate and up products leave the GEMV's fused pair at these rows, as a group of two.
// True where M rows over t take a grouped few-row launch.
bool grouped(DType t, int64_t M) { return cuda_takes_q8_k(t, M, true) || (t == DType::Q8_0 && M >= 2 && M <= 32); }

TEST(CudaDecode, GroupedKQuantProductsOfSeveralStreams) {
  REQUIRE_CUDA();
  const int64_t Ns[3] = {96, 24, 37};
  for (DType t : {DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::Q8_0}) {
    for (int64_t K : {512, 2048}) {
      std::vector<Tensor> ws;
      std::vector<std::vector<float>> deq;
      for (int i = 0; i < 3; ++i) {
        PackedWeights pw = packed_weights(t, Ns[i], K, 60 + static_cast<uint32_t>(i));
        ws.push_back(std::move(pw.packed));
        deq.push_back(std::move(pw.deq));
      }
      for (int64_t M : {2, 5, 9, 16, 17, 32}) {
        SCOPED_TRACE(testing::Message() << ir::dtype_name(t) << " K=" << K << " M=" << M);
        const Tensor xt = f32({M, K}, 65);
        auto xv = x_as_cuda_sees_it(t, *xt.to_f32(), M, true);
        {  // three plain products
          GraphBuilder b;
          auto x = b.input("x", DType::F32, {M, K});
          for (int i = 0; i < 3; ++i)
            b.output(b.dequant_matmul(x, b.param(fmt::format("w{}", i), t, {Ns[i], K})), fmt::format("y{}", i));
          auto graph = b.build();
          ASSERT_TRUE(graph.has_value()) << graph.error().to_string();
          compile::FusionReport report;
          auto out =
              run_graph(Device::cuda(), *graph, {{"w0", ws[0]}, {"w1", ws[1]}, {"w2", ws[2]}}, {{"x", xt}}, &report);
          ASSERT_TRUE(out.has_value()) << out.error().to_string();
          ASSERT_EQ(out->size(), 3u);
          EXPECT_EQ(report.count("linear_group"), grouped(t, M) ? 1 : 0) << report.to_string();
          for (int i = 0; i < 3; ++i) {
            const std::vector<float> ref = reference_product(xv, deq[static_cast<size_t>(i)], M, Ns[i], K);
            const double e = rel_l2(*(*out)[static_cast<size_t>(i)].to_f32(), ref);
            EXPECT_LE(e, 1e-5) << "output " << i << ": relative L2 error " << e;
          }
        }
        if (!grouped(t, M)) continue;
        {  // SwiGLU over two of them (the same N)
          GraphBuilder b;
          auto x = b.input("x", DType::F32, {M, K});
          auto gate = b.dequant_matmul(x, b.param("wg", t, {Ns[0], K}));
          auto up = b.dequant_matmul(x, b.param("wu", t, {Ns[0], K}));
          b.output(b.mul(b.activation(ir::ActKind::Silu, gate), up), "y");
          auto graph = b.build();
          ASSERT_TRUE(graph.has_value()) << graph.error().to_string();
          PackedWeights wu = packed_weights(t, Ns[0], K, 69);
          compile::FusionReport report;
          auto out = run_graph(Device::cuda(), *graph, {{"wg", ws[0]}, {"wu", wu.packed}}, {{"x", xt}}, &report);
          ASSERT_TRUE(out.has_value()) << out.error().to_string();
          EXPECT_EQ(report.count("linear_group"), 1) << report.to_string();
          const std::vector<float> ref = swiglu_reference(reference_product(xv, deq[0], M, Ns[0], K),
                                                          reference_product(xv, wu.deq, M, Ns[0], K));
          const double e = rel_l2(*(*out)[0].to_f32(), ref);
          EXPECT_LE(e, 1e-5) << "swiglu: relative L2 error " << e;
        }
      }
    }
  }
}

}  // namespace
}  // namespace rlx
