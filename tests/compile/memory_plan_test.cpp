// Memory planner tests: property-based random DAGs checked by brute force (no two
// simultaneously-live arena values overlap, alignment holds), views cost no bytes,
// in-place reuse, handles/params outside the arena, a transformer block shares memory.
#include <gtest/gtest.h>

#include <random>

#include "rlx/compile/memory_plan.h"
#include "rlx/compile/passes.h"
#include "rlx/compile/pipeline.h"
#include "test_graphs.h"

namespace rlx::compile {
namespace {
using namespace ir;

// Brute force, per step: every pair of arena values live at the same step must be
// disjoint, unless one is the in-place successor of the other (an elementwise op reading
// it at its last step, same slot). Returns the first violation, or "" for a valid plan.
std::string brute_force_violation(const LirModule& lir) {
  const Graph& g = lir.graph;
  const BufferPlan& p = lir.plan;
  const int n = g.size();
  auto root = [&](ValueId v) { return p.slots[v].kind == SlotKind::kView ? p.slots[v].root : v; };
  std::vector<std::vector<char>> live(n, std::vector<char>(n + 1, 0));  // [value][step]
  for (ValueId v = 0; v < n; ++v) live[v][g.node(v).op == OpKind::Input ? 0 : v] = 1;
  auto mark = [&](ValueId r, int from, int to) {
    for (int t = from; t <= to; ++t) live[r][t] = 1;
  };
  for (ValueId v = 0; v < n; ++v) {
    for (ValueId in : g.node(v).inputs) mark(root(in), g.node(root(in)).op == OpKind::Input ? 0 : root(in), v);
    if (p.slots[v].kind == SlotKind::kView) mark(root(v), root(v), v);
  }
  for (const GraphOutput& o : g.outputs()) mark(root(o.value), root(o.value), n);
  for (ValueId a = 0; a < n; ++a) {
    const BufferSlot& sa = p.slots[a];
    if (sa.kind != SlotKind::kArena) continue;
    if (sa.offset % p.alignment != 0) return g.describe(a) + " is not aligned";
    if (sa.offset + sa.size > p.arena_size) return g.describe(a) + " ends past the arena";
    for (ValueId b = a + 1; b < n; ++b) {
      const BufferSlot& sb = p.slots[b];
      if (sb.kind != SlotKind::kArena || sa.size == 0 || sb.size == 0) continue;
      if (!(sa.offset < sb.offset + sb.size && sb.offset < sa.offset + sa.size)) continue;
      int shared_steps = 0, last_shared = -1;
      for (int t = 0; t <= n; ++t)
        if (live[a][t] && live[b][t]) ++shared_steps, last_shared = t;
      if (shared_steps == 0) continue;
      // In place: b, elementwise, reads a at b's own step, which is a's last step.
      int a_last = 0;
      for (int t = 0; t <= n; ++t)
        if (live[a][t]) a_last = t;
      const Node& nb = g.node(b);
      const bool in_place = shared_steps == 1 && last_shared == b && a_last == b &&
                            std::find(nb.inputs.begin(), nb.inputs.end(), a) != nb.inputs.end() &&
                            sa.offset == sb.offset && sa.size == sb.size &&
                            (is_elementwise(nb.op) || nb.op == OpKind::ElementwiseRegion);
      if (!in_place) return g.describe(a) + " overlaps " + g.describe(b);
    }
  }
  return "";
}

MirModule random_dag(std::mt19937& rng, int n_nodes) {
  GraphBuilder b;
  std::vector<ValueId> vals;
  const int64_t rows[] = {1, 3, 5, 8};
  for (int i = 0; i < 3; ++i) vals.push_back(b.input("in" + std::to_string(i), DType::F32, Shape{Dim(8), Dim(16)}));
  const ValueId w = b.param("w", DType::F32, Shape{Dim(16), Dim(16)});
  for (int i = 0; i < n_nodes; ++i) {
    auto pick = [&] { return vals[std::uniform_int_distribution<size_t>(0, vals.size() - 1)(rng)]; };
    const ValueId a = pick();
    switch (std::uniform_int_distribution<int>(0, 6)(rng)) {
      case 0: vals.push_back(b.activation(ActKind::Silu, a)); break;
      case 1: vals.push_back(b.add(a, pick())); break;
      case 2: vals.push_back(b.matmul(a, w)); break;
      case 3: vals.push_back(b.reshape(b.reshape(a, Shape{Dim(128)}), Shape{Dim(8), Dim(16)})); break;
      case 4: {
        const int64_t r = rows[std::uniform_int_distribution<int>(0, 3)(rng)];
        const ValueId nar = b.narrow(a, 0, 0, Dim(r));
        vals.push_back(b.add(b.expand(b.reduce(ReduceKind::Sum, nar, {0}, true), Shape{Dim(8), Dim(16)}), a));
        break;
      }
      case 5: vals.push_back(b.cast(b.cast(a, DType::F16), DType::F32)); break;
      default: vals.push_back(b.softmax(a)); break;
    }
  }
  const int n_out = std::uniform_int_distribution<int>(1, 3)(rng);
  for (int i = 0; i < n_out; ++i)
    b.output(vals[std::uniform_int_distribution<size_t>(3, vals.size() - 1)(rng)], "o" + std::to_string(i));
  auto g = b.build();
  EXPECT_TRUE(g.has_value()) << g.error().to_string();
  return MirModule{std::move(g).value()};
}

TEST(MemoryPlan, RandomDagsNeverOverlapLiveValues) {
  std::mt19937 rng(1234);
  for (int trial = 0; trial < 200; ++trial) {
    const MirModule m = random_dag(rng, 5 + trial % 40);
    for (int64_t align : {16, 64, 256}) {
      for (bool in_place : {false, true}) {
        auto lir = plan_memory(m, PlanOptions{align, in_place});
        ASSERT_TRUE(lir.has_value()) << lir.error().to_string();
        ASSERT_TRUE(check_plan(*lir).ok()) << check_plan(*lir).error().to_string();
        EXPECT_EQ(brute_force_violation(*lir), "");
        EXPECT_LE(lir->plan.arena_size, lir->plan.unshared_bytes);
        if (HasFailure()) return;
      }
    }
  }
}

TEST(MemoryPlan, CheckPlanRejectsExactlyWhatTheBruteForceRejects) {
  std::mt19937 rng(99);
  int rejected = 0, accepted = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const MirModule m = random_dag(rng, 5 + trial % 40);
    auto lir = plan_memory(m, PlanOptions{64, trial % 2 == 0});
    ASSERT_TRUE(lir.has_value()) << lir.error().to_string();
    std::vector<ValueId> arena;
    for (ValueId v = 0; v < lir->graph.size(); ++v)
      if (lir->plan.slots[v].kind == SlotKind::kArena && lir->plan.slots[v].size > 0) arena.push_back(v);
    if (arena.size() < 2) continue;
    // Move one value onto another's offset (often a conflict, sometimes a legal one).
    for (int k = 0; k < 3; ++k) {
      LirModule bad = *lir;
      const ValueId v = arena[std::uniform_int_distribution<size_t>(0, arena.size() - 1)(rng)];
      const ValueId w = arena[std::uniform_int_distribution<size_t>(0, arena.size() - 1)(rng)];
      BufferSlot& s = bad.plan.slots[v];
      s.offset = bad.plan.slots[w].offset + 64 * std::uniform_int_distribution<int64_t>(0, 1)(rng);
      bad.plan.arena_size = std::max(bad.plan.arena_size, s.offset + s.size);
      const bool expect_ok = brute_force_violation(bad).empty();
      const Status got = check_plan(bad);
      ASSERT_EQ(got.ok(), expect_ok) << (got.ok() ? std::string("accepted") : got.error().to_string());
      if (!got.ok()) {
        EXPECT_NE(got.error().message().find("live together"), std::string::npos);
      }
      (got.ok() ? accepted : rejected)++;
    }
  }
  EXPECT_GT(rejected, 100);
  EXPECT_GT(accepted, 10);
}

TEST(MemoryPlan, CheckPlanIsFastOnLongGraphs) {
  // 20,000 values in a chain: comparing every pair would take 2 * 10^8 comparisons.
  GraphBuilder b;
  ValueId x = b.input("x", DType::F32, Shape{Dim(4), Dim(8)});
  for (int i = 0; i < 20000; ++i) x = b.activation(i % 2 ? ActKind::Exp : ActKind::Relu, x);
  b.output(x, "y");
  auto lir = plan_memory(MirModule{*b.build()});
  ASSERT_TRUE(lir.has_value()) << lir.error().to_string();
  EXPECT_TRUE(check_plan(*lir).ok());
}

TEST(MemoryPlan, ViewsCostNothingAndAliasTheirRoot) {
  GraphBuilder b;
  const ValueId x = b.input("x", DType::F32, Shape{Dim(4), Dim(8)});
  const ValueId s = b.activation(ActKind::Exp, x);
  const ValueId r = b.reshape(s, Shape{Dim(32)});
  const ValueId n = b.narrow(s, 0, 2, Dim(2));  // rows 2..3: byte offset 2*8*4
  const ValueId c = b.cast(n, DType::F32);
  const ValueId t = b.narrow(s, 1, 0, Dim(4));  // strided: a copy
  b.output(r, "r");
  b.output(c, "c");
  b.output(t, "t");
  auto lir = plan_memory(MirModule{*b.build()});
  ASSERT_TRUE(lir.has_value());
  const auto& slots = lir->plan.slots;
  EXPECT_EQ(slots[r].kind, SlotKind::kView);
  EXPECT_EQ(slots[r].root, s);
  EXPECT_EQ(slots[n].kind, SlotKind::kView);
  EXPECT_EQ(slots[n].offset, 64);
  EXPECT_EQ(slots[c].kind, SlotKind::kView);
  EXPECT_EQ(slots[c].root, s);
  EXPECT_EQ(slots[c].offset, 64);
  EXPECT_EQ(slots[t].kind, SlotKind::kArena);
  // x (128) + exp (128) + the strided copy (64): views add nothing.
  EXPECT_EQ(lir->plan.unshared_bytes, 128 + 128 + 64);
}

TEST(MemoryPlan, InPlaceReuseForDyingElementwiseInput) {
  GraphBuilder b;
  const ValueId x = b.input("x", DType::F32, Shape{Dim(64)});
  const ValueId a = b.activation(ActKind::Exp, x);
  const ValueId c = b.activation(ActKind::Tanh, a);  // a dies here: same slot
  const ValueId d = b.activation(ActKind::Neg, c);
  b.output(d, "y");
  b.output(x, "x");  // keeps x live to the end
  const MirModule m{*b.build()};
  auto lir = plan_memory(m);
  ASSERT_TRUE(lir.has_value());
  EXPECT_EQ(lir->plan.slots[c].offset, lir->plan.slots[a].offset);
  EXPECT_EQ(lir->plan.slots[d].offset, lir->plan.slots[a].offset);
  EXPECT_NE(lir->plan.slots[a].offset, lir->plan.slots[x].offset);  // the graph input is never overwritten
  auto no = plan_memory(m, PlanOptions{64, false});
  EXPECT_GT(no->plan.arena_size, lir->plan.arena_size);
}

TEST(MemoryPlan, BoundaryKindsAndUpdateSliceAliasesHandle) {
  GraphBuilder b;
  const ValueId x = b.input("x", DType::F32, Shape{Dim(2), Dim(8)});
  const ValueId w = b.param("w", DType::Q8_0, Shape{Dim(8), Dim(32)});
  const ValueId h = b.handle("cache", DType::F32, Shape{Dim(16), Dim(8)});
  const ValueId start = b.constant(DType::I32, Shape{Dim(1)}, {3, 0, 0, 0});
  const ValueId u = b.update_slice(h, x, start, 0);
  b.output(u, "cache_out");
  b.output(b.dequant_matmul(b.reshape(b.narrow(u, 0, 0, Dim(4)), Shape{Dim(1), Dim(32)}), w), "y");
  auto lir = plan_memory(MirModule{*b.build()});
  ASSERT_TRUE(lir.has_value()) << lir.error().to_string();
  EXPECT_EQ(lir->plan.slots[w].kind, SlotKind::kParam);
  EXPECT_EQ(lir->plan.slots[w].size, 8 * 34);  // dtype-true packed size
  EXPECT_EQ(lir->plan.slots[h].kind, SlotKind::kHandle);
  EXPECT_EQ(lir->plan.slots[start].kind, SlotKind::kConstant);
  EXPECT_EQ(lir->plan.slots[u].kind, SlotKind::kView);
  EXPECT_EQ(lir->plan.slots[u].root, h);
  EXPECT_EQ(lir->manifest.handles.size(), 1u);
  EXPECT_EQ(lir->manifest.params[0].bytes, 8 * 34);
  EXPECT_TRUE(check_plan(*lir).ok());
}

TEST(MemoryPlan, TransformerBlockSharesMemoryAndFusedResidualViewsAreFree) {
  testing::LlamaShape s;
  s.layers = 4;
  s.seq = Dim(32);
  auto r = compile_hir(testing::llama(s, FusionPolicy::Direct), CompileOptions{}, OpSet::all_mir(), "cpu");
  ASSERT_TRUE(r.has_value()) << r.error().to_string();
  const LirModule& lir = r->lir;
  EXPECT_LT(lir.plan.arena_size * 3, lir.plan.unshared_bytes);
  EXPECT_EQ(brute_force_violation(lir), "");
  int views = 0;
  for (ValueId v = 0; v < lir.graph.size(); ++v) {
    const Node& n = lir.graph.node(v);
    if (n.op == OpKind::Narrow && lir.graph.node(n.inputs[0]).op == OpKind::FusedResidualRmsNorm) {
      EXPECT_EQ(lir.plan.slots[v].kind, SlotKind::kView);
      ++views;
    }
  }
  EXPECT_GE(views, 7);
  EXPECT_NE(plan_report(lir).find("saved"), std::string::npos);
}

TEST(MemoryPlan, AlignmentMustBeAPowerOfTwo) {
  GraphBuilder b;
  b.output(b.activation(ActKind::Exp, b.input("x", DType::F32, Shape{Dim(3)})), "y");
  auto lir = plan_memory(MirModule{*b.build()}, PlanOptions{48, true});
  ASSERT_FALSE(lir.has_value());
  EXPECT_NE(lir.error().message().find("48"), std::string::npos);
}

}  // namespace
}  // namespace rlx::compile
