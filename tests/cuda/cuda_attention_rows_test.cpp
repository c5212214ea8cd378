// CUDA decode attention of many streams at once (a batched server step: more sequence x
// query-head rows than one wave of blocks), against the CPU backend. Skips without a
// CUDA device.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "cuda_test_util.h"

namespace rlx {
namespace {

using namespace cuda_test;

using ir::DType;
using ir::GraphBuilder;

// B sequences of one query row each, every row at its own position in its own cache
// (rows past a position hold values the mask must hide): head dims 32 to 256, groups of
// 1, 3, 4 and 8 query heads per KV head, f32 and bf16 caches, a sliding window and
// softcap, positions that give one split (0, 31), a few and the most, splits of more
// than one chunk of 256 keys (64 streams), and a head_dim (80) the many-streams kernel
// does not take (the general kernel's KV-group grid). One compiled graph runs two sets
// of positions (the split counters must be back at zero after each run).
TEST(CudaOps, AttentionDecodeOfManyStreams) {
  REQUIRE_CUDA();
  struct Cfg {
    int64_t B, T, H, KV, hd;
    DType dt;
    ir::MaskKind mask;
    int64_t window;
    double softcap;
  };
  const Cfg cfgs[] = {
      {16, 700, 32, 8, 64, DType::F32, ir::MaskKind::Causal, 0, 0},  // llama-3.2-1b, 16 streams
      {8, 1500, 32, 4, 128, DType::F32, ir::MaskKind::Causal, 0, 0},
      {12, 400, 24, 24, 32, DType::BF16, ir::MaskKind::SlidingWindow, 100, 30.0},
      {10, 300, 32, 8, 256, DType::F32, ir::MaskKind::Causal, 0, 0},
      {12, 600, 24, 8, 64, DType::BF16, ir::MaskKind::Causal, 0, 0},
      {8, 3000, 40, 5, 128, DType::F32, ir::MaskKind::SlidingWindow, 2600, 0},
      {8, 400, 32, 8, 80, DType::F32, ir::MaskKind::Causal, 0, 0},
      {64, 1200, 16, 8, 32, DType::F32, ir::MaskKind::Causal, 0, 0},  // 3 splits of up to 400 keys: 2 chunks
  };
  uint32_t seed = 700;
  for (const Cfg& f : cfgs) {
    SCOPED_TRACE(testing::Message() << "B=" << f.B << " T=" << f.T << " H=" << f.H << " KV=" << f.KV
                                    << " hd=" << f.hd << " dt=" << ir::dtype_name(f.dt));
    GraphBuilder b;
    ir::AttentionAttrs a;
    a.n_heads = f.H;
    a.n_kv_heads = f.KV;
    a.head_dim = f.hd;
    a.mask = f.mask;
    a.window = f.window;
    a.softcap = f.softcap;
    auto q = b.input("q", DType::F32, {f.B, 1, f.H * f.hd});
    auto k = b.input("k", DType::F32, {f.B, f.T, f.KV * f.hd});
    auto v = b.input("v", DType::F32, {f.B, f.T, f.KV * f.hd});
    auto qp = b.input("qp", DType::I32, {f.B, 1});
    auto cvt = [&](ir::ValueId x) { return f.dt == DType::F32 ? x : b.cast(x, f.dt); };
    b.output(b.cast(b.attention(cvt(q), cvt(k), cvt(v), a, qp), DType::F32), "o");
    auto g = b.build();
    ASSERT_TRUE(g.has_value()) << g.error().to_string();
    Case c;
    auto s = Session::create(Device::cuda());
    ASSERT_TRUE(s.has_value());
    auto cg = s->compile_with(*g, c.opt);
    ASSERT_TRUE(cg.has_value()) << cg.error().to_string();
    c.inputs["q"] = f32({f.B, 1, f.H * f.hd}, seed++, -2, 2);
    c.inputs["k"] = f32({f.B, f.T, f.KV * f.hd}, seed++, -2, 2);
    c.inputs["v"] = f32({f.B, f.T, f.KV * f.hd}, seed++);
    const int32_t last = static_cast<int32_t>(f.T) - 1;
    const std::vector<int32_t> picks = {0, 31, 32, 33, 63, 255, 256, 257, 511, 513, 1023, 2047, last, last / 2, 7, 100};
    for (int round = 0; round < 2; ++round) {
      std::vector<int32_t> pos;
      for (int64_t i = 0; i < f.B; ++i) {
        const int32_t p = picks[static_cast<size_t>(i + round * 5) % picks.size()];
        pos.push_back(p < f.T ? p : last - static_cast<int32_t>(i));
      }
      SCOPED_TRACE(testing::Message() << "round " << round);
      c.inputs["qp"] = i32({f.B, 1}, pos);
      auto cpu = run_on(Device::cpu(), *g, c);
      ASSERT_TRUE(cpu.has_value()) << cpu.error().to_string();
      std::vector<NamedTensorView> views;
      for (const auto& [name, t] : c.inputs) views.push_back({name, t.view()});
      auto gpu = cg->run_typed(views);
      ASSERT_TRUE(gpu.has_value()) << gpu.error().to_string();
      const auto want = *(*cpu)[0].to_f32(), got = *(*gpu)[0].to_f32();
      const double e = rel_l2(got, want);
      EXPECT_LE(e, f.dt == DType::F32 ? 1e-5 : 1e-2) << "relative L2 error " << e;
      // Each sequence on its own: a wrong position or cache shows in its rows alone.
      const size_t row = static_cast<size_t>(f.H * f.hd);
      for (int64_t i = 0; i < f.B; ++i) {
        const std::vector<float> gw(want.begin() + static_cast<std::ptrdiff_t>(i * row),
                                    want.begin() + static_cast<std::ptrdiff_t>((i + 1) * row));
        const std::vector<float> gg(got.begin() + static_cast<std::ptrdiff_t>(i * row),
                                    got.begin() + static_cast<std::ptrdiff_t>((i + 1) * row));
        const double ei = rel_l2(gg, gw);
        EXPECT_LE(ei, f.dt == DType::F32 ? 1e-5 : 2e-2) << "sequence " << i << " at " << pos[static_cast<size_t>(i)];
      }
    }
  }
}

}  // namespace
}  // namespace rlx
