// ModelCompilePipeline timings for a 16-layer Llama-shaped model (dim 2048, 32/8 heads,
// head_dim 64, ffn 8192, vocab 32000), prefill with SEQ bound to 128: template build
// (lower + passes + symbolic plan), specialize (bind + re-plan), backend compile, AOT
// entry store and warm AOT load in a fresh pipeline. Each figure is the median of
// --reps runs (default 5). Limit / target: warm AOT load >= 10x faster than the cold
// path it replaces (template + specialize), and the end-to-end ratio with the backend
// compile, which both paths pay, is printed beside it.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "rlx/base/hash.h"
#include "rlx/compile/memory_plan.h"
#include "rlx/ir/builder.h"
#include "rlx/ir/text.h"
#include "rlx/ir/binary.h"
#include "rlx/runtime/aot_cache.h"
#include "rlx/runtime/model_pipeline.h"

namespace {
using namespace rlx;
using namespace rlx::ir;

constexpr int64_t kLayers = 16, kDim = 2048, kHeads = 32, kKvHeads = 8, kHeadDim = 64, kFfn = 8192, kVocab = 32000;
constexpr int64_t kSeq = 128;

Expected<HirModule> llama16() {
  GraphBuilder b;
  const Dim seq = Dim::symbol(SEQ);
  const ValueId ids = b.input("ids", DType::I32, Shape{seq});
  const ValueId pos = b.input("pos", DType::I32, Shape{seq});
  ValueId x = b.op(OpKind::HirEmbedding, {b.param("tok_embd", DType::F32, Shape{Dim(kVocab), Dim(kDim)}), ids}, NoAttrs{});
  for (int64_t l = 0; l < kLayers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    auto w = [&](const char* n, int64_t r, int64_t c) { return b.param(p + n, DType::F32, Shape{Dim(r), Dim(c)}); };
    AttentionBlockAttrs a;
    a.attn.n_heads = kHeads;
    a.attn.n_kv_heads = kKvHeads;
    a.attn.head_dim = kHeadDim;
    a.attn.mask = MaskKind::Causal;
    a.rope.head_dim = kHeadDim;
    a.rope.n_rot = kHeadDim;
    a.rope.theta = 500000.0;
    const ValueId h = b.label(p + "attn_norm")
                          .op(OpKind::HirRmsNorm, {x, b.param(p + "attn_norm", DType::F32, Shape{Dim(kDim)})},
                              NormAttrs{1e-5});
    const ValueId attn = b.label(p + "attn").op(
        OpKind::HirAttentionBlock,
        {h, w("attn_q", kHeads * kHeadDim, kDim), w("attn_k", kKvHeads * kHeadDim, kDim),
         w("attn_v", kKvHeads * kHeadDim, kDim), w("attn_output", kDim, kHeads * kHeadDim), pos},
        a);
    x = b.add(x, attn);
    const ValueId h2 = b.label(p + "ffn_norm")
                           .op(OpKind::HirRmsNorm, {x, b.param(p + "ffn_norm", DType::F32, Shape{Dim(kDim)})},
                               NormAttrs{1e-5});
    x = b.add(x, b.label(p + "ffn").op(OpKind::HirSwiGLUFfn,
                                       {h2, w("ffn_gate", kFfn, kDim), w("ffn_up", kFfn, kDim), w("ffn_down", kDim, kFfn)},
                                       NoAttrs{}));
  }
  x = b.op(OpKind::HirRmsNorm, {x, b.param("output_norm", DType::F32, Shape{Dim(kDim)})}, NormAttrs{1e-5});
  b.output(b.op(OpKind::HirLinear, {x, b.param("output", DType::F32, Shape{Dim(kVocab), Dim(kDim)})},
                FusedMatMulAttrs{}),
           "logits");
  ASSIGN_OR_RETURN(Graph g, b.build());
  return HirModule{std::move(g), FusionPolicy::Direct};
}

template <typename T>
T check(Expected<T> e, const char* what) {
  if (!e) {
    std::fprintf(stderr, "%s: %s\n", what, e.error().to_string().c_str());
    std::exit(1);
  }
  return std::move(e).value();
}

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Median of `reps` timings of `f` (milliseconds).
double time_ms(int reps, const std::function<void()>& f) {
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    t.push_back(ms_since(t0));
  }
  return median(t);
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 5;
  for (int i = 1; i < argc; ++i)
    if (std::strncmp(argv[i], "--reps=", 7) == 0) reps = std::max(1, std::atoi(argv[i] + 7));
  const Device cpu = Device::cpu();
  const compile::CompileOptions opt;
  const DimBinding binding{{SEQ, kSeq}};
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("rlx_model_pipeline_bench_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);

  const HirModule hir = check(llama16(), "llama16");
  const HirBuildFn build = [&hir]() -> Expected<HirModule> { return hir; };
  std::printf("model: 16-layer Llama (dim %lld, %lld/%lld heads, ffn %lld, vocab %lld), SEQ=%lld, %d HIR nodes\n",
              static_cast<long long>(kDim), static_cast<long long>(kHeads), static_cast<long long>(kKvHeads),
              static_cast<long long>(kFfn), static_cast<long long>(kVocab), static_cast<long long>(kSeq),
              hir.graph.size());

  const double t_hir = time_ms(reps, [&] { (void)check(llama16(), "llama16"); });
  const double t_template = time_ms(reps, [&] {
    ModelCompilePipeline p(cpu);
    (void)check(p.build_template(build, opt), "build_template");
  });
  ModelCompilePipeline p(cpu);
  const auto tmpl = check(p.build_template(build, opt), "build_template");
  SpecializedModel spec;
  const double t_specialize = time_ms(reps, [&] { spec = check(p.specialize(binding, opt), "specialize"); });
  const double t_backend = time_ms(reps, [&] { (void)check(p.compile_lir(spec, opt), "compile_lir"); });
  const std::string exe_desc = check(p.compile_lir(spec, opt), "compile_lir").executable().describe();

  // Cold AOT: template + specialize + store into an empty directory.
  std::vector<double> cold;
  std::filesystem::path entry;
  for (int i = 0; i < reps; ++i) {
    std::filesystem::remove_all(dir);
    ModelCompilePipeline q(cpu);
    const auto t0 = std::chrono::steady_clock::now();
    AotSpecialization a = check(q.get_or_specialize_aot(dir, "llama16", 1, binding, build, opt), "aot cold");
    cold.push_back(ms_since(t0));
    if (a.from_disk) std::exit(2);
    entry = a.path;
  }
  const double t_aot_cold = median(cold);
  // Warm AOT: a fresh pipeline (as a new process would have) loads the entry.
  const double t_aot_warm = time_ms(reps, [&] {
    ModelCompilePipeline q(cpu);
    AotSpecialization a = check(q.get_or_specialize_aot(dir, "llama16", 1, binding, build, opt), "aot warm");
    if (!a.from_disk || q.stats().template_builds != 0) std::exit(3);
  });
  std::ifstream f(entry, std::ios::binary);
  const std::string bytes(std::istreambuf_iterator<char>(f), {});
  const std::string name = entry.filename().string();
  const uint64_t key = std::stoull(name.substr(name.find("__") + 2, 16), nullptr, 16);
  const double t_decode = time_ms(reps, [&] { (void)check(decode_aot_entry(bytes, key, "cpu"), "decode"); });
  const double t_encode = time_ms(reps, [&] { (void)encode_aot_entry(key, "cpu", spec); });
  // Parts of the decode: checksum over the entry, LIR parse (with its verify), plan check.
  const std::string lir_text = ir::print(spec.lir);
  const std::string lir_blob = ir::encode_lir_binary(spec.lir);
  const double t_hash = time_ms(reps, [&] {
    StableHasher h;
    h.bytes(bytes.data(), bytes.size());
    if (h.digest() == 0) std::exit(4);
  });
  const double t_decode_lir = time_ms(reps, [&] { (void)check(ir::decode_lir_binary(lir_blob), "decode_lir_binary"); });
  const double t_verify = time_ms(reps, [&] {
    if (!ir::verify(spec.lir.graph).ok()) std::exit(6);
  });
  const double t_parse = time_ms(reps, [&] { (void)check(ir::parse_lir(lir_text), "parse_lir"); });
  const double t_plan_check = time_ms(reps, [&] {
    if (!compile::check_plan(spec.lir).ok()) std::exit(5);
  });

  const double cold_lir = t_template + t_specialize;
  std::printf("\n%-52s %10s\n", "step", "median ms");
  std::printf("%-52s %10.2f\n", "build HIR (GraphBuilder, 16 layers)", t_hir);
  std::printf("%-52s %10.2f\n", "template: lower + passes + legalize + symbolic plan", t_template);
  std::printf("  (template build_ms as recorded by the pipeline)        %10.2f\n", tmpl->build_ms);
  std::printf("%-52s %10.2f\n", "specialize: bind + re-infer + re-plan", t_specialize);
  std::printf("%-52s %10.2f\n", "backend compile (cpu, LIR -> executable)", t_backend);
  std::printf("%-52s %10.2f\n", "AOT cold: HIR + template + specialize + store", t_aot_cold);
  std::printf("%-52s %10.2f\n", "AOT warm load: HIR fingerprint + read + decode", t_aot_warm);
  std::printf("%-52s %10.2f\n", "  of which decode (checksum, LIR, verify, plan check)", t_decode);
  std::printf("%-52s %10.2f\n", "    checksum (StableHasher over the entry)", t_hash);
  std::printf("%-52s %10.2f\n", "    decode_lir_binary (includes its verify)", t_decode_lir);
  std::printf("%-52s %10.2f\n", "      of which verify (re-infer every type)", t_verify);
  std::printf("%-52s %10.2f\n", "    check_plan", t_plan_check);
  std::printf("%-52s %10.2f\n", "  (encode, for reference)", t_encode);
  std::printf("%-52s %10.2f\n", "  (parse_lir of the text form, for reference)", t_parse);
  std::printf("entry: %s, %zu bytes, %d LIR values, arena %lld bytes\n", name.c_str(), bytes.size(),
              spec.lir.graph.size(), static_cast<long long>(spec.lir.plan.arena_size));
  std::printf("backend: %s\n", exe_desc.c_str());
  std::printf("\nwarm AOT load vs cold (template + specialize): %.1fx  (target >= 10x)\n", cold_lir / t_aot_warm);
  std::printf("with the backend compile on both sides:        %.1fx  (%.2f ms vs %.2f ms)\n",
              (cold_lir + t_backend) / (t_aot_warm + t_backend), cold_lir + t_backend, t_aot_warm + t_backend);
  std::filesystem::remove_all(dir);
  return 0;
}
