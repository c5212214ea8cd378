// RoPE (layouts, partial rotation, frequency tables, magnitude scale) and attention (GQA, masks,
// positions, softcap, strided KV views, decode with T split) vs float64 references.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "backends/cpu/kernels/amx_matmul.h"
#include "backends/cpu/kernels/attention.h"
#include "backends/cpu/kernels/rope.h"
#include "cpu_kernels/test_util.h"

namespace rlx::cpu {
namespace {

using test::all_close;
using test::Rng;

// The kernel rotates by the caller's pair frequencies (any scaling is folded into
// them, see ir::rope_inv_freq) and scales the rotated pairs by mscale.
TEST(Rope, LayoutsFrequencyTablesAndPartialRotation) {
  Rng rng;
  RLX_TRACE_SEED(rng);
  for (RopeLayout layout : {RopeLayout::kNormal, RopeLayout::kNeox})
    for (float mscale : {1.0f, 1.1386f})
      for (int64_t n_rot : {int64_t{0}, int64_t{10}}) {
        RopeParams p;
        p.seq = 5;
        p.n_heads = 3;
        p.head_dim = 16;
        p.n_rot = n_rot;
        p.layout = layout;
        p.mscale = mscale;
        const int64_t rot = n_rot ? n_rot : p.head_dim, half = rot / 2;
        // Base frequencies divided by uneven per-pair factors, as a rope_freqs table does.
        std::vector<double> freq(static_cast<size_t>(half));
        for (int64_t i = 0; i < half; ++i)
          freq[i] = std::pow(500000.0, -2.0 * double(i) / double(rot)) / (1.0 + 3.5 * double(i % 3));
        p.inv_freq = freq.data();
        std::vector<float> x = rng.vec(p.seq * p.n_heads * p.head_dim);
        std::vector<int32_t> pos = {0, 1, 7, 1000, 123456};
        std::vector<double> want(x.size());
        for (int64_t s = 0; s < p.seq; ++s)
          for (int64_t h = 0; h < p.n_heads; ++h) {
            const float* xh = x.data() + (s * p.n_heads + h) * p.head_dim;
            double* yh = want.data() + (s * p.n_heads + h) * p.head_dim;
            for (int64_t d = 0; d < p.head_dim; ++d) yh[d] = xh[d];
            for (int64_t i = 0; i < half; ++i) {
              const double c = mscale * std::cos(pos[s] * freq[i]), sn = mscale * std::sin(pos[s] * freq[i]);
              const int64_t i0 = layout == RopeLayout::kNormal ? 2 * i : i;
              const int64_t i1 = layout == RopeLayout::kNormal ? 2 * i + 1 : i + half;
              yh[i0] = xh[i0] * c - xh[i1] * sn;
              yh[i1] = xh[i0] * sn + xh[i1] * c;
            }
          }
        for (const KernelContext& ctx : test::contexts()) {
          std::vector<float> y(x.size());
          rope_f32(ctx, p, x.data(), pos.data(), y.data());
          ASSERT_TRUE(all_close(y, want, 2e-5, 1e-5))
              << test::describe(ctx) << " layout " << int(layout) << " mscale " << mscale << " n_rot " << n_rot;
          std::vector<float> inplace = x;
          rope_f32(ctx, p, inplace.data(), pos.data(), inplace.data());
          ASSERT_EQ(inplace, y);
        }
      }
}

struct AttnCase {
  int64_t S, T, H, KVH, D;
  AttnMask mask;
  int64_t window;
  float softcap;
  bool positions;
  int64_t kv_pad;  // extra elements per K/V row (a view into a wider cache)
};

std::vector<double> attention_ref(const AttnCase& c, const std::vector<float>& q, const std::vector<float>& k,
                                  const std::vector<float>& v, const std::vector<int32_t>& pos, float scale) {
  const int64_t ks = c.KVH * c.D + c.kv_pad;
  std::vector<double> o(static_cast<size_t>(c.S * c.H * c.D), 0.0);
  for (int64_t i = 0; i < c.S; ++i)
    for (int64_t h = 0; h < c.H; ++h) {
      const int64_t kvh = h / (c.H / c.KVH);
      const int64_t p = c.positions ? pos[i] : c.T - c.S + i;
      std::vector<double> s(c.T, -INFINITY);
      double m = -INFINITY;
      for (int64_t j = 0; j < c.T; ++j) {
        bool vis = true;
        if (c.mask != AttnMask::kNone) vis = j <= p;
        if (c.mask == AttnMask::kSlidingWindow) vis = vis && p - j < c.window;
        if (!vis) continue;
        double d = 0;
        for (int64_t e = 0; e < c.D; ++e) d += double(q[(i * c.H + h) * c.D + e]) * k[j * ks + kvh * c.D + e];
        d *= scale;
        if (c.softcap > 0) d = c.softcap * std::tanh(d / c.softcap);
        s[j] = d;
        m = std::max(m, d);
      }
      if (m == -INFINITY) continue;
      double l = 0;
      for (int64_t j = 0; j < c.T; ++j) l += std::exp(s[j] - m);
      for (int64_t j = 0; j < c.T; ++j) {
        const double w = std::exp(s[j] - m) / l;
        if (w == 0) continue;
        for (int64_t e = 0; e < c.D; ++e) o[(i * c.H + h) * c.D + e] += w * v[j * ks + kvh * c.D + e];
      }
    }
  return o;
}

void run_attention(const AttnCase& c) {
  Rng rng;
  RLX_TRACE_SEED(rng);
  const int64_t ks = c.KVH * c.D + c.kv_pad;
  const std::vector<float> q = rng.vec(c.S * c.H * c.D, -2, 2), k = rng.vec(c.T * ks, -2, 2), v = rng.vec(c.T * ks);
  std::vector<int32_t> pos(static_cast<size_t>(c.S));
  for (int64_t i = 0; i < c.S; ++i) pos[i] = static_cast<int32_t>(rng.integer(-1, c.T + 2));
  const float scale = 1.0f / std::sqrt(float(c.D));
  const std::vector<double> want = attention_ref(c, q, k, v, pos, scale);
  AttentionParams p;
  p.seq_q = c.S;
  p.seq_kv = c.T;
  p.n_heads = c.H;
  p.n_kv_heads = c.KVH;
  p.head_dim = c.D;
  p.k_stride = ks;
  p.v_stride = ks;
  p.softcap = c.softcap;
  p.mask = c.mask;
  p.window = c.window;
  p.q_pos = c.positions ? pos.data() : nullptr;
  // On the AMX tiles (prefills of 16+ rows whose stacked GQA rows reach amx_min_rows())
  // q, k, p and v enter as bf16 high + low parts: each product within 2^-15 relative,
  // so a score within scale * Σ|q||k| * 2^-15 =: e, a softmax weight within 2e relative,
  // and an output within (2e + 2^-15) * max|v|.
  double qk_max = 0, v_max = 0;
  for (int64_t i = 0; i < c.S; ++i)
    for (int64_t h = 0; h < c.H; ++h)
      for (int64_t j = 0; j < c.T; ++j) {
        double a = 0;
        for (int64_t e = 0; e < c.D; ++e)
          a += std::fabs(double(q[(i * c.H + h) * c.D + e]) * k[j * ks + (h / (c.H / c.KVH)) * c.D + e]);
        qk_max = std::max(qk_max, a);
      }
  for (float x : v) v_max = std::max(v_max, double(std::fabs(x)));
  const double tile_err = 0x1p-15, score_err = scale * qk_max * tile_err;
  const double amx_tol = (2 * score_err + tile_err) * v_max + 2e-5;
  for (const KernelContext& ctx : test::contexts()) {
    std::vector<float> o(want.size(), 99.0f);
    attention_f32(ctx, p, q.data(), k.data(), v.data(), o.data());
    // (a task stacks at most 64 query rows of each head of its group)
    const bool tiles = amx_enabled(ctx.isa) && c.S >= 16 && c.H / c.KVH * std::min<int64_t>(c.S, 64) >= amx_min_rows();
    ASSERT_TRUE(tiles ? all_close(o, want, amx_tol, 2e-5) : all_close(o, want, 2e-5, 2e-5))
        << test::describe(ctx) << " S=" << c.S << " T=" << c.T << " H=" << c.H << " KVH=" << c.KVH << " D=" << c.D
        << " mask=" << int(c.mask) << " softcap=" << c.softcap;
  }
}

TEST(Attention, PrefillMasksAndGqa) {
  run_attention({17, 17, 4, 2, 16, AttnMask::kCausal, 0, 0.0f, false, 0});
  run_attention({5, 70, 4, 1, 33, AttnMask::kCausal, 0, 0.0f, false, 3});
  run_attention({9, 150, 6, 3, 8, AttnMask::kNone, 0, 0.0f, false, 0});
  run_attention({33, 100, 2, 2, 64, AttnMask::kSlidingWindow, 20, 0.0f, false, 0});
  run_attention({7, 90, 4, 2, 17, AttnMask::kCausal, 0, 5.0f, true, 5});
  run_attention({6, 40, 2, 1, 24, AttnMask::kSlidingWindow, 7, 0.0f, true, 0});
  run_attention({1, 1, 1, 1, 1, AttnMask::kCausal, 0, 0.0f, false, 0});
}

// 16+ query rows run as blocked GEMMs: several query blocks of 64 and key blocks of 512,
// a partial last block, GQA, every mask, softcap, explicit positions (some see no key).
TEST(Attention, PrefillGemmBlocks) {
  run_attention({100, 700, 8, 2, 64, AttnMask::kCausal, 0, 0.0f, false, 0});
  run_attention({80, 80, 4, 4, 64, AttnMask::kSlidingWindow, 30, 20.0f, true, 0});
  run_attention({65, 600, 4, 1, 40, AttnMask::kNone, 0, 0.0f, false, 3});
  run_attention({130, 1100, 6, 3, 17, AttnMask::kCausal, 0, 0.0f, true, 0});
  run_attention({16, 16, 2, 1, 8, AttnMask::kCausal, 0, 0.0f, false, 0});
}

TEST(Attention, DecodeSplitsLongContexts) {
  run_attention({1, 3000, 2, 1, 64, AttnMask::kCausal, 0, 0.0f, false, 0});
  run_attention({1, 1500, 8, 2, 40, AttnMask::kSlidingWindow, 1100, 30.0f, false, 8});
  run_attention({1, 1300, 3, 3, 16, AttnMask::kCausal, 0, 0.0f, true, 0});  // position may hide all keys
  run_attention({1, 7, 5, 1, 9, AttnMask::kNone, 0, 0.0f, false, 0});
  // 512+ visible keys stream whole cache rows in blocks (more heads per KV head than one
  // row group holds; exactly at the threshold; a key count that is no block multiple).
  run_attention({1, 700, 16, 2, 24, AttnMask::kCausal, 0, 0.0f, false, 4});
  run_attention({1, 512, 4, 4, 32, AttnMask::kNone, 0, 0.0f, false, 0});
  run_attention({1, 2049, 6, 2, 20, AttnMask::kCausal, 0, 10.0f, false, 0});
  run_attention({1, 2100, 32, 8, 64, AttnMask::kCausal, 0, 0.0f, false, 0});  // llama-3.2-1b shape
  run_attention({1, 700, 8, 1, 128, AttnMask::kCausal, 0, 0.0f, true, 0});
}

TEST(Attention, EmptyKeysGiveZeros) {
  AttentionParams p;
  p.seq_q = 2;
  p.seq_kv = 0;
  p.n_heads = 2;
  p.n_kv_heads = 1;
  p.head_dim = 4;
  p.mask = AttnMask::kNone;
  std::vector<float> q(16, 1.0f), o(16, 5.0f);
  attention_f32(KernelContext{}, p, q.data(), nullptr, nullptr, o.data());
  for (float x : o) EXPECT_EQ(x, 0.0f);
}

}  // namespace
}  // namespace rlx::cpu
