// Compile-time benchmark: HIR -> LIR for a 16-layer Llama-shaped graph (dim 2048,
// 32/8 heads, ffn 8192, vocab 32000), Direct (prefill) and Fusable (decode with KV
// cache), through the full CompilePipeline. Target: < 20 ms per compile.
#include <benchmark/benchmark.h>

#include "rlx/compile/pipeline.h"
#include "rlx/ir/builder.h"

namespace {
using namespace rlx;
using namespace rlx::ir;

HirModule llama16(FusionPolicy policy, bool kv_cache) {
  constexpr int64_t kLayers = 16, kDim = 2048, kHeads = 32, kKvHeads = 8, kHeadDim = 64, kFfn = 8192, kVocab = 32000;
  GraphBuilder b;
  const Dim seq = kv_cache ? Dim(1) : Dim::symbol(SEQ);
  const ValueId ids = b.input("ids", DType::I32, Shape{seq});
  const ValueId pos = b.input("pos", DType::I32, Shape{seq});
  const ValueId table = b.param("tok_embd", DType::F32, Shape{Dim(kVocab), Dim(kDim)});
  ValueId x = b.op(OpKind::HirEmbedding, {table, ids}, NoAttrs{});
  for (int64_t l = 0; l < kLayers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    auto w = [&](const char* n, int64_t r, int64_t c) { return b.param(p + n, DType::F32, Shape{Dim(r), Dim(c)}); };
    const ValueId an = b.param(p + "attn_norm", DType::F32, Shape{Dim(kDim)});
    const ValueId fn = b.param(p + "ffn_norm", DType::F32, Shape{Dim(kDim)});
    std::vector<ValueId> in{kNoValue, w("attn_q", kHeads * kHeadDim, kDim), w("attn_k", kKvHeads * kHeadDim, kDim),
                            w("attn_v", kKvHeads * kHeadDim, kDim), w("attn_output", kDim, kHeads * kHeadDim), pos};
    if (kv_cache) {
      in.push_back(b.handle(p + "k_cache", DType::F32, Shape{Dim(4096), Dim(kKvHeads * kHeadDim)}));
      in.push_back(b.handle(p + "v_cache", DType::F32, Shape{Dim(4096), Dim(kKvHeads * kHeadDim)}));
    }
    AttentionBlockAttrs a;
    a.attn.n_heads = kHeads;
    a.attn.n_kv_heads = kKvHeads;
    a.attn.head_dim = kHeadDim;
    a.rope.theta = 500000.0;
    a.kv_cache = kv_cache;
    in[0] = b.op(OpKind::HirRmsNorm, {x, an}, NormAttrs{1e-5});
    x = b.add(x, b.op(OpKind::HirAttentionBlock, in, a));
    const ValueId h = b.op(OpKind::HirRmsNorm, {x, fn}, NormAttrs{1e-5});
    x = b.add(x, b.op(OpKind::HirSwiGLUFfn, {h, w("ffn_gate", kFfn, kDim), w("ffn_up", kFfn, kDim), w("ffn_down", kDim, kFfn)},
                      NoAttrs{}));
  }
  x = b.op(OpKind::HirRmsNorm, {x, b.param("output_norm", DType::F32, Shape{Dim(kDim)})}, NormAttrs{1e-5});
  b.output(b.op(OpKind::HirLinear, {x, b.param("output", DType::F32, Shape{Dim(kVocab), Dim(kDim)})}, FusedMatMulAttrs{}),
           "logits");
  auto g = b.build();
  if (!g) abort_with_error(g.error());
  return HirModule{std::move(g).value(), policy};
}

void run(benchmark::State& state, FusionPolicy policy, bool kv_cache) {
  const HirModule hir = llama16(policy, kv_cache);
  rlx::compile::CompileOptions o;
  if (!kv_cache) o.binding.set(SEQ, 128);
  int64_t nodes = 0, arena = 0;
  for (auto _ : state) {
    auto r = rlx::compile::compile_hir(hir, o, rlx::compile::OpSet::all_mir(), "cpu");
    if (!r) {
      state.SkipWithError(r.error().to_string().c_str());
      return;
    }
    nodes = r->lir.graph.size();
    arena = r->lir.plan.arena_size;
    benchmark::DoNotOptimize(r);
  }
  state.counters["lir_nodes"] = static_cast<double>(nodes);
  state.counters["arena_MiB"] = static_cast<double>(arena) / (1 << 20);
  state.counters["target_ms"] = 20;
}

void BM_CompileLlama16PrefillDirect(benchmark::State& s) { run(s, FusionPolicy::Direct, false); }
void BM_CompileLlama16DecodeFusable(benchmark::State& s) { run(s, FusionPolicy::Fusable, true); }
BENCHMARK(BM_CompileLlama16PrefillDirect)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_CompileLlama16DecodeFusable)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
