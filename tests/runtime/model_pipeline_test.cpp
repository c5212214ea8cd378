// ModelCompilePipeline: one template for many bindings, specializations equal to graphs
// compiled directly at their shape, FIFO eviction, stable keys, components, sequence
// buckets with run_padded (padded rows never leak; padded rows are not computed), and
// one copy of the weights shared by every variant.
#include "rlx/runtime/model_pipeline.h"

#include <gtest/gtest.h>

#include <fstream>
#include <unistd.h>

#include <map>

#include "backends/cpu/cpu_backend.h"
#include "rlx/compile/memory_plan.h"
#include "rlx/ir/text.h"
#include "rt_util.h"

namespace rlx {
namespace {

using ir::DType;
using ir::Dim;
using ir::DimBinding;
using namespace rt_test;

constexpr int64_t kD = 16, kH = 4, kKV = 2, kHd = 4, kF = 24;

// One transformer block in HIR (RMS norm, GQA attention with RoPE, SwiGLU FFN) with
// x f32[seq, kD] and pos i32[seq]; `seq` is SEQ for the template or a number. MaskKind::None
// (bidirectional, encoder-style) lets every row see every other: padded rows would leak
// into real ones unless the active extent stops attention keys at the real rows.
Expected<ir::HirModule> block_hir(Dim seq, ir::MaskKind mask = ir::MaskKind::Causal) {
  ir::GraphBuilder b;
  auto x = b.input("x", DType::F32, {seq, kD});
  auto pos = b.input("pos", DType::I32, {seq});
  auto p = [&](const char* n, ir::Shape s) { return b.param(n, DType::F32, std::move(s)); };
  auto attn_norm = p("attn_norm", {kD});
  auto wq = p("wq", {kH * kHd, kD});
  auto wk = p("wk", {kKV * kHd, kD});
  auto wv = p("wv", {kKV * kHd, kD});
  auto wo = p("wo", {kD, kH * kHd});
  auto ffn_norm = p("ffn_norm", {kD});
  auto gate = p("gate", {kF, kD});
  auto up = p("up", {kF, kD});
  auto down = p("down", {kD, kF});
  ir::AttentionBlockAttrs a;
  a.attn.n_heads = kH;
  a.attn.n_kv_heads = kKV;
  a.attn.head_dim = kHd;
  a.attn.mask = mask;
  a.rope.head_dim = kHd;
  a.rope.n_rot = kHd;
  auto h = b.op(ir::OpKind::HirRmsNorm, {x, attn_norm}, ir::NormAttrs{1e-5});
  auto x1 = b.add(x, b.op(ir::OpKind::HirAttentionBlock, {h, wq, wk, wv, wo, pos}, a));
  auto h2 = b.op(ir::OpKind::HirRmsNorm, {x1, ffn_norm}, ir::NormAttrs{1e-5});
  b.output(b.add(x1, b.op(ir::OpKind::HirSwiGLUFfn, {h2, gate, up, down}, ir::NoAttrs{})), "y");
  ASSIGN_OR_RETURN(ir::Graph g, b.build());
  return ir::HirModule{std::move(g), ir::FusionPolicy::Direct};
}

const std::map<std::string, std::vector<int64_t>>& param_shapes() {
  static const std::map<std::string, std::vector<int64_t>> s = {
      {"attn_norm", {kD}},         {"wq", {kH * kHd, kD}}, {"wk", {kKV * kHd, kD}},
      {"wv", {kKV * kHd, kD}},     {"wo", {kD, kH * kHd}}, {"ffn_norm", {kD}},
      {"gate", {kF, kD}},          {"up", {kF, kD}},       {"down", {kD, kF}}};
  return s;
}

ParamStore make_store() {
  ParamStore store;
  uint32_t seed = 7;
  for (const auto& [name, shape] : param_shapes()) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    const bool norm = name.find("norm") != std::string::npos;
    std::vector<float> v = random_vec(static_cast<size_t>(n), seed++, norm ? 0.5f : -0.4f, norm ? 1.5f : 0.4f);
    EXPECT_TRUE(store.add_f32(name, shape, v).ok());
  }
  return store;
}

std::vector<int32_t> iota(int64_t n) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = static_cast<int32_t>(i);
  return v;
}

// Runs a block graph on `rows` rows of x (and positions 0..rows-1).
std::vector<float> run_block(CompiledGraph& g, const std::vector<float>& x, int64_t rows) {
  const std::vector<int32_t> pos = iota(rows);
  const int64_t xs[] = {rows, kD}, ps[] = {rows};
  std::vector<NamedTensorView> in = {{"x", TensorView::f32(x, xs)}, {"pos", {DType::I32, ps, pos.data()}}};
  auto out = g.run(in);
  if (!out) ADD_FAILURE() << out.error().to_string();
  return out ? as_f32((*out)[0]) : std::vector<float>{};
}

// The same block compiled directly at a static shape (no template), weights from `store`.
std::vector<float> direct_block(const ParamStore& store, const std::vector<float>& x, int64_t rows,
                                ir::MaskKind mask = ir::MaskKind::Causal) {
  Session s(Device::cpu());
  auto hir = block_hir(Dim(rows), mask);
  EXPECT_TRUE(hir.has_value());
  auto g = s.compile_hir(*hir);
  if (!g) ADD_FAILURE() << g.error().to_string();
  for (const auto& [name, shape] : param_shapes()) {
    const SharedParam* p = store.find(name);
    EXPECT_TRUE(g->set_param_typed(name, std::span<const uint8_t>(p->bytes.data(), p->bytes.size()), p->dtype).ok());
  }
  return run_block(*g, x, rows);
}

HirBuildFn counting_builder(int* calls) {
  return [calls]() {
    ++*calls;
    return block_hir(Dim::symbol(ir::SEQ));
  };
}

TEST(ModelPipeline, TemplateBuiltOnceForManyBindings) {
  ModelCompilePipeline p(Device::cpu());
  ASSERT_TRUE(p.status().ok());
  int calls = 0;
  const HirBuildFn build = counting_builder(&calls);
  const ParamStore store = make_store();
  const int64_t seqs[] = {3, 5, 8, 16};
  for (int64_t n : seqs) {
    auto v = p.get_or_compile(static_cast<uint64_t>(n), DimBinding{{ir::SEQ, n}}, build, {});
    ASSERT_TRUE(v.has_value()) << v.error().to_string();
    ASSERT_TRUE(store.bind(*(*v)->graph).has_value());
    const std::vector<float> x = random_vec(static_cast<size_t>(n * kD), 100 + static_cast<uint32_t>(n));
    const std::vector<float> got = run_block(*(*v)->graph, x, n);
    EXPECT_LT(max_abs_diff(got, direct_block(store, x, n)), 1e-5) << "SEQ=" << n;
  }
  const PipelineStats st = p.stats();
  EXPECT_EQ(st.template_builds, 1);  // lowering + passes ran once
  EXPECT_EQ(st.specializations, 4);
  EXPECT_EQ(st.backend_compiles, 4);
  EXPECT_EQ(calls, 4);  // the HIR is rebuilt per miss to fingerprint it (no lowering)
  EXPECT_EQ(st.hir_builds, 4);
  // Hits compile nothing.
  auto again = p.get_or_compile(5, DimBinding{{ir::SEQ, 5}}, build, {});
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(p.stats().cache_hits, 1);
  EXPECT_EQ(p.stats().backend_compiles, 4);
  EXPECT_EQ(calls, 4);
}

TEST(ModelPipeline, DifferentOptionsGetTheirOwnTemplate) {
  ModelCompilePipeline p(Device::cpu());
  int calls = 0;
  const HirBuildFn build = counting_builder(&calls);
  compile::CompileOptions unfused;
  unfused.fusion.skip = true;
  ASSERT_TRUE(p.get_or_compile(1, DimBinding{{ir::SEQ, 4}}, build, {}).has_value());
  ASSERT_TRUE(p.get_or_compile(2, DimBinding{{ir::SEQ, 4}}, build, unfused).has_value());
  ASSERT_TRUE(p.get_or_compile(3, DimBinding{{ir::SEQ, 8}}, build, unfused).has_value());
  EXPECT_EQ(p.stats().template_builds, 2);
}

TEST(ModelPipeline, StepsSpecializeVerifyAndPlan) {
  ModelCompilePipeline p(Device::cpu());
  const compile::CompileOptions opt;
  EXPECT_FALSE(p.specialize(DimBinding{{ir::SEQ, 4}}, opt).has_value());  // no template yet
  auto t = p.build_template([] { return block_hir(Dim::symbol(ir::SEQ)); }, opt);
  ASSERT_TRUE(t.has_value()) << t.error().to_string();
  ASSERT_EQ((*t)->lir.dynamic_symbols.size(), 1u);
  EXPECT_EQ((*t)->lir.dynamic_symbols[0], ir::SEQ);
  EXPECT_EQ((*t)->lir.plan.arena_size, 0);  // symbolic: sizes come with specialize
  EXPECT_FALSE(p.specialize(DimBinding{{ir::BATCH, 2}}, opt).has_value());  // SEQ unbound
  const ParamStore store = make_store();
  int64_t last_arena = 0;
  for (int64_t n : {2, 7, 32}) {
    auto s = p.specialize(DimBinding{{ir::SEQ, n}}, opt);
    ASSERT_TRUE(s.has_value()) << s.error().to_string();
    EXPECT_TRUE(s->lir.dynamic_symbols.empty());
    EXPECT_TRUE(ir::verify(s->lir.graph).ok());
    EXPECT_TRUE(compile::check_plan(s->lir).ok());
    EXPECT_GT(s->lir.plan.arena_size, last_arena);  // re-planned for the bound size
    last_arena = s->lir.plan.arena_size;
    EXPECT_EQ(s->extent.symbol, ir::SEQ);
    EXPECT_EQ(s->extent.upper, n);
    // The template's ops are kept: no pass re-ran (same op sequence).
    ASSERT_EQ(s->lir.graph.size(), (*t)->lir.graph.size());
    for (ir::ValueId v = 0; v < s->lir.graph.size(); ++v) EXPECT_EQ(s->lir.graph.node(v).op, (*t)->lir.graph.node(v).op);
    auto g = p.compile_lir(*s, opt);
    ASSERT_TRUE(g.has_value()) << g.error().to_string();
    EXPECT_EQ(g->bucket_symbol(), ir::SEQ);
    EXPECT_EQ(g->bucket_upper(), n);
    ASSERT_TRUE(store.bind(*g).has_value());
    const std::vector<float> x = random_vec(static_cast<size_t>(n * kD), 300 + static_cast<uint32_t>(n));
    EXPECT_LT(max_abs_diff(run_block(*g, x, n), direct_block(store, x, n)), 1e-5);
  }
  auto m = p.binding_manifest_for(DimBinding{{ir::SEQ, 9}});
  ASSERT_TRUE(m.has_value());
  ASSERT_EQ(m->inputs.size(), 2u);
  EXPECT_EQ(m->inputs[0].type.to_string(), "f32[9, 16]");
  EXPECT_EQ(m->outputs[0].bytes, 9 * kD * 4);
}

TEST(ModelPipeline, FifoEvictsTheOldest) {
  ModelCompilePipeline p(Device::cpu(), 2);
  const HirBuildFn build = [] { return block_hir(Dim::symbol(ir::SEQ)); };
  auto get = [&](uint64_t key) {
    auto v = p.get_or_compile(key, DimBinding{{ir::SEQ, static_cast<int64_t>(key)}}, build, {});
    EXPECT_TRUE(v.has_value());
  };
  get(1);
  get(2);
  EXPECT_EQ(p.len(), 2u);
  get(3);  // evicts 1
  EXPECT_FALSE(p.contains(1));
  EXPECT_TRUE(p.contains(2));
  EXPECT_TRUE(p.contains(3));
  EXPECT_EQ(p.keys(), (std::vector<uint64_t>{2, 3}));
  get(2);  // a hit does not refresh: FIFO, not LRU
  get(4);  // evicts 2
  EXPECT_EQ(p.keys(), (std::vector<uint64_t>{3, 4}));
  EXPECT_EQ(p.len(), 2u);
  EXPECT_EQ(p.stats().evictions, 2);
  EXPECT_EQ(p.stats().cache_hits, 1);
  EXPECT_EQ(p.capacity(), 2u);
}

TEST(ModelPipeline, EvictedVariantStaysUsableByItsHolder) {
  ModelCompilePipeline p(Device::cpu(), 1);
  const HirBuildFn build = [] { return block_hir(Dim::symbol(ir::SEQ)); };
  auto a = p.get_or_compile(1, DimBinding{{ir::SEQ, 4}}, build, {});
  ASSERT_TRUE(a.has_value());
  ASSERT_TRUE(p.get_or_compile(2, DimBinding{{ir::SEQ, 8}}, build, {}).has_value());
  EXPECT_FALSE(p.contains(1));
  const ParamStore store = make_store();
  ASSERT_TRUE(store.bind(*(*a)->graph).has_value());
  const std::vector<float> x = random_vec(4 * kD, 5);
  EXPECT_LT(max_abs_diff(run_block(*(*a)->graph, x, 4), direct_block(store, x, 4)), 1e-5);
}

TEST(ModelPipeline, KeyReusedWithAnotherBindingRecompiles) {
  ModelCompilePipeline p(Device::cpu());
  const HirBuildFn build = [] { return block_hir(Dim::symbol(ir::SEQ)); };
  ASSERT_TRUE(p.get_or_compile(7, DimBinding{{ir::SEQ, 4}}, build, {}).has_value());
  auto v = p.get_or_compile(7, DimBinding{{ir::SEQ, 6}}, build, {});
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ((*v)->binding.get(ir::SEQ), 6);
  EXPECT_EQ(p.stats().cache_hits, 0);
  EXPECT_EQ(p.len(), 1u);
}

TEST(ModelPipeline, BuilderErrorsAndUnavailableDevices) {
  ModelCompilePipeline p(Device::cpu());
  auto v = p.get_or_compile(1, {}, [] { return Expected<ir::HirModule>(Error::not_found("weights.gguf")); }, {});
  ASSERT_FALSE(v.has_value());
  EXPECT_NE(v.error().message().find("weights.gguf"), std::string::npos);
  ModelCompilePipeline none(Device{DeviceKind::kTpu, 0});
  EXPECT_FALSE(none.status().ok());
  EXPECT_FALSE(none.get_or_compile(1, DimBinding{{ir::SEQ, 4}}, [] { return block_hir(Dim::symbol(ir::SEQ)); }, {})
                   .has_value());
}

// ---- keys and components ---------------------------------------------------------------

TEST(ModelComponent, CacheKeyIsPinnedAndCoversEveryField) {
  ModelComponent c;
  c.family = "llama32";
  c.seq_bucket = 128;
  // A literal: the key must not change between processes, builds or platforms.
  EXPECT_EQ(c.cache_key(), 0x9a183f559b555c2aull) << std::hex << c.cache_key();
  EXPECT_EQ(c.cache_key(), ModelComponent(c).cache_key());
  std::vector<ModelComponent> variants(8, c);
  variants[1].family = "qwen3";
  variants[2].phase = ModelPhase::kDecode;
  variants[3].batch = 2;
  variants[4].seq_bucket = 256;
  variants[5].exec.dispatch = compile::KernelDispatchPolicy::ForceCommon;
  variants[6].exec.mode = CompilationMode::kAot;
  variants[7].exec.profile = "encoder";
  for (size_t i = 0; i < variants.size(); ++i)
    for (size_t j = i + 1; j < variants.size(); ++j)
      EXPECT_NE(variants[i].cache_key(), variants[j].cache_key()) << i << " vs " << j;
  // The default profile name is the family's phase preset: naming it explicitly is the same variant.
  ModelComponent named = c;
  named.exec.profile = "llama32_prefill";
  EXPECT_EQ(named.cache_key(), c.cache_key());
  EXPECT_NE(c.exec.cache_key(), variants[5].exec.cache_key());
}

TEST(ModelComponent, OptionsHashIsPinnedAndIgnoresNonCodeFields) {
  const compile::CompileOptions base;
  EXPECT_EQ(compile_options_hash(base), 0x33b09b975b2ad35full) << std::hex << compile_options_hash(base);
  compile::CompileOptions o = base;
  o.verbose = true;
  o.ir_dump_dir = "/tmp/x";
  o.binding.set(ir::SEQ, 4);
  EXPECT_EQ(compile_options_hash(o), compile_options_hash(base));
  std::vector<compile::CompileOptions> differ(7, base);
  differ[0].dce = false;
  differ[1].fusion.skip = true;
  differ[2].precision = compile::Precision::F16;
  differ[3].dispatch.policy = compile::KernelDispatchPolicy::ForceCommon;
  differ[4].dispatch.force_common.add(ir::OpKind::Attention);
  differ[5].arena_alignment = 128;
  differ[6].fusion.disabled_patterns = {"swiglu"};
  for (size_t i = 0; i < differ.size(); ++i) {
    EXPECT_NE(compile_options_hash(differ[i]), compile_options_hash(base)) << i;
    for (size_t j = i + 1; j < differ.size(); ++j)
      EXPECT_NE(compile_options_hash(differ[i]), compile_options_hash(differ[j])) << i << " vs " << j;
  }
}

TEST(ModelComponent, BindingsAndOptions) {
  ModelComponent prefill;
  prefill.batch = 2;
  prefill.seq_bucket = 64;
  EXPECT_EQ(prefill.dim_binding().to_string(), "BATCH=2,SEQ=64");
  ModelComponent decode = prefill;
  decode.phase = ModelPhase::kDecode;
  EXPECT_EQ(decode.dim_binding().to_string(), "BATCH=2,PAST_SEQ=64,SEQ=1");
  EXPECT_EQ(decode.profile_name(), "llama32_decode");
  EXPECT_EQ(prefill.to_string(), "llama32/prefill batch=2 seq=64 prefer_native lazy llama32_prefill");
  decode.exec.dispatch = compile::KernelDispatchPolicy::ForceCommon;
  auto o = decode.compile_options(Session(Device::cpu()).backend()->target());
  ASSERT_TRUE(o.has_value()) << o.error().to_string();
  EXPECT_EQ(o->dispatch.policy, compile::KernelDispatchPolicy::ForceCommon);
  ModelComponent bad = prefill;
  bad.family = "no_such_family";
  EXPECT_FALSE(bad.compile_options(Session(Device::cpu()).backend()->target()).has_value());
}

TEST(ModelComponent, GetOrCompileComponentReturnsItsManifest) {
  ModelCompilePipeline p(Device::cpu());
  ModelComponent c;
  c.seq_bucket = 8;
  int calls = 0;
  const HirBuildFn build = counting_builder(&calls);
  auto opt = c.compile_options(Session(Device::cpu()).backend()->target());
  ASSERT_TRUE(opt.has_value());
  auto v = p.get_or_compile_component(c, build, *opt);
  ASSERT_TRUE(v.has_value()) << v.error().to_string();
  EXPECT_TRUE(p.contains(c.cache_key()));
  EXPECT_EQ((*v)->key, c.cache_key());
  ASSERT_EQ((*v)->manifest.inputs.size(), 2u);
  EXPECT_EQ((*v)->manifest.inputs[0].name, "x");
  EXPECT_EQ((*v)->manifest.inputs[0].type.to_string(), "f32[8, 16]");
  EXPECT_EQ((*v)->manifest.params.size(), param_shapes().size());
  auto hit = p.get_or_compile_component(c, build, *opt);
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->get(), v->get());
  EXPECT_EQ((*hit)->manifest.inputs[0].type.to_string(), "f32[8, 16]");
  EXPECT_EQ(calls, 1);
  // AOT mode needs a cache directory.
  ModelComponent aot = c;
  aot.exec.mode = CompilationMode::kAot;
  EXPECT_FALSE(p.get_or_compile_component(aot, build, *opt).has_value());
}

TEST(ModelComponent, WarmUpCompilesEagerComponentsOnly) {
  ModelCompilePipeline p(Device::cpu());
  std::vector<ModelComponent> cs(3);
  cs[0].seq_bucket = 4;
  cs[0].exec.mode = CompilationMode::kEager;
  cs[1].seq_bucket = 8;
  cs[1].exec.mode = CompilationMode::kEager;
  cs[2].seq_bucket = 16;  // lazy
  ASSERT_TRUE(p.warm_up(cs, [] { return block_hir(Dim::symbol(ir::SEQ)); }).ok());
  EXPECT_TRUE(p.contains(cs[0].cache_key()));
  EXPECT_TRUE(p.contains(cs[1].cache_key()));
  EXPECT_FALSE(p.contains(cs[2].cache_key()));
}

// ---- buckets -------------------------------------------------------------------------------

TEST(SeqBuckets, PowersOfTwoAndLists) {
  auto b = SeqBuckets::powers_of_two(100);
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->sizes(), (std::vector<int64_t>{1, 2, 4, 8, 16, 32, 64, 100}));
  EXPECT_EQ(*b->bucket_for(1), 1);
  EXPECT_EQ(*b->bucket_for(5), 8);
  EXPECT_EQ(*b->bucket_for(64), 64);
  EXPECT_EQ(*b->bucket_for(65), 100);
  EXPECT_FALSE(b->bucket_for(0).has_value());
  EXPECT_FALSE(b->bucket_for(101).has_value());
  EXPECT_EQ(SeqBuckets::powers_of_two(64, 8)->sizes(), (std::vector<int64_t>{8, 16, 32, 64}));
  EXPECT_FALSE(SeqBuckets::powers_of_two(0).has_value());
  EXPECT_TRUE(SeqBuckets::from_list({3, 10, 40}).has_value());
  EXPECT_FALSE(SeqBuckets::from_list({3, 3}).has_value());
  EXPECT_FALSE(SeqBuckets::from_list({}).has_value());
  EXPECT_FALSE(SeqBuckets::from_list({0, 4}).has_value());
}

TEST(BucketedCompileCache, RunPaddedEqualsTheUnpaddedGraph) {
  for (ir::MaskKind mask : {ir::MaskKind::Causal, ir::MaskKind::None}) {
    SCOPED_TRACE(ir::MaskKind::None == mask ? "bidirectional" : "causal");
    ModelCompilePipeline p(Device::cpu());
    BucketedCompileCache cache(p, *SeqBuckets::from_list({4, 8, 16}));
    const HirBuildFn build = [mask] { return block_hir(Dim::symbol(ir::SEQ), mask); };
    const ParamStore store = make_store();
    for (int64_t n : {3, 5, 8, 11}) {
      auto v = cache.get(n, build, {});
      ASSERT_TRUE(v.has_value()) << v.error().to_string();
      ASSERT_TRUE(store.bind(*(*v)->graph).has_value());
      EXPECT_EQ((*v)->extent.upper, *cache.buckets().bucket_for(n));
      const std::vector<float> x = random_vec(static_cast<size_t>(n * kD), 900 + static_cast<uint32_t>(n));
      const std::vector<int32_t> pos = iota(n);
      const int64_t xs[] = {n, kD}, ps[] = {n};
      std::vector<NamedTensorView> in = {{"x", TensorView::f32(x, xs)}, {"pos", {DType::I32, ps, pos.data()}}};
      auto out = cache.run(in, n, build, {});
      ASSERT_TRUE(out.has_value()) << out.error().to_string();
      ASSERT_EQ((*out)[0].shape(), (std::vector<int64_t>{n, kD}));  // only the real rows
      EXPECT_LT(max_abs_diff(as_f32((*out)[0]), direct_block(store, x, n, mask)), 1e-5) << n;
    }
    EXPECT_EQ(p.len(), 3u);  // 3 and 5 -> 4 and 8; 8 shares 8's bucket; 11 -> 16
    EXPECT_EQ(p.stats().template_builds, 1);
  }
}

TEST(BucketedCompileCache, PaddedRowsNeverChangeRealRows) {
  ModelCompilePipeline p(Device::cpu());
  BucketedCompileCache cache(p, *SeqBuckets::powers_of_two(16));
  const HirBuildFn build = [] { return block_hir(Dim::symbol(ir::SEQ), ir::MaskKind::None); };
  const ParamStore store = make_store();
  const int64_t n = 5, upper = 8;
  auto v = cache.get(n, build, {});
  ASSERT_TRUE(v.has_value());
  ASSERT_TRUE(store.bind(*(*v)->graph).has_value());
  const std::vector<float> x = random_vec(n * kD, 42);
  const std::vector<float> want = direct_block(store, x, n, ir::MaskKind::None);
  // Padded rows full of large garbage, run directly on the bucket with the extent set.
  for (float garbage : {0.0f, 1000.0f, -3.0e4f}) {
    std::vector<float> xp = x;
    xp.resize(upper * kD, garbage);
    std::vector<int32_t> pos = iota(upper);
    for (int64_t i = n; i < upper; ++i) pos[static_cast<size_t>(i)] = static_cast<int32_t>(garbage) & 7;
    ASSERT_TRUE((*v)->graph->set_active_extent(n, upper).ok());
    const int64_t xs[] = {upper, kD}, ps[] = {upper};
    auto out = (*v)->graph->run({{"x", TensorView::f32(xp, xs)}, {"pos", {DType::I32, ps, pos.data()}}});
    ASSERT_TRUE(out.has_value()) << out.error().to_string();
    const std::vector<float> got = as_f32((*out)[0]);
    EXPECT_LT(max_abs_diff(std::span<const float>(got.data(), n * kD), want), 1e-5) << garbage;
  }
  {  // Without the extent the same garbage does reach the real rows (the check above can fail).
    std::vector<float> xp = x;
    xp.resize(upper * kD, 1000.0f);
    const std::vector<int32_t> pos = iota(upper);
    ASSERT_TRUE((*v)->graph->set_active_extent(upper, upper).ok());
    const int64_t xs[] = {upper, kD}, ps[] = {upper};
    auto out = (*v)->graph->run({{"x", TensorView::f32(xp, xs)}, {"pos", {DType::I32, ps, pos.data()}}});
    ASSERT_TRUE(out.has_value());
    const std::vector<float> got = as_f32((*out)[0]);
    EXPECT_GT(max_abs_diff(std::span<const float>(got.data(), n * kD), want), 1e-3);
  }
  // run_padded checks its inputs.
  const int64_t bad_shape[] = {n + 1, kD}, ps[] = {n};
  const std::vector<float> xb((n + 1) * kD, 0.0f);
  const std::vector<int32_t> pos = iota(n);
  std::vector<NamedTensorView> wrong_rows = {{"x", TensorView::f32(xb, bad_shape)}, {"pos", {DType::I32, ps, pos.data()}}};
  EXPECT_FALSE(run_padded(**v, wrong_rows, n).has_value());
  std::vector<NamedTensorView> missing = {{"pos", {DType::I32, ps, pos.data()}}};
  EXPECT_FALSE(run_padded(**v, missing, n).has_value());
  EXPECT_FALSE(run_padded(**v, missing, upper + 1).has_value());
}

TEST(BucketedCompileCache, ActiveExtentSkipsPaddedRows) {
  // y = x . W^T: with the extent set, rows >= actual of the output are not computed, so
  // they keep what an earlier full run left there (a kernel doing padded work would
  // overwrite them with zeros . W^T = 0).
  ModelCompilePipeline p(Device::cpu());
  BucketedCompileCache cache(p, *SeqBuckets::from_list({8}));
  const HirBuildFn build = []() -> Expected<ir::HirModule> {
    ir::GraphBuilder b;
    auto x = b.input("x", DType::F32, {Dim::symbol(ir::SEQ), 6});
    b.output(b.linear(x, b.param("w", DType::F32, {5, 6})), "y");
    ASSIGN_OR_RETURN(ir::Graph g, b.build());
    return ir::HirModule{std::move(g), ir::FusionPolicy::Direct};
  };
  auto v = cache.get(8, build, {});
  ASSERT_TRUE(v.has_value()) << v.error().to_string();
  ParamStore store;
  const std::vector<float> w = random_vec(30, 3);
  ASSERT_TRUE(store.add_f32("w", {5, 6}, w).ok());
  ASSERT_TRUE(store.bind(*(*v)->graph).has_value());
  const std::vector<float> full = random_vec(48, 4, 1.0f, 2.0f);
  const int64_t fs[] = {8, 6};
  std::vector<NamedTensorView> in_full = {{"x", TensorView::f32(full, fs)}};
  auto first = run_padded(**v, in_full, 8);
  ASSERT_TRUE(first.has_value());
  const std::vector<float> y_full = as_f32((*first)[0]);
  const std::vector<float> part = random_vec(18, 5);
  const int64_t ps[] = {3, 6};
  std::vector<NamedTensorView> in_part = {{"x", TensorView::f32(part, ps)}};
  auto second = run_padded(**v, in_part, 3);
  ASSERT_TRUE(second.has_value());
  ASSERT_EQ((*second)[0].shape(), (std::vector<int64_t>{3, 5}));
  const std::vector<float> y = as_f32((*second)[0]);
  for (int64_t r = 0; r < 3; ++r)
    for (int64_t c = 0; c < 5; ++c) {
      double want = 0;
      for (int64_t k = 0; k < 6; ++k) want += double(part[r * 6 + k]) * w[c * 6 + k];
      EXPECT_NEAR(y[r * 5 + c], want, 1e-5);
    }
  for (int64_t r = 3; r < 8; ++r) {
    auto row = (*v)->graph->read_output_row(0, r, 5);
    ASSERT_TRUE(row.has_value());
    for (int64_t c = 0; c < 5; ++c) EXPECT_EQ((*row)[c], y_full[r * 5 + c]) << "row " << r << " was recomputed";
  }
}

// ---- shared parameters ---------------------------------------------------------------------

TEST(ParamStore, ThreeVariantsAddNoResidentCopyOfA32MBWeight) {
  // x[SEQ, 4096] . W[2048, 4096]^T with a 32 MiB f32 weight, compiled at three sequence
  // lengths and bound from one store. Measured by accounting, not by the process's
  // resident size (which moves with allocator slack): every variant reads the store's
  // buffer itself, and the backend holds one packed copy for all three (when it packs).
  constexpr int64_t kOut = 2048, kIn = 4096;
  const HirBuildFn build = [] {
    ir::GraphBuilder b;
    const ir::ValueId x = b.input("x", DType::F32, {Dim::symbol(ir::SEQ), Dim(kIn)});
    b.output(b.matmul(x, b.param("w", DType::F32, {Dim(kOut), Dim(kIn)}), false, true), "y");
    return ir::HirModule{std::move(b.build()).value(), ir::FusionPolicy::Direct};
  };
  ParamStore store;
  std::vector<float> w(static_cast<size_t>(kOut * kIn));
  for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(i % 7) * 0.01f;
  ASSERT_TRUE(store.add_f32("w", {kOut, kIn}, w).ok());
  const void* stored = store.find("w")->bytes.data();
  ModelCompilePipeline p(Device::cpu());
  const auto& cpu = dynamic_cast<const cpu_backend::CpuBackend&>(*p.session().backend());
  std::vector<std::shared_ptr<const CompiledVariant>> vs;
  for (int64_t n : {1, 4, 16}) {
    auto v = p.get_or_compile(static_cast<uint64_t>(n), DimBinding{{ir::SEQ, n}}, build, {});
    ASSERT_TRUE(v.has_value()) << v.error().to_string();
    auto r = store.bind(*(*v)->graph);
    ASSERT_TRUE(r.has_value()) << r.error().to_string();
    EXPECT_EQ(r->copied, 0u);
    EXPECT_EQ((*v)->graph->executable().param_data(0), stored) << "n " << n << " reads a copy of the weight";
    vs.push_back(*v);
  }
  // Packing happens when a variant first runs; all three are run below.
  for (const auto& v : vs) {
    const int64_t n = v->binding.get(ir::SEQ);
    const std::vector<float> x(static_cast<size_t>(n * kIn), 1.0f);
    const std::vector<int64_t> shape{n, kIn};
    auto out = v->graph->run({NamedF32{"x", x, shape}});
    ASSERT_TRUE(out.has_value()) << out.error().to_string();
    const std::vector<float> y = as_f32((*out)[0]);
    for (int64_t c : {int64_t{0}, int64_t{5}, kOut - 1}) {
      double want = 0;
      for (int64_t k = 0; k < kIn; ++k) want += w[static_cast<size_t>(c * kIn + k)];
      EXPECT_NEAR(y[static_cast<size_t>((n - 1) * kOut + c)], want, 1e-2) << "n " << n << " col " << c;
    }
  }
  if (cpu.prepacks_weights()) {
    const cpu_backend::PackedWeightStats ps = cpu.packed_weight_stats();
    EXPECT_EQ(ps.live, 1) << "one packed copy of the weight for the three variants";
    EXPECT_GE(ps.live_bytes, kOut * kIn * 4);
    EXPECT_LT(ps.live_bytes, kOut * kIn * 4 * 5 / 4);
  }
}

TEST(ParamStore, ThreeVariantsHoldOneCopyOfTheWeights) {
  ModelCompilePipeline p(Device::cpu());
  const HirBuildFn build = [] { return block_hir(Dim::symbol(ir::SEQ)); };
  const ParamStore store = make_store();
  std::vector<std::shared_ptr<const CompiledVariant>> vs;
  for (int64_t n : {4, 8, 16}) {
    auto v = p.get_or_compile(static_cast<uint64_t>(n), DimBinding{{ir::SEQ, n}}, build, {});
    ASSERT_TRUE(v.has_value());
    auto r = store.bind(*(*v)->graph);
    ASSERT_TRUE(r.has_value()) << r.error().to_string();
    EXPECT_EQ(r->shared, param_shapes().size());
    EXPECT_EQ(r->copied, 0u);
    vs.push_back(*v);
  }
  // Every variant reads the store's bytes: one buffer per weight, referenced 1 + 3 times.
  int64_t resident = 0;
  for (const auto& [name, shape] : param_shapes()) {
    const SharedParam* sp = store.find(name);
    EXPECT_EQ(sp->bytes.owner().use_count(), 4) << name;
    resident += static_cast<int64_t>(sp->bytes.size());
    for (const auto& v : vs) {
      const auto& params = v->graph->manifest().params;
      size_t i = 0;
      while (i < params.size() && params[i].name != name) ++i;
      ASSERT_LT(i, params.size());
      EXPECT_EQ(v->graph->executable().param_data(i), sp->bytes.data()) << name;
    }
  }
  EXPECT_EQ(resident, store.total_bytes());
  // Results are right for all three.
  for (const auto& v : vs) {
    const int64_t n = v->binding.get(ir::SEQ);
    const std::vector<float> x = random_vec(static_cast<size_t>(n * kD), 11);
    EXPECT_LT(max_abs_diff(run_block(*v->graph, x, n), direct_block(store, x, n)), 1e-5);
  }
  // Setting a weight on one variant copies it there; the store and the others are untouched.
  const std::vector<float> before(reinterpret_cast<const float*>(store.find("wo")->bytes.data()),
                                  reinterpret_cast<const float*>(store.find("wo")->bytes.data()) + kD * kH * kHd);
  ASSERT_TRUE(vs[0]->graph->set_param("wo", std::vector<float>(kD * kH * kHd, 0.0f)).ok());
  const float* after = reinterpret_cast<const float*>(store.find("wo")->bytes.data());
  EXPECT_TRUE(std::equal(before.begin(), before.end(), after));
  EXPECT_EQ(store.find("wo")->bytes.owner().use_count(), 3);
  const std::vector<float> x = random_vec(8 * kD, 12);
  EXPECT_LT(max_abs_diff(run_block(*vs[1]->graph, x, 8), direct_block(store, x, 8)), 1e-5);
  // Clones share too.
  auto c = vs[2]->graph->clone();
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(store.find("wq")->bytes.owner().use_count(), 5);
}

TEST(ParamStore, ErrorsNameTheParam) {
  ParamStore store;
  EXPECT_FALSE(store.add_f32("w", {2, 3}, std::vector<float>(5)).ok());
  ASSERT_TRUE(store.add_f32("w", {2, 3}, std::vector<float>(6)).ok());
  EXPECT_FALSE(store.add_f32("w", {2, 3}, std::vector<float>(6)).ok());  // duplicate
  ModelCompilePipeline p(Device::cpu());
  auto v = p.get_or_compile(1, DimBinding{{ir::SEQ, 4}}, [] { return block_hir(Dim::symbol(ir::SEQ)); }, {});
  ASSERT_TRUE(v.has_value());
  auto r = store.bind(*(*v)->graph);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code(), ErrorCode::kNotFound);
  ParamStore wrong = make_store();
  ParamStore reshaped;
  for (const auto& [name, shape] : param_shapes()) {
    const SharedParam* sp = wrong.find(name);
    std::vector<int64_t> s = shape;
    if (name == "gate") s = {kD, kF};  // transposed shape, same bytes
    ASSERT_TRUE(reshaped.add_shared(name, SharedParam{sp->dtype, s, sp->bytes}).ok());
  }
  auto rr = reshaped.bind(*(*v)->graph);
  ASSERT_FALSE(rr.has_value());
  EXPECT_NE(rr.error().message().find("gate"), std::string::npos);
}

}  // namespace
}  // namespace rlx
