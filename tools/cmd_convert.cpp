// `rlx convert HF_DIR OUT.gguf [--type MIX]`: writes a Hugging Face decoder folder as a
// GGUF file with llama.cpp's keys and tensor names (see rlx/models/convert.h).
#include <cstdio>
#include <filesystem>

#include "commands.h"
#include "rlx/models/convert.h"
#include "rlx/models/quantize.h"

namespace rlx::cli {

void add_convert_command(CLI::App& app, Runner* run) {
  auto* cmd = app.add_subcommand(
      "convert",
      "Write a Hugging Face folder (llama, mistral, mixtral, qwen2, qwen3, qwen3_moe, qwen3_5_text, qwen3_5_moe_text) "
      "as GGUF");
  auto in = std::make_shared<std::string>(), out = std::make_shared<std::string>();
  auto mix = std::make_shared<std::string>("f16");
  cmd->add_option("input", *in, "Hugging Face folder (config.json + safetensors)")->required()->check(CLI::ExistingDirectory);
  cmd->add_option("output", *out, "GGUF file to write")->required();
  cmd->add_option("--type", *mix, fmt::format("{} (default f16)", models::quant_mix_names()))
      ->check(CLI::IsMember(models::quant_mixes()));
  cmd->callback([run, in, out, mix] {
    *run = [in, out, mix] {
      models::ConvertOptions o;
      o.mix = *mix;
      o.progress = terminal_progress("rlx convert", 5);
      if (Status s = models::convert_hf_to_gguf(*in, *out, o); !s.ok()) return report(s.error());
      std::error_code ec;
      const auto size = std::filesystem::file_size(*out, ec);
      const bool has_tokenizer = std::filesystem::is_regular_file(std::filesystem::path(*in) / "tokenizer.json", ec);
      std::fprintf(stderr, "rlx: wrote %s (%s, %.2f MB; %s)\n", out->c_str(), mix->c_str(), size / 1e6,
                   has_tokenizer ? "tokenizer from tokenizer.json" : "no tokenizer.json: no vocabulary");
      return 0;
    };
  });
}

}  // namespace rlx::cli
