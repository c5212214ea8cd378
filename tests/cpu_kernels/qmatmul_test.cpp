// DequantMatMul (qmatmul.h) for every GGUF block type against float64 references:
// tightly against llama.cpp's numerics (activations rounded to the weight's vec_dot
// type first), loosely against plain f32 x · dequantized W; both paths (GEMV, panel),
// decode and prefill shapes, every ISA level, with and without the pool; bad calls.
#include "backends/cpu/kernels/qmatmul.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "backends/cpu/kernels/amx_matmul.h"
#include "backends/cpu/kernels/gemv_tuning.h"
#include "backends/cpu/kernels/isa_kernels.h"
#include "backends/cpu/kernels/qmatmul_kernels.h"
#include "backends/cpu/kernels/vnni_matmul.h"
#include "cpu_kernels/test_util.h"
#include "rlx/base/env.h"
#include "rlx/base/half.h"
#include "rlx/formats/quant.h"

namespace rlx::cpu {
namespace {

using formats::GgmlType;
using test::Rng;

const GgmlType kQuantTypes[] = {GgmlType::Q4_0,   GgmlType::Q4_1,    GgmlType::Q5_0,   GgmlType::Q5_1,
                                GgmlType::Q8_0,   GgmlType::Q2_K,    GgmlType::Q3_K,   GgmlType::Q4_K,
                                GgmlType::Q5_K,   GgmlType::Q6_K,    GgmlType::IQ4_NL, GgmlType::IQ4_XS,
                                GgmlType::TQ1_0,  GgmlType::TQ2_0,   GgmlType::IQ2_XXS, GgmlType::IQ2_XS,
                                GgmlType::IQ2_S,  GgmlType::IQ3_XXS, GgmlType::IQ3_S,  GgmlType::IQ1_S,
                                GgmlType::IQ1_M};

bool is_min_type(GgmlType t) { return t == GgmlType::Q4_1 || t == GgmlType::Q5_1; }

// A packed weight matrix [n, k] and, as f64-ready floats, what its blocks decode to.
struct QWeights {
  std::vector<uint8_t> packed;
  size_t row_bytes = 0;
  std::vector<float> full;    // [n, k] dequantize_row output
  std::vector<float> scaled;  // [n, k] d*q without the block min ("_1" types; else == full)
  std::vector<float> mins;    // [n, k/32] block mins ("_1" types)
};

QWeights make_weights(Rng& rng, GgmlType t, int64_t n, int64_t k) {
  QWeights w;
  w.row_bytes = static_cast<size_t>(*formats::ggml_bytes_for(t, k));
  w.packed.resize(w.row_bytes * static_cast<size_t>(n));
  w.full.resize(static_cast<size_t>(n * k));
  const std::vector<float> src = rng.vec(n * k);
  for (int64_t j = 0; j < n; ++j) {
    EXPECT_TRUE(formats::quantize_row(t, src.data() + j * k, w.packed.data() + j * w.row_bytes, k).ok());
    EXPECT_TRUE(formats::dequantize_row(t, w.packed.data() + j * w.row_bytes, w.full.data() + j * k, k).ok());
  }
  w.scaled = w.full;
  if (is_min_type(t)) {
    // Q4_1 / Q5_1 blocks keep their f16 min at byte offset 2: decode with it zeroed.
    const size_t bb = static_cast<size_t>(formats::ggml_block_bytes(t));
    std::vector<uint8_t> zeroed = w.packed;
    w.mins.resize(static_cast<size_t>(n * k / 32));
    for (size_t b = 0; b < w.mins.size(); ++b) {
      uint16_t m;
      std::memcpy(&m, zeroed.data() + b * bb + 2, 2);
      w.mins[b] = f16_bits_to_f32(m);
      std::memset(zeroed.data() + b * bb + 2, 0, 2);
    }
    for (int64_t j = 0; j < n; ++j)
      EXPECT_TRUE(formats::dequantize_row(t, zeroed.data() + j * w.row_bytes, w.scaled.data() + j * k, k).ok());
  }
  return w;
}

// Activation row as llama.cpp's dot products see it: values d*q and, for Q8_1, the
// per-block s = f16(d * Σq) (d unrounded f32) that multiplies the weight block's min.
struct QActRow {
  std::vector<double> v;
  std::vector<double> s;
};

QActRow round_activation(GgmlType t, const float* x, int64_t k) {
  QActRow out;
  out.v.resize(static_cast<size_t>(k));
  std::vector<float> tmp(static_cast<size_t>(k));
  if (t == GgmlType::Q8_0) {
    std::vector<formats::BlockQ8_0> q(static_cast<size_t>(k / 32));
    formats::quantize_activation_q8_0(x, q.data(), k);
    formats::dequantize_row_q8_0(q.data(), tmp.data(), k);
  } else if (t == GgmlType::Q8_K) {
    std::vector<formats::BlockQ8_K> q(static_cast<size_t>(k / 256));
    formats::quantize_activation_q8_k(x, q.data(), k);
    formats::dequantize_row_q8_k(q.data(), tmp.data(), k);
  } else {  // Q8_1, written out from llama.cpp's x86 quantize_row_q8_1
    for (int64_t b = 0; b < k / 32; ++b) {
      float amax = 0;
      for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[b * 32 + i]));
      const float d = amax / 127.0f, id = amax != 0 ? 127.0f / amax : 0.0f;
      int sum = 0;
      for (int i = 0; i < 32; ++i) {
        const int q = static_cast<int>(std::nearbyint(x[b * 32 + i] * id));
        sum += q;
        tmp[static_cast<size_t>(b * 32 + i)] = f16_bits_to_f32(f32_to_f16_bits(d)) * static_cast<float>(q);
      }
      out.s.push_back(f16_bits_to_f32(f32_to_f16_bits(d * static_cast<float>(sum))));
    }
  }
  for (int64_t i = 0; i < k; ++i) out.v[static_cast<size_t>(i)] = tmp[static_cast<size_t>(i)];
  return out;
}

struct Expected {
  std::vector<double> emulated;  // [m, n] llama.cpp numerics
  std::vector<double> plain;     // [m, n] f32 x · dequantized W
  std::vector<double> abs_sum;   // [m, n] Σ |x_k| * (|w_k| + |min|): scale of both checks
};

Expected reference(GgmlType t, const std::vector<float>& x, int64_t lda, const QWeights& w, const float* bias,
                   int64_t m, int64_t n, int64_t k) {
  Expected e;
  e.emulated.resize(static_cast<size_t>(m * n));
  e.plain.resize(e.emulated.size());
  e.abs_sum.resize(e.emulated.size());
  const GgmlType vt = qmatmul_vec_dot_type(t);
  for (int64_t i = 0; i < m; ++i) {
    const QActRow a = round_activation(vt, x.data() + i * lda, k);
    for (int64_t j = 0; j < n; ++j) {
      double emu = bias ? bias[j] : 0.0, plain = emu, abs_sum = 0;
      for (int64_t kk = 0; kk < k; ++kk) {
        const double xv = x[static_cast<size_t>(i * lda + kk)];
        emu += a.v[static_cast<size_t>(kk)] * w.scaled[static_cast<size_t>(j * k + kk)];
        plain += xv * w.full[static_cast<size_t>(j * k + kk)];
        const double mn = is_min_type(t) ? std::fabs(w.mins[static_cast<size_t>((j * k + kk) / 32)]) : 0.0;
        abs_sum += std::fabs(xv) * (std::fabs(w.full[static_cast<size_t>(j * k + kk)]) + mn);
      }
      if (is_min_type(t))
        for (int64_t b = 0; b < k / 32; ++b)
          emu += a.s[static_cast<size_t>(b)] * w.mins[static_cast<size_t>(j * k / 32 + b)];
      e.emulated[static_cast<size_t>(i * n + j)] = emu;
      e.plain[static_cast<size_t>(i * n + j)] = plain;
      e.abs_sum[static_cast<size_t>(i * n + j)] = abs_sum;
    }
  }
  return e;
}

// |got - want| <= rel * abs_sum for every element (with ldc stride on `got`).
::testing::AssertionResult within(const std::vector<float>& y, int64_t ldc, const std::vector<double>& want,
                                  const std::vector<double>& abs_sum, int64_t m, int64_t n, double rel) {
  int bad = 0;
  ::testing::AssertionResult r = ::testing::AssertionFailure();
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      const double g = y[static_cast<size_t>(i * ldc + j)], wv = want[static_cast<size_t>(i * n + j)];
      const double tol = rel * abs_sum[static_cast<size_t>(i * n + j)] + 1e-6;
      if (!(std::fabs(g - wv) <= tol)) {
        if (bad < 5) r << "[" << i << "," << j << "] got " << g << " want " << wv << " tol " << tol << "\n";
        ++bad;
      }
    }
  if (bad == 0) return ::testing::AssertionSuccess();
  return r << bad << " of " << m * n << " out of tolerance";
}

// Tight: llama.cpp-emulating reference, 1e-5 of Σ|x||w| (f32 scale products and block
// sums give ~1e-7). Loose: plain f32 activations; Q8 rounding moves each x by at most
// half a step (amax/254) plus the f16 scale rounding, so 1e-2 of Σ|x||w| bounds it.
constexpr double kTightRel = 1e-5;
constexpr double kLooseRel = 1e-2;

struct Shape {
  int64_t m, n;
};

void check_type(GgmlType t, const std::vector<Shape>& shapes, const std::vector<QMatmulPath>& paths) {
  Rng rng;
  RLX_TRACE_SEED(rng);
  const int64_t bs = formats::ggml_block_size(t);
  const int64_t k = bs == 256 ? 512 : 160;
  for (const Shape& s : shapes) {
    SCOPED_TRACE(::testing::Message() << formats::ggml_type_name(t) << " m=" << s.m << " n=" << s.n << " k=" << k);
    const QWeights w = make_weights(rng, t, s.n, k);
    const int64_t lda = k + 3, ldc = s.n + 5;  // strided rows on both sides
    const std::vector<float> x = rng.vec(s.m * lda);
    const std::vector<float> bias = rng.vec(s.n);
    const Expected e = reference(t, x, lda, w, bias.data(), s.m, s.n, k);
    // The panel path needs the most scratch; the GEMV path gets exactly its own size.
    std::vector<uint8_t> scratch(qmatmul_scratch_bytes(t, s.m, k, QMatmulPath::kPanel, IsaLevel::kAvx512));
    EXPECT_LE(qmatmul_scratch_bytes(t, s.m, k, QMatmulPath::kGemv, IsaLevel::kAvx512), scratch.size());
    for (const KernelContext& ctx : test::contexts()) {
      for (QMatmulPath path : paths) {
        SCOPED_TRACE(test::describe(ctx) + (path == QMatmulPath::kGemv ? " gemv" : " panel"));
        std::vector<float> y(static_cast<size_t>(s.m * ldc), NAN);
        QMatmulParams p;
        p.m = s.m;
        p.n = s.n;
        p.k = k;
        p.lda = lda;
        p.ldc = ldc;
        p.bias = bias.data();
        p.path = path;
        ASSERT_TRUE(dequant_matmul(ctx, p, t, x.data(), w.packed.data(), y.data(),
                                   QMatmulScratch{scratch.data(), scratch.size()})
                        .ok());
        EXPECT_TRUE(within(y, ldc, e.emulated, e.abs_sum, s.m, s.n, kTightRel));
        EXPECT_TRUE(within(y, ldc, e.plain, e.abs_sum, s.m, s.n, kLooseRel));
        for (int64_t i = 0; i < s.m; ++i)  // the padding between rows is untouched
          for (int64_t j = s.n; j < ldc; ++j) ASSERT_TRUE(std::isnan(y[static_cast<size_t>(i * ldc + j)]));
      }
    }
  }
}

class QMatmulTypes : public ::testing::TestWithParam<GgmlType> {};

TEST_P(QMatmulTypes, DecodeShapesBothPaths) {
  check_type(GetParam(), {{1, 33}, {2, 100}, {3, 33}}, {QMatmulPath::kGemv, QMatmulPath::kPanel});
}

TEST_P(QMatmulTypes, PrefillShapesBothPaths) {
  check_type(GetParam(), {{17, 33}, {64, 100}, {100, 33}}, {QMatmulPath::kPanel, QMatmulPath::kGemv});
}

// A tile path (kAmx or kVnni) of a type it supports at cap `isa`: the integer sums per
// scale group are exact, as in the integer loops, so it meets the llama.cpp-emulating
// reference within the same 1e-5 of sum |x||w|. Shapes: one row block, partial row and
// column blocks, two passes of 512 rows, K past one decoded block (and for 32-element
// blocks a K of no multiple of 64). Single-threaded the path is asked for with its own
// scratch size and a bias; pooled it is the production route (kAuto, no bias).
void check_tile_path(GgmlType t, QMatmulPath path, IsaLevel isa, int64_t min_rows) {
  Rng rng;
  RLX_TRACE_SEED(rng);
  const int64_t bs = formats::ggml_block_size(t);
  const int64_t k_small = bs == 256 ? 512 : 192, k_big = bs == 256 ? 2304 : 2112;
  struct TileShape {
    int64_t m, n, k;
  };
  std::vector<TileShape> shapes = {{32, 33, k_small}, {45, 100, k_small}, {530, 17, k_small}, {40, 50, k_big}};
  if (path == QMatmulPath::kVnni && bs == 32) shapes.push_back({23, 40, 160});
  for (const TileShape& s : shapes) {
    SCOPED_TRACE(::testing::Message() << formats::ggml_type_name(t) << " m=" << s.m << " n=" << s.n << " k=" << s.k);
    const QWeights w = make_weights(rng, t, s.n, s.k);
    const int64_t lda = s.k + 3, ldc = s.n + 5;
    const std::vector<float> x = rng.vec(s.m * lda);
    const std::vector<float> bias = rng.vec(s.n);
    const Expected e = reference(t, x, lda, w, bias.data(), s.m, s.n, s.k);
    if (s.m >= min_rows && s.k % 64 == 0) {
      EXPECT_EQ(qmatmul_auto_path(t, s.m, isa), path);
    }
    // Without bias: the same references less the bias.
    std::vector<double> emulated_nb = e.emulated, plain_nb = e.plain;
    for (size_t i = 0; i < emulated_nb.size(); ++i) {
      emulated_nb[i] -= bias[i % static_cast<size_t>(s.n)];
      plain_nb[i] -= bias[i % static_cast<size_t>(s.n)];
    }
    for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &test::test_pool()}) {
      const QMatmulPath asked = pool == nullptr ? path : QMatmulPath::kAuto;
      std::vector<uint8_t> scratch(qmatmul_scratch_bytes(t, s.m, s.k, asked, isa));
      std::vector<float> y(static_cast<size_t>(s.m * ldc), NAN);
      QMatmulParams p;
      p.m = s.m;
      p.n = s.n;
      p.k = s.k;
      p.lda = lda;
      p.ldc = ldc;
      p.bias = pool == nullptr ? bias.data() : nullptr;
      p.path = asked;
      ASSERT_TRUE(dequant_matmul(KernelContext{pool, isa}, p, t, x.data(), w.packed.data(), y.data(),
                                 QMatmulScratch{scratch.data(), scratch.size()})
                      .ok());
      EXPECT_TRUE(within(y, ldc, p.bias ? e.emulated : emulated_nb, e.abs_sum, s.m, s.n, kTightRel));
      EXPECT_TRUE(within(y, ldc, p.bias ? e.plain : plain_nb, e.abs_sum, s.m, s.n, kLooseRel));
      for (int64_t i = 0; i < s.m; ++i)  // the padding between rows is untouched
        for (int64_t j = s.n; j < ldc; ++j) ASSERT_TRUE(std::isnan(y[static_cast<size_t>(i * ldc + j)]));
    }
  }
}

// Types without a tile loop (Q4_1, Q5_1, Q2_K, Q3_K, the i-quants) keep the integer loops.
TEST_P(QMatmulTypes, AmxPrefill) {
  if (!amx_enabled(IsaLevel::kAmx))
    GTEST_SKIP() << "no usable AMX-BF16 tiles here: " << describe_cpu_features(cpu_features());
  const GgmlType t = GetParam();
  if (!amx_supports(t)) {
    EXPECT_NE(qmatmul_auto_path(t, 512, IsaLevel::kAmx), QMatmulPath::kAmx);
    return;
  }
  check_tile_path(t, QMatmulPath::kAmx, IsaLevel::kAmx, amx_min_rows());
  if (formats::ggml_block_size(t) == 32) {  // k = 160 is no multiple of 64: kAuto leaves the AMX tiles
    Rng rng;
    const int64_t m = 40, n = 24, k = 160;
    const QWeights w = make_weights(rng, t, n, k);
    const std::vector<float> x = rng.vec(m * k);
    const Expected e = reference(t, x, k, w, nullptr, m, n, k);
    std::vector<uint8_t> scratch(qmatmul_scratch_bytes(t, m, k, QMatmulPath::kAuto, IsaLevel::kAmx));
    std::vector<float> y(static_cast<size_t>(m * n));
    QMatmulParams p;
    p.m = m;
    p.n = n;
    p.k = k;
    ASSERT_TRUE(dequant_matmul(KernelContext{&test::test_pool(), IsaLevel::kAmx}, p, t, x.data(), w.packed.data(),
                               y.data(), QMatmulScratch{scratch.data(), scratch.size()})
                    .ok());
    EXPECT_TRUE(within(y, n, e.emulated, e.abs_sum, m, n, kTightRel));
  }
}

// The AVX-512 VNNI register tiles, capped at kAvx512 (so an AMX host runs them too).
TEST_P(QMatmulTypes, VnniPrefill) {
  if (!vnni_enabled(IsaLevel::kAvx512))
    GTEST_SKIP() << "no AVX-512 VNNI here: " << describe_cpu_features(cpu_features());
  const GgmlType t = GetParam();
  if (!vnni_supports(t)) {
    EXPECT_NE(qmatmul_auto_path(t, 512, IsaLevel::kAvx512), QMatmulPath::kVnni);
    return;
  }
  check_tile_path(t, QMatmulPath::kVnni, IsaLevel::kAvx512, vnni_min_rows());
  EXPECT_NE(qmatmul_auto_path(t, vnni_min_rows() - 1, IsaLevel::kAvx512), QMatmulPath::kVnni);
  EXPECT_NE(qmatmul_auto_path(t, 512, IsaLevel::kAvx2), QMatmulPath::kVnni);
}

// The tile loops at their largest integer sums. AMX folds each 6-bit Q4_K / Q5_K scale
// into the weight quants as 8 * (sc >> 3) + (sc & 7), unsigned bytes up to 31 * 7 = 217 for
// Q5_K; VNNI stores every quant unsigned (Q8_0 as q + 128) and starts the sums at
// -offset * Σx. Every quant sits at the top or bottom of its range with the extreme
// scales (Q4_K / Q5_K: quants 15 / 31, scales and mins 63; Q6_K: +31 with 127, -32 with
// -128; Q8_0: +127 and -128), against activations of +-v per superblock (quants +-127);
// blocks written by hand, results worked out here in f64.
void check_largest_sums(QMatmulPath path, IsaLevel isa) {
  constexpr int64_t kBlocks = 3, m = 48, n = 20, k = kBlocks * 256;
  std::vector<float> x(static_cast<size_t>(m * k));
  auto value = [](int64_t r, int64_t b) { return static_cast<float>((r + 1) * (b == 1 ? -0.375 : 0.5)); };
  for (int64_t r = 0; r < m; ++r)
    for (int64_t i = 0; i < k; ++i) x[static_cast<size_t>(r * k + i)] = value(r, i / 256);
  struct Case {
    GgmlType type;
    int scale;  // Q6_K: the scale of every group (quants +31 for 127, -32 for -128); Q8_0: the quant
  };
  for (const Case& c : {Case{GgmlType::Q4_K, 0}, Case{GgmlType::Q5_K, 0}, Case{GgmlType::Q6_K, 127},
                        Case{GgmlType::Q6_K, -128}, Case{GgmlType::Q8_0, 127}, Case{GgmlType::Q8_0, -128}}) {
    SCOPED_TRACE(::testing::Message() << formats::ggml_type_name(c.type) << " " << c.scale);
    const size_t block_bytes = formats::ggml_block_bytes(c.type);
    const int64_t blocks = k / formats::ggml_block_size(c.type);
    std::vector<uint8_t> w(static_cast<size_t>(n * blocks) * block_bytes);
    double per_x = 0.0;  // every weight's value
    for (int64_t i = 0; i < n * blocks; ++i) {
      uint8_t* b = w.data() + static_cast<size_t>(i) * block_bytes;
      if (c.type == GgmlType::Q8_0) {
        auto* q8 = reinterpret_cast<formats::BlockQ8_0*>(b);
        for (int8_t& q : q8->qs) q = static_cast<int8_t>(c.scale);
        q8->d = f32_to_f16_bits(0.25f);
        per_x = 0.25 * c.scale;
      } else if (c.type == GgmlType::Q6_K) {
        auto* q6 = reinterpret_cast<formats::BlockQ6_K*>(b);
        const uint8_t bits = c.scale > 0 ? 0xFF : 0x00;  // quants 63 - 32 or 0 - 32
        std::memset(q6->ql, bits, sizeof q6->ql);
        std::memset(q6->qh, bits, sizeof q6->qh);
        for (int8_t& sc : q6->scales) sc = static_cast<int8_t>(c.scale);
        q6->d = f32_to_f16_bits(0.25f);
        per_x = 0.25 * c.scale * (c.scale > 0 ? 31 : -32);
      } else {
        const uint16_t d = f32_to_f16_bits(0.25f), dmin = f32_to_f16_bits(0.125f);
        std::memcpy(b, &d, 2);
        std::memcpy(b + 2, &dmin, 2);
        std::memset(b + 4, 0xFF, block_bytes - 4);  // scales and mins 63, quants 15 (Q5_K: 31)
        per_x = 0.25 * 63 * (c.type == GgmlType::Q5_K ? 31 : 15) - 0.125 * 63;
      }
    }
    for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &test::test_pool()}) {
      std::vector<uint8_t> scratch(qmatmul_scratch_bytes(c.type, m, k, path, isa));
      std::vector<float> y(static_cast<size_t>(m * n), NAN);
      QMatmulParams p;
      p.m = m;
      p.n = n;
      p.k = k;
      p.path = path;
      ASSERT_TRUE(dequant_matmul(KernelContext{pool, isa}, p, c.type, x.data(), w.data(), y.data(),
                                 QMatmulScratch{scratch.data(), scratch.size()})
                      .ok());
      for (int64_t r = 0; r < m; ++r) {
        double want = 0.0;
        for (int64_t b = 0; b < kBlocks; ++b) {
          // Q8_0 activation blocks keep their scale amax / 127 in f16 (Q8_K: in f32).
          const double v = value(r, b);
          const double xq = c.type != GgmlType::Q8_0 ? v
                                                      : std::copysign(127.0 * f16_bits_to_f32(f32_to_f16_bits(
                                                                                  static_cast<float>(std::fabs(v) / 127))),
                                                                      v);
          want += 256.0 * xq * per_x;
        }
        for (int64_t col = 0; col < n; ++col)
          ASSERT_NEAR(y[static_cast<size_t>(r * n + col)], want, 1e-6 * std::fabs(want))
              << "row " << r << " col " << col;
      }
    }
  }
}

TEST(QMatmul, AmxPrefillAtTheLargestSums) {
  if (!amx_enabled(IsaLevel::kAmx))
    GTEST_SKIP() << "no usable AMX-BF16 tiles here: " << describe_cpu_features(cpu_features());
  check_largest_sums(QMatmulPath::kAmx, IsaLevel::kAmx);
}

TEST(QMatmul, VnniPrefillAtTheLargestSums) {
  if (!vnni_enabled(IsaLevel::kAvx512))
    GTEST_SKIP() << "no AVX-512 VNNI here: " << describe_cpu_features(cpu_features());
  check_largest_sums(QMatmulPath::kVnni, IsaLevel::kAvx512);
}

INSTANTIATE_TEST_SUITE_P(AllTypes, QMatmulTypes, ::testing::ValuesIn(kQuantTypes),
                         [](const ::testing::TestParamInfo<GgmlType>& i) {
                           return std::string(formats::ggml_type_name(i.param));
                         });

// The ISA paths agree with each other closely where they take the same path (same integer
// sums, f32 order differs). Where kAuto picks the integer loops on one ISA and the f32
// panels on another (m > kQGemvMaxM), each is held to the tight bound of check_type, so
// they agree within twice it.
TEST(QMatmul, AutoPathAndIsaLevelsAgree) {
  Rng rng;
  RLX_TRACE_SEED(rng);
  // Q8_0 at 1, 3 and 8 blocks per row: the AVX-512 loop takes blocks in pairs and the
  // last one alone when the count is odd. Q4_0/Q4_1/Q5_0/Q5_1 at 3, 7 and 8 blocks: the
  // AVX-512 loops take four blocks per step and the last nb % 4 through the 256-bit loop.
  struct Case {
    GgmlType type;
    int64_t k;
  };
  const Case cases[] = {{GgmlType::Q4_K, 768}, {GgmlType::Q6_K, 768}, {GgmlType::Q8_0, 32},
                        {GgmlType::Q8_0, 96},  {GgmlType::Q8_0, 256}, {GgmlType::Q4_0, 96},
                        {GgmlType::Q4_0, 224}, {GgmlType::Q4_0, 256}, {GgmlType::Q4_1, 96},
                        {GgmlType::Q4_1, 224}, {GgmlType::Q4_1, 256}, {GgmlType::Q5_0, 96},
                        {GgmlType::Q5_0, 224}, {GgmlType::Q5_0, 256}, {GgmlType::Q5_1, 96},
                        {GgmlType::Q5_1, 224}, {GgmlType::Q5_1, 256}};
  for (const Case& c : cases) {
    const GgmlType t = c.type;
    const int64_t k = c.k, n = 70;
    const QWeights w = make_weights(rng, t, n, k);
    for (int64_t m : {1, 4, 5, 9, 16, 20}) {
      const std::vector<float> x = rng.vec(m * k);
      QMatmulParams p;
      p.m = m;
      p.n = n;
      p.k = k;
      std::vector<float> first;
      QMatmulPath first_path = QMatmulPath::kAuto;
      std::vector<double> abs_sum;  // of the reference, when two paths differ
      for (IsaLevel l : test::isa_levels()) {
        SCOPED_TRACE(::testing::Message() << formats::ggml_type_name(t) << " k=" << k << " m=" << m
                                          << " isa=" << isa_name(l));
        std::vector<uint8_t> scratch(qmatmul_scratch_bytes(t, m, k, QMatmulPath::kAuto, l));
        std::vector<float> y(static_cast<size_t>(m * n));
        ASSERT_TRUE(dequant_matmul(KernelContext{&test::test_pool(), l}, p, t, x.data(), w.packed.data(), y.data(),
                                   QMatmulScratch{scratch.data(), scratch.size()})
                        .ok());
        const QMatmulPath path = qmatmul_auto_path(t, m, l);
        if (first.empty()) {
          first = y;
          first_path = path;
          continue;
        }
        if (abs_sum.empty()) abs_sum = reference(t, x, k, w, nullptr, m, n, k).abs_sum;
        for (size_t i = 0; i < y.size(); ++i) {
          // The same path in another f32 order: rounding grows with the terms' magnitudes
          // (a result near 0 can come from large terms that cancel), not with the result.
          const double tol = path == first_path ? 1e-5 * (std::fabs(first[i]) + 1.0) + 2e-6 * abs_sum[i]
                                                : 2 * kTightRel * abs_sum[i] + 1e-6;
          ASSERT_NEAR(y[i], first[i], tol) << " i=" << i;
        }
      }
    }
  }
}

// The one-row 512-bit loops (QKernels::gemv_one_row: Q4_K, Q6_K, Q8_0, IQ4_XS), called directly
// whatever RLX_CPU_GEMV_ZMM says: against the llama.cpp-emulating reference at the tight
// bound and against the shared loop, at block counts that leave the Q8_0 loop 0-3
// blocks past its steps of four, on a column range that does not start at row 0.
TEST(QMatmul, OneRowZmmLoopsMatchTheSharedLoops) {
  const detail::QKernels& qk = detail::qkernels(IsaLevel::kAvx512);
  if (qk.isa != IsaLevel::kAvx512) GTEST_SKIP() << "no AVX-512 VNNI here: " << describe_cpu_features(cpu_features());
  Rng rng;
  RLX_TRACE_SEED(rng);
  struct Case {
    GgmlType type;
    detail::QKind kind;
    int64_t k;
  };
  const Case cases[] = {{GgmlType::Q4_K, detail::QKind::kQ4_K, 256},  {GgmlType::Q4_K, detail::QKind::kQ4_K, 1280},
                        {GgmlType::Q6_K, detail::QKind::kQ6_K, 256},  {GgmlType::Q6_K, detail::QKind::kQ6_K, 1280},
                        {GgmlType::Q8_0, detail::QKind::kQ8_0, 32},   {GgmlType::Q8_0, detail::QKind::kQ8_0, 128},
                        {GgmlType::Q8_0, detail::QKind::kQ8_0, 224},  {GgmlType::Q8_0, detail::QKind::kQ8_0, 352},
                        {GgmlType::Q8_0, detail::QKind::kQ8_0, 2080}, {GgmlType::IQ4_XS, detail::QKind::kIQ4_XS, 256},
                        {GgmlType::IQ4_XS, detail::QKind::kIQ4_XS, 1280}};
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << formats::ggml_type_name(c.type) << " k=" << c.k);
    const detail::QGemvFn one_row = qk.gemv_one_row[static_cast<int>(c.kind)];
    ASSERT_NE(one_row, nullptr);
    const int64_t n = 45, n0 = 6, k = c.k;
    const QWeights w = make_weights(rng, c.type, n, k);
    const std::vector<float> x = rng.vec(k, -2.0f, 2.0f);
    const Expected e = reference(c.type, x, k, w, nullptr, 1, n, k);
    const GgmlType vt = qmatmul_vec_dot_type(c.type);
    std::vector<uint8_t> act(static_cast<size_t>(*formats::ggml_bytes_for(vt, k)));
    qmatmul_quantize_activation(c.type, x.data(), act.data(), k, IsaLevel::kAvx512);
    const int64_t nb = k / formats::ggml_block_size(c.type);
    std::vector<float> got(static_cast<size_t>(n), NAN), shared(static_cast<size_t>(n), NAN);
    one_row(1, nb, w.packed.data(), w.row_bytes, act.data(), act.size(), n0, n, got.data() + n0, n);
    qk.gemv[static_cast<int>(c.kind)](1, nb, w.packed.data(), w.row_bytes, act.data(), act.size(), n0, n,
                                      shared.data() + n0, n);
    for (int64_t j = 0; j < n0; ++j) EXPECT_TRUE(std::isnan(got[static_cast<size_t>(j)]));
    for (int64_t j = n0; j < n; ++j) {
      const size_t i = static_cast<size_t>(j);
      EXPECT_NEAR(got[i], e.emulated[i], kTightRel * e.abs_sum[i] + 1e-6) << "row " << j;
      EXPECT_NEAR(got[i], shared[i], kTightRel * e.abs_sum[i] + 1e-6) << "row " << j;
    }
  }
}

// The largest integer sums the one-row K-quant loops see: every weight at its top code
// (Q4_K 15 with scale and min 63; Q6_K 63, i.e. +31, with scale -128 and 127) against
// activations of +-127, blocks written by hand, results worked out here in f64. A lane's
// four products then sum to 4 * 63 * 127 = 32004 for Q6_K, the most its int16 step holds.
TEST(QMatmul, OneRowZmmLoopsAtTheLargestSums) {
  const detail::QKernels& qk = detail::qkernels(IsaLevel::kAvx512);
  if (qk.isa != IsaLevel::kAvx512) GTEST_SKIP() << "no AVX-512 VNNI here: " << describe_cpu_features(cpu_features());
  constexpr int64_t kBlocks = 3;
  std::vector<formats::BlockQ8_K> act(kBlocks);
  for (int64_t b = 0; b < kBlocks; ++b) {
    formats::BlockQ8_K& a = act[static_cast<size_t>(b)];
    a.d = 0.5f + static_cast<float>(b);
    const int sign = b == 1 ? -1 : 1;  // block 1: all -127
    for (int i = 0; i < 256; ++i) a.qs[i] = static_cast<int8_t>(sign * 127);
    for (int g = 0; g < 16; ++g) a.bsums[g] = static_cast<int16_t>(sign * 127 * 16);
  }
  const double dx_sum_signed = 0.5 * 1 + 1.5 * -1 + 2.5 * 1;  // Σ_b d_x * sign, per element 127
  {
    std::vector<formats::BlockQ4_K> w(kBlocks);
    for (formats::BlockQ4_K& b : w) {
      b.d = f32_to_f16_bits(0.25f);
      b.dmin = f32_to_f16_bits(0.125f);
      std::memset(b.scales, 0xFF, sizeof b.scales);  // every 6-bit scale and min = 63
      std::memset(b.qs, 0xFF, sizeof b.qs);          // every value 15
    }
    // Per element: d * 63 * 15 * q_x - dmin * 63 * q_x.
    const double want = 256 * 127 * dx_sum_signed * (0.25 * 63 * 15 - 0.125 * 63);
    float got = NAN;
    qk.gemv_one_row[static_cast<int>(detail::QKind::kQ4_K)](1, kBlocks, reinterpret_cast<const uint8_t*>(w.data()),
                                                           sizeof(formats::BlockQ4_K) * kBlocks,
                                                           reinterpret_cast<const uint8_t*>(act.data()), 0, 0, 1, &got, 1);
    EXPECT_NEAR(got, want, 1e-6 * std::fabs(want));
  }
  for (int scale : {127, -128}) {
    std::vector<formats::BlockQ6_K> w(kBlocks);
    for (formats::BlockQ6_K& b : w) {
      b.d = f32_to_f16_bits(0.25f);
      std::memset(b.ql, 0xFF, sizeof b.ql);
      std::memset(b.qh, 0xFF, sizeof b.qh);  // every value 63 - 32 = 31
      for (int8_t& sc : b.scales) sc = static_cast<int8_t>(scale);
    }
    const double want = 256 * 127 * dx_sum_signed * 0.25 * scale * 31;
    float got = NAN;
    qk.gemv_one_row[static_cast<int>(detail::QKind::kQ6_K)](1, kBlocks, reinterpret_cast<const uint8_t*>(w.data()),
                                                           sizeof(formats::BlockQ6_K) * kBlocks,
                                                           reinterpret_cast<const uint8_t*>(act.data()), 0, 0, 1, &got, 1);
    EXPECT_NEAR(got, want, 1e-6 * std::fabs(want)) << "scale " << scale;
  }
}

// The activation quantizer is bit-identical to the formats reference (Q8_0, Q8_K) and to
// llama.cpp's Q8_1 written out above, ties (x * 127/amax = n + 0.5) included.
TEST(QMatmul, ActivationQuantizationIsBitExact) {
  Rng rng;
  RLX_TRACE_SEED(rng);
  const int64_t k = 512;
  std::vector<float> x = rng.vec(k, -3.0f, 3.0f);
  // Block 0: amax 127 (scale 1), so these land exactly halfway between integers.
  x[0] = 127.0f;
  x[1] = 2.5f;
  x[2] = -3.5f;
  x[3] = 0.5f;
  x[4] = -0.5f;
  for (int i = 32; i < 64; ++i) x[static_cast<size_t>(i)] = 0.0f;  // an all-zero block
  {
    std::vector<formats::BlockQ8_0> want(k / 32), got(k / 32);
    formats::quantize_activation_q8_0(x.data(), want.data(), k);
    qmatmul_quantize_activation(GgmlType::Q4_0, x.data(), got.data(), k);
    EXPECT_EQ(std::memcmp(want.data(), got.data(), want.size() * sizeof(want[0])), 0);
    EXPECT_EQ(got[0].qs[1], 2);
    EXPECT_EQ(got[0].qs[2], -4);
  }
  {
    // Q8_K (vector code on AVX2 / AVX-512): blocks of 256 with the cases its vector
    // path must get right: halfway products (block 0: amax 127), a tie of +-amax (the
    // first one sets the sign of the scale), an all-zero and an all -0 block, tiny
    // values, and blocks with a NaN or an infinity (which take the scalar code).
    const int64_t kk = 256 * 8;
    std::vector<float> xk = rng.vec(kk, -3.0f, 3.0f);
    std::copy(x.begin(), x.end(), xk.begin());  // blocks 0-1: the Q8_0 data above
    xk[256 * 2 + 200] = -4.0f;                    // block 2: -4 first, +4 later
    xk[256 * 2 + 230] = 4.0f;
    for (int i = 0; i < 256; ++i) {
      xk[static_cast<size_t>(256 * 3 + i)] = 0.0f;
      xk[static_cast<size_t>(256 * 4 + i)] = -0.0f;
      xk[static_cast<size_t>(256 * 7 + i)] *= 1e-30f;
    }
    xk[256 * 5 + 17] = std::numeric_limits<float>::quiet_NaN();
    xk[256 * 6 + 100] = std::numeric_limits<float>::infinity();
    std::vector<formats::BlockQ8_K> want(kk / 256);
    formats::quantize_activation_q8_k(xk.data(), want.data(), kk);
    EXPECT_GT(want[2].d, 0.0f);  // -4 came first: d = -max / 127 > 0
    for (IsaLevel l : test::isa_levels()) {
      SCOPED_TRACE(testing::Message() << "isa " << static_cast<int>(l));
      std::vector<formats::BlockQ8_K> got(kk / 256);
      qmatmul_quantize_activation(GgmlType::Q6_K, xk.data(), got.data(), kk, l);
      for (size_t b = 0; b < want.size(); ++b)
        EXPECT_EQ(std::memcmp(&want[b], &got[b], sizeof(want[b])), 0) << "block " << b;
    }
  }
  {
    // Q8_0 / Q8_1 on every ISA level (vector code on AVX2 / AVX-512) against the scalar
    // table: finite data only (the scalar code's q of a NaN product is an int cast of
    // NaN), with halfway products, zero, -0 and tiny blocks.
    std::vector<float> xs = x;
    for (int i = 64; i < 96; ++i) xs[static_cast<size_t>(i)] = -0.0f;
    for (int i = 96; i < 128; ++i) xs[static_cast<size_t>(i)] *= 1e-30f;
    std::vector<formats::BlockQ8_0> want0(k / 32);
    std::vector<formats::BlockQ8_1> want1(k / 32);
    qmatmul_quantize_activation(GgmlType::Q4_0, xs.data(), want0.data(), k, IsaLevel::kScalar);
    qmatmul_quantize_activation(GgmlType::Q5_1, xs.data(), want1.data(), k, IsaLevel::kScalar);
    for (IsaLevel l : test::isa_levels()) {
      SCOPED_TRACE(testing::Message() << "isa " << static_cast<int>(l));
      std::vector<formats::BlockQ8_0> got0(k / 32);
      std::vector<formats::BlockQ8_1> got1(k / 32);
      qmatmul_quantize_activation(GgmlType::Q8_0, xs.data(), got0.data(), k, l);
      qmatmul_quantize_activation(GgmlType::Q4_1, xs.data(), got1.data(), k, l);
      for (size_t b = 0; b < want0.size(); ++b) {
        EXPECT_EQ(std::memcmp(&want0[b], &got0[b], sizeof(want0[b])), 0) << "Q8_0 block " << b;
        EXPECT_EQ(std::memcmp(&want1[b], &got1[b], sizeof(want1[b])), 0) << "Q8_1 block " << b;
      }
    }
  }
  {
    std::vector<formats::BlockQ8_1> got(k / 32);
    qmatmul_quantize_activation(GgmlType::Q5_1, x.data(), got.data(), k);
    const QActRow want = round_activation(GgmlType::Q8_1, x.data(), k);
    for (int64_t b = 0; b < k / 32; ++b) {
      EXPECT_EQ(f16_bits_to_f32(got[static_cast<size_t>(b)].s), want.s[static_cast<size_t>(b)]) << b;
      const float d = f16_bits_to_f32(got[static_cast<size_t>(b)].d);
      for (int i = 0; i < 32; ++i)
        ASSERT_EQ(d * static_cast<float>(got[static_cast<size_t>(b)].qs[i]), want.v[static_cast<size_t>(b * 32 + i)]);
    }
  }
}

TEST(QMatmul, FloatWeightsRouteToGemm) {
  Rng rng;
  RLX_TRACE_SEED(rng);
  const int64_t m = 3, n = 21, k = 40;
  const std::vector<float> x = rng.vec(m * k), wf = rng.vec(n * k), bias = rng.vec(n);
  std::vector<uint16_t> wh(wf.size());
  for (GgmlType t : {GgmlType::F32, GgmlType::F16, GgmlType::BF16}) {
    EXPECT_EQ(qmatmul_scratch_bytes(t, m, k, QMatmulPath::kAuto, IsaLevel::kAvx512), 0u);
    std::vector<float> seen = wf;
    for (size_t i = 0; i < wf.size(); ++i) {
      wh[i] = t == GgmlType::F16 ? f32_to_f16_bits(wf[i]) : f32_to_bf16_bits(wf[i]);
      if (t == GgmlType::F16) seen[i] = f16_bits_to_f32(wh[i]);
      if (t == GgmlType::BF16) seen[i] = bf16_bits_to_f32(wh[i]);
    }
    std::vector<double> want(static_cast<size_t>(m * n));
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = bias[static_cast<size_t>(j)];
        for (int64_t kk = 0; kk < k; ++kk)
          s += double(x[static_cast<size_t>(i * k + kk)]) * seen[static_cast<size_t>(j * k + kk)];
        want[static_cast<size_t>(i * n + j)] = s;
      }
    std::vector<float> y(static_cast<size_t>(m * n));
    QMatmulParams p;
    p.m = m;
    p.n = n;
    p.k = k;
    p.bias = bias.data();
    const void* wp = t == GgmlType::F32 ? static_cast<const void*>(wf.data()) : wh.data();
    ASSERT_TRUE(dequant_matmul(KernelContext{}, p, t, x.data(), wp, y.data(), QMatmulScratch{}).ok());
    EXPECT_TRUE(test::all_close(y, want, 1e-5, 1e-5)) << formats::ggml_type_name(t);
  }
}

TEST(QMatmul, ZeroKGivesBias) {
  const float bias[3] = {1.5f, -2.0f, 0.25f};
  std::vector<float> y(6, NAN);
  QMatmulParams p;
  p.m = 2;
  p.n = 3;
  p.k = 0;
  p.bias = bias;
  ASSERT_TRUE(dequant_matmul(KernelContext{}, p, GgmlType::Q4_K, nullptr, nullptr, y.data(), QMatmulScratch{}).ok());
  for (int i = 0; i < 6; ++i) EXPECT_EQ(y[static_cast<size_t>(i)], bias[i % 3]);
}

TEST(QMatmul, BadCallsReturnErrors) {
  std::vector<float> x(512, 0.5f), y(4);
  std::vector<uint8_t> w(4096), scratch(qmatmul_scratch_bytes(GgmlType::Q4_K, 1, 512, QMatmulPath::kAuto, IsaLevel::kAvx512));
  const QMatmulScratch s{scratch.data(), scratch.size()};
  QMatmulParams p;
  p.m = 1;
  p.n = 2;
  p.k = 512;
  const KernelContext ctx;
  EXPECT_TRUE(dequant_matmul(ctx, p, GgmlType::Q4_K, x.data(), w.data(), y.data(), s).ok());

  const Status unsupported = dequant_matmul(ctx, p, GgmlType::Q8_1, x.data(), w.data(), y.data(), s);
  ASSERT_FALSE(unsupported.ok());
  EXPECT_EQ(unsupported.error().code(), ErrorCode::kUnsupported);
  EXPECT_FALSE(qmatmul_supported(GgmlType::Q8_K));

  QMatmulParams bad_k = p;
  bad_k.k = 100;  // not a multiple of 256
  const Status k_err = dequant_matmul(ctx, bad_k, GgmlType::Q4_K, x.data(), w.data(), y.data(), s);
  ASSERT_FALSE(k_err.ok());
  EXPECT_EQ(k_err.error().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(k_err.error().message().find("block size"), std::string::npos) << k_err.error().message();

  const Status small = dequant_matmul(ctx, p, GgmlType::Q4_K, x.data(), w.data(), y.data(),
                                      QMatmulScratch{scratch.data(), scratch.size() - 1});
  ASSERT_FALSE(small.ok());
  EXPECT_NE(small.error().message().find("scratch"), std::string::npos) << small.error().message();

  QMatmulParams bad_ld = p;
  bad_ld.lda = 256;
  EXPECT_FALSE(dequant_matmul(ctx, bad_ld, GgmlType::Q4_K, x.data(), w.data(), y.data(), s).ok());
  QMatmulParams neg = p;
  neg.n = -1;
  EXPECT_FALSE(dequant_matmul(ctx, neg, GgmlType::Q4_K, x.data(), w.data(), y.data(), s).ok());
  EXPECT_FALSE(dequant_matmul(ctx, p, GgmlType::Q4_K, x.data(), nullptr, y.data(), s).ok());

  // The AMX path asked for where the tiles are not usable (capped below kAmx here).
  QMatmulParams amx = p;
  amx.path = QMatmulPath::kAmx;
  std::vector<uint8_t> amx_scratch(qmatmul_scratch_bytes(GgmlType::Q4_K, 1, 512, QMatmulPath::kAmx, IsaLevel::kAvx512));
  const Status no_tiles = dequant_matmul(KernelContext{nullptr, IsaLevel::kAvx512}, amx, GgmlType::Q4_K, x.data(),
                                         w.data(), y.data(), QMatmulScratch{amx_scratch.data(), amx_scratch.size()});
  ASSERT_FALSE(no_tiles.ok());
  EXPECT_EQ(no_tiles.error().code(), ErrorCode::kUnsupported);
  EXPECT_NE(no_tiles.error().message().find("AMX"), std::string::npos) << no_tiles.error().message();
  EXPECT_NE(qmatmul_auto_path(GgmlType::Q4_K, 64, IsaLevel::kAvx512), QMatmulPath::kAmx);
  if (amx_enabled(IsaLevel::kAmx)) {  // a type without a tile loop
    std::vector<float> x1(32 * 512, 0.5f), y1(32 * 2);
    std::vector<uint8_t> w1(2 * 512 / 32 * 24), s1(qmatmul_scratch_bytes(GgmlType::Q4_1, 32, 512, QMatmulPath::kAmx,
                                                                        IsaLevel::kAmx));
    QMatmulParams q1 = amx;
    q1.m = 32;
    const Status no_loop = dequant_matmul(KernelContext{nullptr, IsaLevel::kAmx}, q1, GgmlType::Q4_1, x1.data(),
                                          w1.data(), y1.data(), QMatmulScratch{s1.data(), s1.size()});
    ASSERT_FALSE(no_loop.ok());
    EXPECT_EQ(no_loop.error().code(), ErrorCode::kUnsupported);
  }
}

// The decode GEMVs' prefetch distance and thread split are measured on real one-row
// calls of 1 MiB or more: every candidate in turn, then one stays. They move prefetch
// hints and which thread computes a row only, so each call's result is bit for bit the
// one before any tuning.
TEST(QMatmul, DecodePrefetchIsMeasuredAndChangesNoResult) {
  if (env_config().cpu_gemv_prefetch >= 0 || env_config().cpu_gemv_split >= 0)
    GTEST_SKIP() << "RLX_CPU_GEMV_PREFETCH or RLX_CPU_GEMV_SPLIT is set";
  Rng rng;
  const int64_t k = 2048, n = 1024;  // Q8_0: 2.1 MiB of weights
  const QWeights w = make_weights(rng, GgmlType::Q8_0, n, k);
  const std::vector<float> x = rng.vec(k);
  std::vector<uint8_t> scratch(qmatmul_scratch_bytes(GgmlType::Q8_0, 1, k, QMatmulPath::kAuto, IsaLevel::kAmx));
  QMatmulParams p;
  p.m = 1;
  p.n = n;
  p.k = k;
  auto run = [&] {
    std::vector<float> y(static_cast<size_t>(n));
    EXPECT_TRUE(dequant_matmul(KernelContext{&test::test_pool(), IsaLevel::kAmx}, p, GgmlType::Q8_0, x.data(),
                               w.packed.data(), y.data(), QMatmulScratch{scratch.data(), scratch.size()})
                    .ok());
    return y;
  };
  test::expect_prefetch_measurement_settles(run);
}

}  // namespace
}  // namespace rlx::cpu
