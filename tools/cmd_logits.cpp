// `rlx logits --model PATH --tokens 1,2,3 [--mode batch|incremental] [--kv f32|f16]
// [--device cpu|cuda] --out FILE`: writes float32 little-endian logits
// [n_tokens, n_vocab], row i = next-token logits after tokens[0..i].
// batch: one prefill of all tokens; incremental: one decode step per token.
// This interface is relied on by external checks: keep it stable.
#include <cstdio>
#include <fstream>

#include "cli_io.h"
#include "commands.h"
#include "model_path.h"
#include "progress.h"
#include "rlx/models/language_model.h"

namespace rlx::cli {
namespace {

struct LogitsArgs {
  std::string model, tokens, mode = "batch", kv = "f32", device = "cpu", out;
  int threads = 0;
  bool no_cache = false;
};

int run_logits(const LogitsArgs& a) {
  auto ids = parse_token_ids(a.tokens, "--tokens");
  if (!ids) return report(ids.error());
  auto device = Device::parse(a.device);
  if (!device) return report(device.error());
  models::LoadOptions lo;
  lo.device = *device;
  lo.threads = a.threads;
  lo.kv_dtype = a.kv == "f16" ? ir::DType::F16 : ir::DType::F32;
  lo.ctx = std::max<int64_t>(64, static_cast<int64_t>(ids->size()) + 32);
  lo.compile_cache = !a.no_cache;
  auto where = resolve_model_path(a.model);
  if (!where) return report(where.error());
  const std::shared_ptr<Progress> preparing = attach_load_progress(lo, "rlx: preparing the model");
  auto model = models::LanguageModel::load(where->path, lo);
  if (!model) return report(model.error());
  const int64_t n_vocab = (*model)->config().n_vocab;

  std::vector<float> logits;
  if (a.mode == "batch") {
    auto r = (*model)->forward(*ids, /*all_rows=*/true);
    if (!r) return report(r.error());
    logits = std::move(*r);
  } else {
    for (int32_t t : *ids) {
      auto r = (*model)->forward(std::span<const int32_t>(&t, 1), /*all_rows=*/true);
      if (!r) return report(r.error());
      logits.insert(logits.end(), r->begin(), r->end());
    }
  }
  preparing->finish();
  if (static_cast<int64_t>(logits.size()) != n_vocab * static_cast<int64_t>(ids->size()))
    return report(Error::internal("logits have {} values, expected {}", logits.size(), n_vocab * ids->size()));
  const std::string_view bytes(reinterpret_cast<const char*>(logits.data()), logits.size() * sizeof(float));
  if (Status st = write_output(a.out, bytes); !st.ok()) return report(st.error());
  std::fprintf(stderr, "rlx: wrote logits [%zu, %lld] to %s\n", ids->size(), static_cast<long long>(n_vocab),
               a.out.c_str());
  return 0;
}

}  // namespace

void add_logits_command(CLI::App& app, Runner* run) {
  auto* cmd = app.add_subcommand("logits", "Write the logits of every position of a token sequence");
  auto a = std::make_shared<LogitsArgs>();
  cmd->add_option("-m,--model", a->model, "GGUF file or Hugging Face folder (config.json + safetensors)")
      ->required()
      ->check(model_path_check());
  cmd->add_option("--tokens", a->tokens, "token ids separated by commas or spaces")->required();
  cmd->add_option("--mode", a->mode, "batch | incremental")->check(CLI::IsMember({"batch", "incremental"}));
  cmd->add_option("--kv", a->kv, "KV cache dtype: f32 | f16")->check(CLI::IsMember({"f32", "f16"}));
  add_device_option(cmd, &a->device, true);
  cmd->add_option("-t,--threads", a->threads, "CPU threads")->check(kThreadCount);
  cmd->add_flag("--no-cache", a->no_cache, "compile everything (no AOT disk cache of compiled executables)");
  cmd->add_option("--out", a->out, "output file (float32 little-endian [n_tokens, n_vocab]; - for standard output)")
      ->required()
      ->check(output_path_check());
  cmd->callback([run, a] { *run = [a] { return run_logits(*a); }; });
}

}  // namespace rlx::cli
