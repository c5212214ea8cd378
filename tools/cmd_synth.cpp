// `rlx synth --arch llama|qwen3|gemma2|qwen3moe --preset NAME --type f32|f16|q8_0|q4_k_m --seed S
// [--chat-template FILE] -o FILE`: writes a GGUF with seeded random weights at real shapes
// and a generated vocabulary.
#include <cstdio>
#include <fstream>
#include <sstream>

#include "cli_io.h"
#include "commands.h"
#include "progress.h"
#include "rlx/models/quantize.h"
#include "rlx/models/synth.h"

namespace rlx::cli {

void add_synth_command(CLI::App& app, Runner* run) {
  auto* cmd = app.add_subcommand("synth", "Write a synthetic model (seeded random weights) as GGUF");
  auto o = std::make_shared<models::SynthOptions>();
  auto out = std::make_shared<std::string>();
  cmd->add_option("--arch", o->arch, "model family (default: the preset's family; llama for tiny)")
      ->check(CLI::IsMember({"llama", "qwen3", "gemma2", "qwen3moe", "bert", "qwen35"}));
  cmd->add_option("--preset", o->preset, "shapes of a real model (qwen3-30b-a3b-4l: a mixture of experts, 4 layers; moe-tiny: the same at test size)")
      ->check(CLI::IsMember(models::synth_presets()));
  cmd->add_option("--type", o->type, "weight type mix (as rlx quantize): " + models::quant_mix_names())
      ->check(CLI::IsMember(models::synth_types()));
  cmd->add_option("--seed", o->seed, "weight seed");
  auto chat_template = std::make_shared<std::string>();
  cmd->add_option("--chat-template", *chat_template, "a Jinja file to store as tokenizer.chat_template")
      ->check(CLI::ExistingFile);
  cmd->add_option("-o,--out", *out, "output GGUF file (- : standard output)")->required()->check(output_path_check());
  cmd->callback([run, o, out, chat_template] {
    *run = [o, out, chat_template] {
      models::SynthOptions opts = *o;
      if (!chat_template->empty()) {
        std::ifstream in(*chat_template, std::ios::binary);
        std::stringstream ss;
        ss << in.rdbuf();
        if (!in) return report(Error::io("cannot read '{}'", *chat_template));
        opts.chat_template = ss.str();
      }
      Progress progress("rlx synth");
      opts.progress = progress.callback();
      const std::string staged = staged_output_path(*out);
      Status s = models::write_synthetic_gguf(opts, staged);
      progress.finish();
      if (s.ok()) s = deliver_output(*out, staged);
      if (!s.ok()) return report(s.error());
      std::fprintf(stderr, "rlx: wrote %s\n", *out == "-" ? "the model to standard output" : out->c_str());
      return 0;
    };
  });
}

}  // namespace rlx::cli
