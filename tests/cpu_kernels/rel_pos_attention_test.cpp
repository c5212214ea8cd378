// rel_pos_attention_f32 against a float64 transcription of its definition (RelPosAttentionAttrs
// in rlx/ir/op.h) under every ISA, single-threaded and on the shared pool: grids from one
// token to longer than a query block, several items and heads, head_dim not a power of
// two, an explicit scale.
#include "backends/cpu/kernels/rel_pos_attention.h"

#include <gtest/gtest.h>

#include <cmath>

#include "test_util.h"

namespace rlx::cpu {
namespace {

std::vector<double> reference(const RelPosAttentionParams& p, const std::vector<float>& q, const std::vector<float>& k,
                              const std::vector<float>& v, const std::vector<float>& rh, const std::vector<float>& rw) {
  const int64_t T = p.grid_h * p.grid_w, D = p.head_dim, W = p.n_heads * D;
  const double scale = p.scale != 0.0f ? p.scale : 1.0 / std::sqrt(static_cast<double>(D));
  std::vector<double> o(q.size(), 0.0), s(static_cast<size_t>(T));
  for (int64_t n = 0; n < p.items; ++n)
    for (int64_t h = 0; h < p.n_heads; ++h)
      for (int64_t i = 0; i < T; ++i) {
        const float* qi = q.data() + (n * T + i) * W + h * D;
        double mx = -INFINITY;
        for (int64_t j = 0; j < T; ++j) {
          const float* kj = k.data() + (n * T + j) * W + h * D;
          const float* th = rh.data() + (i / p.grid_w - j / p.grid_w + p.grid_h - 1) * D;
          const float* tw = rw.data() + (i % p.grid_w - j % p.grid_w + p.grid_w - 1) * D;
          double dot = 0, bias = 0;
          for (int64_t c = 0; c < D; ++c) {
            dot += double(qi[c]) * kj[c];
            bias += double(qi[c]) * (double(th[c]) + tw[c]);
          }
          s[static_cast<size_t>(j)] = scale * dot + bias;
          mx = std::max(mx, s[static_cast<size_t>(j)]);
        }
        double sum = 0;
        for (double& e : s) sum += (e = std::exp(e - mx));
        for (int64_t j = 0; j < T; ++j)
          for (int64_t c = 0; c < D; ++c)
            o[static_cast<size_t>((n * T + i) * W + h * D + c)] +=
                s[static_cast<size_t>(j)] / sum * v[static_cast<size_t>((n * T + j) * W + h * D + c)];
      }
  return o;
}

TEST(RelPosAttention, MatchesFloat64OnEveryIsaAndPool) {
  struct Shape {
    int64_t items, heads, dim, gh, gw;
    float scale;
  };
  for (const Shape& sh : {Shape{1, 1, 4, 1, 1, 0.0f}, Shape{3, 2, 8, 3, 5, 0.0f}, Shape{2, 3, 12, 9, 10, 0.3f},
                          Shape{1, 2, 32, 11, 7, 0.0f}}) {
    test::Rng rng;
    RelPosAttentionParams p;
    p.items = sh.items;
    p.n_heads = sh.heads;
    p.head_dim = sh.dim;
    p.grid_h = sh.gh;
    p.grid_w = sh.gw;
    p.scale = sh.scale;
    const int64_t n = sh.items * sh.gh * sh.gw * sh.heads * sh.dim;
    const std::vector<float> q = rng.vec(n), k = rng.vec(n), v = rng.vec(n);
    const std::vector<float> rh = rng.vec((2 * sh.gh - 1) * sh.dim, -0.5f, 0.5f),
                             rw = rng.vec((2 * sh.gw - 1) * sh.dim, -0.5f, 0.5f);
    const std::vector<double> want = reference(p, q, k, v, rh, rw);
    for (const KernelContext& ctx : test::contexts()) {
      std::vector<float> o(static_cast<size_t>(n), NAN);
      rel_pos_attention_f32(ctx, p, q.data(), k.data(), v.data(), rh.data(), rw.data(), o.data());
      double diff = 0, norm = 0;
      for (size_t i = 0; i < want.size(); ++i) {
        diff += (o[i] - want[i]) * (o[i] - want[i]);
        norm += want[i] * want[i];
      }
      EXPECT_LE(std::sqrt(diff / norm), 2e-6)
          << test::describe(ctx) << " grid " << sh.gh << "x" << sh.gw << " seed " << rng.seed;
    }
  }
}

}  // namespace
}  // namespace rlx::cpu
