// `rlx quantize MODEL OUT.gguf MIX` (or `--model MODEL OUT.gguf MIX`): rewrites a model
// with a per-tensor type mix (q4_k_m, q3_k_m, q4_0, q2_k, q6_k, q8_0, f16, iq4_xs, ...; any
// case), printing progress and one line per tensor whose type fell back. MODEL is a GGUF
// file or a Hugging Face folder (converted with the same mix).
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>

#include "cli_io.h"
#include "commands.h"
#include "model_path.h"
#include "progress.h"
#include "rlx/models/convert.h"
#include "rlx/models/imatrix.h"
#include "rlx/models/quantize.h"

namespace rlx::cli {
namespace {

struct QuantizeArgs {
  std::string model;              // -m/--model, or the first positional
  std::vector<std::string> args;  // [MODEL] OUT MIX
  std::string imatrix;            // --imatrix FILE
};

int run_quantize(const std::string& in, const std::string& out, const std::string& mix, const std::string& imatrix_path) {
  auto where = resolve_model_path(in);
  if (!where) return report(where.error());
  std::shared_ptr<const models::Imatrix> imatrix;
  if (!imatrix_path.empty()) {
    auto m = models::read_imatrix(imatrix_path);
    if (!m) return report(m.error());
    imatrix = std::make_shared<const models::Imatrix>(std::move(*m));
  }
  Progress progress("rlx quantize");
  auto on_fallback = [&progress](const std::string& line) { progress.message("rlx quantize: " + line); };
  int64_t without = 0;
  auto on_no_importance = [&](const std::string& name) {
    ++without;
    progress.message(fmt::format("rlx quantize: tensor '{}': no importance in {}; quantized without", name, imatrix_path));
  };
  const std::string staged = staged_output_path(out);
  Status s;
  if (where->hf) {
    models::ConvertOptions o;
    o.mix = mix;
    o.progress = progress.callback();
    o.on_fallback = on_fallback;
    o.imatrix = imatrix;
    o.on_no_importance = on_no_importance;
    s = models::convert_hf_to_gguf(where->path, staged, o);
  } else {
    models::QuantizeOptions o;
    o.mix = mix;
    o.progress = progress.callback();
    o.on_fallback = on_fallback;
    o.imatrix = imatrix;
    o.on_no_importance = on_no_importance;
    s = models::quantize_gguf(where->path, staged, o);
  }
  progress.finish();
  if (!s.ok()) return report(s.error());
  namespace fs = std::filesystem;
  std::error_code ec;
  double in_size = 0;
  if (where->hf) {
    for (const auto& e : fs::directory_iterator(where->path, ec))
      if (e.is_regular_file() && e.path().extension() == ".safetensors")
        in_size += static_cast<double>(e.file_size(ec));
  } else {
    in_size = static_cast<double>(fs::file_size(where->path, ec));
  }
  const auto out_size = static_cast<double>(fs::file_size(staged, ec));
  if (Status d = deliver_output(out, staged); !d.ok()) return report(d.error());
  std::fprintf(stderr, "rlx: wrote %s (%s): %.2f MB -> %.2f MB\n", out == "-" ? "standard output" : out.c_str(), mix.c_str(), in_size / 1e6,
               out_size / 1e6);
  if (imatrix)
    std::fprintf(stderr, "rlx: importance from %s (%zu matrices); %lld quantized matri%s had none\n",
                 imatrix_path.c_str(), imatrix->entries.size(), static_cast<long long>(without),
                 without == 1 ? "x" : "ces");
  return 0;
}

}  // namespace

void add_quantize_command(CLI::App& app, Runner* run) {
  auto* cmd = app.add_subcommand("quantize", "Quantize a model (GGUF file or Hugging Face folder) to a GGUF file");
  auto a = std::make_shared<QuantizeArgs>();
  cmd->add_option("-m,--model", a->model, "model to read (or give it as the first argument)")
      ->check(model_path_check());
  cmd->add_option("args", a->args, fmt::format("[MODEL] OUT.gguf MIX (OUT - : standard output); MIX: {} (any case)", models::quant_mix_names()))
      ->default_str("")
      ->required();
  cmd->add_option("--imatrix", a->imatrix,
                  "importance matrix (rlx imatrix, or llama.cpp's GGUF / .dat): its matrices are quantized with their "
                  "columns weighted by it")
      ->check(CLI::ExistingFile);
  cmd->callback([run, a] {
    std::vector<std::string> p = a->args;
    if (!a->model.empty()) p.insert(p.begin(), a->model);
    if (p.size() != 3)
      throw CLI::ValidationError("quantize", fmt::format("expected MODEL OUT.gguf MIX, got {} argument{}", p.size(),
                                                         p.size() == 1 ? "" : "s"));
    std::string mix = p[2];
    std::transform(mix.begin(), mix.end(), mix.begin(), [](unsigned char c) { return std::tolower(c); });
    const std::vector<std::string> mixes = models::quant_mixes();
    if (std::find(mixes.begin(), mixes.end(), mix) == mixes.end())
      throw CLI::ValidationError(
          "MIX", fmt::format("'{}' is not a quantization mix ({})", p[2], models::quant_mix_names()));
    if (auto where = resolve_model_path(p[0]); !where) throw CLI::ValidationError("MODEL", where.error().message());
    if (std::string problem = output_path_problem(p[1]); !problem.empty()) throw CLI::ValidationError("OUT", problem);
    *run = [in = p[0], out = p[1], mix, imatrix = a->imatrix] { return run_quantize(in, out, mix, imatrix); };
  });
}

}  // namespace rlx::cli
