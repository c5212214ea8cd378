// `rlx convert HF_DIR OUT.gguf [--type MIX]`: writes a Hugging Face decoder folder as a
// GGUF file with llama.cpp's keys and tensor names (see rlx/models/convert.h).
#include <cstdio>
#include <filesystem>

#include "cli_io.h"
#include "commands.h"
#include "progress.h"
#include "rlx/models/convert.h"
#include "rlx/models/quantize.h"

namespace rlx::cli {

void add_convert_command(CLI::App& app, Runner* run) {
  auto* cmd = app.add_subcommand(
      "convert",
      "Write a Hugging Face folder (llama, mistral, mixtral, qwen2, qwen3, qwen3_moe, gemma, gemma2, gemma3_text, phi3, "
      "qwen3_5_text, qwen3_5_moe_text, qwen3_next) as GGUF");
  auto in = std::make_shared<std::string>(), out = std::make_shared<std::string>();
  auto mix = std::make_shared<std::string>("f16");
  cmd->add_option("input", *in, "Hugging Face folder (config.json + safetensors)")->required()->check(CLI::ExistingDirectory);
  cmd->add_option("output", *out, "GGUF file to write (- : standard output)")->required()->check(output_path_check());
  cmd->add_option("--type", *mix, "weight type mix (as rlx quantize)")
      ->check(CLI::IsMember(models::quant_mixes()));
  auto imatrix = std::make_shared<std::string>();
  cmd->add_option("--imatrix", *imatrix, "importance matrix for the quantized types (as rlx quantize --imatrix)")
      ->check(CLI::ExistingFile);
  cmd->callback([run, in, out, mix, imatrix] {
    *run = [in, out, mix, imatrix] {
      models::ConvertOptions o;
      o.mix = *mix;
      if (!imatrix->empty()) {
        auto m = models::read_imatrix(*imatrix);
        if (!m) return report(m.error());
        o.imatrix = std::make_shared<const models::Imatrix>(std::move(*m));
      }
      Progress progress("rlx convert");
      o.progress = progress.callback();
      o.on_fallback = [&progress](const std::string& line) { progress.message("rlx convert: " + line); };
      o.on_no_importance = [&progress, imatrix](const std::string& name) {
        progress.message(fmt::format("rlx convert: tensor '{}': no importance in {}; quantized without", name, *imatrix));
      };
      const std::string staged = staged_output_path(*out);
      Status s = models::convert_hf_to_gguf(*in, staged, o);
      progress.finish();
      std::error_code ec;
      const auto size = std::filesystem::file_size(staged, ec);
      if (s.ok()) s = deliver_output(*out, staged);
      if (!s.ok()) return report(s.error());
      const bool has_tokenizer = std::filesystem::is_regular_file(std::filesystem::path(*in) / "tokenizer.json", ec);
      std::fprintf(stderr, "rlx: wrote %s (%s, %.2f MB; %s)\n", out->c_str(), mix->c_str(), size / 1e6,
                   has_tokenizer ? "tokenizer from tokenizer.json" : "no tokenizer.json: no vocabulary");
      return 0;
    };
  });
}

}  // namespace rlx::cli
