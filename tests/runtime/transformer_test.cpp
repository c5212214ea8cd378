// A whole transformer block (RMS norm -> GQA attention with RoPE and a causal mask ->
// residual -> RMS norm -> SwiGLU FFN -> residual) written in HIR, compiled with the
// Direct and Fusable policies and with fusion off, against a hand-written double
// reference. Also: KV-cache decode through handles equals full recompute, and
// set_active_extent on a bucketed graph equals the unpadded graph.
// Tolerance: 2e-4 absolute (f32 accumulation over d_model = 24, ffn = 40).
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <thread>

#include "rt_util.h"

namespace rlx {
namespace {

using ir::DType;
using ir::GraphBuilder;
using ir::OpKind;
using ir::ValueId;
using namespace rt_test;

constexpr int64_t kD = 24, kH = 4, kKV = 2, kHd = 6, kF = 40;
constexpr double kEps = 1e-5;
constexpr int64_t kCtx = 16;

struct Weights {
  std::map<std::string, std::vector<float>> w;
  Weights() {
    uint32_t seed = 1000;
    auto add = [&](const std::string& n, size_t count, float scale) {
      w[n] = random_vec(count, seed++, -scale, scale);
    };
    add("wq", kH * kHd * kD, 0.3f);
    add("wk", kKV * kHd * kD, 0.3f);
    add("wv", kKV * kHd * kD, 0.3f);
    add("wo", kD * kH * kHd, 0.3f);
    add("wg", kF * kD, 0.3f);
    add("wu", kF * kD, 0.3f);
    add("wd", kD * kF, 0.3f);
    w["attn_norm"] = random_vec(kD, seed++, 0.5f, 1.5f);
    w["ffn_norm"] = random_vec(kD, seed++, 0.5f, 1.5f);
  }
  void load(CompiledGraph& g) const {
    for (const auto& [name, v] : w) {
      Status st = g.set_param(name, v);
      EXPECT_TRUE(st.ok()) << name << ": " << st.error().to_string();
    }
  }
};

// The block in HIR over x[seq, d] (seq: a number or a symbol).
ir::HirModule block_hir(ir::Dim seq, ir::FusionPolicy policy, bool kv_cache) {
  GraphBuilder b;
  auto x = b.input("x", DType::F32, {seq, kD});
  auto pos = b.input("pos", DType::I32, {seq});
  auto p = [&](const char* n, ir::Shape s) { return b.param(n, DType::F32, std::move(s)); };
  auto wq = p("wq", {kH * kHd, kD}), wk = p("wk", {kKV * kHd, kD}), wv = p("wv", {kKV * kHd, kD});
  auto wo = p("wo", {kD, kH * kHd});
  auto an = p("attn_norm", {kD}), fn = p("ffn_norm", {kD});
  auto wg = p("wg", {kF, kD}), wu = p("wu", {kF, kD}), wd = p("wd", {kD, kF});
  ir::AttentionBlockAttrs a;
  a.attn.n_heads = kH;
  a.attn.n_kv_heads = kKV;
  a.attn.head_dim = kHd;
  a.attn.mask = ir::MaskKind::Causal;
  a.rope.theta = 10000.0;
  a.kv_cache = kv_cache;
  std::vector<ValueId> in{b.op(OpKind::HirRmsNorm, {x, an}, ir::NormAttrs{kEps}), wq, wk, wv, wo, pos};
  if (kv_cache) {
    in.push_back(b.handle("k_cache", DType::F32, {kCtx, kKV * kHd}));
    in.push_back(b.handle("v_cache", DType::F32, {kCtx, kKV * kHd}));
  }
  auto attn = b.op(OpKind::HirAttentionBlock, in, a);
  auto x2 = b.add(x, attn);
  auto h2 = b.op(OpKind::HirRmsNorm, {x2, fn}, ir::NormAttrs{kEps});
  auto f = b.op(OpKind::HirSwiGLUFfn, {h2, wg, wu, wd}, ir::NoAttrs{});
  b.output(b.add(x2, f), "y");
  return ir::HirModule{build(b), policy};
}

// ---- the reference forward pass, in double ------------------------------------------
using Mat = std::vector<double>;

Mat linear(const Mat& x, const std::vector<float>& w, int64_t rows, int64_t k, int64_t n) {
  Mat y(static_cast<size_t>(rows * n), 0.0);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t t = 0; t < k; ++t) s += x[i * k + t] * w[j * k + t];
      y[i * n + j] = s;
    }
  return y;
}

Mat rms(const Mat& x, const std::vector<float>& g, int64_t rows) {
  Mat y(x.size());
  for (int64_t i = 0; i < rows; ++i) {
    double ss = 0;
    for (int64_t j = 0; j < kD; ++j) ss += x[i * kD + j] * x[i * kD + j];
    const double s = 1 / std::sqrt(ss / kD + kEps);
    for (int64_t j = 0; j < kD; ++j) y[i * kD + j] = x[i * kD + j] * s * g[j];
  }
  return y;
}

void rope(Mat& x, const std::vector<int32_t>& pos, int64_t rows, int64_t heads) {
  for (int64_t s = 0; s < rows; ++s)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < kHd / 2; ++i) {
        const double a = pos[s] * std::pow(10000.0, -2.0 * i / kHd);
        double& x0 = x[(s * heads + h) * kHd + 2 * i];
        double& x1 = x[(s * heads + h) * kHd + 2 * i + 1];
        const double r0 = x0 * std::cos(a) - x1 * std::sin(a), r1 = x0 * std::sin(a) + x1 * std::cos(a);
        x0 = r0;
        x1 = r1;
      }
}

Mat reference_block(const std::vector<float>& xf, const std::vector<int32_t>& pos, const Weights& W) {
  const int64_t S = static_cast<int64_t>(pos.size());
  Mat x(xf.begin(), xf.end());
  const auto& w = W.w;
  Mat h = rms(x, w.at("attn_norm"), S);
  Mat q = linear(h, w.at("wq"), S, kD, kH * kHd), k = linear(h, w.at("wk"), S, kD, kKV * kHd),
      v = linear(h, w.at("wv"), S, kD, kKV * kHd);
  rope(q, pos, S, kH);
  rope(k, pos, S, kKV);
  Mat o(static_cast<size_t>(S * kH * kHd), 0.0);
  for (int64_t hh = 0; hh < kH; ++hh) {
    const int64_t kvh = hh / (kH / kKV);
    for (int64_t i = 0; i < S; ++i) {
      std::vector<double> sc;
      double mx = -INFINITY;
      for (int64_t j = 0; j <= i; ++j) {
        double s = 0;
        for (int64_t d = 0; d < kHd; ++d) s += q[(i * kH + hh) * kHd + d] * k[(j * kKV + kvh) * kHd + d];
        sc.push_back(s / std::sqrt(double(kHd)));
        mx = std::max(mx, sc.back());
      }
      double sum = 0;
      for (double& s : sc) sum += (s = std::exp(s - mx));
      for (int64_t j = 0; j <= i; ++j)
        for (int64_t d = 0; d < kHd; ++d) o[(i * kH + hh) * kHd + d] += sc[j] / sum * v[(j * kKV + kvh) * kHd + d];
    }
  }
  Mat attn = linear(o, w.at("wo"), S, kH * kHd, kD);
  for (size_t i = 0; i < x.size(); ++i) x[i] += attn[i];
  Mat h2 = rms(x, w.at("ffn_norm"), S);
  Mat g = linear(h2, w.at("wg"), S, kD, kF), u = linear(h2, w.at("wu"), S, kD, kF);
  for (size_t i = 0; i < g.size(); ++i) g[i] = g[i] / (1 + std::exp(-g[i])) * u[i];
  Mat f = linear(g, w.at("wd"), S, kF, kD);
  for (size_t i = 0; i < x.size(); ++i) x[i] += f[i];
  return x;
}

std::vector<int32_t> iota_pos(int64_t n, int32_t from = 0) {
  std::vector<int32_t> p(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) p[static_cast<size_t>(i)] = from + static_cast<int32_t>(i);
  return p;
}

Expected<std::vector<Tensor>> run_block(CompiledGraph& g, const std::vector<float>& x, const std::vector<int32_t>& pos) {
  const int64_t S = static_cast<int64_t>(pos.size());
  const int64_t xs[] = {S, kD}, ps[] = {S};
  const NamedTensorView in[] = {{"x", TensorView::f32(x, xs)}, {"pos", TensorView{DType::I32, ps, pos.data()}}};
  return g.run(in);
}

CompiledGraph compile_hir(const ir::HirModule& hir, const compile::CompileOptions& opt) {
  auto c = Session(Device::cpu()).compile_hir_with(hir, opt);
  if (!c) ADD_FAILURE() << c.error().to_string();
  return std::move(c).value();
}

TEST(TransformerBlock, DirectFusableAndUnfusedMatchReference) {
  const Weights W;
  const int64_t S = 7;
  const auto x = random_vec(S * kD, 77);
  const auto pos = iota_pos(S);
  const Mat ref = reference_block(x, pos, W);
  struct Variant {
    const char* name;
    ir::FusionPolicy policy;
    bool skip_fusion;
  };
  std::vector<std::vector<float>> outs;
  for (const Variant& v : {Variant{"direct", ir::FusionPolicy::Direct, false},
                           Variant{"fusable", ir::FusionPolicy::Fusable, false},
                           Variant{"fusable-unfused", ir::FusionPolicy::Fusable, true}}) {
    compile::CompileOptions opt;
    opt.fusion.skip = v.skip_fusion;
    CompiledGraph g = compile_hir(block_hir(S, v.policy, false), opt);
    W.load(g);
    auto out = run_block(g, x, pos);
    ASSERT_TRUE(out.has_value()) << v.name << ": " << out.error().to_string();
    outs.push_back(as_f32((*out)[0]));
    EXPECT_LT(max_abs_diff(outs.back(), ref), 2e-4) << v.name;
    if (v.policy == ir::FusionPolicy::Fusable && !v.skip_fusion) {
      EXPECT_GT(g.fusion_report().count("swiglu"), 0) << g.fusion_report().to_string();
    }
  }
  // Fused and unfused forms agree with each other closely too.
  EXPECT_LT(max_abs_diff(outs[0], outs[1]), 1e-4);
  EXPECT_LT(max_abs_diff(outs[1], outs[2]), 1e-4);
}

TEST(TransformerBlock, LowPrecisionStorage) {
  // The compiler picks f16/bf16 storage (casts inserted, weights retyped); the CPU
  // kernels run it. Tolerance: bf16 keeps 8 bits of mantissa -> ~5e-2 on outputs ~1.
  const Weights W;
  const int64_t S = 5;
  const auto x = random_vec(S * kD, 81);
  const auto pos = iota_pos(S);
  const Mat ref = reference_block(x, pos, W);
  for (compile::Precision p : {compile::Precision::F16, compile::Precision::BF16}) {
    for (compile::MixedPrecision m : {compile::MixedPrecision::Auto, compile::MixedPrecision::None}) {
      compile::CompileOptions opt;
      opt.precision = p;
      opt.mixed = m;
      CompiledGraph g = compile_hir(block_hir(S, ir::FusionPolicy::Direct, false), opt);
      int low = 0;
      for (const auto& e : g.manifest().params) low += e.type.dtype == compile::precision_dtype(p);
      EXPECT_GT(low, 0) << "no weight stored in " << compile::to_string(p);
      W.load(g);  // f32 data, converted to the stored dtype
      auto out = run_block(g, x, pos);
      ASSERT_TRUE(out.has_value()) << out.error().to_string();
      EXPECT_EQ((*out)[0].dtype(), DType::F32);
      const double tol = p == compile::Precision::F16 ? 1e-2 : 8e-2;
      EXPECT_LT(max_abs_diff(as_f32((*out)[0]), ref), tol) << compile::to_string(p) << " " << compile::to_string(m);
    }
  }
}

TEST(TransformerBlock, ClonesRunConcurrently) {
  const Weights W;
  const int64_t S = 6;
  CompiledGraph g = compile_hir(block_hir(S, ir::FusionPolicy::Direct, false), {});
  W.load(g);
  auto c = g.clone();
  ASSERT_TRUE(c.has_value());
  const auto xa = random_vec(S * kD, 82), xb = random_vec(S * kD, 83);
  const auto pos = iota_pos(S);
  std::vector<float> ya, yb;
  std::thread t1([&] {
    for (int i = 0; i < 5; ++i) ya = as_f32((*run_block(g, xa, pos))[0]);
  });
  std::thread t2([&] {
    for (int i = 0; i < 5; ++i) yb = as_f32((*run_block(*c, xb, pos))[0]);
  });
  t1.join();
  t2.join();
  EXPECT_LT(max_abs_diff(ya, reference_block(xa, pos, W)), 2e-4);
  EXPECT_LT(max_abs_diff(yb, reference_block(xb, pos, W)), 2e-4);
}

TEST(TransformerBlock, KvCacheDecodeEqualsFullRecompute) {
  const Weights W;
  const int64_t P = 5;
  const auto x_all = random_vec((P + 1) * kD, 78);
  // Full recompute over P+1 tokens, no cache.
  CompiledGraph full = compile_hir(block_hir(P + 1, ir::FusionPolicy::Direct, false), {});
  W.load(full);
  auto full_out = run_block(full, x_all, iota_pos(P + 1));
  ASSERT_TRUE(full_out.has_value()) << full_out.error().to_string();
  const auto full_y = as_f32((*full_out)[0]);

  // Prefill P tokens into the caches, then decode one token at position P.
  CompiledGraph prefill = compile_hir(block_hir(P, ir::FusionPolicy::Direct, true), {});
  CompiledGraph decode = compile_hir(block_hir(1, ir::FusionPolicy::Direct, true), {});
  W.load(prefill);
  W.load(decode);
  auto pre = run_block(prefill, std::vector<float>(x_all.begin(), x_all.begin() + P * kD), iota_pos(P));
  ASSERT_TRUE(pre.has_value()) << pre.error().to_string();
  EXPECT_LT(max_abs_diff(as_f32((*pre)[0]), std::span<const float>(full_y.data(), P * kD)), 1e-5);
  for (const char* h : {"k_cache", "v_cache"}) {
    auto t = prefill.read_handle(h);
    ASSERT_TRUE(t.has_value());
    ASSERT_TRUE(decode.bind_handle(h, t->view()).ok());
  }
  auto dec = run_block(decode, std::vector<float>(x_all.begin() + P * kD, x_all.end()), iota_pos(1, P));
  ASSERT_TRUE(dec.has_value()) << dec.error().to_string();
  EXPECT_LT(max_abs_diff(as_f32((*dec)[0]), std::span<const float>(full_y.data() + P * kD, kD)), 1e-5);
  // The decode step wrote row P of the caches in place.
  auto kc = decode.read_handle("k_cache");
  ASSERT_TRUE(kc.has_value());
  const auto kcv = as_f32(*kc);
  double row_p = 0, row_next = 0;
  for (int64_t j = 0; j < kKV * kHd; ++j) {
    row_p += std::fabs(kcv[P * kKV * kHd + j]);
    row_next += std::fabs(kcv[(P + 1) * kKV * kHd + j]);
  }
  EXPECT_GT(row_p, 0.0);
  EXPECT_EQ(row_next, 0.0);
}

TEST(ActiveExtent, PaddedRowsNeverAffectRealRows) {
  const Weights W;
  const int64_t upper = 8, actual = 5;
  compile::CompileOptions opt;
  opt.binding.set(ir::SEQ, upper);
  CompiledGraph bucket = compile_hir(block_hir(ir::Dim::symbol(ir::SEQ), ir::FusionPolicy::Direct, false), opt);
  EXPECT_EQ(bucket.bucket_symbol(), ir::SEQ);
  EXPECT_EQ(bucket.bucket_upper(), upper);
  W.load(bucket);
  CompiledGraph exact = compile_hir(block_hir(actual, ir::FusionPolicy::Direct, false), {});
  W.load(exact);
  const auto x = random_vec(actual * kD, 79);
  auto want = run_block(exact, x, iota_pos(actual));
  ASSERT_TRUE(want.has_value());
  // Padded rows hold garbage that would change every row if it leaked.
  std::vector<float> xp = x;
  for (int64_t i = actual * kD; i < upper * kD; ++i) xp.push_back(1000.0f);
  auto pos = iota_pos(actual);
  for (int64_t i = actual; i < upper; ++i) pos.push_back(0);
  ASSERT_TRUE(bucket.set_active_extent(actual, upper).ok());
  auto got = run_block(bucket, xp, pos);
  ASSERT_TRUE(got.has_value()) << got.error().to_string();
  const auto gv = as_f32((*got)[0]);
  EXPECT_LT(max_abs_diff(std::span<const float>(gv.data(), actual * kD), as_f32((*want)[0])), 1e-5);
  // Back to full extent: every row computed.
  ASSERT_TRUE(bucket.set_active_extent(upper, upper).ok());
  auto full = run_block(bucket, xp, pos);
  ASSERT_TRUE(full.has_value());
  EXPECT_FALSE(bucket.set_active_extent(0, upper).ok());
  EXPECT_FALSE(bucket.set_active_extent(3, upper + 1).ok());
}

TEST(ActiveExtent, ReductionsAlongTheBucketStopAtActual) {
  // sum over SEQ and softmax over SEQ: padded rows must not count.
  GraphBuilder b;
  auto x = b.input("x", DType::F32, {ir::Dim::symbol(ir::SEQ), 3});
  b.output(b.reduce(ir::ReduceKind::Sum, x, {0}), "sum");
  b.output(b.softmax(x, 0), "sm");
  b.output(b.add(x, x), "twice");
  compile::CompileOptions opt;
  opt.binding.set(ir::SEQ, 6);
  CompiledGraph g = compile_cpu(build(b), opt);
  ASSERT_TRUE(g.set_active_extent(4, 6).ok());
  std::vector<float> xv = random_vec(12, 80);
  for (int i = 0; i < 6; ++i) xv.push_back(500.0f);
  const int64_t s[] = {6, 3};
  auto out = g.run({NamedF32{"x", xv, s}});
  ASSERT_TRUE(out.has_value()) << out.error().to_string();
  std::vector<double> sum(3, 0.0), sm(12);
  for (int c = 0; c < 3; ++c) {
    double mx = -INFINITY, z = 0;
    for (int r = 0; r < 4; ++r) {
      sum[c] += xv[r * 3 + c];
      mx = std::max(mx, double(xv[r * 3 + c]));
    }
    for (int r = 0; r < 4; ++r) z += std::exp(xv[r * 3 + c] - mx);
    for (int r = 0; r < 4; ++r) sm[r * 3 + c] = std::exp(xv[r * 3 + c] - mx) / z;
  }
  EXPECT_LT(max_abs_diff(as_f32((*out)[0]), sum), 1e-5);
  const auto smv = as_f32((*out)[1]);
  EXPECT_LT(max_abs_diff(std::span<const float>(smv.data(), 12), sm), 1e-6);
  const auto tw = as_f32((*out)[2]);
  for (int i = 0; i < 12; ++i) EXPECT_EQ(tw[i], 2 * xv[i]);
}

}  // namespace
}  // namespace rlx
