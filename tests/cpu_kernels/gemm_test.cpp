// GEMM / GEMV / pre-packed / batched kernels against a float64 reference, over odd
// sizes, both B layouts, every epilogue, f32/f16/bf16 weights and every ISA path.
#include "backends/cpu/kernels/gemm.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "backends/cpu/kernels/amx_matmul.h"
#include "backends/cpu/kernels/bf16_dot_matmul.h"
#include "cpu_kernels/test_util.h"
#include "rlx/base/env.h"
#include "rlx/base/half.h"

namespace rlx::cpu {
namespace {

using test::all_close;
using test::Rng;

double act_ref(double x, Activation a) {
  switch (a) {
    case Activation::kIdentity: return x;
    case Activation::kRelu: return x > 0 ? x : 0;
    case Activation::kSilu: return x / (1 + std::exp(-x));
    case Activation::kGelu: return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
    case Activation::kGeluTanh:
      return 0.5 * x * (1 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
  }
  return x;
}

// Weights stored as `wt`; `bq` holds the values the kernel really sees (after rounding).
struct Weights {
  std::vector<float> f32;
  std::vector<uint16_t> half;
  std::vector<float> seen;
  const void* ptr(WeightType wt) const {
    return wt == WeightType::kF32 ? static_cast<const void*>(f32.data()) : half.data();
  }
};

Weights make_weights(Rng& rng, int64_t count, WeightType wt) {
  Weights w;
  w.f32 = rng.vec(count);
  w.seen = w.f32;
  if (wt != WeightType::kF32) {
    w.half.resize(w.f32.size());
    for (size_t i = 0; i < w.f32.size(); ++i) {
      w.half[i] = wt == WeightType::kF16 ? f32_to_f16_bits(w.f32[i]) : f32_to_bf16_bits(w.f32[i]);
      w.seen[i] = wt == WeightType::kF16 ? f16_bits_to_f32(w.half[i]) : bf16_bits_to_f32(w.half[i]);
    }
  }
  return w;
}

std::vector<double> gemm_ref(const GemmParams& p, const float* a, int64_t lda, const float* b, int64_t ldb,
                             const float* c_old, int64_t ldc) {
  std::vector<double> out(static_cast<size_t>(p.m * ldc), 0.0);
  for (int64_t i = 0; i < p.m; ++i)
    for (int64_t j = 0; j < ldc; ++j) {
      if (j >= p.n) {
        out[i * ldc + j] = c_old[i * ldc + j];
        continue;
      }
      double s = 0;
      for (int64_t k = 0; k < p.k; ++k)
        s += double(a[i * lda + k]) * (p.b_transposed ? b[j * ldb + k] : b[k * ldb + j]);
      if (p.bias) s += p.bias[j];
      s = act_ref(s, p.act);
      if (p.beta != 0) s += p.beta * double(c_old[i * ldc + j]);
      out[i * ldc + j] = s;
    }
  return out;
}

struct Case {
  int64_t m, n, k;
  bool trans;
  Activation act;
  bool bias;
  float beta;
  bool padded;  // non-dense strides
};

// Dense m x k times k x n (B [N, K]), no epilogue.
GemmParams dense(int64_t m, int64_t n, int64_t k) {
  GemmParams p;
  p.m = m;
  p.n = n;
  p.k = k;
  return p;
}

std::vector<float> rounded_to_bf16(std::vector<float> v) {
  for (float& x : v) x = bf16_bits_to_f32(f32_to_bf16_bits(x));
  return v;
}

void run_case(const Case& cs, WeightType wt, bool prepacked) {
  Rng rng;
  RLX_TRACE_SEED(rng);
  GemmParams p;
  p.m = cs.m;
  p.n = cs.n;
  p.k = cs.k;
  p.b_transposed = cs.trans;
  p.act = cs.act;
  p.beta = cs.beta;
  const int64_t pad = cs.padded ? 3 : 0;
  const int64_t lda = cs.k + pad, ldb = (cs.trans ? cs.k : cs.n) + pad, ldc = cs.n + pad;
  if (cs.padded) {
    p.lda = lda;
    p.ldb = ldb;
    p.ldc = ldc;
  }
  const std::vector<float> a = rng.vec(std::max<int64_t>(1, cs.m * lda));
  const Weights w = make_weights(rng, std::max<int64_t>(1, (cs.trans ? cs.n : cs.k) * ldb), wt);
  const std::vector<float> bias = rng.vec(std::max<int64_t>(1, cs.n));
  if (cs.bias) p.bias = bias.data();
  const std::vector<float> c0 = rng.vec(std::max<int64_t>(1, cs.m * ldc));
  const std::vector<double> want = gemm_ref(p, a.data(), lda, w.seen.data(), ldb, c0.data(), ldc);
  // The BF16 dot products see x and W rounded to bf16; their products are exact in f32,
  // so against those values they are as close as the f32 path.
  const std::vector<double> want_bf16 = gemm_ref(p, rounded_to_bf16(a).data(), lda, rounded_to_bf16(w.seen).data(),
                                                 ldb, c0.data(), ldc);
  const double tol = 2e-6 * std::sqrt(double(std::max<int64_t>(cs.k, 1))) + 1e-6;
  // The AMX tiles (f16 / bf16 weights, pre-packed, amx_min_rows() rows or more) add the
  // three largest bf16 cross products of x = xh + xl and w = wh + wl: each product is off
  // by at most ~2^-17 of |x w|, so the bound grows like the f32 path's but 8x wider.
  const double amx_tol = 1.6e-5 * std::sqrt(double(std::max<int64_t>(cs.k, 1))) + 1e-5;
  for (const KernelContext& ctx : test::contexts()) {
    SCOPED_TRACE(test::describe(ctx));
    const bool on_tiles = prepacked && wt != WeightType::kF32 && cs.m >= amx_min_rows() && amx_enabled(ctx.isa);
    bool on_bf16_dot = false;
    std::vector<float> c = c0;
    if (prepacked) {
      const PackedB pb = pack_b(ctx, cs.k, cs.n, cs.trans, cs.padded ? ldb : 0, w.ptr(wt), wt);
      on_bf16_dot = !on_tiles && bf16_dot_takes(ctx.isa, bf16_dot_policy(), cs.m, pb);
      gemm_prepacked(ctx, p, a.data(), pb, c.data());
    } else {
      // Per-call packing takes the same products as packing ahead (no AMX path here).
      on_bf16_dot = cs.m > kGemvMaxM && bf16_dot_takes_unpacked(ctx.isa, bf16_dot_policy(), cs.m, wt);
      gemm(ctx, p, a.data(), w.ptr(wt), wt, c.data());
    }
    const double t = on_tiles ? amx_tol : tol;
    ASSERT_TRUE(all_close(c.data(), (on_bf16_dot ? want_bf16 : want).data(), cs.m * ldc, t, t))
        << "m=" << cs.m << " n=" << cs.n << " k=" << cs.k << " trans=" << cs.trans << " act=" << int(cs.act)
        << " beta=" << cs.beta << " wt=" << int(wt) << " prepacked=" << prepacked << " bf16_dot=" << on_bf16_dot;
  }
}

const int64_t kSizes[] = {1, 3, 17, 33, 100};

TEST(Gemm, OddSizesBothLayoutsF32) {
  for (int64_t m : kSizes)
    for (int64_t n : kSizes)
      for (int64_t k : {int64_t{1}, int64_t{17}, int64_t{100}})
        for (bool trans : {true, false}) run_case({m, n, k, trans, Activation::kIdentity, false, 0.0f, false},
                                                  WeightType::kF32, false);
}

TEST(Gemm, EpiloguesAndStrides) {
  const Activation acts[] = {Activation::kIdentity, Activation::kRelu, Activation::kSilu, Activation::kGelu,
                             Activation::kGeluTanh};
  for (Activation act : acts)
    for (float beta : {0.0f, 0.5f})
      for (bool prepacked : {false, true}) {
        run_case({33, 45, 300, true, act, true, beta, true}, WeightType::kF32, prepacked);
        run_case({3, 70, 17, false, act, true, beta, true}, WeightType::kF32, prepacked);
      }
}

TEST(Gemm, LongKSplitsIntoBlocksWithBeta) {
  // K > one K block with beta and identity (split) and with gelu (unsplit).
  run_case({20, 40, 700, true, Activation::kIdentity, true, 1.0f, false}, WeightType::kF32, false);
  run_case({20, 40, 700, false, Activation::kGelu, true, 1.0f, false}, WeightType::kF32, true);
}

TEST(Gemm, HalfWeights) {
  for (WeightType wt : {WeightType::kF16, WeightType::kBF16})
    for (bool prepacked : {false, true})
      for (int64_t m : {int64_t{1}, int64_t{4}, int64_t{19}})
        for (bool trans : {true, false})
          run_case({m, 37, 65, trans, Activation::kSilu, true, 0.0f, false}, wt, prepacked);
}

// Many rows against f16 / bf16 pre-packed weights: the AMX tiles where the CPU has them
// (row blocks of 32 with a partial one, passes of kAmxRowsPerPass rows, K past one
// decoded block and not a multiple of 32, column chunks with a partial tail), the
// AVX-512 / AVX2 / scalar panels everywhere.
TEST(Gemm, PrepackedHalfWeightsManyRows) {
  for (WeightType wt : {WeightType::kF16, WeightType::kBF16}) {
    run_case({32, 37, 65, true, Activation::kIdentity, false, 0.0f, false}, wt, true);
    run_case({45, 100, 300, true, Activation::kSilu, true, 0.5f, true}, wt, true);
    run_case({530, 70, 40, false, Activation::kGelu, true, 0.0f, true}, wt, true);
    run_case({40, 290, 2100, true, Activation::kIdentity, true, 1.0f, false}, wt, true);
  }
}

// bf16 weights take the BF16 dot products (where the CPU has them, outside the AMX
// tiles) under the default policy: rows below, at and past kBf16DotMinRows, tile tails
// (rows not a multiple of 14), two row passes, K odd and past one weight chunk, a
// partial last panel, every epilogue; and packed per call. run_case checks them against
// x and W in bf16.
TEST(Gemm, Bf16WeightsOnDotProducts) {
  run_case({kBf16DotMinRows - 1, 37, 65, true, Activation::kIdentity, false, 0.0f, false}, WeightType::kBF16, true);
  run_case({kBf16DotMinRows, 64, 64, true, Activation::kSilu, true, 0.5f, true}, WeightType::kBF16, true);
  run_case({29, 100, 1031, false, Activation::kGelu, true, 0.0f, false}, WeightType::kBF16, true);
  run_case({kBf16DotRowsPerPass + 3, 33, 40, true, Activation::kGeluTanh, true, 1.0f, true}, WeightType::kBF16, true);
  run_case({20, 45, 7, true, Activation::kRelu, true, 0.0f, false}, WeightType::kBF16, true);
  // Packed per call (gemm): stripes of 1024 columns, both layouts, strides, a bias.
  for (bool trans : {true, false})
    run_case({20, 1100, 70, trans, Activation::kSilu, true, 0.5f, true}, WeightType::kBF16, false);
  const PackedB f16 = pack_b(KernelContext{nullptr, IsaLevel::kAvx512}, 8, 8, true, 0,
                             std::vector<uint16_t>(64, 0).data(), WeightType::kF16);
  EXPECT_FALSE(bf16_dot_takes(IsaLevel::kAvx512, Bf16DotPolicy::kBf16, 64, f16));  // f16 stays exact by default
  EXPECT_EQ(bf16_dot_takes(IsaLevel::kAvx512, Bf16DotPolicy::kAll, 64, f16), bf16_dot_usable(IsaLevel::kAvx512));
  EXPECT_FALSE(bf16_dot_takes(IsaLevel::kAvx2, Bf16DotPolicy::kAll, 64, f16));
}

// keep_x_f32 (dequant_matmul's promise of f32 activations) keeps many rows of bf16
// weights off the BF16 dot products: the f32 path's bound against the exact products.
TEST(Gemm, KeepXF32StaysOffTheDotProducts) {
  Rng rng;
  RLX_TRACE_SEED(rng);
  const int64_t m = 40, n = 70, k = 300;
  const Weights w = make_weights(rng, n * k, WeightType::kBF16);
  const std::vector<float> a = rng.vec(m * k);
  GemmParams p = dense(m, n, k);
  p.keep_x_f32 = true;
  const std::vector<float> zero(static_cast<size_t>(m * n), 0.0f);
  const std::vector<double> want = gemm_ref(p, a.data(), k, w.seen.data(), k, zero.data(), n);
  const double tol = 2e-6 * std::sqrt(double(k)) + 1e-6;
  for (const KernelContext& ctx : test::contexts()) {
    if (amx_enabled(ctx.isa)) continue;  // the tiles' own split products (PrepackedHalfWeightsManyRows)
    std::vector<float> c1(static_cast<size_t>(m * n)), c2(c1.size());
    gemm(ctx, p, a.data(), w.ptr(WeightType::kBF16), WeightType::kBF16, c1.data());
    gemm_prepacked(ctx, p, a.data(), pack_b(ctx, k, n, true, 0, w.ptr(WeightType::kBF16), WeightType::kBF16),
                   c2.data());
    ASSERT_TRUE(all_close(c1.data(), want.data(), m * n, tol, tol)) << test::describe(ctx) << " gemm";
    ASSERT_TRUE(all_close(c2.data(), want.data(), m * n, tol, tol)) << test::describe(ctx) << " prepacked";
  }
}

// bf16_dot_gemm_prepacked itself on f16 weights (what RLX_CPU_BF16_DOT=all sends it):
// they are rounded to bf16 like x.
TEST(Gemm, Bf16DotRoundsOtherHalfWeights) {
  if (!bf16_dot_usable(IsaLevel::kAvx512)) GTEST_SKIP() << "no AVX512_BF16 on this CPU";
  Rng rng;
  RLX_TRACE_SEED(rng);
  for (const KernelContext& ctx : {KernelContext{nullptr, IsaLevel::kAvx512}, KernelContext{&test::test_pool(), IsaLevel::kAvx512}}) {
    const int64_t m = 31, n = 70, k = 1100;
    const Weights w = make_weights(rng, n * k, WeightType::kF16);
    const std::vector<float> a = rng.vec(m * k);
    GemmParams p = dense(m, n, k);
    p.lda = k;
    p.ldc = n;
    const PackedB pb = pack_b(ctx, k, n, true, 0, w.ptr(WeightType::kF16), WeightType::kF16);
    std::vector<float> c(static_cast<size_t>(m * n));
    bf16_dot_gemm_prepacked(ctx, p, a.data(), pb, c.data());
    const std::vector<float> zero(c.size(), 0.0f);  // beta 0: C's old values are not read
    const std::vector<double> want =
        gemm_ref(p, rounded_to_bf16(a).data(), k, rounded_to_bf16(w.seen).data(), k, zero.data(), n);
    const double tol = 2e-6 * std::sqrt(double(k)) + 1e-6;
    ASSERT_TRUE(all_close(c.data(), want.data(), m * n, tol, tol)) << test::describe(ctx);
  }
}

// One-row products over packed f16 panels of 1 MiB or more (an f16 model's decode) feed
// the prefetch-distance and thread-split measurements as the quantized GEMVs do, and
// change no result bit.
TEST(Gemm, PanelGemvFeedsThePrefetchMeasurement) {
  if (env_config().cpu_gemv_prefetch >= 0 || env_config().cpu_gemv_split >= 0)
    GTEST_SKIP() << "RLX_CPU_GEMV_PREFETCH or RLX_CPU_GEMV_SPLIT is set";
  Rng rng;
  RLX_TRACE_SEED(rng);
  const int64_t k = 1024, n = 1024;  // f16: 2 MiB of panels
  const KernelContext ctx{&test::test_pool(), IsaLevel::kAvx512};
  const Weights w = make_weights(rng, n * k, WeightType::kF16);
  const PackedB pb = pack_b(ctx, k, n, true, 0, w.ptr(WeightType::kF16), WeightType::kF16);
  const std::vector<float> x = rng.vec(k);
  const GemmParams p = dense(1, n, k);
  auto run = [&] {
    std::vector<float> y(static_cast<size_t>(n));
    gemm_prepacked(ctx, p, x.data(), pb, y.data());
    return y;
  };
  test::expect_prefetch_measurement_settles(run);
}

TEST(Gemm, PrepackedOddSizes) {
  for (int64_t m : kSizes)
    for (int64_t n : {int64_t{1}, int64_t{33}, int64_t{100}})
      run_case({m, n, 33, true, Activation::kIdentity, false, 0.0f, false}, WeightType::kF32, true);
}

TEST(Gemm, PrepackedGemvRowsAndKRemainders) {
  // The packed GEMV path (M <= kGemvMaxM) unrolls K by up to 4: every remainder, with
  // an epilogue that reads C.
  for (WeightType wt : {WeightType::kF32, WeightType::kF16, WeightType::kBF16})
    for (int64_t m = 1; m <= kGemvMaxM; ++m)
      for (int64_t k : {int64_t{1}, int64_t{2}, int64_t{7}, int64_t{258}})
        run_case({m, 100, k, true, Activation::kGelu, true, 0.5f, true}, wt, true);
}

// pack_b_into writes the same panels as pack_b into caller memory (packed_b_bytes of
// it; the bytes after them untouched) and the GEMM against either gives the same C, for
// both B layouts, a row stride and every weight type.
TEST(Gemm, PackIntoCallerMemoryMatchesPackB) {
  Rng rng;
  RLX_TRACE_SEED(rng);
  for (WeightType wt : {WeightType::kF32, WeightType::kF16, WeightType::kBF16})
    for (bool trans : {true, false}) {
      const int64_t m = 40, n = 45, k = 70, ldb = (trans ? k : n) + 3;
      const Weights w = make_weights(rng, (trans ? n : k) * ldb, wt);
      const std::vector<float> a = rng.vec(m * k);
      GemmParams p;
      p.m = m;
      p.n = n;
      p.k = k;
      for (const KernelContext& ctx : test::contexts()) {
        SCOPED_TRACE(test::describe(ctx) + " wt=" + std::to_string(int(wt)) + " trans=" + std::to_string(trans));
        const PackedB owned = pack_b(ctx, k, n, trans, ldb, w.ptr(wt), wt);
        const size_t bytes = packed_b_bytes(ctx, k, n, wt);
        ASSERT_EQ(bytes, owned.bytes());
        AlignedBuffer mem(bytes + 64, 64);
        std::fill(mem.data(), mem.data() + mem.size(), uint8_t{0xA5});
        const PackedB view = pack_b_into(ctx, k, n, trans, ldb, w.ptr(wt), wt, mem.data());
        EXPECT_EQ(view.data(), mem.data());
        EXPECT_EQ(view.k(), k);
        EXPECT_EQ(view.n(), n);
        EXPECT_EQ(view.nr(), owned.nr());
        EXPECT_EQ(std::memcmp(view.data(), owned.data(), bytes), 0);
        for (size_t i = bytes; i < mem.size(); ++i) ASSERT_EQ(mem.data()[i], 0xA5) << i;
        std::vector<float> c1(static_cast<size_t>(m * n)), c2(c1.size());
        gemm_prepacked(ctx, p, a.data(), owned, c1.data());
        gemm_prepacked(ctx, p, a.data(), view, c2.data());
        EXPECT_EQ(std::memcmp(c1.data(), c2.data(), c1.size() * sizeof(float)), 0);
      }
    }
}

TEST(Gemm, EmptyDims) {
  const KernelContext ctx{&test::test_pool(), IsaLevel::kAvx512};
  float a = 1, b = 2;
  std::vector<float> c(6, 7.0f);
  GemmParams p;
  p.m = 0;
  p.n = 3;
  p.k = 4;
  gemm_f32(ctx, p, &a, &b, c.data());  // nothing to do, nothing read
  EXPECT_EQ(c[0], 7.0f);
  // K == 0: C = act(bias) + beta*C
  const float bias[3] = {1.0f, -2.0f, 3.0f};
  p.m = 2;
  p.k = 0;
  p.bias = bias;
  p.act = Activation::kRelu;
  p.beta = 1.0f;
  gemm_f32(ctx, p, &a, &b, c.data());
  EXPECT_EQ(c[0], 8.0f);
  EXPECT_EQ(c[1], 7.0f);
  EXPECT_EQ(c[5], 10.0f);
}

TEST(Gemm, BatchedWithBroadcast) {
  Rng rng;
  RLX_TRACE_SEED(rng);
  const int64_t batch = 5, m = 7, n = 9, k = 11;
  const std::vector<float> a = rng.vec(batch * m * k);
  const std::vector<float> b = rng.vec(n * k);  // broadcast over the batch
  GemmParams p;
  p.m = m;
  p.n = n;
  p.k = k;
  for (const KernelContext& ctx : test::contexts()) {
    SCOPED_TRACE(test::describe(ctx));
    std::vector<float> c(batch * m * n, 0.0f);
    batched_gemm(ctx, p, batch, a.data(), m * k, b.data(), WeightType::kF32, 0, c.data(), m * n);
    for (int64_t i = 0; i < batch; ++i) {
      const std::vector<float> zero(m * n, 0.0f);
      const std::vector<double> want = gemm_ref(p, a.data() + i * m * k, k, b.data(), k, zero.data(), n);
      ASSERT_TRUE(all_close(c.data() + i * m * n, want.data(), m * n, 1e-5, 1e-5)) << "batch " << i;
    }
  }
}

}  // namespace
}  // namespace rlx::cpu
