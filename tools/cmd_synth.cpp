// `rlx synth --arch llama|qwen3|gemma2|qwen3moe --preset NAME --type f32|f16|q8_0|q4_k_m --seed S
// [--chat-template FILE] -o FILE`: writes a GGUF with seeded random weights at real shapes
// and a generated vocabulary.
#include <cstdio>
#include <fstream>
#include <sstream>

#include "commands.h"
#include "rlx/models/quantize.h"
#include "rlx/models/synth.h"

namespace rlx::cli {

void add_synth_command(CLI::App& app, Runner* run) {
  auto* cmd = app.add_subcommand("synth", "Write a synthetic model (seeded random weights) as GGUF");
  auto o = std::make_shared<models::SynthOptions>();
  auto out = std::make_shared<std::string>();
  cmd->add_option("--arch", o->arch, "llama | qwen3 | gemma2 | qwen3moe (default: the preset's family; llama for tiny)")
      ->check(CLI::IsMember({"llama", "qwen3", "gemma2"}));
  cmd->add_option("--preset", o->preset, "tiny | llama-3.2-1b | llama-3-8b | qwen3-0.6b | gemma-2-2b | qwen3-30b-a3b-4l (MoE)")
      ->check(CLI::IsMember(models::synth_presets()));
  cmd->add_option("--type", o->type, "weight type mix (as rlx quantize): " + models::quant_mix_names())
      ->check(CLI::IsMember(models::synth_types()));
  cmd->add_option("--seed", o->seed, "weight seed");
  auto chat_template = std::make_shared<std::string>();
  cmd->add_option("--chat-template", *chat_template, "a Jinja file to store as tokenizer.chat_template")
      ->check(CLI::ExistingFile);
  cmd->add_option("-o,--out", *out, "output GGUF file")->required();
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
      opts.progress = terminal_progress("rlx synth", 10);
      if (Status s = models::write_synthetic_gguf(opts, *out); !s.ok()) return report(s.error());
      std::fprintf(stderr, "rlx: wrote %s\n", out->c_str());
      return 0;
    };
  });
}

}  // namespace rlx::cli
