// The compile pipeline as a readable list of passes: lower, bind, clean up, fuse,
// choose precision, legalize for the backend, plan memory. Each stage can be dumped
// (CompileOptions::ir_dump_dir) and is verified in debug builds or when verbose.
#include "rlx/compile/pipeline.h"

#include <chrono>
#include <filesystem>
#include <fstream>

#include "rlx/base/log.h"
#include "rlx/compile/lower.h"
#include "rlx/compile/memory_plan.h"
#include "rlx/compile/passes.h"
#include "rlx/ir/text.h"

namespace rlx::compile {
namespace {
using namespace ir;

bool pattern_enabled(const FusionOptions& f, const std::string& name) {
  for (const std::string& p : f.disabled_patterns)
    if (p == name) return false;
  return true;
}

// Runs passes, timing each, verifying and dumping when asked.
class PassRunner {
 public:
  PassRunner(const CompileOptions& o, CompileResult& r) : opt_(o), res_(r) {
#ifndef NDEBUG
    verify_ = true;
#endif
    if (o.verbose) verify_ = true;
  }

  Status stage(const std::string& name, const MirModule& m, double ms) {
    res_.timings.push_back({name, ms, m.graph.size()});
    if (opt_.verbose) RLX_LOG_INFO("compile: {:<28} {:>5} nodes {:8.3f} ms", name, m.graph.size(), ms);
    if (verify_) {
      Status s = verify(m.graph);
      if (!s.ok()) return s.error().with_context("after pass " + name);
    }
    return dump(name, print(m));
  }

  Status dump(const std::string& name, const std::string& text) {
    if (opt_.ir_dump_dir.empty()) return {};
    std::error_code ec;
    std::filesystem::create_directories(opt_.ir_dump_dir, ec);
    if (ec) return Error::io("cannot create IR dump dir '{}': {}", opt_.ir_dump_dir, ec.message());
    const std::string path = fmt::format("{}/{:02d}_{}.rlx", opt_.ir_dump_dir, index_++, name);
    std::ofstream f(path);
    f << text;
    if (!f) return Error::io("cannot write IR dump '{}'", path);
    return {};
  }

  template <class F>
  Status run(const std::string& name, MirModule& m, F&& pass) {
    const auto t0 = std::chrono::steady_clock::now();
    m = pass(m);
    return stage(name, m, ms_since(t0));
  }
  template <class F>
  Status run_expected(const std::string& name, MirModule& m, F&& pass) {
    const auto t0 = std::chrono::steady_clock::now();
    Expected<MirModule> r = pass(m);
    if (!r) return r.error().with_context(name);
    m = std::move(r).value();
    return stage(name, m, ms_since(t0));
  }

  static double ms_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  }

 private:
  const CompileOptions& opt_;
  CompileResult& res_;
  bool verify_ = false;
  int index_ = 0;
};

Expected<CompileResult> compile_from(MirModule m, const CompileOptions& o, const OpSet& ops, const Target& target,
                                     CompileResult& res, PassRunner& run, std::chrono::steady_clock::time_point t0) {
  if (!o.binding.values().empty())
    TRY(run.run_expected("bind", m, [&](const MirModule& x) -> Expected<MirModule> {
      ASSIGN_OR_RETURN(Graph g, bind(x.graph, o.binding));
      return MirModule{std::move(g)};
    }));
  if (o.constant_folding) TRY(run.run("fold_constants", m, fold_constants));
  if (o.cse) TRY(run.run("eliminate_common_subexpressions", m, eliminate_common_subexpressions));
  if (o.dce) TRY(run.run("eliminate_dead_code", m, eliminate_dead_code));

  // Fusion: a pattern runs only when the backend claims the fused kind it emits.
  FusionReport& fr = res.fusion;
  fr.nodes_before = m.graph.size();
  const FusionOptions& f = o.fusion;
  auto fuse_if = [&](const char* pattern, OpKind emits, auto pass) -> Status {
    if (f.skip || !pattern_enabled(f, pattern) || !ops.contains(emits)) return {};
    return run.run(std::string("fuse_") + pattern, m, [&](const MirModule& x) { return pass(x, &fr); });
  };
  TRY(fuse_if("attention", OpKind::Attention, fuse_attention));
  if (target.fused_linear)
    TRY(fuse_if("linear", OpKind::FusedLinear,
                [&](const MirModule& x, FusionReport* r) { return fuse_linear(x, target, r); }));
  TRY(fuse_if("swiglu", OpKind::FusedSwiGLU, fuse_swiglu));
  TRY(fuse_if("matmul_bias_act", OpKind::FusedMatMulBiasAct, fuse_matmul_bias_act));
  TRY(fuse_if("residual_norm", OpKind::FusedResidualRmsNorm, fuse_residual_norm));
  TRY(fuse_if("narrow_rope", OpKind::Rope, fuse_narrow_rope));
  if (!f.skip && !f.unfuse_regions && pattern_enabled(f, "elementwise_region") && ops.contains(OpKind::ElementwiseRegion)) {
    const FusionLimits limits = effective_fusion_limits(f, target);
    TRY(run.run("fuse_elementwise", m, [&](const MirModule& x) { return fuse_elementwise(x, limits, &fr); }));
  }
  if (f.unfuse_regions) TRY(run.run("unfuse_elementwise", m, unfuse_elementwise));
  fr.nodes_after = m.graph.size();
  if (o.assert_fusion_clean && !fr.clean())
    return Error::unsupported("fusion is not clean (assert_fusion_clean):\n{}", fr.to_string());

  if (o.precision != Precision::F32)
    TRY(run.run_expected("apply_precision", m, [&](const MirModule& x) { return apply_precision(x, o.precision, o.mixed); }));
  TRY(run.run_expected("legalize", m, [&](const MirModule& x) {
    return legalize(x, ops, target.name, o.dispatch, &res.dispatch, &target);
  }));
  if (o.dce) TRY(run.run("eliminate_dead_code", m, eliminate_dead_code));

  const auto tp = std::chrono::steady_clock::now();
  ASSIGN_OR_RETURN(res.lir, plan_memory(m, plan_options(o)));
  res.timings.push_back({"plan_memory", PassRunner::ms_since(tp), m.graph.size()});
  TRY(run.dump("lir", print(res.lir)));
  res.total_ms = PassRunner::ms_since(t0);
  if (o.verbose) {
    RLX_LOG_INFO("{}", res.fusion.to_string());
    RLX_LOG_INFO("{}", res.dispatch.to_string());
  }
  return std::move(res);
}

}  // namespace

Expected<CompileResult> compile_hir(const HirModule& hir, const CompileOptions& o, const OpSet& ops,
                                    const Target& target) {
  const auto t0 = std::chrono::steady_clock::now();
  CompileResult res;
  PassRunner run(o, res);
  TRY(run.dump("hir", print(hir)));
  MirModule m;
  if (target.tensor_parallel > 1) {
    const auto ts = std::chrono::steady_clock::now();
    ASSIGN_OR_RETURN(HirModule sharded, shard_tensor_parallel(hir, target.tensor_parallel, &res.shard));
    res.timings.push_back({"shard_tensor_parallel", PassRunner::ms_since(ts), sharded.graph.size()});
    TRY(run.dump("hir_sharded", print(sharded)));
    TRY(run.run_expected("lower", m, [&](const MirModule&) { return lower(sharded); }));
  } else {
    TRY(run.run_expected("lower", m, [&](const MirModule&) { return lower(hir); }));
  }
  return compile_from(std::move(m), o, ops, target, res, run, t0);
}

Expected<CompileResult> compile_mir(const MirModule& mir, const CompileOptions& o, const OpSet& ops,
                                    const Target& target) {
  const auto t0 = std::chrono::steady_clock::now();
  CompileResult res;
  PassRunner run(o, res);
  TRY(run.stage("input", mir, 0));
  return compile_from(mir, o, ops, target, res, run, t0);
}

Expected<CompileResult> CompilePipeline::compile_hir(const HirModule& hir) const {
  return rlx::compile::compile_hir(hir, options_, backend_ops_, target_);
}
Expected<CompileResult> CompilePipeline::compile_mir(const MirModule& mir) const {
  return rlx::compile::compile_mir(mir, options_, backend_ops_, target_);
}

}  // namespace rlx::compile
