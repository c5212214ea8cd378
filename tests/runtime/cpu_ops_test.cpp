// Every MIR op kind on the CPU backend against naive double-precision references,
// through the full Session path, with odd sizes and size-1 dims. Tolerances: 1e-5
// absolute for elementwise/movement (f32 rounding of the same formula), 1e-4 for
// matmul/norm/attention (f32 accumulation over K <= 64), exact for integer results.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/cpu_step.h"
#include "rlx/formats/quant.h"
#include "rlx/ir/custom_op.h"
#include "rt_util.h"

namespace rlx {
namespace {

using ir::ActKind;
using ir::BinaryKind;
using ir::DType;
using ir::GraphBuilder;
using ir::ValueId;
using namespace rt_test;

struct In {
  std::string name;
  Tensor t;
};

Tensor f32_tensor(std::vector<int64_t> shape, uint32_t seed, float lo = -1, float hi = 1) {
  int64_t n = 1;
  for (auto d : shape) n *= d;
  return Tensor::from_f32(random_vec(static_cast<size_t>(n), seed, lo, hi), std::move(shape));
}

template <typename T>
Tensor int_tensor(DType dt, std::vector<int64_t> shape, std::vector<T> vals) {
  std::vector<uint8_t> bytes(vals.size() * sizeof(T));
  std::memcpy(bytes.data(), vals.data(), bytes.size());
  return Tensor(dt, std::move(shape), std::move(bytes));
}

// Compiles with fusion and folding off (so the op under test reaches its kernel) and runs.
std::vector<Tensor> run_graph(GraphBuilder& b, const std::vector<In>& ins, std::map<std::string, Tensor> params = {}) {
  compile::CompileOptions opt;
  opt.fusion.skip = true;
  opt.constant_folding = false;
  CompiledGraph g = compile_cpu(build(b), opt);
  for (auto& [name, t] : params) {
    Status st = g.set_param_typed(name, t.bytes(), t.dtype());
    EXPECT_TRUE(st.ok()) << st.error().to_string();
  }
  std::vector<NamedTensorView> views;
  for (const In& i : ins) views.push_back({i.name, i.t.view()});
  auto out = g.run_typed(views);
  if (!out) {
    ADD_FAILURE() << out.error().to_string();
    return {};
  }
  return std::move(out).value();
}

// Index helpers over row-major shapes.
std::vector<int64_t> unravel(int64_t i, const std::vector<int64_t>& shape) {
  std::vector<int64_t> idx(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    idx[d] = i % shape[d];
    i /= shape[d];
  }
  return idx;
}
int64_t ravel_bcast(const std::vector<int64_t>& idx, const std::vector<int64_t>& shape) {
  int64_t off = 0;
  const size_t lead = idx.size() - shape.size();
  for (size_t d = 0; d < shape.size(); ++d) off = off * shape[d] + (shape[d] == 1 ? 0 : idx[lead + d]);
  return off;
}

double act_ref(ActKind k, double x) {
  switch (k) {
    case ActKind::Identity: return x;
    case ActKind::Gelu: return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
    case ActKind::GeluTanh: return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
    case ActKind::Silu: return x / (1 + std::exp(-x));
    case ActKind::Relu: return std::max(x, 0.0);
    case ActKind::Sigmoid: return 1 / (1 + std::exp(-x));
    case ActKind::Tanh: return std::tanh(x);
    case ActKind::Exp: return std::exp(x);
    case ActKind::Log: return std::log(x);
    case ActKind::Sqrt: return std::sqrt(x);
    case ActKind::Rsqrt: return 1 / std::sqrt(x);
    case ActKind::Neg: return -x;
    case ActKind::Abs: return std::fabs(x);
    case ActKind::Sin: return std::sin(x);
    case ActKind::Cos: return std::cos(x);
    case ActKind::Softplus: return std::log1p(std::exp(x));
  }
  return x;
}

double bin_ref(BinaryKind k, double a, double b) {
  switch (k) {
    case BinaryKind::Add: return a + b;
    case BinaryKind::Sub: return a - b;
    case BinaryKind::Mul: return a * b;
    case BinaryKind::Div: return a / b;
    case BinaryKind::Max: return std::max(a, b);
    case BinaryKind::Min: return std::min(a, b);
    case BinaryKind::Pow: return std::pow(a, b);
  }
  return 0;
}

TEST(CpuKernelTable, ClaimsExactlyWhatItRuns) {
  const compile::OpSet claimed = Session(Device::cpu()).backend()->supported_ops();
  compile::OpSet table;
  for (const auto& e : cpu_backend::cpu_kernel_table()) {
    EXPECT_NE(e.build, nullptr) << ir::op_name(e.kind);
    EXPECT_TRUE(claimed.contains(e.kind)) << ir::op_name(e.kind) << " has a kernel but is not claimed";
    table.add(e.kind);
  }
  for (ir::OpKind k : claimed.kinds()) EXPECT_TRUE(table.contains(k)) << ir::op_name(k) << " claimed without a kernel";
  // Every MIR kind has a CPU kernel but fused_linear, a GEMV backend's fused form that
  // fuse_linear makes only for a target that claims it (elsewhere legalize expands it).
  compile::OpSet all_but_gemv = compile::OpSet::all_mir();
  all_but_gemv.remove(ir::OpKind::FusedLinear);
  EXPECT_EQ(claimed, all_but_gemv) << claimed.to_string();
}

TEST(CpuOps, ActivationsAllKinds) {
  for (int k = 0; k <= static_cast<int>(ActKind::Softplus); ++k) {
    const auto kind = static_cast<ActKind>(k);
    const bool positive = kind == ActKind::Log || kind == ActKind::Sqrt || kind == ActKind::Rsqrt;
    GraphBuilder b;
    auto x = b.input("x", DType::F32, {3, 1, 7});
    b.output(b.activation(kind, x), "y");
    Tensor xt = f32_tensor({3, 1, 7}, 10 + k, positive ? 0.1f : -3.0f, 3.0f);
    auto out = run_graph(b, {{"x", xt}});
    ASSERT_EQ(out.size(), 1u);
    const auto xv = as_f32(xt);
    std::vector<double> ref;
    for (float v : xv) ref.push_back(act_ref(kind, v));
    const double tol = kind == ActKind::Exp ? 1e-4 : 2e-6;
    EXPECT_LT(max_abs_diff(as_f32(out[0]), ref), tol) << ir::enum_name(kind);
  }
}

TEST(CpuOps, BinaryAllKindsBroadcast) {
  for (int k = 0; k <= static_cast<int>(BinaryKind::Pow); ++k) {
    const auto kind = static_cast<BinaryKind>(k);
    GraphBuilder b;
    auto x = b.input("a", DType::F32, {3, 1, 5});
    auto y = b.input("b", DType::F32, {4, 1});
    b.output(b.binary(kind, x, y), "y");
    const bool pos = kind == BinaryKind::Pow || kind == BinaryKind::Div;
    Tensor at = f32_tensor({3, 1, 5}, 20 + k, pos ? 0.5f : -2, 2), bt = f32_tensor({4, 1}, 30 + k, pos ? 0.5f : -2, 2);
    auto out = run_graph(b, {{"a", at}, {"b", bt}});
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].shape(), (std::vector<int64_t>{3, 4, 5}));
    const auto av = as_f32(at), bv = as_f32(bt);
    std::vector<double> ref;
    for (int64_t i = 0; i < 60; ++i) {
      auto idx = unravel(i, {3, 4, 5});
      ref.push_back(bin_ref(kind, av[ravel_bcast(idx, {3, 1, 5})], bv[ravel_bcast(idx, {4, 1})]));
    }
    EXPECT_LT(max_abs_diff(as_f32(out[0]), ref), 1e-5) << ir::enum_name(kind);
  }
}

TEST(CpuOps, IntegerBinaryCompareWhere) {
  GraphBuilder b;
  auto x = b.input("a", DType::I32, {5});
  auto y = b.input("b", DType::I32, {1});
  auto q = b.div(x, y);
  b.output(q, "q");
  b.output(b.add(x, y), "s");
  auto fa = b.input("fa", DType::F32, {2, 3});
  auto fb = b.input("fb", DType::F32, {3});
  auto lt = b.compare(ir::CompareKind::Lt, fa, fb);
  b.output(lt, "lt");
  b.output(b.compare(ir::CompareKind::Eq, fa, fa), "eq");
  b.output(b.where(lt, fa, b.expand(fb, {2, 3})), "w");
  Tensor at = int_tensor<int32_t>(DType::I32, {5}, {7, -7, 100000000, 3, 0});
  Tensor bt = int_tensor<int32_t>(DType::I32, {1}, {2});
  Tensor fat = f32_tensor({2, 3}, 41), fbt = f32_tensor({3}, 42);
  auto out = run_graph(b, {{"a", at}, {"b", bt}, {"fa", fat}, {"fb", fbt}});
  ASSERT_EQ(out.size(), 5u);
  EXPECT_EQ(out[0].dtype(), DType::I32);
  const auto qv = out[0].as<int32_t>();
  EXPECT_EQ(std::vector<int32_t>(qv.begin(), qv.end()), (std::vector<int32_t>{3, -3, 50000000, 1, 0}));
  const auto sv = out[1].as<int32_t>();
  EXPECT_EQ(std::vector<int32_t>(sv.begin(), sv.end()), (std::vector<int32_t>{9, -5, 100000002, 5, 2}));
  const auto fa_v = as_f32(fat), fb_v = as_f32(fbt);
  EXPECT_EQ(out[2].dtype(), DType::Bool);
  std::vector<double> wref;
  for (int i = 0; i < 6; ++i) {
    const bool l = fa_v[i] < fb_v[i % 3];
    EXPECT_EQ(out[2].bytes()[i], l ? 1 : 0);
    EXPECT_EQ(out[3].bytes()[i], 1);
    wref.push_back(l ? fa_v[i] : fb_v[i % 3]);
  }
  EXPECT_LT(max_abs_diff(as_f32(out[4]), wref), 0.0 + 1e-12);
}

TEST(CpuOps, CastsRoundCorrectly) {
  GraphBuilder b;
  auto x = b.input("x", DType::F32, {9});
  b.output(b.cast(x, DType::F16), "h");
  b.output(b.cast(x, DType::BF16), "bh");
  b.output(b.cast(x, DType::I32), "i");
  b.output(b.cast(b.cast(x, DType::F16), DType::F32), "hf");
  const std::vector<float> v{0.1f, -2.5f, 65504.f, 1e-7f, 3.99f, -0.0f, 1000.75f, -7.9f, 0.33333f};
  auto out = run_graph(b, {{"x", Tensor::from_f32(v, {9})}});
  ASSERT_EQ(out.size(), 4u);
  EXPECT_EQ(out[0].dtype(), DType::F16);
  for (int i = 0; i < 9; ++i) {
    uint16_t h, bh;
    std::memcpy(&h, out[0].bytes().data() + 2 * i, 2);
    std::memcpy(&bh, out[1].bytes().data() + 2 * i, 2);
    EXPECT_EQ(h, f32_to_f16_bits(v[i])) << i;
    EXPECT_EQ(bh, f32_to_bf16_bits(v[i])) << i;
    EXPECT_EQ(out[2].as<int32_t>()[i], static_cast<int32_t>(v[i])) << i;  // truncation toward zero
    EXPECT_EQ(out[3].as<float>()[i], f16_bits_to_f32(f32_to_f16_bits(v[i]))) << i;
  }
}

std::vector<double> matmul_ref(const std::vector<float>& a, const std::vector<float>& b, int64_t batch_a,
                               int64_t batch_b, int64_t M, int64_t K, int64_t N, bool ta, bool tb) {
  const int64_t batch = std::max(batch_a, batch_b);
  std::vector<double> c(static_cast<size_t>(batch * M * N));
  for (int64_t bi = 0; bi < batch; ++bi) {
    const float* A = a.data() + (batch_a == 1 ? 0 : bi) * M * K;
    const float* B = b.data() + (batch_b == 1 ? 0 : bi) * K * N;
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double s = 0;
        for (int64_t k = 0; k < K; ++k) s += double(ta ? A[k * M + i] : A[i * K + k]) * (tb ? B[j * K + k] : B[k * N + j]);
        c[static_cast<size_t>((bi * M + i) * N + j)] = s;
      }
  }
  return c;
}

TEST(CpuOps, MatMulBatchedBroadcastTransposed) {
  const int64_t M = 5, K = 37, N = 3;
  for (int t = 0; t < 4; ++t) {
    const bool ta = t & 1, tb = t & 2;
    GraphBuilder b;
    std::vector<int64_t> as = ta ? std::vector<int64_t>{2, K, M} : std::vector<int64_t>{2, M, K};
    std::vector<int64_t> bs = tb ? std::vector<int64_t>{N, K} : std::vector<int64_t>{K, N};
    auto x = b.input("a", DType::F32, ir::Shape::of(as));
    auto y = b.input("b", DType::F32, ir::Shape::of(bs));
    b.output(b.matmul(x, y, ta, tb), "c");
    Tensor at = f32_tensor(as, 50 + t), bt = f32_tensor(bs, 60 + t);
    auto out = run_graph(b, {{"a", at}, {"b", bt}});
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].shape(), (std::vector<int64_t>{2, M, N}));
    EXPECT_LT(max_abs_diff(as_f32(out[0]), matmul_ref(as_f32(at), as_f32(bt), 2, 1, M, K, N, ta, tb)), 1e-4) << t;
  }
  // batch broadcast on the other side and size-1 dims
  GraphBuilder b;
  auto x = b.input("a", DType::F32, {1, 1, 4});
  auto y = b.input("b", DType::F32, {3, 4, 1});
  b.output(b.matmul(x, y), "c");
  Tensor at = f32_tensor({1, 1, 4}, 70), bt = f32_tensor({3, 4, 1}, 71);
  auto out = run_graph(b, {{"a", at}, {"b", bt}});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_LT(max_abs_diff(as_f32(out[0]), matmul_ref(as_f32(at), as_f32(bt), 1, 3, 1, 4, 1, false, false)), 1e-5);
}

TEST(CpuOps, LinearFusedBiasActAndSwiGLU) {
  const int64_t M = 7, K = 19, N = 11;
  GraphBuilder b;
  auto x = b.input("x", DType::F32, {M, K});
  auto w = b.param("w", DType::F32, {N, K});
  auto bias = b.param("bias", DType::F32, {N});
  auto wu = b.param("wu", DType::F32, {N, K});
  b.output(b.linear(x, w, bias, ActKind::Gelu), "y");
  b.output(b.op(ir::OpKind::FusedSwiGLU, {x, w, wu}, ir::FusedSwiGLUAttrs{true}), "s");
  Tensor xt = f32_tensor({M, K}, 80), wt = f32_tensor({N, K}, 81), bt = f32_tensor({N}, 82), ut = f32_tensor({N, K}, 83);
  auto out = run_graph(b, {{"x", xt}}, {{"w", wt}, {"bias", bt}, {"wu", ut}});
  ASSERT_EQ(out.size(), 2u);
  const auto g = matmul_ref(as_f32(xt), as_f32(wt), 1, 1, M, K, N, false, true);
  const auto u = matmul_ref(as_f32(xt), as_f32(ut), 1, 1, M, K, N, false, true);
  const auto bv = as_f32(bt);
  std::vector<double> y, s;
  for (int64_t i = 0; i < M * N; ++i) {
    y.push_back(act_ref(ActKind::Gelu, g[i] + bv[i % N]));
    s.push_back(act_ref(ActKind::Silu, g[i]) * u[i]);
  }
  EXPECT_LT(max_abs_diff(as_f32(out[0]), y), 1e-4);
  EXPECT_LT(max_abs_diff(as_f32(out[1]), s), 1e-4);
}

TEST(CpuOps, DequantMatMulHalfWeights) {
  const int64_t M = 3, K = 64, N = 5;
  for (DType wd : {DType::F16, DType::BF16}) {
    GraphBuilder b;
    auto x = b.input("x", DType::F32, {M, K});
    auto w = b.param("w", wd, {N, K});
    b.output(b.dequant_matmul(x, w), "y");
    Tensor xt = f32_tensor({M, K}, 90);
    const auto wf = random_vec(N * K, 91);
    std::vector<uint8_t> wb(N * K * 2);
    std::vector<float> wr(N * K);
    for (int64_t i = 0; i < N * K; ++i) {
      const uint16_t h = wd == DType::F16 ? f32_to_f16_bits(wf[i]) : f32_to_bf16_bits(wf[i]);
      std::memcpy(wb.data() + 2 * i, &h, 2);
      wr[i] = wd == DType::F16 ? f16_bits_to_f32(h) : bf16_bits_to_f32(h);
    }
    auto out = run_graph(b, {{"x", xt}}, {{"w", Tensor(wd, {N, K}, wb)}});
    ASSERT_EQ(out.size(), 1u);
    // DequantMatMul rounds the activations to the weight's dtype first (the vec-dot rule
    // of the reference engines), so the reference rounds them too.
    std::vector<float> xr = as_f32(xt);
    for (float& v : xr) v = wd == DType::F16 ? f16_bits_to_f32(f32_to_f16_bits(v)) : bf16_bits_to_f32(f32_to_bf16_bits(v));
    EXPECT_LT(max_abs_diff(as_f32(out[0]), matmul_ref(xr, wr, 1, 1, M, K, N, false, true)), 1e-4);
  }
}

TEST(CpuOps, DequantMatMulPackedBlocks) {
  // Weights stay in GGUF blocks; x is quantized per row like llama.cpp (q8_0 / q8_K),
  // so the tolerance is relative to the row scale: 3e-2 * max|y|.
  const int64_t M = 3, K = 512, N = 6;
  for (DType wd : {DType::Q4_0, DType::Q8_0, DType::Q4_K, DType::Q6_K}) {
    const auto gt = static_cast<formats::GgmlType>(
        wd == DType::Q4_0 ? 2 : wd == DType::Q8_0 ? 8 : wd == DType::Q4_K ? 12 : 14);
    GraphBuilder b;
    auto x = b.input("x", DType::F32, {M, K});
    auto w = b.param("w", wd, {N, K});
    b.output(b.dequant_matmul(x, w), "y");
    const auto wf = random_vec(N * K, 92);
    const int64_t row_bytes = *ir::dtype_bytes(wd, K);
    std::vector<uint8_t> packed(static_cast<size_t>(N * row_bytes));
    std::vector<float> wr(N * K);
    for (int64_t r = 0; r < N; ++r) {
      ASSERT_TRUE(formats::quantize_row(gt, wf.data() + r * K, packed.data() + r * row_bytes, K).ok());
      ASSERT_TRUE(formats::dequantize_row(gt, packed.data() + r * row_bytes, wr.data() + r * K, K).ok());
    }
    Tensor xt = f32_tensor({M, K}, 93);
    auto out = run_graph(b, {{"x", xt}}, {{"w", Tensor(wd, {N, K}, packed)}});
    ASSERT_EQ(out.size(), 1u) << ir::dtype_name(wd);
    const auto ref = matmul_ref(as_f32(xt), wr, 1, 1, M, K, N, false, true);
    double scale = 0;
    for (double v : ref) scale = std::max(scale, std::fabs(v));
    EXPECT_LT(max_abs_diff(as_f32(out[0]), ref), 3e-2 * scale) << ir::dtype_name(wd);
  }
  // Q8_K weights have no DequantMatMul kernel: a clear compile error.
  GraphBuilder b;
  auto x = b.input("x", DType::F32, {2, 256});
  auto w = b.param("w", DType::Q8_K, {4, 256});
  b.output(b.dequant_matmul(x, w), "y");
  compile::CompileOptions opt;
  opt.fusion.skip = true;
  auto g = Session(Device::cpu()).compile_with(build(b), opt);
  ASSERT_FALSE(g.has_value());
  EXPECT_NE(g.error().to_string().find("unsupported: dequant_matmul for q8_k on cpu"), std::string::npos)
      << g.error().to_string();
}

TEST(CpuOps, ReduceAllKindsAndAxes) {
  const std::vector<int64_t> shape{3, 4, 5};
  Tensor xt = f32_tensor(shape, 100);
  const auto xv = as_f32(xt);
  const std::vector<std::vector<int64_t>> axes_list{{0}, {2}, {-1, 0}, {1}, {0, 1, 2}};
  for (int k = 0; k < 4; ++k) {
    for (const auto& axes : axes_list) {
      for (bool keep : {false, true}) {
        const auto kind = static_cast<ir::ReduceKind>(k);
        GraphBuilder b;
        auto x = b.input("x", DType::F32, ir::Shape::of(shape));
        b.output(b.reduce(kind, x, axes, keep), "y");
        auto out = run_graph(b, {{"x", xt}});
        ASSERT_EQ(out.size(), 1u);
        std::vector<bool> red(3, false);
        for (int64_t a : axes) red[(a + 3) % 3] = true;
        std::map<std::vector<int64_t>, std::vector<double>> groups;
        for (int64_t i = 0; i < 60; ++i) {
          auto idx = unravel(i, shape);
          std::vector<int64_t> key;
          for (int d = 0; d < 3; ++d)
            if (!red[d]) key.push_back(idx[d]);
          groups[key].push_back(xv[i]);
        }
        std::vector<double> ref;
        for (auto& [key, vals] : groups) {
          double r = kind == ir::ReduceKind::Max ? -INFINITY : kind == ir::ReduceKind::Min ? INFINITY : 0;
          for (double v : vals) {
            if (kind == ir::ReduceKind::Max) r = std::max(r, v);
            else if (kind == ir::ReduceKind::Min) r = std::min(r, v);
            else r += v;
          }
          if (kind == ir::ReduceKind::Mean) r /= double(vals.size());
          ref.push_back(r);
        }
        EXPECT_LT(max_abs_diff(as_f32(out[0]), ref), 1e-5) << k << " keep " << keep;
        if (keep) {
          EXPECT_EQ(out[0].shape().size(), 3u);
        }
      }
    }
  }
}

TEST(CpuOps, SoftmaxCumsumTopK) {
  const std::vector<int64_t> shape{2, 7, 3};
  Tensor xt = f32_tensor(shape, 110, -4, 4);
  const auto xv = as_f32(xt);
  GraphBuilder b;
  auto x = b.input("x", DType::F32, ir::Shape::of(shape));
  b.output(b.softmax(x, -1), "sm_last");
  b.output(b.softmax(x, 1), "sm_mid");
  b.output(b.cumsum(x, 1, false), "cs");
  b.output(b.cumsum(x, 1, true), "cs_ex");
  b.output(b.topk(b.reshape(x, {6, 7}), 3, false), "ti");
  b.output(b.topk(b.reshape(x, {6, 7}), 3, true), "tv");
  auto out = run_graph(b, {{"x", xt}});
  ASSERT_EQ(out.size(), 6u);
  auto at = [&](int64_t i, int64_t j, int64_t k) { return double(xv[(i * 7 + j) * 3 + k]); };
  std::vector<double> sm_last(42), sm_mid(42), cs(42), cs_ex(42);
  for (int i = 0; i < 2; ++i) {
    for (int j = 0; j < 7; ++j) {
      double mx = -INFINITY, s = 0;
      for (int k = 0; k < 3; ++k) mx = std::max(mx, at(i, j, k));
      for (int k = 0; k < 3; ++k) s += std::exp(at(i, j, k) - mx);
      for (int k = 0; k < 3; ++k) sm_last[(i * 7 + j) * 3 + k] = std::exp(at(i, j, k) - mx) / s;
    }
    for (int k = 0; k < 3; ++k) {
      double mx = -INFINITY, s = 0, acc = 0;
      for (int j = 0; j < 7; ++j) mx = std::max(mx, at(i, j, k));
      for (int j = 0; j < 7; ++j) s += std::exp(at(i, j, k) - mx);
      for (int j = 0; j < 7; ++j) {
        sm_mid[(i * 7 + j) * 3 + k] = std::exp(at(i, j, k) - mx) / s;
        cs_ex[(i * 7 + j) * 3 + k] = acc;
        acc += at(i, j, k);
        cs[(i * 7 + j) * 3 + k] = acc;
      }
    }
  }
  EXPECT_LT(max_abs_diff(as_f32(out[0]), sm_last), 1e-6);
  EXPECT_LT(max_abs_diff(as_f32(out[1]), sm_mid), 1e-6);
  EXPECT_LT(max_abs_diff(as_f32(out[2]), cs), 1e-5);
  EXPECT_LT(max_abs_diff(as_f32(out[3]), cs_ex), 1e-5);
  EXPECT_EQ(out[4].dtype(), DType::I32);
  for (int r = 0; r < 6; ++r) {
    std::vector<int> idx(7);
    std::iota(idx.begin(), idx.end(), 0);
    std::stable_sort(idx.begin(), idx.end(), [&](int a, int c) { return xv[r * 7 + a] > xv[r * 7 + c]; });
    for (int k = 0; k < 3; ++k) {
      EXPECT_EQ(out[4].as<int32_t>()[r * 3 + k], idx[k]);
      EXPECT_EQ(out[5].as<float>()[r * 3 + k], xv[r * 7 + idx[k]]);
    }
  }
}

TEST(CpuOps, NormsAndFusedResidualNorms) {
  const int64_t R = 5, D = 13;
  GraphBuilder b;
  auto x = b.input("x", DType::F32, {R, D});
  auto res = b.input("res", DType::F32, {R, D});
  auto g = b.param("g", DType::F32, {D});
  auto be = b.param("be", DType::F32, {D});
  b.output(b.rms_norm(x, g, 1e-5), "rms");
  b.output(b.layer_norm(x, g, be, 1e-5), "ln");
  b.output(b.layer_norm(x, g, std::nullopt, 1e-5), "ln_nob");
  b.output(b.op(ir::OpKind::FusedResidualRmsNorm, {x, res, g}, ir::NormAttrs{1e-6}), "frms");
  b.output(b.op(ir::OpKind::FusedResidualLayerNorm, {x, res, g, be}, ir::NormAttrs{1e-6}), "fln");
  Tensor xt = f32_tensor({R, D}, 120, -3, 3), rt = f32_tensor({R, D}, 121), gt = f32_tensor({D}, 122),
         bt = f32_tensor({D}, 123);
  auto out = run_graph(b, {{"x", xt}, {"res", rt}}, {{"g", gt}, {"be", bt}});
  ASSERT_EQ(out.size(), 5u);
  const auto xv = as_f32(xt), rv = as_f32(rt), gv = as_f32(gt), bv = as_f32(bt);
  auto norm = [&](const std::vector<double>& in, bool rms, bool beta, double eps) {
    std::vector<double> y(in.size());
    for (int64_t r = 0; r < R; ++r) {
      double mean = 0, var = 0;
      if (!rms) {
        for (int64_t j = 0; j < D; ++j) mean += in[r * D + j];
        mean /= D;
      }
      for (int64_t j = 0; j < D; ++j) var += (in[r * D + j] - mean) * (in[r * D + j] - mean);
      const double s = 1 / std::sqrt(var / D + eps);
      for (int64_t j = 0; j < D; ++j) y[r * D + j] = (in[r * D + j] - mean) * s * gv[j] + (beta ? bv[j] : 0);
    }
    return y;
  };
  std::vector<double> xd(xv.begin(), xv.end()), sum(R * D);
  for (int64_t i = 0; i < R * D; ++i) sum[i] = double(xv[i]) + rv[i];
  EXPECT_LT(max_abs_diff(as_f32(out[0]), norm(xd, true, false, 1e-5)), 1e-5);
  EXPECT_LT(max_abs_diff(as_f32(out[1]), norm(xd, false, true, 1e-5)), 1e-5);
  EXPECT_LT(max_abs_diff(as_f32(out[2]), norm(xd, false, false, 1e-5)), 1e-5);
  auto cat = [&](const std::vector<double>& a, const std::vector<double>& c) {
    std::vector<double> r(a);
    r.insert(r.end(), c.begin(), c.end());
    return r;
  };
  EXPECT_EQ(out[3].shape(), (std::vector<int64_t>{2, R, D}));
  EXPECT_LT(max_abs_diff(as_f32(out[3]), cat(sum, norm(sum, true, false, 1e-6))), 1e-5);
  EXPECT_LT(max_abs_diff(as_f32(out[4]), cat(sum, norm(sum, false, true, 1e-6))), 1e-5);
}

// x[S, W] with the rotated heads at columns [offset, offset + H*D); returns [S, H*D].
std::vector<double> rope_ref(const std::vector<float>& x, const std::vector<int32_t>& pos, int64_t S, int64_t H,
                             const ir::RopeAttrs& r, int64_t W = 0) {
  const int64_t D = r.head_dim, half = r.n_rot / 2;
  if (W == 0) W = H * D;
  const std::vector<double> inv = ir::rope_inv_freq(r);
  std::vector<double> y(static_cast<size_t>(S * H * D));
  for (int64_t s = 0; s < S; ++s)
    for (int64_t h = 0; h < H; ++h) {
      const int64_t in = s * W + r.offset + h * D, out = (s * H + h) * D;
      for (int64_t d = 0; d < D; ++d) y[out + d] = x[in + d];
      for (int64_t i = 0; i < half; ++i) {
        const double a = pos[s] * inv[i];
        const int64_t i0 = r.layout == ir::RopeLayout::Neox ? i : 2 * i;
        const int64_t i1 = r.layout == ir::RopeLayout::Neox ? i + half : 2 * i + 1;
        const double x0 = x[in + i0], x1 = x[in + i1], m = r.attn_factor;
        y[out + i0] = m * (x0 * std::cos(a) - x1 * std::sin(a));
        y[out + i1] = m * (x0 * std::sin(a) + x1 * std::cos(a));
      }
    }
  return y;
}

TEST(CpuOps, RopeLayoutsPartialRotaryScaling) {
  const int64_t S = 5, H = 3, D = 8;
  const std::vector<int32_t> pos{0, 3, 7, 100, 2};
  for (int layout = 0; layout < 2; ++layout) {
    for (int variant = 0; variant < 3; ++variant) {
      const int64_t n_rot = variant == 1 ? 4 : 8;
      ir::RopeAttrs r;
      r.head_dim = D;
      r.n_rot = n_rot;
      r.layout = static_cast<ir::RopeLayout>(layout);
      r.theta = 500.0;
      r.scaling = variant == 0   ? ir::RopeScaling::Llama3
                  : variant == 1 ? ir::RopeScaling::Linear
                                 : ir::RopeScaling::Yarn;
      r.factor = 2.0;
      r.original_context = 16;  // puts the llama3 wavelengths on both sides of the band
      if (variant == 2) {       // yarn with per-pair factors and a magnitude scale
        r.freq_factors = {1.0, 2.5, 1.25, 4.0};
        r.attn_factor = 1.07;
      }
      GraphBuilder b;
      auto x = b.input("x", DType::F32, {S, H * D});
      auto p = b.input("pos", DType::I32, {S});
      b.output(b.rope(x, p, r), "y");
      Tensor xt = f32_tensor({S, H * D}, 130 + layout);
      auto out = run_graph(b, {{"x", xt}, {"pos", int_tensor<int32_t>(DType::I32, {S}, pos)}});
      ASSERT_EQ(out.size(), 1u);
      EXPECT_LT(max_abs_diff(as_f32(out[0]), rope_ref(as_f32(xt), pos, S, H, r)), 1e-5) << layout << " " << variant;
    }
  }
}

// The column-slice form (offset/width), the narrow_rope fusion that produces it, and the
// primitive form legalization rewrites Rope into, for f32 and f16 activations.
TEST(CpuOps, RopeColumnSliceFusedNarrowAndPrimitiveForm) {
  const int64_t S = 4, H = 2, D = 8, W = 5 * D;  // x = [q (2 heads) | k | ..] columns
  const std::vector<int32_t> pos{1, 2, 30, 7};
  for (DType dt : {DType::F32, DType::F16}) {
    for (int layout = 0; layout < 2; ++layout) {
      ir::RopeAttrs r;
      r.head_dim = D;
      r.n_rot = layout == 0 ? 8 : 6;
      r.layout = static_cast<ir::RopeLayout>(layout);
      r.theta = 10000.0;
      if (layout == 1) {  // per-pair factors and a magnitude scale reach every form
        r.freq_factors = {1.0, 3.0, 8.0};
        r.attn_factor = 1.2;
      }
      const Tensor xt = f32_tensor({S, W}, 150 + layout);
      const Tensor pt = int_tensor<int32_t>(DType::I32, {S}, pos);
      std::vector<float> xr = as_f32(xt);
      if (dt == DType::F16)
        for (float& v : xr) v = f16_bits_to_f32(f32_to_f16_bits(v));
      ir::RopeAttrs sliced = r;
      sliced.offset = 2 * D;
      sliced.width = H * D;
      const std::vector<double> want = rope_ref(xr, pos, S, H, sliced, W);
      const double tol = dt == DType::F16 ? 2e-3 : 1e-5;
      auto graph = [&](bool as_slice) {
        GraphBuilder b;
        ValueId x = b.input("x", DType::F32, {S, W});
        if (dt != DType::F32) x = b.cast(x, dt);
        auto p = b.input("pos", DType::I32, {S});
        ValueId y = as_slice ? b.rope(x, p, sliced) : b.rope(b.narrow(x, 1, 2 * D, ir::Dim(H * D)), p, r);
        b.output(dt != DType::F32 ? b.cast(y, DType::F32) : y, "y");
        return build(b);
      };
      auto run = [&](CompiledGraph g) {
        const std::vector<NamedTensorView> in{{"x", xt.view()}, {"pos", pt.view()}};
        auto out = g.run_typed(in);
        EXPECT_TRUE(out.has_value()) << out.error().to_string();
        return out ? as_f32((*out)[0]) : std::vector<float>{};
      };
      const std::string what = fmt::format("{} layout {}", ir::dtype_name(dt), layout);
      {  // the slice read directly
        compile::CompileOptions o;
        o.fusion.skip = true;
        EXPECT_LT(max_abs_diff(run(compile_cpu(graph(true), o)), want), tol) << what;
      }
      {  // narrow + rope, fused into the slice form
        CompiledGraph g = compile_cpu(graph(false), {});
        EXPECT_EQ(g.fusion_report().count("narrow_rope"), 1) << what;
        EXPECT_LT(max_abs_diff(run(std::move(g)), want), tol) << what;
      }
      {  // the primitive form: f32 angles, so a slightly looser bound
        compile::CompileOptions o;
        o.dispatch.force_common.add(ir::OpKind::Rope);
        CompiledGraph g = compile_cpu(graph(true), o);
        EXPECT_EQ(g.dispatch_report().kinds.at(ir::OpKind::Rope).rewritten, 1) << what;
        EXPECT_LT(max_abs_diff(run(std::move(g)), want), dt == DType::F16 ? 4e-3 : 2e-5) << what;
      }
    }
  }
}

// q [B, S, H*D], k/v [B, T, KV*D]
std::vector<double> attention_ref(const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v,
                                  int64_t B, int64_t S, int64_t T, const ir::AttentionAttrs& a,
                                  const std::vector<int32_t>* q_pos) {
  const int64_t H = a.n_heads, KV = a.n_kv_heads, D = a.head_dim;
  const double scale = a.scale > 0 ? a.scale : 1 / std::sqrt(double(D));
  std::vector<double> o(static_cast<size_t>(B * S * H * D), 0.0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < S; ++i) {
        const int64_t kh = h / (H / KV);
        const int64_t pos = q_pos ? (*q_pos)[i] : T - S + i;
        std::vector<double> sc(T, -INFINITY);
        double mx = -INFINITY;
        for (int64_t j = 0; j < T; ++j) {
          bool ok = true;
          if (a.mask != ir::MaskKind::None) ok = j <= pos;
          if (a.mask == ir::MaskKind::SlidingWindow) ok = ok && pos - j < a.window;
          if (!ok) continue;
          double s = 0;
          for (int64_t d = 0; d < D; ++d) s += double(q[((b * S + i) * H + h) * D + d]) * k[((b * T + j) * KV + kh) * D + d];
          s *= scale;
          if (a.softcap > 0) s = a.softcap * std::tanh(s / a.softcap);
          sc[j] = s;
          mx = std::max(mx, s);
        }
        double sum = 0;
        for (int64_t j = 0; j < T; ++j) sum += sc[j] == -INFINITY ? 0 : std::exp(sc[j] - mx);
        for (int64_t j = 0; j < T; ++j) {
          if (sc[j] == -INFINITY) continue;
          const double w = std::exp(sc[j] - mx) / sum;
          for (int64_t d = 0; d < D; ++d) o[((b * S + i) * H + h) * D + d] += w * v[((b * T + j) * KV + kh) * D + d];
        }
      }
  return o;
}

TEST(CpuOps, AttentionMasksGqaSoftcapPositions) {
  const int64_t B = 2, S = 3, T = 7, D = 5;
  struct Case {
    ir::MaskKind mask;
    int64_t H, KV, window;
    double softcap;
    bool qpos;
  };
  const Case cases[] = {{ir::MaskKind::Causal, 4, 2, 0, 0, false},   {ir::MaskKind::None, 2, 2, 0, 0, false},
                        {ir::MaskKind::SlidingWindow, 3, 1, 3, 0, false}, {ir::MaskKind::Causal, 2, 1, 0, 5.0, true},
                        {ir::MaskKind::Causal, 1, 1, 0, 0, false}};
  int seed = 140;
  for (const Case& c : cases) {
    ir::AttentionAttrs a;
    a.n_heads = c.H;
    a.n_kv_heads = c.KV;
    a.head_dim = D;
    a.mask = c.mask;
    a.window = c.window;
    a.softcap = c.softcap;
    const int64_t b_dim = c.qpos ? 1 : B;
    GraphBuilder b;
    auto q = b.input("q", DType::F32, {b_dim, S, c.H * D});
    auto k = b.input("k", DType::F32, {b_dim, T, c.KV * D});
    auto v = b.input("v", DType::F32, {b_dim, T, c.KV * D});
    std::optional<ValueId> qp;
    if (c.qpos) qp = b.input("qp", DType::I32, {S});
    b.output(b.attention(q, k, v, a, qp), "o");
    Tensor qt = f32_tensor({b_dim, S, c.H * D}, seed++, -2, 2), kt = f32_tensor({b_dim, T, c.KV * D}, seed++, -2, 2),
           vt = f32_tensor({b_dim, T, c.KV * D}, seed++);
    const std::vector<int32_t> pos{1, 4, 2};
    std::vector<In> ins{{"q", qt}, {"k", kt}, {"v", vt}};
    if (c.qpos) ins.push_back({"qp", int_tensor<int32_t>(DType::I32, {S}, pos)});
    auto out = run_graph(b, ins);
    ASSERT_EQ(out.size(), 1u);
    const auto ref = attention_ref(as_f32(qt), as_f32(kt), as_f32(vt), b_dim, S, T, a, c.qpos ? &pos : nullptr);
    EXPECT_LT(max_abs_diff(as_f32(out[0]), ref), 1e-5) << ir::enum_name(c.mask) << " H=" << c.H;
  }
}

TEST(CpuOps, MovementOps) {
  Tensor xt = f32_tensor({2, 3, 4}, 150);
  const auto xv = as_f32(xt);
  GraphBuilder b;
  auto x = b.input("x", DType::F32, {2, 3, 4});
  auto y = b.input("y", DType::F32, {2, 1, 4});
  auto ids = b.input("ids", DType::I64, {5});
  b.output(b.transpose(x, {2, 0, 1}), "t");
  b.output(b.narrow(x, 2, 1, 2), "n");
  b.output(b.concat({x, y, x}, 1), "c");
  b.output(b.expand(y, {2, 3, 4}), "e");
  b.output(b.gather(x, ids, 2), "g");
  b.output(b.reshape(b.transpose(x, {1, 0, 2}), {3, 8}), "r");
  Tensor yt = f32_tensor({2, 1, 4}, 151);
  const auto yv = as_f32(yt);
  const std::vector<int64_t> idv{3, 0, 0, 2, 1};
  auto out = run_graph(b, {{"x", xt}, {"y", yt}, {"ids", int_tensor<int64_t>(DType::I64, {5}, idv)}});
  ASSERT_EQ(out.size(), 6u);
  auto X = [&](int64_t i, int64_t j, int64_t k) { return double(xv[(i * 3 + j) * 4 + k]); };
  std::vector<double> t, n, c, e, g, r;
  for (int64_t k = 0; k < 4; ++k)
    for (int64_t i = 0; i < 2; ++i)
      for (int64_t j = 0; j < 3; ++j) t.push_back(X(i, j, k));
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 3; ++j)
      for (int64_t k = 1; k < 3; ++k) n.push_back(X(i, j, k));
  for (int64_t i = 0; i < 2; ++i) {
    for (int64_t j = 0; j < 7; ++j)
      for (int64_t k = 0; k < 4; ++k) c.push_back(j < 3 ? X(i, j, k) : j == 3 ? yv[i * 4 + k] : X(i, j - 4, k));
    for (int64_t j = 0; j < 3; ++j)
      for (int64_t k = 0; k < 4; ++k) e.push_back(yv[i * 4 + k]);
    for (int64_t j = 0; j < 3; ++j)
      for (int64_t k = 0; k < 5; ++k) g.push_back(X(i, j, idv[k]));
  }
  for (int64_t j = 0; j < 3; ++j)
    for (int64_t i = 0; i < 2; ++i)
      for (int64_t k = 0; k < 4; ++k) r.push_back(X(i, j, k));
  EXPECT_EQ(max_abs_diff(as_f32(out[0]), t), 0.0);
  EXPECT_EQ(max_abs_diff(as_f32(out[1]), n), 0.0);
  EXPECT_EQ(max_abs_diff(as_f32(out[2]), c), 0.0);
  EXPECT_EQ(max_abs_diff(as_f32(out[3]), e), 0.0);
  EXPECT_EQ(max_abs_diff(as_f32(out[4]), g), 0.0);
  EXPECT_EQ(max_abs_diff(as_f32(out[5]), r), 0.0);
}

TEST(CpuOps, GatherOutOfRangeIsAnError) {
  GraphBuilder b;
  auto t = b.param("table", DType::F32, {4, 3});
  auto ids = b.input("ids", DType::I32, {2});
  b.output(b.gather(t, ids, 0), "g");
  compile::CompileOptions opt;
  CompiledGraph g = compile_cpu(build(b), opt);
  ASSERT_TRUE(g.set_param("table", random_vec(12, 160)).ok());
  const int32_t bad[] = {1, 4};
  const int64_t s[] = {2};
  const NamedTensorView in[] = {{"ids", TensorView{DType::I32, s, bad}}};
  auto out = g.run(in);
  ASSERT_FALSE(out.has_value());
  EXPECT_NE(out.error().message().find("index 4"), std::string::npos) << out.error().message();
}

TEST(CpuOps, ElementwiseRegionProgram) {
  // silu(a) * b + c, then > 0 -> where(.., r, -r)
  GraphBuilder b;
  auto a = b.input("a", DType::F32, {3, 5});
  auto bb = b.input("b", DType::F32, {5});
  auto c = b.input("c", DType::F32, {3, 1});
  ir::RegionAttrs r;
  r.steps.push_back({ir::OpKind::Activation, static_cast<uint8_t>(ActKind::Silu), DType::F32, {-1}});
  r.steps.push_back({ir::OpKind::Binary, static_cast<uint8_t>(BinaryKind::Mul), DType::F32, {0, -2}});
  r.steps.push_back({ir::OpKind::Binary, static_cast<uint8_t>(BinaryKind::Add), DType::F32, {1, -3}});
  r.steps.push_back({ir::OpKind::Compare, static_cast<uint8_t>(ir::CompareKind::Gt), DType::Bool, {2, -2}});
  r.steps.push_back({ir::OpKind::Activation, static_cast<uint8_t>(ActKind::Neg), DType::F32, {2}});
  r.steps.push_back({ir::OpKind::Where, 0, DType::F32, {3, 2, 4}});
  b.output(b.op(ir::OpKind::ElementwiseRegion, {a, bb, c}, r), "y");
  Tensor at = f32_tensor({3, 5}, 170), bt = f32_tensor({5}, 171), ct = f32_tensor({3, 1}, 172);
  auto out = run_graph(b, {{"a", at}, {"b", bt}, {"c", ct}});
  ASSERT_EQ(out.size(), 1u);
  const auto av = as_f32(at), bv = as_f32(bt), cv = as_f32(ct);
  std::vector<double> ref;
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 5; ++j) {
      const double v = act_ref(ActKind::Silu, av[i * 5 + j]) * bv[j] + cv[i];
      ref.push_back(v > bv[j] ? v : -v);
    }
  EXPECT_LT(max_abs_diff(as_f32(out[0]), ref), 1e-6);
}

// Rows longer than the region evaluator's chunk, an f16 input and an f16 output next to
// f32 inputs read in place and a broadcast column: the same float operations in the
// same order as a scalar loop, so the f16 results agree bit for bit.
TEST(CpuOps, ElementwiseRegionLongRowsMixedDtypes) {
  GraphBuilder b;
  const int64_t rows = 3, cols = 700;
  auto a = b.input("a", DType::F16, {rows, cols});
  auto bb = b.input("b", DType::F32, {cols});
  auto c = b.input("c", DType::F32, {rows, 1});
  ir::RegionAttrs r;
  r.steps.push_back({ir::OpKind::Binary, static_cast<uint8_t>(BinaryKind::Mul), DType::F32, {-1, -2}});  // a * b
  r.steps.push_back({ir::OpKind::Binary, static_cast<uint8_t>(BinaryKind::Sub), DType::F32, {0, -3}});   // - c
  r.steps.push_back({ir::OpKind::Binary, static_cast<uint8_t>(BinaryKind::Div), DType::F32, {1, -2}});   // / b
  r.steps.push_back({ir::OpKind::Binary, static_cast<uint8_t>(BinaryKind::Max), DType::F16, {2, -1}});   // max(., a)
  b.output(b.op(ir::OpKind::ElementwiseRegion, {a, bb, c}, r), "y");
  std::vector<float> av = random_vec(static_cast<size_t>(rows * cols), 173, -2, 2);
  std::vector<uint16_t> ah(av.size());
  for (size_t i = 0; i < av.size(); ++i) {
    ah[i] = f32_to_f16_bits(av[i]);
    av[i] = f16_bits_to_f32(ah[i]);
  }
  std::vector<uint8_t> abytes(ah.size() * 2);
  std::memcpy(abytes.data(), ah.data(), abytes.size());
  Tensor at(DType::F16, {rows, cols}, std::move(abytes));
  Tensor bt = f32_tensor({cols}, 174, 0.5f, 2.0f), ct = f32_tensor({rows, 1}, 175);
  auto out = run_graph(b, {{"a", at}, {"b", bt}, {"c", ct}});
  ASSERT_EQ(out.size(), 1u);
  ASSERT_EQ(out[0].dtype(), DType::F16);
  const auto bv = as_f32(bt), cv = as_f32(ct);
  const auto* got = reinterpret_cast<const uint16_t*>(out[0].bytes().data());
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) {
      const float x = av[static_cast<size_t>(i * cols + j)], y = static_cast<float>(bv[static_cast<size_t>(j)]);
      const float t = (x * y - static_cast<float>(cv[static_cast<size_t>(i)])) / y;
      ASSERT_EQ(got[i * cols + j], f32_to_f16_bits(t > x ? t : x)) << i << ", " << j;
    }
}

TEST(CpuOps, CustomOpThroughKernelRegistry) {
  ir::CustomOpDef def;
  def.name = "test.scale_add";
  def.min_inputs = 2;
  def.max_inputs = 2;
  def.infer = [](const std::vector<ir::TensorType>& in, const std::string&) -> Expected<ir::TensorType> {
    return in[0];
  };
  ir::register_custom_op(def);
  register_cpu_custom_kernel("test.scale_add", [](const CpuCustomCall& c) -> Status {
    const float scale = std::stof(std::string(c.config));
    const auto* x = static_cast<const float*>(c.inputs[0].data);
    const auto* y = static_cast<const float*>(c.inputs[1].data);
    auto* o = static_cast<float*>(c.out);
    for (int64_t i = 0; i < c.inputs[0].num_elements(); ++i) o[i] = x[i] * scale + y[i];
    return {};
  });
  GraphBuilder b;
  auto x = b.input("x", DType::F32, {2, 3});
  auto y = b.input("y", DType::F32, {2, 3});
  b.output(b.op(ir::OpKind::Custom, {x, y}, ir::CustomAttrs{"test.scale_add", "2.5"}, {DType::F32, {2, 3}}), "o");
  Tensor xt = f32_tensor({2, 3}, 180), yt = f32_tensor({2, 3}, 181);
  auto out = run_graph(b, {{"x", xt}, {"y", yt}});
  ASSERT_EQ(out.size(), 1u);
  std::vector<double> ref;
  for (int i = 0; i < 6; ++i) ref.push_back(as_f32(xt)[i] * 2.5 + as_f32(yt)[i]);
  EXPECT_LT(max_abs_diff(as_f32(out[0]), ref), 1e-6);

  // A custom op without a CPU kernel fails the compile, naming the op.
  ir::CustomOpDef def2 = def;
  def2.name = "test.no_kernel";
  ir::register_custom_op(def2);
  GraphBuilder b2;
  auto x2 = b2.input("x", DType::F32, {2});
  b2.output(b2.op(ir::OpKind::Custom, {x2, x2}, ir::CustomAttrs{"test.no_kernel", ""}, {DType::F32, {2}}), "o");
  auto g = Session(Device::cpu()).compile(build(b2));
  ASSERT_FALSE(g.has_value());
  EXPECT_NE(g.error().message().find("test.no_kernel"), std::string::npos) << g.error().message();
}

}  // namespace
}  // namespace rlx
