// `rlx quantize IN.gguf OUT.gguf MIX`: rewrites a model with the standard per-tensor
// type mix (q4_k_m, q5_k_m, q6_k, q8_0, f16, f32), printing progress.
#include <cstdio>
#include <filesystem>

#include "commands.h"
#include "rlx/models/quantize.h"

namespace rlx::cli {

void add_quantize_command(CLI::App& app, Runner* run) {
  auto* cmd = app.add_subcommand("quantize", "Quantize a GGUF model with a standard type mix");
  auto in = std::make_shared<std::string>(), out = std::make_shared<std::string>();
  auto mix = std::make_shared<std::string>();
  cmd->add_option("input", *in, "GGUF file to read")->required()->check(CLI::ExistingFile);
  cmd->add_option("output", *out, "GGUF file to write")->required();
  cmd->add_option("mix", *mix, "q4_k_m | q5_k_m | q6_k | q8_0 | f16 | f32")
      ->required()
      ->check(CLI::IsMember(models::quant_mixes()));
  cmd->callback([run, in, out, mix] {
    *run = [in, out, mix] {
      models::QuantizeOptions o;
      o.mix = *mix;
      o.progress = terminal_progress("rlx quantize", 5);
      if (Status s = models::quantize_gguf(*in, *out, o); !s.ok()) return report(s.error());
      std::error_code ec;
      const auto in_size = std::filesystem::file_size(*in, ec), out_size = std::filesystem::file_size(*out, ec);
      std::fprintf(stderr, "rlx: wrote %s (%s): %.2f MB -> %.2f MB\n", out->c_str(), mix->c_str(), in_size / 1e6,
                   out_size / 1e6);
      return 0;
    };
  });
}

}  // namespace rlx::cli
