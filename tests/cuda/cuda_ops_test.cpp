// The CUDA backend against the CPU backend: every op kind the CUDA backend claims, on
// random inputs with odd sizes, built once and compiled on both devices (fusion off so
// that each op reaches its own kernel), plus packed DequantMatMul against a float64
// reference and a small transformer block end to end. Every test skips, saying so,
// when the build has no CUDA backend or the machine has no GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <map>
#include <random>

#include "rlx/base/token_choice.h"
#include "rlx/formats/quant.h"
#include "rlx/rlx.h"
#include "cuda_test_util.h"
#ifdef RLX_HAVE_CUDA
#include "backends/cuda/cuda_backend.h"
#endif

namespace rlx {
namespace {

using namespace cuda_test;

using ir::ActKind;
using ir::BinaryKind;
using ir::DType;
using ir::GraphBuilder;
using ir::OpKind;
using ir::ValueId;

Expected<std::vector<Tensor>> runv(CompiledGraph& g, const std::vector<NamedTensorView>& v) { return g.run_typed(v); }

TEST(CudaBackend, AvailabilityIsReported) {
  auto s = Session::create(Device::cuda());
  if (!is_available(Device::cuda())) {
    ASSERT_FALSE(s.has_value());
    EXPECT_FALSE(s.error().to_string().empty());
    GTEST_SKIP() << "no CUDA device: skipped (Session::create says: " << s.error().to_string() << ")";
  }
  ASSERT_TRUE(s.has_value()) << s.error().to_string();
  EXPECT_EQ(s->backend()->name(), "cuda");
  auto bad = Session::create(Device::cuda(99));
  EXPECT_FALSE(bad.has_value());
}

// RLX_CUDA_FUSE's list: names select fusions, "all" / "none" the obvious, and a typo is
// an error naming it (no GPU needed).
TEST(CudaBackend, FusionListParsing) {
#ifdef RLX_HAVE_CUDA
  using cuda_backend::CudaOptions;
  auto parse = [](const std::string& list) -> Expected<CudaOptions> {
    CudaOptions o;
    TRY(cuda_backend::apply_fusion_list(list, o));
    return o;
  };
  auto all = parse("all");
  ASSERT_TRUE(all.has_value());
  EXPECT_TRUE(all->fuse_swiglu && all->fuse_rope_kv && all->fuse_gemv_rope_kv && all->fuse_norm_gemv);
  for (const char* off : {"0", "off", "none"}) {
    auto o = parse(off);
    ASSERT_TRUE(o.has_value()) << off;
    EXPECT_FALSE(o->fuse_swiglu || o->fuse_rope_kv || o->fuse_gemv_rope_kv || o->fuse_norm_gemv) << off;
  }
  auto some = parse("rope_kv");
  ASSERT_TRUE(some.has_value());
  EXPECT_TRUE(some->fuse_rope_kv);
  EXPECT_FALSE(some->fuse_swiglu || some->fuse_gemv_rope_kv || some->fuse_norm_gemv);
  auto epilogue = parse("swiglu,gemv_rope_kv");  // implies rope_kv
  ASSERT_TRUE(epilogue.has_value());
  EXPECT_TRUE(epilogue->fuse_swiglu && epilogue->fuse_rope_kv && epilogue->fuse_gemv_rope_kv);
  auto prologue = parse("norm_gemv");
  ASSERT_TRUE(prologue.has_value());
  EXPECT_TRUE(prologue->fuse_norm_gemv);
  EXPECT_FALSE(prologue->fuse_swiglu || prologue->fuse_rope_kv);
  auto bad = parse("swiglu,rope");
  ASSERT_FALSE(bad.has_value());
  EXPECT_NE(bad.error().to_string().find("unknown fusion 'rope'"), std::string::npos) << bad.error().to_string();
#else
  GTEST_SKIP() << "built without the CUDA backend: skipped";
#endif
}

TEST(CudaOps, Activations) {
  REQUIRE_CUDA();
  for (int k = 0; k <= static_cast<int>(ActKind::Softplus); ++k) {
    const auto ak = static_cast<ActKind>(k);
    const bool positive = ak == ActKind::Log || ak == ActKind::Sqrt || ak == ActKind::Rsqrt;
    GraphBuilder b;
    auto x = b.input("x", DType::F32, {7, 33});
    b.output(b.activation(ak, x), "y");
    Case c;
    c.inputs["x"] = f32({7, 33}, 1 + k, positive ? 0.1f : -3.0f, 3.0f);
    SCOPED_TRACE(std::string(ir::enum_name(ak)));
    expect_match(b, c, 1e-6);
  }
}

TEST(CudaOps, BinaryBroadcastCompareWhereCast) {
  REQUIRE_CUDA();
  for (int k = 0; k <= static_cast<int>(BinaryKind::Pow); ++k) {
    GraphBuilder b;
    auto x = b.input("x", DType::F32, {4, 1, 5});
    auto y = b.input("y", DType::F32, {3, 5});
    b.output(b.binary(static_cast<BinaryKind>(k), x, y), "z");
    Case c;
    c.inputs["x"] = f32({4, 1, 5}, 3, 0.5f, 2.0f);
    c.inputs["y"] = f32({3, 5}, 4, 0.5f, 2.0f);
    expect_match(b, c, 1e-6);
  }
  GraphBuilder b;
  auto x = b.input("x", DType::F32, {6, 9});
  auto y = b.input("y", DType::F32, {9});
  auto m = b.compare(ir::CompareKind::Gt, x, y);
  b.output(b.where(m, x, y), "w");
  b.output(b.cast(x, DType::F16), "h");
  b.output(b.cast(b.activation(ActKind::Abs, b.mul(x, b.scalar(10.0f))), DType::I32), "i");
  Case c;
  c.inputs["x"] = f32({6, 9}, 5);
  c.inputs["y"] = f32({9}, 6);
  expect_match(b, c, 1e-6);
}

TEST(CudaOps, ElementwiseRegion) {
  REQUIRE_CUDA();
  GraphBuilder b;
  auto x = b.input("x", DType::F32, {5, 64});
  auto y = b.input("y", DType::F32, {64});
  auto z = b.add(b.mul(b.activation(ActKind::Silu, x), y), b.activation(ActKind::Tanh, x));
  b.output(b.activation(ActKind::Exp, b.mul(z, b.scalar(0.5f))), "o");
  Case c;
  c.opt.fusion.skip = false;
  c.inputs["x"] = f32({5, 64}, 7);
  c.inputs["y"] = f32({64}, 8);
  expect_match(b, c, 1e-6);
}

TEST(CudaOps, MatMulForms) {
  REQUIRE_CUDA();
  {
    GraphBuilder b;
    auto a = b.input("a", DType::F32, {2, 3, 17, 19});
    auto w = b.input("w", DType::F32, {3, 23, 19});
    b.output(b.matmul(a, w, false, true), "y");
    auto t = b.input("t", DType::F32, {19, 17});
    auto u = b.input("u", DType::F32, {19, 5});
    b.output(b.matmul(t, u, true, false), "z");
    Case c;
    c.inputs["a"] = f32({2, 3, 17, 19}, 9);
    c.inputs["w"] = f32({3, 23, 19}, 10);
    c.inputs["t"] = f32({19, 17}, 11);
    c.inputs["u"] = f32({19, 5}, 12);
    expect_match(b, c, 1e-5);
  }
  for (ActKind act : {ActKind::Identity, ActKind::Relu, ActKind::GeluTanh, ActKind::Silu, ActKind::Gelu}) {
    for (bool bias : {false, true}) {
      GraphBuilder b;
      auto x = b.input("x", DType::F32, {13, 40});
      auto w = b.param("w", DType::F32, {24, 40});
      std::optional<ValueId> bv;
      if (bias) bv = b.param("b", DType::F32, {24});
      b.output(b.linear(x, w, bv, act), "y");
      Case c;
      c.inputs["x"] = f32({13, 40}, 13);
      c.params["w"] = f32({24, 40}, 14);
      if (bias) c.params["b"] = f32({24}, 15);
      SCOPED_TRACE(std::string(ir::enum_name(act)) + (bias ? " +bias" : ""));
      expect_match(b, c, 1e-5);
    }
  }
  {  // SwiGLU and f16 weights (x cast to f16 on the device)
    GraphBuilder b;
    auto x = b.input("x", DType::F32, {9, 32});
    auto g = b.param("g", DType::F32, {48, 32});
    auto u = b.param("u", DType::F32, {48, 32});
    b.output(b.op(OpKind::FusedSwiGLU, {x, g, u}, ir::FusedSwiGLUAttrs{}), "y");
    auto wh = b.param("wh", DType::F16, {16, 32});
    b.output(b.linear(x, wh), "z");
    Case c;
    c.inputs["x"] = f32({9, 32}, 16);
    c.params["g"] = f32({48, 32}, 17);
    c.params["u"] = f32({48, 32}, 18);
    c.params["wh"] = f32({16, 32}, 19);
    expect_match(b, c, 2e-3);
  }
}

TEST(CudaOps, NormsRopeSoftmaxReduce) {
  REQUIRE_CUDA();
  GraphBuilder b;
  auto x = b.input("x", DType::F32, {5, 96});
  auto r = b.input("r", DType::F32, {5, 96});
  auto g = b.param("g", DType::F32, {96});
  auto be = b.param("be", DType::F32, {96});
  auto pos = b.input("pos", DType::I32, {5});
  b.output(b.rms_norm(x, g, 1e-5), "rms");
  b.output(b.layer_norm(x, g, be, 1e-5), "ln");
  b.output(b.op(OpKind::FusedResidualRmsNorm, {x, r, g}, ir::NormAttrs{1e-6}), "frms");
  b.output(b.op(OpKind::FusedResidualLayerNorm, {x, r, g, be}, ir::NormAttrs{1e-6}), "fln");
  ir::RopeAttrs ra;
  ra.head_dim = 32;
  ra.n_rot = 32;
  b.output(b.rope(x, pos, ra), "rope_normal");
  ra.layout = ir::RopeLayout::Neox;
  ra.n_rot = 16;
  ra.scaling = ir::RopeScaling::Llama3;
  ra.factor = 8;
  ra.original_context = 64;
  b.output(b.rope(x, pos, ra), "rope_neox");
  ra.scaling = ir::RopeScaling::Yarn;  // yarn ramp, per-pair factors and the magnitude scale
  ra.factor = 4;
  ra.freq_factors = {1, 1, 2, 4, 8, 1.5, 3, 1};
  ra.attn_factor = 1.1386;
  b.output(b.rope(x, pos, ra), "rope_yarn");
  b.output(b.softmax(x, -1), "sm_last");
  b.output(b.softmax(x, 0), "sm_first");
  b.output(b.reduce(ir::ReduceKind::Sum, x, {1}), "sum");
  b.output(b.reduce(ir::ReduceKind::Mean, x, {0}, true), "mean");
  b.output(b.reduce(ir::ReduceKind::Max, x, {0, 1}), "max");
  b.output(b.reduce(ir::ReduceKind::Min, x, {1}), "min");
  b.output(b.cumsum(x, 1, false), "cs");
  b.output(b.cumsum(x, 0, true), "cse");
  b.output(b.topk(x, 7, false), "topk_i");
  b.output(b.topk(x, 3, true), "topk_v");
  Case c;
  c.inputs["x"] = f32({5, 96}, 20, -2, 2);
  c.inputs["r"] = f32({5, 96}, 21);
  c.inputs["pos"] = i32({5}, {0, 3, 17, 100, 2047});
  c.params["g"] = f32({96}, 22);
  c.params["be"] = f32({96}, 23);
  expect_match(b, c, 1e-5);
}

// f32 inputs q [S, H*hd], k and v [T, KV*hd] of `b` and the attributes of an attention
// over them (the three attention tests below).
struct AttnGraph {
  ValueId q, k, v;
  ir::AttentionAttrs attrs;
};
AttnGraph attention_inputs(GraphBuilder& b, int64_t S, int64_t T, int64_t H, int64_t KV, int64_t hd,
                           ir::MaskKind mask, int64_t window, double softcap) {
  AttnGraph g{b.input("q", DType::F32, {S, H * hd}), b.input("k", DType::F32, {T, KV * hd}),
              b.input("v", DType::F32, {T, KV * hd}), {}};
  g.attrs.n_heads = H;
  g.attrs.n_kv_heads = KV;
  g.attrs.head_dim = hd;
  g.attrs.mask = mask;
  g.attrs.window = window;
  g.attrs.softcap = softcap;
  return g;
}

// TopK with k = 1 over f32 rows (the greedy token of a decode step) takes a one-block
// argmax kernel: ties go to the lowest index and NaN ranks last, as on the CPU.
TEST(CudaOps, ArgmaxTiesAndNaN) {
  REQUIRE_CUDA();
  const int64_t rows = 5, len = 32000;
  std::vector<float> x = random_vec(static_cast<size_t>(rows * len), 31);
  auto at = [&](int64_t r, int64_t j) -> float& { return x[static_cast<size_t>(r * len + j)]; };
  for (int64_t j = 0; j < len; ++j) at(0, j) = 0.5f;  // all equal: index 0
  at(1, 10) = at(1, 31000) = 7.0f;                     // a tie: the lower index
  at(2, 5) = NAN;                                      // NaN ranks last
  at(2, 7) = 9.0f;
  for (int64_t j = 0; j < len; ++j) at(3, j) = NAN;    // all NaN: index 0
  at(4, len - 1) = 100.0f;                             // the last element
  GraphBuilder b;
  auto xi = b.input("x", DType::F32, {rows, len});
  b.output(b.topk(xi, 1, false), "index");
  b.output(b.topk(xi, 1, true), "value");
  auto g = b.build();
  ASSERT_TRUE(g.has_value()) << g.error().to_string();
  Case c;
  c.inputs["x"] = Tensor::from_f32(x, {rows, len});
  auto cpu = run_on(Device::cpu(), *g, c);
  auto gpu = run_on(Device::cuda(), *g, c);
  ASSERT_TRUE(cpu && gpu);
  const auto ci = (*cpu)[0].as<int32_t>(), gi = (*gpu)[0].as<int32_t>();
  ASSERT_EQ(ci.size(), static_cast<size_t>(rows));
  const int32_t expected[rows] = {0, 10, 7, 0, static_cast<int32_t>(len - 1)};
  for (int64_t r = 0; r < rows; ++r) {
    EXPECT_EQ(ci[static_cast<size_t>(r)], expected[r]) << "cpu row " << r;
    EXPECT_EQ(gi[static_cast<size_t>(r)], expected[r]) << "cuda row " << r;
  }
  const auto cv = *(*cpu)[1].to_f32(), gv = *(*gpu)[1].to_f32();
  for (int64_t r = 0; r < rows; ++r) {
    if (r == 3) continue;  // NaN
    EXPECT_EQ(gv[static_cast<size_t>(r)], cv[static_cast<size_t>(r)]) << "row " << r;
  }
  EXPECT_TRUE(std::isnan(gv[3]));
}

// The `sample` op on the device picks what rlx::choose_token picks on the host for the
// same logits and parameters (read_sample_params), over rows with random logits, many
// ties (logits on a 0.5 grid, a constant row), NaN and -inf, nearly flat; each row of a
// run has its own filter (top-k 1 .. 1024, top-p, min-p, temperature, greedy) and the
// last run gives out-of-range parameters (clamped alike); vocabularies smaller than
// top-k and too large for the kernel to keep its keys in shared memory. Draws whose
// token could change with the order of the sums (within 1e-6 of a cumulative edge, or
// a top-p / min-p cut within 1e-9 of a prefix sum) are not compared; the test fails
// when fewer than 90 % of the draws are compared.
TEST(CudaOps, SampleMatchesChooseToken) {
  REQUIRE_CUDA();
  // temperature, top_k, top_p, min_p
  const std::vector<std::array<float, 4>> filters = {{1.0f, 1024, 1.0f, 0.0f}, {0.8f, 40, 0.95f, 0.05f},
                                                     {1.5f, 7, 0.5f, 0.0f},    {0.3f, 1, 1.0f, 0.0f},
                                                     {2.0f, 300, 1.0f, 0.1f},  {1.0f, 64, 0.9f, 0.0f},
                                                     {0.0f, 40, 1.0f, 0.0f}};
  const std::vector<std::array<float, 5>> hostile = {{1.0f, 1.0f, 0.0f, 2.0f, -1.0f},   {NAN, NAN, 5000.0f, 0.0f, 1.5f},
                                                     {-0.5f, 0.7f, -3.0f, NAN, NAN},    {0.5f, -1.0f, 40.0f, 0.9f, 0.0f},
                                                     {0.99f, 1e30f, 1e9f, 1e-30f, 0.0f}, {0.3f, 1e-30f, 2.5f, 1.0f, 0.999f}};
  for (const int64_t len : {int64_t{32000}, int64_t{60000}, int64_t{5}}) {  // keys in shared memory or not
    SCOPED_TRACE(len);
    const int64_t rows = 6;
    std::vector<float> x = random_vec(static_cast<size_t>(rows * len), 41, -4.0f, 4.0f);
    auto at = [&](int64_t r, int64_t j) -> float& { return x[static_cast<size_t>(r * len + j)]; };
    for (int64_t j = 0; j < len; ++j) at(1, j) = std::round(at(1, j) * 2.0f) / 2.0f;  // ties
    for (int64_t j = 0; j < len; ++j) at(2, j) = 0.25f;                              // all tied
    at(3, 1) = NAN;
    at(3, len - 1) = -INFINITY;
    for (int64_t j = 0; j < len; ++j) at(4, j) *= 0.01f;  // nearly flat
    GraphBuilder b;
    auto xi = b.input("x", DType::F32, {rows, len});
    auto pi = b.input("params", DType::F32, {rows, ir::kSampleParams});
    b.output(b.sample(xi, pi));
    auto g = b.build();
    ASSERT_TRUE(g.has_value()) << g.error().to_string();
    int compared = 0, total = 0;
    TokenChoiceScratch scratch;
    for (uint32_t run = 0; run <= 2 * filters.size(); ++run) {
      const bool bad_params = run == 2 * filters.size();
      const std::vector<float> u = random_vec(static_cast<size_t>(rows), 100 + run, 0.0f, 1.0f);
      std::vector<float> params;
      for (int64_t r = 0; r < rows; ++r) {
        if (bad_params) {
          const auto& h = hostile[static_cast<size_t>(r) % hostile.size()];
          params.insert(params.end(), h.begin(), h.end());
        } else {
          const auto& f = filters[(static_cast<size_t>(r) + run) % filters.size()];
          params.push_back(u[static_cast<size_t>(r)]);
          params.insert(params.end(), f.begin(), f.end());
        }
      }
      Case c;
      c.inputs["x"] = Tensor::from_f32(x, {rows, len});
      c.inputs["params"] = Tensor::from_f32(params, {rows, ir::kSampleParams});
      auto gpu = run_on(Device::cuda(), *g, c);
      auto cpu = run_on(Device::cpu(), *g, c);
      ASSERT_TRUE(gpu && cpu) << (gpu ? cpu.error().to_string() : gpu.error().to_string());
      const auto got = (*gpu)[0].as<int32_t>(), got_cpu = (*cpu)[0].as<int32_t>();
      for (int64_t r = 0; r < rows; ++r) {
        const std::span<const float> row(x.data() + r * len, static_cast<size_t>(len));
        const SampleRow sr = read_sample_params(params.data() + r * ir::kSampleParams, ir::kMaxSampleTopK);
        const int32_t want = choose_token(row, sr.filter, sr.draw, scratch);
        EXPECT_EQ(got_cpu[static_cast<size_t>(r)], want) << "cpu, run " << run << ", row " << r;
        ++total;
        // Near a boundary the order of the device's sums may decide: a draw within 1e-6
        // of a cumulative edge, or a top-p / min-p cut within 1e-9 of a prefix sum.
        bool edge = choose_token(row, sr.filter, std::max(0.0, sr.draw - 1e-6), scratch) != want ||
                    choose_token(row, sr.filter, std::min(0.999999999, sr.draw + 1e-6), scratch) != want;
        for (const double nudge : {1.0 - 1e-9, 1.0 + 1e-9}) {
          TokenFilter f = sr.filter;
          f.top_p = std::min(1.0, f.top_p * nudge);
          f.min_p = f.min_p * nudge;
          edge = edge || choose_token(row, f, sr.draw, scratch) != want;
        }
        if (edge) continue;
        ++compared;
        EXPECT_EQ(got[static_cast<size_t>(r)], want) << "run " << run << ", row " << r << ", draw " << sr.draw;
      }
    }
    EXPECT_GE(compared, total * 9 / 10);
  }
}

TEST(CudaOps, Attention) {
  REQUIRE_CUDA();
  struct Cfg {
    int64_t S, T, H, KV, hd;
    ir::MaskKind mask;
    int64_t window;
    double softcap;
    bool qpos;
  };
  const Cfg cfgs[] = {
      {31, 37, 4, 2, 64, ir::MaskKind::Causal, 0, 0, false},  // (62 rows x heads: below the tensor-core path's 64)
      {37, 37, 4, 4, 32, ir::MaskKind::None, 0, 0, false},
      {21, 50, 6, 2, 128, ir::MaskKind::SlidingWindow, 9, 0, true},
      {9, 9, 2, 1, 256, ir::MaskKind::Causal, 0, 30.0, false},
      {1, 300, 8, 2, 64, ir::MaskKind::Causal, 0, 0, true},  // decode: keys split across blocks
      {3, 1000, 4, 4, 64, ir::MaskKind::Causal, 0, 0, false},
      {11, 11, 6, 3, 8, ir::MaskKind::Causal, 0, 0, false},  // head_dim below a warp
      {2, 70, 2, 1, 80, ir::MaskKind::Causal, 0, 0, false},
  };
  uint32_t seed = 30;
  for (const Cfg& f : cfgs) {
    GraphBuilder b;
    const auto [q, k, v, a] = attention_inputs(b, f.S, f.T, f.H, f.KV, f.hd, f.mask, f.window, f.softcap);
    std::optional<ValueId> qp;
    Case c;
    if (f.qpos) {
      qp = b.input("qp", DType::I32, {f.S});
      std::vector<int32_t> pv(static_cast<size_t>(f.S));
      for (int64_t i = 0; i < f.S; ++i) pv[static_cast<size_t>(i)] = static_cast<int32_t>(f.T - 1 - 2 * (f.S - 1 - i));
      c.inputs["qp"] = i32({f.S}, pv);
    }
    b.output(b.attention(q, k, v, a, qp), "o");
    c.inputs["q"] = f32({f.S, f.H * f.hd}, seed++);
    c.inputs["k"] = f32({f.T, f.KV * f.hd}, seed++);
    c.inputs["v"] = f32({f.T, f.KV * f.hd}, seed++);
    SCOPED_TRACE(testing::Message() << "S=" << f.S << " T=" << f.T << " hd=" << f.hd);
    expect_match(b, c, 1e-5);
  }
}

// An f32 q over an f16 K / V cache (the f16 KV cache of a language model): CUDA rounds q
// to f16 first, as llama.cpp does for K·Q and as the CPU backend's kernel does; prefill,
// decode (one query row) and the tensor-core prefill sizes, against the CPU backend.
// An f16 cache computes with llama.cpp's f16-cache numerics on both devices (q rounded
// to f16, normalised probabilities rounded to f16 before P.V): CUDA's two-pass kernel
// against the CPU's attention_f16kv. Masks, softcap, head_dim 8 (stories260K) and a row
// of 13,000 keys (scores beyond 48 KB of shared memory). Few rows over more than 512
// keys take the split form (chunks of keys over four kernels): decode at Llama 3.2 1B's
// heads, head_dim 128 / 256, a sliding window and softcap, 40,000 keys (past the
// whole-row form's shared-memory limit), and a window of 200 of 1,000 keys (a row of one
// chunk: done whole by the first kernel).
TEST(CudaOps, AttentionF32QueriesOverHalfCache) {
  REQUIRE_CUDA();
  struct Cfg {
    int64_t S, T, H, KV, hd;
    ir::MaskKind mask = ir::MaskKind::Causal;
    int64_t window = 0;
    double softcap = 0;
  };
  uint32_t seed = 90;
  for (const Cfg& f : {Cfg{9, 9, 4, 2, 64}, Cfg{1, 300, 8, 2, 64}, Cfg{1, 40, 4, 4, 32}, Cfg{70, 70, 4, 2, 64},
                       Cfg{64, 64, 8, 4, 8}, Cfg{33, 33, 4, 2, 16, ir::MaskKind::SlidingWindow, 8, 5.0},
                       Cfg{2, 13000, 2, 1, 32}, Cfg{1, 5000, 32, 8, 64}, Cfg{1, 1300, 4, 2, 128},
                       Cfg{1, 2000, 4, 2, 256, ir::MaskKind::SlidingWindow, 700, 30.0}, Cfg{1, 40000, 2, 2, 64},
                       Cfg{1, 1000, 4, 2, 64, ir::MaskKind::SlidingWindow, 200}}) {
    GraphBuilder b;
    const auto [q, k, v, a] = attention_inputs(b, f.S, f.T, f.H, f.KV, f.hd, f.mask, f.window, f.softcap);
    b.output(b.attention(q, b.cast(k, DType::F16), b.cast(v, DType::F16), a), "o");
    Case c;
    c.inputs["q"] = f32({f.S, f.H * f.hd}, seed++);
    c.inputs["k"] = f32({f.T, f.KV * f.hd}, seed++);
    c.inputs["v"] = f32({f.T, f.KV * f.hd}, seed++);
    SCOPED_TRACE(testing::Message() << "S=" << f.S << " T=" << f.T << " hd=" << f.hd);
    expect_match(b, c, 1e-5);
  }
}

// Relative L2 error of `b`'s first (float) output on CUDA against the CPU backend; a
// failure to build or run is a test failure (and 1.0).
double first_output_error(GraphBuilder& b, const Case& c) {
  auto g = b.build();
  EXPECT_TRUE(g.has_value()) << g.error().to_string();
  if (!g) return 1.0;
  auto cpu = run_on(Device::cpu(), *g, c);
  EXPECT_TRUE(cpu.has_value()) << cpu.error().to_string();
  auto gpu = run_on(Device::cuda(), *g, c);
  EXPECT_TRUE(gpu.has_value()) << gpu.error().to_string();
  if (!cpu || !gpu) return 1.0;
  return rel_l2(*(*gpu)[0].to_f32(), *(*cpu)[0].to_f32());
}

// The tensor-core prefill attention (query rows x query heads per KV head >= 64, head_dim
// 64 / 128 / 256; q, k, v and the softmax weights rounded to f16 for the products; head_dim
// 64 / 128 on the pipelined kernel, or with RLX_CUDA_ATTN_FLASH=0 the one-stage one): row
// counts that are not a multiple of the 64-row block, GQA (the group's heads share a
// block: 16 rows x 4 heads, 8 x 8, 24 x 4 over two blocks), masks, softcap, explicit
// positions over a longer key range, f32/f16/bf16 inputs, against the CPU backend's f32
// math. An f32 error above 1e-5 also shows that this path ran (the f32 kernel matches to
// ~1e-7).
TEST(CudaOps, AttentionPrefillTensorCores) {
  REQUIRE_CUDA();
  struct Cfg {
    int64_t S, T, H, KV, hd;
    DType dt;
    ir::MaskKind mask;
    int64_t window;
    double softcap;
    bool qpos;
  };
  const Cfg cfgs[] = {
      {64, 64, 4, 2, 64, DType::F32, ir::MaskKind::Causal, 0, 0, false},
      {200, 200, 8, 2, 128, DType::F32, ir::MaskKind::Causal, 0, 0, false},
      {130, 300, 4, 1, 64, DType::F32, ir::MaskKind::SlidingWindow, 50, 0, true},
      {96, 96, 2, 2, 64, DType::F32, ir::MaskKind::None, 0, 30.0, false},
      {300, 300, 32, 8, 64, DType::F32, ir::MaskKind::Causal, 0, 0, false},  // llama-3.2-1b heads
      {128, 128, 4, 2, 64, DType::F16, ir::MaskKind::Causal, 0, 0, false},
      {77, 150, 4, 4, 128, DType::BF16, ir::MaskKind::Causal, 0, 0, true},
      {150, 150, 8, 2, 256, DType::F32, ir::MaskKind::Causal, 0, 0, false},  // Qwen3.5's gated attention heads
      {100, 180, 4, 2, 256, DType::F16, ir::MaskKind::SlidingWindow, 64, 50.0, true},  // Gemma 2's
      {16, 900, 32, 8, 64, DType::F32, ir::MaskKind::Causal, 0, 0, true},  // a 16-row chunk late in a context
      {8, 500, 16, 2, 128, DType::F32, ir::MaskKind::Causal, 0, 0, true},
      {24, 300, 8, 2, 64, DType::BF16, ir::MaskKind::SlidingWindow, 40, 0, true},
      // The pipelined kernel over many tiles: a 2,048-row prompt at llama-3.2-1b's heads,
      // head_dim 128 over a range that is not a multiple of the 64-key tile, a chunk
      // late in its context, and a window whose rows see disjoint key ranges.
      {2048, 2048, 32, 8, 64, DType::F32, ir::MaskKind::Causal, 0, 0, false},
      {700, 1001, 16, 2, 128, DType::F32, ir::MaskKind::Causal, 0, 0, true},
      {256, 1500, 32, 8, 64, DType::BF16, ir::MaskKind::Causal, 0, 0, true},
      {600, 600, 8, 8, 64, DType::F32, ir::MaskKind::SlidingWindow, 100, 0, false},
  };
  uint32_t seed = 700;
  for (const Cfg& f : cfgs) {
    SCOPED_TRACE(testing::Message() << "S=" << f.S << " T=" << f.T << " H=" << f.H << " KV=" << f.KV << " hd=" << f.hd
                                    << " dt=" << ir::dtype_name(f.dt));
    GraphBuilder b;
    const auto [q, k, v, a] = attention_inputs(b, f.S, f.T, f.H, f.KV, f.hd, f.mask, f.window, f.softcap);
    Case c;
    std::optional<ValueId> qp;
    if (f.qpos) {
      qp = b.input("qp", DType::I32, {f.S});
      std::vector<int32_t> pv(static_cast<size_t>(f.S));
      for (int64_t i = 0; i < f.S; ++i) pv[static_cast<size_t>(i)] = static_cast<int32_t>(f.T - f.S + i);
      c.inputs["qp"] = i32({f.S}, pv);
    }
    auto cvt = [&](ValueId x) { return f.dt == DType::F32 ? x : b.cast(x, f.dt); };
    b.output(b.cast(b.attention(cvt(q), cvt(k), cvt(v), a, qp), DType::F32), "o");
    c.inputs["q"] = f32({f.S, f.H * f.hd}, seed++, -2, 2);
    c.inputs["k"] = f32({f.T, f.KV * f.hd}, seed++, -2, 2);
    c.inputs["v"] = f32({f.T, f.KV * f.hd}, seed++);
    const double e = first_output_error(b, c);
    EXPECT_LE(e, f.dt == DType::BF16 ? 1e-2 : 3e-3) << "relative L2 error " << e;
    if (f.dt == DType::F32) {
      EXPECT_GT(e, 1e-5) << "the f32 kernel ran, not the tensor-core one";
    }
  }
}

// A batched server step: three sequences of 16 query rows each at its own place in its
// cache (positions from the start, the middle and the end of 200 rows; rows past a
// sequence's position hold stale values the mask must hide), llama-3.2-1b's heads (four
// query heads per KV head: one 64-row tensor-core block per KV head and sequence).
TEST(CudaOps, AttentionBatchedRowsAtTheirOwnPositions) {
  REQUIRE_CUDA();
  const int64_t B = 3, S = 16, T = 200, H = 32, KV = 8, hd = 64;
  GraphBuilder b;
  ir::AttentionAttrs a;
  a.n_heads = H;
  a.n_kv_heads = KV;
  a.head_dim = hd;
  a.mask = ir::MaskKind::Causal;
  auto q = b.input("q", DType::F32, {B, S, H * hd});
  auto k = b.input("k", DType::F32, {B, T, KV * hd});
  auto v = b.input("v", DType::F32, {B, T, KV * hd});
  auto qp = b.input("qp", DType::I32, {B, S});
  b.output(b.attention(q, k, v, a, qp), "o");
  Case c;
  c.inputs["q"] = f32({B, S, H * hd}, 901, -2, 2);
  c.inputs["k"] = f32({B, T, KV * hd}, 902, -2, 2);
  c.inputs["v"] = f32({B, T, KV * hd}, 903);
  std::vector<int32_t> pv;
  for (int32_t start : {0, 100, 184})
    for (int32_t i = 0; i < S; ++i) pv.push_back(start + i);
  c.inputs["qp"] = i32({B, S}, pv);
  const double e = first_output_error(b, c);
  EXPECT_LE(e, 3e-3) << "relative L2 error " << e;
  EXPECT_GT(e, 1e-5) << "the f32 kernel ran, not the tensor-core one";
}

// The decode attention kernel (one query row over a long key cache): head dims from 16 to
// 256, groups of 1 to 8 query heads per KV head, f32/f16/bf16, masks and softcap, and
// positions that give one, a few and many key splits, and the one-trip path of short
// contexts (head_dim 32 / 64 up to 256-1024 visible keys) with and without a window. One compiled graph runs every
// position in turn (the split counters must be back at zero after each run).
TEST(CudaOps, AttentionDecode) {
  REQUIRE_CUDA();
  struct Cfg {
    int64_t T, H, KV, hd;
    DType dt;
    ir::MaskKind mask;
    int64_t window;
    double softcap;
  };
  const Cfg cfgs[] = {
      {2100, 32, 8, 64, DType::F32, ir::MaskKind::Causal, 0, 0},  // llama-3.2-1b decode
      {700, 8, 1, 128, DType::F32, ir::MaskKind::Causal, 0, 0},
      {600, 4, 4, 256, DType::F32, ir::MaskKind::SlidingWindow, 200, 30.0},
      {500, 6, 2, 80, DType::F32, ir::MaskKind::Causal, 0, 0},
      {333, 4, 2, 16, DType::F32, ir::MaskKind::None, 0, 0},
      {300, 2, 1, 20, DType::F32, ir::MaskKind::Causal, 0, 0},  // rows not 16-byte aligned
      {900, 16, 4, 64, DType::F16, ir::MaskKind::Causal, 0, 0},
      {400, 8, 2, 128, DType::BF16, ir::MaskKind::Causal, 0, 0},
      {700, 8, 1, 32, DType::F32, ir::MaskKind::SlidingWindow, 150, 20.0},  // short path: window, softcap
      {600, 16, 2, 64, DType::BF16, ir::MaskKind::SlidingWindow, 250, 0},
  };
  uint32_t seed = 300;
  for (const Cfg& f : cfgs) {
    SCOPED_TRACE(testing::Message() << "T=" << f.T << " H=" << f.H << " KV=" << f.KV << " hd=" << f.hd << " dt="
                                    << ir::dtype_name(f.dt));
    GraphBuilder b;
    const auto [q, k, v, a] = attention_inputs(b, 1, f.T, f.H, f.KV, f.hd, f.mask, f.window, f.softcap);
    auto qp = b.input("qp", DType::I32, {1});
    auto cvt = [&](ValueId x) { return f.dt == DType::F32 ? x : b.cast(x, f.dt); };
    b.output(b.cast(b.attention(cvt(q), cvt(k), cvt(v), a, qp), DType::F32), "o");
    auto g = b.build();
    ASSERT_TRUE(g.has_value()) << g.error().to_string();
    Case c;
    auto s = Session::create(Device::cuda());
    ASSERT_TRUE(s.has_value());
    auto cg = s->compile_with(*g, c.opt);
    ASSERT_TRUE(cg.has_value()) << cg.error().to_string();
    const Tensor tq = f32({1, f.H * f.hd}, seed++, -2, 2), tk = f32({f.T, f.KV * f.hd}, seed++, -2, 2),
                 tv = f32({f.T, f.KV * f.hd}, seed++);
    for (int32_t pos : {0, 5, 127, 128, 129, 255, 256, 300, 511, 512, static_cast<int32_t>(f.T) - 1}) {
      if (pos >= f.T) continue;
      SCOPED_TRACE(testing::Message() << "pos=" << pos);
      c.inputs["q"] = tq;
      c.inputs["k"] = tk;
      c.inputs["v"] = tv;
      c.inputs["qp"] = i32({1}, {pos});
      auto cpu = run_on(Device::cpu(), *g, c);
      ASSERT_TRUE(cpu.has_value()) << cpu.error().to_string();
      auto gpu = runv(*cg, {{"q", tq.view()}, {"k", tk.view()}, {"v", tv.view()}, {"qp", c.inputs["qp"].view()}});
      ASSERT_TRUE(gpu.has_value()) << gpu.error().to_string();
      const double e = rel_l2(*(*gpu)[0].to_f32(), *(*cpu)[0].to_f32());
      EXPECT_LE(e, f.dt == DType::F32 ? 1e-5 : f.dt == DType::F16 ? 2e-3 : 1e-2) << "relative L2 error " << e;
    }
  }
}

TEST(CudaOps, Movement) {
  REQUIRE_CUDA();
  GraphBuilder b;
  auto x = b.input("x", DType::F32, {4, 6, 10});
  auto y = b.input("y", DType::F32, {4, 3, 10});
  auto ids = b.input("ids", DType::I32, {5});
  auto table = b.param("table", DType::F32, {11, 10});
  b.output(b.transpose(x, {2, 0, 1}), "t");
  b.output(b.narrow(x, 1, 2, ir::Dim(3)), "n");
  b.output(b.concat({x, y, x}, 1), "c");
  b.output(b.expand(b.narrow(y, 1, 0, ir::Dim(1)), {4, 5, 10}), "e");
  b.output(b.gather(table, ids, 0), "g");
  b.output(b.reshape(b.transpose(x, {1, 0, 2}), {24, 10}), "r");
  Case c;
  c.inputs["x"] = f32({4, 6, 10}, 40);
  c.inputs["y"] = f32({4, 3, 10}, 41);
  c.inputs["ids"] = i32({5}, {0, 10, 3, 3, 7});
  c.params["table"] = f32({11, 10}, 42);
  expect_match(b, c, 0.0);
}

TEST(CudaOps, UpdateSliceIntoHandle) {
  REQUIRE_CUDA();
  GraphBuilder b;
  auto cache = b.handle("cache", DType::F32, {16, 8});
  auto src = b.input("src", DType::F32, {3, 8});
  auto start = b.input("start", DType::I32, {1});
  auto upd = b.update_slice(cache, src, start, 0);
  b.output(b.reduce(ir::ReduceKind::Sum, upd, {1}), "rowsum");
  auto g = b.build();
  ASSERT_TRUE(g.has_value()) << g.error().to_string();
  compile::CompileOptions opt;
  opt.fusion.skip = true;
  auto s = Session::create(Device::cuda());
  ASSERT_TRUE(s.has_value());
  auto cg = s->compile_with(*g, opt);
  ASSERT_TRUE(cg.has_value()) << cg.error().to_string();
  const Tensor a = f32({3, 8}, 43), bb = f32({3, 8}, 44);
  ASSERT_TRUE(runv(*cg, {{"src", a.view()}, {"start", i32({1}, {2}).view()}}).has_value());
  ASSERT_TRUE(runv(*cg, {{"src", bb.view()}, {"start", i32({1}, {5}).view()}}).has_value());
  auto h = cg->read_handle("cache");
  ASSERT_TRUE(h.has_value());
  auto hv = *h->to_f32();
  auto av = *a.to_f32(), bv = *bb.to_f32();
  for (int r = 0; r < 16; ++r)
    for (int j = 0; j < 8; ++j) {
      float want = 0;
      if (r >= 2 && r < 5) want = av[static_cast<size_t>((r - 2) * 8 + j)];
      if (r >= 5 && r < 8) want = bv[static_cast<size_t>((r - 5) * 8 + j)];
      EXPECT_EQ(hv[static_cast<size_t>(r * 8 + j)], want) << r << "," << j;
    }
  // A start past the end is an error naming the node, not a crash.
  auto bad = runv(*cg, {{"src", a.view()}, {"start", i32({1}, {14}).view()}});
  ASSERT_FALSE(bad.has_value());
  EXPECT_NE(bad.error().to_string().find("update_slice"), std::string::npos) << bad.error().to_string();
}

TEST(CudaOps, DequantMatMulPacked) {
  REQUIRE_CUDA();
  // Q4_1, Q5_0 and Q5_1: what llama-quantize (and rlx quantize) fall back to for rows of
  // no whole 256-value block (e.g. 896-wide models in q4_k_m).
  const DType types[] = {DType::Q8_0,  DType::Q4_0,    DType::Q4_1,   DType::Q5_0,   DType::Q5_1,
                         DType::Q4_K,  DType::Q5_K,    DType::Q6_K,
                         DType::IQ4_NL, DType::IQ4_XS,  DType::IQ3_S,  DType::IQ3_XXS, DType::IQ2_S,
                         DType::IQ2_XS, DType::IQ2_XXS, DType::IQ1_S,  DType::IQ1_M,  DType::TQ1_0,
                         DType::TQ2_0};
  const int64_t N = 40, K = 512;
  for (DType t : types) {
    for (int64_t M : {1, 3, 20}) {
      const auto [packed, deq] = packed_weights(t, N, K, 50);
      auto g = dequant_matmul_graph(t, M, N, K);
      ASSERT_TRUE(g.has_value()) << g.error().to_string();
      Case c;
      c.inputs["x"] = f32({M, K}, 51);
      c.params["w"] = packed;
      auto out = run_on(Device::cuda(), *g, c);
      ASSERT_TRUE(out.has_value()) << out.error().to_string();
      auto xv = *c.inputs["x"].to_f32();
      xv = x_as_cuda_sees_it(t, xv, M, true);  // (the GEMV's 8-bit x is the default)
      const double e = rel_l2(*(*out)[0].to_f32(), reference_product(xv, deq, M, N, K));
      // GEMV: f32 math on exact weights (and on 8-bit x, M <= 5); M > 8: Q8_0 / Q4_0 and
      // the K-quants on the int8 tensor cores (exact block products), the i-quants in f16
      // through cuBLAS.
      const bool f16_path = M > 8 && t != DType::Q8_0 && t != DType::Q4_0 && !cuda_takes_q8_k(t, M, true);
      EXPECT_LE(e, f16_path ? 2e-3 : 1e-5) << ir::dtype_name(t) << " M=" << M << ": relative L2 error " << e;
    }
  }
}

// y = x . w^T over packed w; with `stored` w is an output too, so that the backend keeps
// the file's layout instead of the split one.
Expected<ir::Graph> packed_product_graph(DType t, int64_t M, int64_t N, int64_t K, bool stored) {
  GraphBuilder b;
  auto x = b.input("x", DType::F32, {M, K});
  auto w = b.param("w", t, {N, K});
  b.output(b.dequant_matmul(x, w), "y");
  if (stored) b.output(w, "w_out");
  return b.build();
}

// Prefill sizes over Q8_0 / Q4_0 take the int8 tensor-core GEMM: x as llama.cpp's Q8_0
// blocks, exact int32 block products, f32 sums. Tile edges in M and N, K not a multiple
// of the kernel's 128-value step, and both weight layouts: split (the default) and as
// stored (the param is also an output, so the backend keeps its file layout).
TEST(CudaOps, DequantMatMulInt8TensorCores) {
  REQUIRE_CUDA();
  struct Shape {
    int64_t M, N, K;
  };
  const Shape shapes[] = {{9, 40, 512}, {64, 64, 128}, {65, 70, 96}, {130, 200, 1056}};
  for (DType t : {DType::Q8_0, DType::Q4_0}) {
    for (const Shape& sh : shapes) {
      for (bool stored : {false, true}) {
        const auto [packed, deq] = packed_weights(t, sh.N, sh.K, 70);
        auto g = packed_product_graph(t, sh.M, sh.N, sh.K, stored);
        ASSERT_TRUE(g.has_value()) << g.error().to_string();
        Case c;
        std::vector<float> xv = random_vec(static_cast<size_t>(sh.M * sh.K), 71, -2.0f, 2.0f);
        xv[static_cast<size_t>(3 * sh.K + 5)] = NAN;  // row 3: a block that is not finite
        c.inputs["x"] = Tensor::from_f32(xv, {sh.M, sh.K});
        c.params["w"] = packed;
        auto out = run_on(Device::cuda(), *g, c);
        ASSERT_TRUE(out.has_value()) << out.error().to_string();
        std::vector<float> y = *(*out)[0].to_f32();
        const std::string what = std::string(ir::dtype_name(t)) + " " + std::to_string(sh.M) + "x" +
                                 std::to_string(sh.N) + "x" + std::to_string(sh.K) + (stored ? " stored" : " split");
        for (int64_t n = 0; n < sh.N; ++n) {
          EXPECT_TRUE(std::isnan(y[static_cast<size_t>(3 * sh.N + n)])) << what << ": row 3 col " << n;
          y[static_cast<size_t>(3 * sh.N + n)] = 0.0f;
        }
        xv[static_cast<size_t>(3 * sh.K + 5)] = 0.0f;
        std::vector<float> ref = reference_product(q8_0_like_llama_cpp(xv), deq, sh.M, sh.N, sh.K);
        for (int64_t n = 0; n < sh.N; ++n) ref[static_cast<size_t>(3 * sh.N + n)] = 0.0f;
        const double e = rel_l2(y, ref);
        EXPECT_LE(e, 1e-6) << what << ": relative L2 error " << e;
      }
    }
  }
}

// 6..32 rows over the K-quants take the int8 tensor cores against x as llama.cpp's Q8_K
// blocks (launch_kqmma): each sub-block product exact in int32, f32 once per 256 values.
// Row counts on both sides of the 16-row tile and of the kernel's limit (33 rows take
// cuBLAS in f16; Q5_K's 6 rows the GEMV on f32 x), N not a multiple of the 8- or 16-row
// block and wide enough for 16-row blocks on any GPU, K of one super-block (seven of the
// eight warps idle) and long enough for each warp to stream several, rows not 16-byte
// aligned (Q6_K as stored: 210-byte blocks), both weight layouts, and a row of x holding
// a NaN (its products NaN, the other rows untouched).
TEST(CudaOps, DequantMatMulKQuantInt8TensorCores) {
  REQUIRE_CUDA();
  struct Shape {
    int64_t M, N, K;
  };
  const Shape shapes[] = {{6, 40, 256},  {9, 40, 512},    {16, 264, 768},   {13, 40, 4096}, {17, 33, 1024},
                          {32, 70, 512}, {20, 8200, 256}, {11, 8200, 2560}, {33, 40, 512}};
  for (DType t : {DType::Q4_K, DType::Q5_K, DType::Q6_K}) {
    for (const Shape& sh : shapes) {
      for (bool stored : {false, true}) {
        const auto [packed, deq] = packed_weights(t, sh.N, sh.K, 90);
        auto g = packed_product_graph(t, sh.M, sh.N, sh.K, stored);
        ASSERT_TRUE(g.has_value()) << g.error().to_string();
        Case c;
        std::vector<float> xv = random_vec(static_cast<size_t>(sh.M * sh.K), 91, -2.0f, 2.0f);
        for (int64_t k = 0; k < sh.K; k += 97) xv[static_cast<size_t>(2 * sh.K + k)] *= 40.0f;  // a row of outliers
        xv[static_cast<size_t>(3 * sh.K + 5)] = NAN;
        c.inputs["x"] = Tensor::from_f32(xv, {sh.M, sh.K});
        c.params["w"] = packed;
        auto out = run_on(Device::cuda(), *g, c);
        ASSERT_TRUE(out.has_value()) << out.error().to_string();
        std::vector<float> y = *(*out)[0].to_f32();
        const std::string what = std::string(ir::dtype_name(t)) + " " + std::to_string(sh.M) + "x" +
                                 std::to_string(sh.N) + "x" + std::to_string(sh.K) + (stored ? " stored" : " split");
        const bool int8 = cuda_takes_q8_k(t, sh.M, true);
        for (int64_t n = 0; n < sh.N; ++n) {
          EXPECT_TRUE(std::isnan(y[static_cast<size_t>(3 * sh.N + n)])) << what << ": row 3 col " << n;
          y[static_cast<size_t>(3 * sh.N + n)] = 0.0f;
        }
        xv[static_cast<size_t>(3 * sh.K + 5)] = 0.0f;
        std::vector<float> ref;
        if (int8) {
          ref = reference_product(q8_k_like_llama_cpp(xv), deq, sh.M, sh.N, sh.K);
        } else if (sh.M > 32) {  // past the kernel: x and W in f16 through cuBLAS
          std::vector<float> x16 = xv, w16 = deq;
          for (float& f : x16) f = f16_bits_to_f32(f32_to_f16_bits(f));
          for (float& f : w16) f = f16_bits_to_f32(f32_to_f16_bits(f));
          ref = reference_product(x16, w16, sh.M, sh.N, sh.K);
        } else {  // the GEMV, on f32 x
          ref = reference_product(xv, deq, sh.M, sh.N, sh.K);
        }
        for (int64_t n = 0; n < sh.N; ++n) ref[static_cast<size_t>(3 * sh.N + n)] = 0.0f;
        const double e = rel_l2(y, ref);
        EXPECT_LE(e, 1e-5) << what << ": relative L2 error " << e;
        if (int8) {  // and the rounding really was Q8_K's: f32 x is measurably further
          const double e_f32 = rel_l2(y, reference_product(xv, deq, sh.M, sh.N, sh.K));
          EXPECT_GT(e_f32, 10 * e + 1e-7) << what;
        }
      }
    }
  }
}

#ifdef RLX_HAVE_CUDA
// The CUDA backend with CudaOptions::int8_prefill off, for the life of the object.
class Int8PrefillOff {
 public:
  Int8PrefillOff() { set(false); }
  ~Int8PrefillOff() { set(cuda_backend::default_cuda_options().int8_prefill); }

 private:
  static void set(bool on) {
    BackendRegistry::global().register_backend(
        DeviceKind::kCuda, [on](const Device& device, const BackendOptions&) -> Expected<std::shared_ptr<Backend>> {
          cuda_backend::CudaOptions o = cuda_backend::default_cuda_options();
          o.int8_prefill = on;
          ASSIGN_OR_RETURN(std::shared_ptr<cuda_backend::CudaBackend> b, cuda_backend::CudaBackend::create(device.ordinal, o));
          return std::shared_ptr<Backend>(std::move(b));
        });
  }
};
#endif

// 6..16 rows over the packed types that do not take the int8 path: W decoded into f16
// tiles in shared memory (launch_dqmma) with f32 accumulation -- x and W rounded to f16,
// as the dequantize + cuBLAS path rounds them, so the error is f32 summation only. M at
// the tile edges, N not a multiple of the 32-row block, K not a multiple of the 128-value
// step, K long enough to be split across blocks, rows not 16-byte aligned, both weight
// layouts.
TEST(CudaOps, DequantMatMulF16Tiles) {
  REQUIRE_CUDA();
  struct Shape {
    int64_t M, N, K;
  };
  // (Q4_K, Q6_K and the IQ4 types leave the GEMV from 6 rows, the others from 9.)
  // (K = 160 and 416: rows whose bytes do not start on a 16-byte boundary.)
  const Shape shapes[] = {{6, 40, 256},   {9, 40, 256},   {16, 264, 768}, {13, 40, 4096},
                          {16, 96, 512},  {11, 70, 2560}, {9, 40, 160},   {16, 33, 416}};
  auto to_f16 = [](std::vector<float> v) {
    for (float& f : v) f = f16_bits_to_f32(f32_to_f16_bits(f));
    return v;
  };
  // (The K-quants take the int8 tensor cores unless int8_prefill is off, as here.)
#ifdef RLX_HAVE_CUDA
  const Int8PrefillOff f16_kquants;
#endif
  for (DType t : {DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::IQ4_XS, DType::IQ4_NL, DType::Q5_0, DType::Q4_1}) {
    for (const Shape& sh : shapes) {
      const bool x8 = t == DType::Q4_K || t == DType::Q6_K || t == DType::IQ4_XS || t == DType::IQ4_NL;
      if (sh.M < 9 && !x8) continue;
      if ((t == DType::IQ4_XS || t == DType::Q4_K || t == DType::Q5_K || t == DType::Q6_K) && sh.K % 256 != 0) continue;
      for (bool stored : {false, true}) {
        const auto [packed, deq] = packed_weights(t, sh.N, sh.K, 80);
        auto g = packed_product_graph(t, sh.M, sh.N, sh.K, stored);
        ASSERT_TRUE(g.has_value()) << g.error().to_string();
        Case c;
        const std::vector<float> xv = random_vec(static_cast<size_t>(sh.M * sh.K), 81, -2.0f, 2.0f);
        c.inputs["x"] = Tensor::from_f32(xv, {sh.M, sh.K});
        c.params["w"] = packed;
        auto out = run_on(Device::cuda(), *g, c);
        ASSERT_TRUE(out.has_value()) << out.error().to_string();
        const std::string what = std::string(ir::dtype_name(t)) + " " + std::to_string(sh.M) + "x" +
                                 std::to_string(sh.N) + "x" + std::to_string(sh.K) + (stored ? " stored" : " split");
        const double e = rel_l2(*(*out)[0].to_f32(), reference_product(to_f16(xv), to_f16(deq), sh.M, sh.N, sh.K));
        EXPECT_LE(e, 1e-5) << what << ": relative L2 error " << e;
      }
    }
  }
}

TEST(CudaOps, PackedGather) {
  REQUIRE_CUDA();
  const int64_t V = 12, D = 256;
  for (DType t : {DType::Q8_0, DType::Q4_K, DType::Q6_K, DType::IQ4_NL, DType::IQ4_XS, DType::IQ3_S, DType::IQ2_XXS,
                  DType::IQ1_M, DType::TQ1_0}) {
    const auto [packed, deq] = packed_weights(t, V, D, 60);
    GraphBuilder b;
    auto table = b.param("table", t, {V, D});
    auto ids = b.input("ids", DType::I32, {4});
    b.output(b.gather(table, ids, 0), "e");
    auto g = b.build();
    ASSERT_TRUE(g.has_value()) << g.error().to_string();
    Case c;
    c.inputs["ids"] = i32({4}, {11, 0, 5, 5});
    c.params["table"] = packed;
    auto out = run_on(Device::cuda(), *g, c);
    ASSERT_TRUE(out.has_value()) << out.error().to_string();
    const auto ov = *(*out)[0].to_f32();
    const int ids_v[4] = {11, 0, 5, 5};
    for (int i = 0; i < 4; ++i)
      for (int64_t d = 0; d < D; ++d)
        ASSERT_EQ(ov[static_cast<size_t>(i * D + d)], deq[static_cast<size_t>(ids_v[i] * D + d)]) << ir::dtype_name(t);
  }
}

// A decoder block written in HIR (as tools/demo_graph.cpp does), compiled with the
// default pipeline (fusion on) on both devices.
TEST(CudaModel, TransformerBlockMatchesCpu) {
  REQUIRE_CUDA();
  const int64_t dim = 128, heads = 4, kv = 2, ffn = 352, hd = dim / heads, seq = 19;
  GraphBuilder b;
  auto x = b.input("x", DType::F32, {ir::Dim::symbol(ir::SEQ), dim});
  auto pos = b.input("pos", DType::I32, {ir::Dim::symbol(ir::SEQ)});
  Case c;
  uint32_t seed = 70;
  auto p = [&](const char* n, std::vector<int64_t> shape) {
    std::vector<ir::Dim> dims;
    for (int64_t d : shape) dims.push_back(ir::Dim(d));
    const ir::Shape s(std::move(dims));
    c.params[n] = f32(shape, seed++, -0.2f, 0.2f);
    return b.param(n, DType::F32, s);
  };
  auto attn_norm = p("attn_norm", {dim});
  auto wq = p("wq", {heads * hd, dim});
  auto wk = p("wk", {kv * hd, dim});
  auto wv = p("wv", {kv * hd, dim});
  auto wo = p("wo", {dim, heads * hd});
  auto ffn_norm = p("ffn_norm", {dim});
  auto gate = p("gate", {ffn, dim});
  auto up = p("up", {ffn, dim});
  auto down = p("down", {dim, ffn});
  ir::AttentionBlockAttrs a;
  a.attn.n_heads = heads;
  a.attn.n_kv_heads = kv;
  a.attn.head_dim = hd;
  a.attn.mask = ir::MaskKind::Causal;
  a.rope.head_dim = hd;
  a.rope.n_rot = hd;
  auto h = b.op(OpKind::HirRmsNorm, {x, attn_norm}, ir::NormAttrs{1e-5});
  auto attn = b.op(OpKind::HirAttentionBlock, {h, wq, wk, wv, wo, pos}, a);
  auto x1 = b.add(x, attn);
  auto h2 = b.op(OpKind::HirRmsNorm, {x1, ffn_norm}, ir::NormAttrs{1e-5});
  auto f = b.op(OpKind::HirSwiGLUFfn, {h2, gate, up, down}, ir::NoAttrs{});
  b.output(b.add(x1, f), "y");
  c.opt = compile::CompileOptions{};
  c.opt.binding.set(ir::SEQ, seq);
  c.inputs["x"] = f32({seq, dim}, 90);
  std::vector<int32_t> pv(static_cast<size_t>(seq));
  for (int64_t i = 0; i < seq; ++i) pv[static_cast<size_t>(i)] = static_cast<int32_t>(i);
  c.inputs["pos"] = i32({seq}, pv);
  auto g = b.build();
  ASSERT_TRUE(g.has_value()) << g.error().to_string();
  auto hir_run = [&](const Device& dev) -> Expected<std::vector<Tensor>> {
    ASSIGN_OR_RETURN(Session s, Session::create(dev));
    ASSIGN_OR_RETURN(CompiledGraph cg, s.compile_hir_with(ir::HirModule{*g, ir::FusionPolicy::Direct}, c.opt));
    for (const auto& [name, t] : c.params) TRY(cg.set_param_typed(name, t.bytes(), t.dtype()));
    return runv(cg, {{"x", c.inputs["x"].view()}, {"pos", c.inputs["pos"].view()}});
  };
  auto cpu = hir_run(Device::cpu());
  ASSERT_TRUE(cpu.has_value()) << cpu.error().to_string();
  auto gpu = hir_run(Device::cuda());
  ASSERT_TRUE(gpu.has_value()) << gpu.error().to_string();
  const double e = rel_l2(*(*gpu)[0].to_f32(), *(*cpu)[0].to_f32());
  EXPECT_LE(e, 1e-5) << "relative L2 error " << e;
}

}  // namespace
}  // namespace rlx
