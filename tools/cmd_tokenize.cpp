// `rlx tokenize --model PATH (--text TEXT | --file FILE) [--no-special] [--parse-special]
// [--show-pieces]` prints the ids on one line separated by single spaces (or a table
// with --show-pieces); `rlx detokenize --model PATH --tokens 1,2,3` prints the text.
// PATH is a GGUF file, a tokenizer.json, or a Hugging Face folder holding one.
// This interface is relied on by external checks: keep it stable.
#include <cstdio>
#include <fstream>
#include <sstream>

#include "cli_io.h"
#include "commands.h"
#include "model_path.h"
#include "rlx/models/tokenizer.h"

namespace rlx::cli {
namespace {

struct TokenizeArgs {
  std::string model, text, file;
  bool no_special = false, parse_special = false, show_pieces = false;
};

int run_tokenize(const TokenizeArgs& a) {
  auto tok = open_tokenizer(a.model);
  if (!tok) return report(tok.error());
  std::string text = a.text;
  if (!a.file.empty()) {
    std::ifstream in(a.file, std::ios::binary);
    if (!in) return report(Error::not_found("cannot open '{}'", a.file));
    std::stringstream ss;
    ss << in.rdbuf();
    text = ss.str();
  }
  const std::vector<int32_t> ids = (*tok)->encode(text, !a.no_special, a.parse_special);
  if (a.show_pieces) {
    std::printf("%8s  %s\n", "id", "piece");
    for (int32_t id : ids) std::printf("%8d  %s\n", id, std::string((*tok)->token_text(id)).c_str());
    return 0;
  }
  std::string line;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) line += ' ';
    line += std::to_string(ids[i]);
  }
  std::printf("%s\n", line.c_str());
  return 0;
}

int run_detokenize(const std::string& model, const std::string& tokens) {
  auto tok = open_tokenizer(model);
  if (!tok) return report(tok.error());
  auto parsed = parse_token_ids(tokens, "--tokens");
  if (!parsed) return report(parsed.error());
  const std::vector<int32_t>& ids = *parsed;
  auto text = (*tok)->decode(ids);
  if (!text) return report(text.error());
  std::fwrite(text->data(), 1, text->size(), stdout);
  std::fputc('\n', stdout);
  return 0;
}

}  // namespace

void add_tokenize_commands(CLI::App& app, Runner* run) {
  auto* cmd = app.add_subcommand("tokenize", "Turn text into token ids with a model's tokenizer");
  auto a = std::make_shared<TokenizeArgs>();
  cmd->add_option("--model", a->model, "GGUF file, tokenizer.json or HF folder")->required();
  auto* text = cmd->add_option("--text", a->text, "text to tokenize");
  auto* file = cmd->add_option("--file", a->file, "file whose bytes are tokenized as they are")->check(CLI::ExistingFile);
  text->excludes(file);
  cmd->add_flag("--no-special", a->no_special, "add no BOS/EOS");
  cmd->add_flag("--parse-special", a->parse_special, "match special-token text (e.g. <|eot_id|>) as one token");
  cmd->add_flag("--show-pieces", a->show_pieces, "print a table of ids and pieces");
  cmd->callback([run, a, text, file] {
    if (text->count() == 0 && file->count() == 0) throw CLI::RequiredError("--text or --file");
    *run = [a] { return run_tokenize(*a); };
  });

  auto* de = app.add_subcommand("detokenize", "Turn token ids back into text");
  auto model = std::make_shared<std::string>(), tokens = std::make_shared<std::string>();
  de->add_option("--model", *model, "GGUF file, tokenizer.json or HF folder")->required();
  de->add_option("--tokens", *tokens, "token ids separated by commas or spaces (as rlx tokenize prints them)")->required();
  de->callback([run, model, tokens] { *run = [model, tokens] { return run_detokenize(*model, *tokens); }; });
}

}  // namespace rlx::cli
