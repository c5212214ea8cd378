// `rlx compile`: compiles a text-IR file, a GGUF model or the demo block for a
// device and prints any tier (--dump hir|mir|lir) plus the fusion, dispatch and
// memory reports (--report).
#include <cstdio>
#include <fstream>
#include <sstream>

#include <fmt/ranges.h>

#include "commands.h"
#include "demo_graph.h"
#include "model_path.h"
#include "progress.h"
#include "rlx/compile/pipeline.h"
#include "rlx/compile/profile.h"
#include "rlx/ir/text.h"
#include "rlx/models/decoder.h"
#include "rlx/models/language_model.h"
#include "rlx/runtime/session.h"

namespace rlx::cli {
namespace {

struct CompileArgs {
  std::string ir_file, model, dump, device = "cpu", profile, policy = "direct", phase = "forward";
  bool report = false;
  int64_t seq = 16;
  int64_t ctx = 512;
  int64_t batch = 1;
};

Expected<std::string> read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Error::not_found("cannot open '{}'", path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

/// The HIR to compile and, for a model's prefill or decode phase, the profile `rlx run`
/// compiles it with (empty otherwise).
struct LoadedHir {
  ir::HirModule hir;
  std::string profile;
};

Expected<LoadedHir> load_hir(const CompileArgs& a, Progress& progress) {
  const ir::FusionPolicy policy = a.policy == "fusable" ? ir::FusionPolicy::Fusable : ir::FusionPolicy::Direct;
  if (a.batch != 1 && (a.model.empty() || a.phase == "forward"))
    return Error::invalid_argument("--batch {} needs --model and --phase prefill or decode", a.batch);
  if (!a.ir_file.empty()) {
    ASSIGN_OR_RETURN(std::string text, read_text(a.ir_file));
    // A file holds either a HIR module or a MIR module; MIR is a HIR without HIR ops.
    auto hir = ir::parse_hir(text);
    if (hir) return LoadedHir{std::move(*hir), {}};
    auto mir = ir::parse_mir(text);
    if (!mir) return hir.error().with_context(a.ir_file);
    return LoadedHir{ir::HirModule{std::move(mir->graph), policy}, {}};
  }
  if (!a.model.empty()) {
    progress.update(0.0, "opening the model");
    ASSIGN_OR_RETURN(ModelPath where, resolve_model_path(a.model));
    ASSIGN_OR_RETURN(OpenedModel model, open_model(where));
    progress.update(0.2, "building the graph");
    if (model.config.fused_projections)
      model.weights = models::split_fused_projections(std::move(model.weights), model.config);
    models::DecoderOptions opts;
    opts.policy = policy;
    // decode: the one-token step `rlx run` specializes (KV cache of --ctx rows, the
    // greedy token out); prefill: the same over --seq rows. forward: no cache, logits.
    if (a.phase != "forward") {
      opts.ctx = a.ctx;
      opts.last_row_logits = true;
      opts.greedy_token = true;
      if (a.phase == "decode") opts.seq = ir::Dim(1);
      opts.batch = a.batch;
    }
    ASSIGN_OR_RETURN(models::BuiltModel built, models::build_decoder(model.config, *model.weights, opts));
    std::string profile = a.phase == "forward" ? "" : models::default_profile_name(model.config, a.phase == "decode");
    return LoadedHir{std::move(built.hir), std::move(profile)};
  }
  if (a.phase != "forward") return Error::invalid_argument("--phase {} needs --model", a.phase);
  ASSIGN_OR_RETURN(ir::HirModule demo, demo_block(DemoShape{}, policy));
  return LoadedHir{std::move(demo), {}};
}

int run_compile(const CompileArgs& a) {
  auto device = Device::parse(a.device);
  if (!device) return report(device.error());
  // The backend's compile target (fusion limits, op set); a device kind this build has
  // but this machine lacks (cuda without a GPU) still compiles, for the reports.
  BackendCompileTarget target;
  std::string backend_name;
  if (auto backend = BackendRegistry::global().get(*device)) {
    target = {(*backend)->target(), (*backend)->supported_ops()};
  } else {
    auto described = BackendRegistry::global().compile_target(device->kind);
    if (!described) return report(backend.error());
    target = std::move(*described);
    if (device->count > 1) target.target = target.target.for_tensor_parallel(device->count);  // as a group asks
    std::fprintf(stderr, "rlx compile: %s (compiling for its target only)\n", backend.error().message().c_str());
  }
  // Opening a model, building its graph and compiling it: one progress job.
  Progress progress("rlx compile");
  auto loaded = load_hir(a, progress);
  if (!loaded) return report(loaded.error());
  ir::HirModule* hir = &loaded->hir;

  compile::CompileOptions options;
  const std::string profile_name = !a.profile.empty() ? a.profile : loaded->profile;
  if (!profile_name.empty()) {
    // A preset name (llama32_decode, ...) or a *.rlx.toml file.
    auto profile = compile::CompileProfile::preset(profile_name);
    if (!profile) profile = compile::CompileProfile::load(profile_name);
    if (!profile) return report(profile.error());
    if (Status s = check_profile_backends(*profile, profile_name); !s.ok()) return report(s.error());
    options = profile->to_compile_options(target.target);
    if (!loaded->profile.empty()) hir->policy = profile->fusion.policy;
  }
  if (!ir::free_symbols(hir->graph).empty()) options.binding.set(ir::SEQ, a.seq);
  progress.update(0.4, "compiling");
  auto result = compile::compile_hir(*hir, options, target.ops, target.target);
  progress.update(1.0);
  progress.finish();
  if (!result) return report(result.error());

  if (a.dump == "hir") {
    std::fputs(ir::print(*hir).c_str(), stdout);
  } else if (a.dump == "mir") {
    std::fputs(ir::print(ir::MirModule{result->lir.graph}).c_str(), stdout);
  } else if (a.dump == "lir") {
    std::fputs(ir::print(result->lir).c_str(), stdout);
  }
  if (a.report || a.dump.empty()) {
    const auto& plan = result->lir.plan;
    std::printf("compile: %d HIR nodes -> %d LIR nodes in %.2f ms\n", hir->graph.size(), result->lir.graph.size(),
                result->total_ms);
    if (target.target.tensor_parallel > 1) std::printf("\n%s", result->shard.to_string().c_str());
    std::printf("\nfusion report:\n%s\n", result->fusion.to_string().c_str());
    std::printf("dispatch report (%s):\n%s\n", target.target.name.c_str(), result->dispatch.to_string().c_str());
    std::printf("memory plan: arena %lld bytes (alignment %lld), unshared %lld bytes, saved %lld bytes\n",
                static_cast<long long>(plan.arena_size), static_cast<long long>(plan.alignment),
                static_cast<long long>(plan.unshared_bytes), static_cast<long long>(plan.bytes_saved()));
  }
  return 0;
}

}  // namespace

void add_compile_command(CLI::App& app, Runner* run) {
  auto* cmd = app.add_subcommand("compile", "Compile a graph and print its IR and reports");
  auto a = std::make_shared<CompileArgs>();
  auto* src = cmd->add_option_group("source", "what to compile (default: the demo block)");
  src->add_option("--ir", a->ir_file, "text IR file (HIR or MIR)")->check(CLI::ExistingFile);
  src->add_option("-m,--model", a->model, "GGUF file or Hugging Face folder")->check(model_path_check());
  src->require_option(0, 1);
  cmd->add_option("--dump", a->dump, "print a tier")->check(CLI::IsMember({"hir", "mir", "lir"}));
  cmd->add_flag("--report", a->report, "print fusion, dispatch and memory reports");
  add_device_option(cmd, &a->device, true);
  cmd->add_option("--profile", a->profile,
                  fmt::format("compile profile: a *.rlx.toml file or a preset ({})",
                              fmt::join(compile::CompileProfile::preset_names(), ", ")));
  cmd->add_option("--policy", a->policy, "fusion policy for HIR")->check(CLI::IsMember({"direct", "fusable"}));
  cmd->add_option("--seq", a->seq, "value bound to SEQ when the graph is symbolic")->check(kTokenCount);
  cmd->add_option("--phase", a->phase, "with --model: forward (no KV cache), prefill or decode (as rlx run builds them)")
      ->check(CLI::IsMember({"forward", "prefill", "decode"}));
  cmd->add_option("--ctx", a->ctx, "KV-cache rows of the prefill and decode phases")->check(kTokenCount);
  cmd->add_option("--batch", a->batch,
                  "with --phase prefill or decode: sequences run together (as rlx bench --batch and rlx serve build "
                  "them)")
      ->check(CLI::Range(int64_t{1}, int64_t{4096}));
  cmd->callback([run, a] { *run = [a] { return run_compile(*a); }; });
}

}  // namespace rlx::cli
