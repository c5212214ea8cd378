// The CUDA backend's mixture-of-experts ops: moe_route against the CPU backend (the same
// experts chosen, ties, NaN, sigmoid gating, 1024 experts; more are refused) and moe_ffn
// against a float64 host computation over the exact (dequantized) expert weights, for
// float and packed experts, one token and nine (one routed to no expert), vectors too
// long to stage in shared memory, moe_route -> moe_ffn run again and again through
// the captured CUDA graph with other experts each time, and the grouped form of runs of
// many tokens. Every test skips without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "rlx/rlx.h"
#ifdef RLX_HAVE_CUDA
#include "backends/cuda/cuda_backend.h"
#endif

namespace rlx {
namespace {

using namespace cuda_test;

using ir::ActKind;
using ir::DType;
using ir::GraphBuilder;
using ir::MoeGating;

/// `values` stored as `dt` (f32, f16 or bf16), shaped `dims`.
Tensor float_tensor(DType dt, const std::vector<float>& values, std::vector<int64_t> dims) {
  Tensor t(dt, std::move(dims));
  convert_from_f32(dt, values.data(), t.mutable_data(), static_cast<int64_t>(values.size()));
  return t;
}

/// The same experts chosen (zero, NaN or a number in the same places) and the weights
/// within 1e-5 relative of each other.
void expect_same_route(const std::vector<float>& gpu, const std::vector<float>& cpu, const std::string& what) {
  ASSERT_EQ(gpu.size(), cpu.size()) << what;
  for (size_t i = 0; i < cpu.size(); ++i) {
    const float g = gpu[i], c = cpu[i];
    if (std::isnan(c) || c == 0.0f) {
      EXPECT_TRUE(std::isnan(c) ? std::isnan(g) : g == 0.0f) << what << ": element " << i << ": " << g << " for " << c;
      continue;
    }
    EXPECT_NEAR(g, c, 1e-5 * std::fabs(c)) << what << ": element " << i;
  }
}

/// moe_route of logits [rows, experts] on the CPU and on CUDA.
void check_route(const Tensor& logits, const ir::MoeRouteAttrs& a, const std::string& what) {
  GraphBuilder b;
  b.output(b.moe_route(b.input("logits", logits.dtype(), ir::Shape::of(logits.shape())), a), "route");
  auto g = b.build();
  ASSERT_TRUE(g.has_value()) << g.error().to_string();
  Case c;
  c.inputs["logits"] = logits;
  auto cpu = run_on(Device::cpu(), *g, c);
  ASSERT_TRUE(cpu.has_value()) << what << ": " << cpu.error().to_string();
  auto gpu = run_on(Device::cuda(), *g, c);
  ASSERT_TRUE(gpu.has_value()) << what << ": " << gpu.error().to_string();
  expect_same_route(*(*gpu)[0].to_f32(), *(*cpu)[0].to_f32(), what);
}

TEST(CudaMoe, RouteMatchesCpu) {
  REQUIRE_CUDA();
  struct Form {
    DType dt;
    int64_t rows, experts, k;
    MoeGating gating;
    bool normalize;
  };
  uint32_t seed = 300;
  for (const Form& f : {Form{DType::F32, 5, 8, 2, MoeGating::Softmax, true},
                        Form{DType::F16, 4, 60, 6, MoeGating::Softmax, false},
                        Form{DType::BF16, 3, 16, 2, MoeGating::Sigmoid, true},
                        Form{DType::F32, 2, 4, 4, MoeGating::Softmax, false},
                        Form{DType::F32, 9, 128, 8, MoeGating::Softmax, true},
                        Form{DType::F32, 3, 1024, 8, MoeGating::Softmax, true},
                        Form{DType::F32, 2, 1000, 1000, MoeGating::Sigmoid, false}}) {
    const auto v = random_vec(static_cast<size_t>(f.rows * f.experts), seed++, -3.0f, 3.0f);
    check_route(float_tensor(f.dt, v, {f.rows, f.experts}), {f.k, f.gating, f.normalize},
                fmt::format("{} [{}, {}] k={}", ir::dtype_name(f.dt), f.rows, f.experts, f.k));
  }
}

TEST(CudaMoe, RouteTiesGoToTheLowerExpertAndNaNLoses) {
  REQUIRE_CUDA();
  // Integer logits: many equal probabilities.
  std::vector<float> ties(6 * 8);
  for (size_t i = 0; i < ties.size(); ++i) ties[i] = static_cast<float>(static_cast<int>((i * 7) % 3) - 1);
  check_route(float_tensor(DType::F32, ties, {6, 8}), {3, MoeGating::Softmax, true}, "ties");
  // NaN: never chosen over a number (row 0); chosen, the lowest first, when too few
  // numbers are left (row 1).
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> v{nan, 0.5f, -1.0f, 2.0f, nan, nan, 1.0f, nan};
  check_route(float_tensor(DType::F32, v, {2, 4}), {2, MoeGating::Sigmoid, false}, "nan");
}

TEST(CudaMoe, RouteOverMoreThan1024ExpertsIsRefused) {
  REQUIRE_CUDA();
  GraphBuilder b;
  b.output(b.moe_route(b.input("logits", DType::F32, {2, 1025}), {2, MoeGating::Softmax, true}), "route");
  auto g = b.build();
  ASSERT_TRUE(g.has_value()) << g.error().to_string();
  Case c;
  c.inputs["logits"] = f32({2, 1025}, 5);
  auto out = run_on(Device::cuda(), *g, c);
  ASSERT_FALSE(out.has_value());
  EXPECT_NE(out.error().to_string().find("at most 1024"), std::string::npos) << out.error().to_string();
}

// The op table comes from cuda_builder (no GPU needed).
TEST(CudaMoe, BackendClaimsTheOps) {
#ifdef RLX_HAVE_CUDA
  const compile::OpSet ops = cuda_backend::cuda_supported_ops();
  EXPECT_TRUE(ops.contains(ir::OpKind::MoeRoute)) << ops.to_string();
  EXPECT_TRUE(ops.contains(ir::OpKind::MoeFfn)) << ops.to_string();
#else
  GTEST_SKIP() << "built without the CUDA backend: skipped";
#endif
}

// ---- moe_ffn ---------------------------------------------------------------------------

/// Stacked expert weights: the params ([experts, rows, cols] of one dtype) and their
/// exact values.
struct Experts {
  int64_t n = 0, dim = 0, hidden = 0;
  Tensor gate, up, down;
  std::vector<float> gate_v, up_v, down_v;
};

Tensor stacked(const PackedWeights& w, int64_t experts, int64_t rows, int64_t cols) {
  return Tensor(w.packed.dtype(), {experts, rows, cols}, w.packed.bytes());
}

Experts make_experts(DType dt, int64_t n, int64_t dim, int64_t hidden, uint32_t seed) {
  Experts e{n, dim, hidden, {}, {}, {}, {}, {}, {}};
  PackedWeights g = packed_weights(dt, n * hidden, dim, seed);
  PackedWeights u = packed_weights(dt, n * hidden, dim, seed + 1);
  PackedWeights d = packed_weights(dt, n * dim, hidden, seed + 2);
  e.gate = stacked(g, n, hidden, dim);
  e.up = stacked(u, n, hidden, dim);
  e.down = stacked(d, n, dim, hidden);
  e.gate_v = std::move(g.deq);
  e.up_v = std::move(u.deq);
  e.down_v = std::move(d.deq);
  return e;
}

double act_of(ActKind act, double v) {
  switch (act) {
    case ActKind::Gelu: return 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0)));
    case ActKind::GeluTanh: return 0.5 * v * (1.0 + std::tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
    default: return v / (1.0 + std::exp(-v));
  }
}

/// moe_ffn in float64: y[t] = sum over route[t, e] != 0 of route[t, e] * down_e . h,
/// h = act(gate_e . x[t]) * (up_e . x[t]).
std::vector<float> moe_ffn_reference(const std::vector<float>& x, const std::vector<float>& route, const Experts& w,
                                     int64_t rows, ActKind act) {
  const int64_t D = w.dim, F = w.hidden, E = w.n;
  std::vector<float> y(static_cast<size_t>(rows * D), 0.0f);
  std::vector<double> h(static_cast<size_t>(F)), acc(static_cast<size_t>(D));
  for (int64_t t = 0; t < rows; ++t) {
    std::fill(acc.begin(), acc.end(), 0.0);
    for (int64_t e = 0; e < E; ++e) {
      const double r = route[static_cast<size_t>(t * E + e)];
      if (r == 0.0) continue;
      for (int64_t f = 0; f < F; ++f) {
        double g = 0, u = 0;
        for (int64_t c = 0; c < D; ++c) {
          const double xv = x[static_cast<size_t>(t * D + c)];
          g += xv * w.gate_v[static_cast<size_t>((e * F + f) * D + c)];
          u += xv * w.up_v[static_cast<size_t>((e * F + f) * D + c)];
        }
        h[static_cast<size_t>(f)] = act_of(act, g) * u;
      }
      for (int64_t c = 0; c < D; ++c) {
        double s = 0;
        for (int64_t f = 0; f < F; ++f) s += w.down_v[static_cast<size_t>((e * D + c) * F + f)] * h[static_cast<size_t>(f)];
        acc[static_cast<size_t>(c)] += r * s;
      }
    }
    for (int64_t c = 0; c < D; ++c) y[static_cast<size_t>(t * D + c)] = static_cast<float>(acc[static_cast<size_t>(c)]);
  }
  return y;
}

/// Routes for `rows` tokens over `experts` (at least 6): token t % 4 == 3 goes to no
/// expert, token 5 to every expert, the others to 1..3 experts apart, weights in [0.1, 1).
std::vector<float> route_pattern(int64_t rows, int64_t experts, uint32_t seed) {
  const auto weights = random_vec(static_cast<size_t>(rows * experts), seed, 0.1f, 1.0f);
  std::vector<float> r(weights.size(), 0.0f);
  for (int64_t t = 0; t < rows; ++t) {
    if (t % 4 == 3) continue;
    const int64_t n = t == 5 ? experts : t % 3 + 1;
    for (int64_t i = 0; i < n; ++i) {
      const auto at = static_cast<size_t>(t * experts + (t == 5 ? i : (t + 2 * i) % experts));
      r[at] = weights[at];
    }
  }
  return r;
}

/// moe_ffn over a given route (no moe_route: every expert may be chosen) on CUDA against
/// moe_ffn_reference.
void check_ffn(DType dt, int64_t rows, int64_t experts, int64_t dim, int64_t hidden, ActKind act,
               const std::vector<float>& route, const std::string& what, double f16_tol = 1e-5) {
  const Experts w = make_experts(dt, experts, dim, hidden, 400);
  GraphBuilder b;
  auto x = b.input("x", DType::F32, {rows, dim});
  auto r = b.input("route", DType::F32, {rows, experts});
  b.output(b.moe_ffn(x, r, b.param("w_gate", dt, {experts, hidden, dim}), b.param("w_up", dt, {experts, hidden, dim}),
                     b.param("w_down", dt, {experts, dim, hidden}), act),
           "y");
  auto g = b.build();
  ASSERT_TRUE(g.has_value()) << g.error().to_string();
  Case c;
  c.inputs["x"] = f32({rows, dim}, 401);
  c.inputs["route"] = Tensor::from_f32(route, {rows, experts});
  c.params["w_gate"] = w.gate;
  c.params["w_up"] = w.up;
  c.params["w_down"] = w.down;
  auto out = run_on(Device::cuda(), *g, c);
  ASSERT_TRUE(out.has_value()) << what << ": " << out.error().to_string();
  const auto got = *(*out)[0].to_f32();
  const auto want = moe_ffn_reference(*c.inputs["x"].to_f32(), route, w, rows, act);
  // f32 products of exact weights and f32 x; with Q8_0 / Q4_0 weights the kernel first
  // rounds a staged x or hidden row to Q8_0 blocks, as llama.cpp's vec-dot rule does (the
  // bound BackendOps gives packed experts).
  const double e = rel_l2(got, want);
  const double tol = dt == DType::Q8_0 || dt == DType::Q4_0 ? 3e-2 : f16_tol;
  EXPECT_LE(e, tol) << what << ": relative L2 error " << e;
  for (int64_t t = 0; t < rows; ++t) {
    bool routed = false;
    for (int64_t j = 0; j < experts; ++j) routed = routed || route[static_cast<size_t>(t * experts + j)] != 0.0f;
    if (routed) continue;
    for (int64_t i = 0; i < dim; ++i)
      ASSERT_EQ(got[static_cast<size_t>(t * dim + i)], 0.0f) << what << ": token " << t << " has no expert";
  }
}

TEST(CudaMoe, FfnMatchesHostReference) {
  REQUIRE_CUDA();
  struct Form {
    DType dt;
    int64_t dim, hidden;
    ActKind act;
  };
  const int64_t experts = 6;
  for (const Form& f : {Form{DType::F32, 40, 24, ActKind::Silu}, Form{DType::F16, 72, 40, ActKind::GeluTanh},
                        Form{DType::BF16, 64, 48, ActKind::Gelu}, Form{DType::Q8_0, 64, 96, ActKind::Silu},
                        Form{DType::Q4_K, 256, 256, ActKind::Silu}, Form{DType::Q6_K, 256, 512, ActKind::Silu},
                        Form{DType::IQ4_XS, 256, 256, ActKind::Silu}, Form{DType::IQ3_S, 256, 256, ActKind::Silu},
                        Form{DType::IQ2_XXS, 256, 512, ActKind::Silu}, Form{DType::IQ1_M, 256, 256, ActKind::Silu}}) {
    for (int64_t rows : {1, 9}) {
      const std::string what = fmt::format("{} T={} D={} F={}", ir::dtype_name(f.dt), rows, f.dim, f.hidden);
      check_ffn(f.dt, rows, experts, f.dim, f.hidden, f.act, route_pattern(rows, experts, 402), what);
    }
    // One token routed to no expert.
    check_ffn(f.dt, 1, experts, f.dim, f.hidden, f.act, std::vector<float>(experts, 0.0f),
              fmt::format("{} unrouted token", ir::dtype_name(f.dt)));
  }
}

TEST(CudaMoe, FfnVectorsTooLongToStage) {
  REQUIRE_CUDA();
  // x rows of 12288 floats, then hidden rows of 12288: over 48 KiB staged, read from
  // global memory instead.
  const int64_t rows = 3, experts = 6;
  check_ffn(DType::Q8_0, rows, experts, 12288, 32, ActKind::Silu, route_pattern(rows, experts, 410), "long x");
  check_ffn(DType::F16, rows, experts, 32, 12288, ActKind::Silu, route_pattern(rows, experts, 411), "long hidden");
}

// Runs of 16 rows or more take the grouped form (pairs sorted by expert, one
// tensor-core product per expert): Q8_0 / Q4_0 on int8 products of Q8_0-rounded x and
// hidden rows, the other types on f16 tiles (x, W and the hidden rows rounded to f16:
// the 2e-3 bound). Covered: tokens routed to no expert or to every expert, one expert
// taking every token (several tiles of it, the last one partial), a run of exactly 16
// rows, and many experts with few tokens each.
TEST(CudaMoe, GroupedFfnMatchesHostReference) {
  REQUIRE_CUDA();
  struct Form {
    DType dt;
    int64_t dim, hidden;
  };
  for (const Form& f : {Form{DType::F16, 64, 96}, Form{DType::Q8_0, 64, 96}, Form{DType::Q4_0, 96, 64},
                        Form{DType::Q5_0, 64, 96}, Form{DType::Q4_K, 256, 256}, Form{DType::Q6_K, 256, 512},
                        Form{DType::IQ4_XS, 256, 256}}) {
    const std::string name(ir::dtype_name(f.dt));
    for (int64_t rows : {16, 150}) {
      check_ffn(f.dt, rows, 6, f.dim, f.hidden, ActKind::Silu, route_pattern(rows, 6, 450),
                fmt::format("{} grouped T={}", name, rows), 2e-3);
    }
    // Every token to expert 4 alone: three tiles of it (64, 64, 2 rows).
    const int64_t rows = 130, experts = 6;
    std::vector<float> one(static_cast<size_t>(rows * experts), 0.0f);
    for (int64_t t = 0; t < rows; ++t) one[static_cast<size_t>(t * experts + 4)] = 0.25f + 0.005f * static_cast<float>(t);
    check_ffn(f.dt, rows, experts, f.dim, f.hidden, ActKind::GeluTanh, one, name + " grouped, one expert", 2e-3);
    // 40 experts, two each for 24 tokens: most experts get one or two rows.
    const int64_t many = 40, few_rows = 24;
    std::vector<float> spread(static_cast<size_t>(few_rows * many), 0.0f);
    for (int64_t t = 0; t < few_rows; ++t) {
      spread[static_cast<size_t>(t * many + (7 * t) % many)] = 0.6f;
      spread[static_cast<size_t>(t * many + (7 * t + 13) % many)] = 0.4f;
    }
    check_ffn(f.dt, few_rows, many, f.dim, f.hidden, ActKind::Silu, spread, name + " grouped, 40 experts", 2e-3);
  }
}

// moe_route -> moe_ffn over `rows` tokens, compiled once and run five times with new
// logits and x: each run must take the experts its route chooses (for one token, the
// CUDA graph captured on a later run; for many, the grouped form's device-made tables).
// Checked: the route against the CPU backend's, y against the reference over that route.
void check_routed_runs(DType dt, int64_t rows, int64_t experts, int64_t k, double tol) {
  const int64_t dim = 256, hidden = 256;
  const Experts w = make_experts(dt, experts, dim, hidden, 420);
  GraphBuilder b;
  auto x = b.input("x", DType::F32, {rows, dim});
  auto route = b.moe_route(b.input("logits", DType::F32, {rows, experts}), {k, MoeGating::Softmax, true});
  b.output(route, "route");
  b.output(b.moe_ffn(x, route, b.param("w_gate", dt, {experts, hidden, dim}), b.param("w_up", dt, {experts, hidden, dim}),
                     b.param("w_down", dt, {experts, dim, hidden})),
           "y");
  auto g = b.build();
  ASSERT_TRUE(g.has_value()) << g.error().to_string();
  Case c;
  auto gpu_s = Session::create(Device::cuda());
  ASSERT_TRUE(gpu_s.has_value()) << gpu_s.error().to_string();
  auto gpu = gpu_s->compile_with(*g, c.opt);
  ASSERT_TRUE(gpu.has_value()) << gpu.error().to_string();
  auto cpu_s = Session::create(Device::cpu());
  ASSERT_TRUE(cpu_s.has_value()) << cpu_s.error().to_string();
  auto cpu = cpu_s->compile_with(*g, c.opt);
  ASSERT_TRUE(cpu.has_value()) << cpu.error().to_string();
  for (const char* name : {"w_gate", "w_up", "w_down"}) {
    const Tensor& t = std::string(name) == "w_gate" ? w.gate : std::string(name) == "w_up" ? w.up : w.down;
    ASSERT_TRUE(gpu->set_param_typed(name, t.bytes(), t.dtype()).ok());
    ASSERT_TRUE(cpu->set_param_typed(name, t.bytes(), t.dtype()).ok());
  }
  for (uint32_t run = 0; run < 5; ++run) {
    const std::string what = fmt::format("{} T={} run {}", ir::dtype_name(dt), rows, run);
    const Tensor xv = f32({rows, dim}, 430 + run), logits = f32({rows, experts}, 440 + run, -3, 3);
    const std::vector<NamedTensorView> views{{"x", xv.view()}, {"logits", logits.view()}};
    auto go = gpu->run_typed(views);
    ASSERT_TRUE(go.has_value()) << what << ": " << go.error().to_string();
    auto co = cpu->run_typed(views);
    ASSERT_TRUE(co.has_value()) << what << ": " << co.error().to_string();
    const auto route_v = *(*go)[0].to_f32();
    expect_same_route(route_v, *(*co)[0].to_f32(), what);
    const double e = rel_l2(*(*go)[1].to_f32(), moe_ffn_reference(*xv.to_f32(), route_v, w, rows, ActKind::Silu));
    EXPECT_LE(e, tol) << what << ": relative L2 error " << e;
  }
}

TEST(CudaMoe, RoutedFfnFollowsTheRouteAcrossGraphRuns) {
  REQUIRE_CUDA();
  for (const DType dt : {DType::F32, DType::Q4_K}) check_routed_runs(dt, 1, 8, 2, 1e-5);
}

TEST(CudaMoe, RoutedGroupedFfnFollowsTheRouteAcrossRuns) {
  REQUIRE_CUDA();
  check_routed_runs(DType::Q8_0, 96, 16, 4, 3e-2);
  check_routed_runs(DType::Q4_K, 96, 16, 4, 2e-3);
}

}  // namespace
}  // namespace rlx
