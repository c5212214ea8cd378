// Elementwise kernels vs float64: vector-math error bounds per op (stated in
// isa_impl.inc), broadcasting binary ops (same shape, row, scalar, general, strided),
// compare, where and casts, on every ISA path.
#include "backends/cpu/kernels/elementwise.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "cpu_kernels/test_util.h"
#include "rlx/base/half.h"

namespace rlx::cpu {
namespace {

using test::all_close;
using test::Rng;

double unary_ref(UnaryOp op, double x) {
  switch (op) {
    case UnaryOp::kIdentity: return x;
    case UnaryOp::kGelu: return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
    case UnaryOp::kGeluTanh: return 0.5 * x * (1 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
    case UnaryOp::kSilu: return x / (1 + std::exp(-x));
    case UnaryOp::kRelu: return x > 0 ? x : 0;
    case UnaryOp::kSigmoid: return 1 / (1 + std::exp(-x));
    case UnaryOp::kTanh: return std::tanh(x);
    case UnaryOp::kExp: return std::exp(x);
    case UnaryOp::kLog: return std::log(x);
    case UnaryOp::kSqrt: return std::sqrt(x);
    case UnaryOp::kRsqrt: return 1 / std::sqrt(x);
    case UnaryOp::kNeg: return -x;
    case UnaryOp::kAbs: return std::fabs(x);
    case UnaryOp::kSin: return std::sin(x);
    case UnaryOp::kCos: return std::cos(x);
    case UnaryOp::kSoftplus: return x > 20 ? x : std::log1p(std::exp(x));
  }
  return 0;
}

struct UnarySpec {
  UnaryOp op;
  float lo, hi;
  double atol, rtol;
};

TEST(Elementwise, UnaryOpsWithinStatedError) {
  const UnarySpec specs[] = {
      {UnaryOp::kIdentity, -10, 10, 0, 0},     {UnaryOp::kGelu, -12, 12, -2e-7, 2e-7},
      {UnaryOp::kGeluTanh, -12, 12, 1e-7, 1e-6}, {UnaryOp::kSilu, -30, 30, 1e-7, 1e-6},
      {UnaryOp::kRelu, -10, 10, 0, 0},          {UnaryOp::kSigmoid, -30, 30, 1e-7, 1e-6},
      {UnaryOp::kTanh, -10, 10, 1e-6, 0},       {UnaryOp::kExp, -86, 88, 0, 4e-7},
      {UnaryOp::kLog, 1e-3f, 1e3f, 1e-7, 2e-7},  {UnaryOp::kSqrt, 0, 100, 0, 2e-7},
      {UnaryOp::kRsqrt, 1e-3f, 100, 0, 4e-7},   {UnaryOp::kNeg, -5, 5, 0, 0},
      {UnaryOp::kAbs, -5, 5, 0, 0},             {UnaryOp::kSin, -10, 10, 1e-7, 1e-6},
      {UnaryOp::kCos, -10, 10, 1e-7, 1e-6},    {UnaryOp::kSoftplus, -30, 30, 1e-7, 1e-6},
  };
  Rng rng;
  RLX_TRACE_SEED(rng);
  for (const UnarySpec& s : specs) {
    for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{15}, int64_t{33}, int64_t{5000}}) {
      std::vector<float> x = rng.vec(n, s.lo, s.hi);
      std::vector<double> want(x.size());
      for (size_t i = 0; i < x.size(); ++i) want[i] = unary_ref(s.op, x[i]);
      for (const KernelContext& ctx : test::contexts()) {
        SCOPED_TRACE(test::describe(ctx));
        std::vector<float> y(x.size(), -1.0f);
        unary_f32(ctx, s.op, x.data(), y.data(), n);
        if (s.atol < 0) {  // bound scales with |x|: |err| <= -atol * max(1, |x|) + rtol * |want|
          for (size_t i = 0; i < x.size(); ++i)
            ASSERT_LE(std::fabs(y[i] - want[i]), -s.atol * std::max(1.0f, std::fabs(x[i])) + s.rtol * std::fabs(want[i]))
                << "op " << int(s.op) << " x=" << x[i];
        } else {
          ASSERT_TRUE(all_close(y, want, s.atol, s.rtol)) << "op " << int(s.op) << " n=" << n;
        }
      }
    }
  }
}

TEST(Elementwise, ExpAndTanhEdgeValues) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> x = {-inf, -1000.0f, -87.5f, 0.0f, 88.7f, 89.0f, inf, std::nanf("")};
  for (const KernelContext& ctx : test::contexts()) {
    SCOPED_TRACE(test::describe(ctx));
    std::vector<float> y(x.size());
    unary_f32(ctx, UnaryOp::kExp, x.data(), y.data(), static_cast<int64_t>(x.size()));
    EXPECT_EQ(y[0], 0.0f);
    EXPECT_EQ(y[1], 0.0f);
    EXPECT_LT(y[2], 1.2e-38f);
    EXPECT_EQ(y[3], 1.0f);
    EXPECT_NEAR(y[4] / std::exp(double(x[4])), 1.0, 4e-7);
    EXPECT_EQ(y[5], inf);
    EXPECT_EQ(y[6], inf);
    EXPECT_TRUE(std::isnan(y[7]));
    unary_f32(ctx, UnaryOp::kTanh, x.data(), y.data(), static_cast<int64_t>(x.size()));
    EXPECT_EQ(y[0], -1.0f);
    EXPECT_EQ(y[6], 1.0f);
    EXPECT_TRUE(std::isnan(y[7]));
    unary_f32(ctx, UnaryOp::kSigmoid, x.data(), y.data(), 7);
    EXPECT_EQ(y[0], 0.0f);
    EXPECT_EQ(y[6], 1.0f);
  }
}

double binary_ref(BinaryOp op, double a, double b) {
  switch (op) {
    case BinaryOp::kAdd: return a + b;
    case BinaryOp::kSub: return a - b;
    case BinaryOp::kMul: return a * b;
    case BinaryOp::kDiv: return a / b;
    case BinaryOp::kMax: return std::max(a, b);
    case BinaryOp::kMin: return std::min(a, b);
    case BinaryOp::kPow: return std::pow(a, b);
  }
  return 0;
}

// Reference broadcast: index each operand by its broadcast strides.
template <typename F>
std::vector<double> broadcast_ref(const Dims& out, const Dims& ad, const Dims& bd, F f) {
  int64_t sa[kMaxRank], sb[kMaxRank];
  broadcast_strides(ad, out, sa);
  broadcast_strides(bd, out, sb);
  std::vector<double> r(static_cast<size_t>(out.numel()));
  for (int64_t e = 0; e < out.numel(); ++e) {
    int64_t rem = e, oa = 0, ob = 0;
    for (int d = out.rank - 1; d >= 0; --d) {
      const int64_t idx = rem % out.d[d];
      rem /= out.d[d];
      oa += idx * sa[d];
      ob += idx * sb[d];
    }
    r[static_cast<size_t>(e)] = f(oa, ob);
  }
  return r;
}

TEST(Elementwise, BinaryBroadcasting) {
  const std::pair<Dims, Dims> shapes[] = {
      {{17, 33}, {17, 33}},      {{17, 33}, {33}},       {{17, 33}, {17, 1}}, {{1}, {5, 7}},
      {{3, 1, 5}, {4, 1}},       {{2, 3, 4, 5}, {3, 1, 5}}, {{0, 4}, {4}},     {{1}, {1}},
      {{100, 65}, {1, 65}},
  };
  const BinaryOp ops[] = {BinaryOp::kAdd, BinaryOp::kSub, BinaryOp::kMul, BinaryOp::kDiv,
                          BinaryOp::kMax, BinaryOp::kMin, BinaryOp::kPow};
  Rng rng;
  RLX_TRACE_SEED(rng);
  for (const auto& [ad, bd] : shapes) {
    Dims out;
    ASSERT_TRUE(broadcast_dims(ad, bd, &out).ok());
    const std::vector<float> a = rng.vec(ad.numel(), 0.5f, 2.0f), b = rng.vec(bd.numel(), 0.5f, 2.0f);
    for (BinaryOp op : ops) {
      const std::vector<double> want =
          broadcast_ref(out, ad, bd, [&](int64_t i, int64_t j) { return binary_ref(op, a[i], b[j]); });
      for (const KernelContext& ctx : test::contexts()) {
        SCOPED_TRACE(test::describe(ctx));
        std::vector<float> y(static_cast<size_t>(out.numel()));
        ASSERT_TRUE(binary_f32(ctx, op, a.data(), ad, b.data(), bd, y.data()).ok());
        ASSERT_TRUE(all_close(y, want, 1e-7, 3e-7)) << "op " << int(op);
      }
    }
  }
}

TEST(Elementwise, BinaryStridedView) {
  // a is a transposed view (strides {1, 7}) of a 5x7 buffer; b broadcasts over rows.
  Rng rng;
  RLX_TRACE_SEED(rng);
  const std::vector<float> a = rng.vec(35), b = rng.vec(5);
  const Dims out{7, 5};
  const int64_t sa[2] = {1, 7}, sb[2] = {0, 1};
  std::vector<double> want(35);
  for (int i = 0; i < 7; ++i)
    for (int j = 0; j < 5; ++j) want[i * 5 + j] = double(a[j * 7 + i]) * b[j];
  for (const KernelContext& ctx : test::contexts()) {
    std::vector<float> y(35);
    binary_f32_strided(ctx, BinaryOp::kMul, out, a.data(), sa, b.data(), sb, y.data());
    ASSERT_TRUE(all_close(y, want, 0, 1e-7)) << test::describe(ctx);
  }
}

TEST(Elementwise, BroadcastErrorNamesShapes) {
  Dims out;
  const Status s = broadcast_dims({3, 4}, {5}, &out);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message().find("[3, 4]"), std::string::npos);
}

TEST(Elementwise, CompareAndWhere) {
  Rng rng;
  RLX_TRACE_SEED(rng);
  const Dims ad{9, 13}, bd{13};
  std::vector<float> a = rng.vec(ad.numel()), b = rng.vec(bd.numel());
  for (int i = 0; i < 13; i += 3) a[i] = b[i];  // some equal pairs
  const CompareOp ops[] = {CompareOp::kEq, CompareOp::kNe, CompareOp::kLt,
                           CompareOp::kLe, CompareOp::kGt, CompareOp::kGe};
  for (const KernelContext& ctx : test::contexts()) {
    SCOPED_TRACE(test::describe(ctx));
    for (CompareOp op : ops) {
      std::vector<uint8_t> y(static_cast<size_t>(ad.numel()), 7);
      ASSERT_TRUE(compare_f32(ctx, op, a.data(), ad, b.data(), bd, y.data()).ok());
      for (int64_t i = 0; i < ad.numel(); ++i) {
        const float x = a[i], z = b[i % 13];
        const bool want = op == CompareOp::kEq ? x == z : op == CompareOp::kNe ? x != z : op == CompareOp::kLt ? x < z
                          : op == CompareOp::kLe ? x <= z : op == CompareOp::kGt ? x > z : x >= z;
        ASSERT_EQ(y[i], want ? 1 : 0) << "op " << int(op) << " i " << i;
      }
    }
    std::vector<uint8_t> cond(9);
    for (int i = 0; i < 9; ++i) cond[i] = static_cast<uint8_t>(i % 2);
    std::vector<float> y(static_cast<size_t>(ad.numel()));
    ASSERT_TRUE(where_f32(ctx, cond.data(), {9, 1}, a.data(), ad, b.data(), bd, y.data()).ok());
    for (int64_t i = 0; i < ad.numel(); ++i) ASSERT_EQ(y[i], cond[i / 13] ? a[i] : b[i % 13]) << i;
  }
}

// round_to_half gives what the scalar conversions give, bit for bit, on every ISA level:
// ties at both types' half-ulp (even and odd last bits), the f16 range's edges (65504,
// the first value that rounds to infinity, subnormals down to below half the smallest),
// infinities and NaN; in place and into another buffer, with a length that leaves a tail.
TEST(Elementwise, RoundToHalfMatchesTheScalarConversions) {
  std::vector<float> x = {0.0f, -0.0f, 1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f, 1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f,
                          65504.0f, 65519.99f, 65520.0f, -65520.0f, 0x1p-24f, 0x1p-25f, 0x1.8p-25f, 0x1p-26f,
                          3e-6f, -7.7e-5f, 1e30f, -1e38f, 3.4e38f, std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity(), std::nanf(""), -std::nanf("")};
  test::Rng rng;
  RLX_TRACE_SEED(rng);
  for (float v : rng.vec(37, -1000.0f, 1000.0f)) x.push_back(v);
  const int64_t n = static_cast<int64_t>(x.size());
  auto same = [](float got, float want) {
    uint32_t g, w;
    std::memcpy(&g, &got, 4);
    std::memcpy(&w, &want, 4);
    return g == w || (std::isnan(got) && std::isnan(want));
  };
  for (const KernelContext& ctx : test::contexts()) {
    SCOPED_TRACE(test::describe(ctx));
    std::vector<float> y(x.size(), -1.0f), in_place = x;
    round_to_half(ctx, x.data(), y.data(), n, ElemType::kF16);
    round_to_half(ctx, in_place.data(), in_place.data(), n, ElemType::kF16);
    for (int64_t i = 0; i < n; ++i) {
      const float want = f16_bits_to_f32(f32_to_f16_bits(x[i]));
      ASSERT_TRUE(same(y[i], want)) << "f16 " << i << ": " << x[i] << " -> " << y[i] << ", want " << want;
      ASSERT_TRUE(same(in_place[i], want)) << "f16 in place " << i;
    }
    round_to_half(ctx, x.data(), y.data(), n, ElemType::kBF16);
    for (int64_t i = 0; i < n; ++i) {
      const float want = bf16_bits_to_f32(f32_to_bf16_bits(x[i]));
      ASSERT_TRUE(same(y[i], want)) << "bf16 " << i << ": " << x[i] << " -> " << y[i] << ", want " << want;
    }
  }
  EXPECT_EQ(f16_bits_to_f32(f32_to_f16_bits(1.0f + 0x1p-11f)), 1.0f);  // the tie rounds to even
  EXPECT_TRUE(std::isinf(f16_bits_to_f32(f32_to_f16_bits(65520.0f))));
}

TEST(Elementwise, Casts) {
  const std::vector<float> x = {0.0f, -0.0f, 1.5f, -2.7f, 65504.0f, 1e10f, -1e10f, 3.1415926f, 1e-8f,
                                std::nanf(""), 300.0f, -129.0f, 0.1f, 255.5f};
  const int64_t n = static_cast<int64_t>(x.size());
  for (const KernelContext& ctx : test::contexts()) {
    SCOPED_TRACE(test::describe(ctx));
    std::vector<uint16_t> h(x.size()), bh(x.size());
    std::vector<float> back(x.size());
    cast(ctx, x.data(), ElemType::kF32, h.data(), ElemType::kF16, n);
    cast(ctx, x.data(), ElemType::kF32, bh.data(), ElemType::kBF16, n);
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(h[i], f32_to_f16_bits(x[i])) << i;
      ASSERT_EQ(bh[i], f32_to_bf16_bits(x[i])) << i;
    }
    cast(ctx, h.data(), ElemType::kF16, back.data(), ElemType::kF32, n);
    for (int64_t i = 0; i < n; ++i) {
      const float w = f16_bits_to_f32(h[i]);
      ASSERT_TRUE(back[i] == w || (std::isnan(w) && std::isnan(back[i]))) << i;
    }
    cast(ctx, bh.data(), ElemType::kBF16, back.data(), ElemType::kF32, n);
    for (int64_t i = 0; i < n; ++i) {
      const float w = bf16_bits_to_f32(bh[i]);
      ASSERT_TRUE(back[i] == w || (std::isnan(w) && std::isnan(back[i]))) << i;
    }
    std::vector<int32_t> i32(x.size());
    cast(ctx, x.data(), ElemType::kF32, i32.data(), ElemType::kI32, n);
    EXPECT_EQ(i32[2], 1);
    EXPECT_EQ(i32[3], -2);
    EXPECT_EQ(i32[5], std::numeric_limits<int32_t>::max());
    EXPECT_EQ(i32[6], std::numeric_limits<int32_t>::min());
    EXPECT_EQ(i32[9], 0);
    std::vector<int8_t> i8(x.size());
    cast(ctx, x.data(), ElemType::kF32, i8.data(), ElemType::kI8, n);
    EXPECT_EQ(i8[10], 127);
    EXPECT_EQ(i8[11], -128);
    std::vector<uint8_t> u8(x.size()), bl(x.size());
    cast(ctx, x.data(), ElemType::kF32, u8.data(), ElemType::kU8, n);
    EXPECT_EQ(u8[3], 0);
    EXPECT_EQ(u8[13], 255);
    cast(ctx, x.data(), ElemType::kF32, bl.data(), ElemType::kBool, n);
    EXPECT_EQ(bl[0], 0);
    EXPECT_EQ(bl[1], 0);
    EXPECT_EQ(bl[8], 1);
    EXPECT_EQ(bl[9], 1);  // NaN != 0
    std::vector<double> f64(x.size());
    cast(ctx, x.data(), ElemType::kF32, f64.data(), ElemType::kF64, n);
    EXPECT_EQ(f64[7], double(x[7]));
    const std::vector<int64_t> big = {(int64_t{1} << 53) + 1, -5, 16777217};
    std::vector<float> bf(3);
    cast(ctx, big.data(), ElemType::kI64, bf.data(), ElemType::kF32, 3);
    EXPECT_EQ(bf[0], static_cast<float>(big[0]));
    EXPECT_EQ(bf[1], -5.0f);
    EXPECT_EQ(bf[2], 16777216.0f);
    const std::vector<uint8_t> b8 = {0, 1, 1};
    std::vector<int64_t> i64(3);
    cast(ctx, b8.data(), ElemType::kBool, i64.data(), ElemType::kI64, 3);
    EXPECT_EQ(i64, (std::vector<int64_t>{0, 1, 1}));
  }
}

TEST(Elementwise, LargeCastIsParallelAndExact) {
  Rng rng;
  RLX_TRACE_SEED(rng);
  const std::vector<float> x = rng.vec(100003, -100, 100);
  std::vector<uint16_t> h(x.size());
  cast(KernelContext{&test::test_pool(), IsaLevel::kAvx512}, x.data(), ElemType::kF32, h.data(), ElemType::kBF16,
       static_cast<int64_t>(x.size()));
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(h[i], f32_to_bf16_bits(x[i])) << i;
}

}  // namespace
}  // namespace rlx::cpu
