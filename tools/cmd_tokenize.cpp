// `rlx tokenize` / `rlx detokenize`: text <-> token ids with the tokenizer stored
// in a model file. Output format is stable (external checks rely on it).
#include "commands.h"

namespace rlx::cli {

void add_tokenize_commands(CLI::App& app, Runner* run) {
  (void)app;
  (void)run;
}

}  // namespace rlx::cli
