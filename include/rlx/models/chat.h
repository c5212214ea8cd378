// Chat prompts: a conversation rendered with the model's own Jinja template (GGUF
// `tokenizer.chat_template`, as transformers renders it), or with one of three built-in
// formats (Llama 3, ChatML, Gemma) for files without a template; plus the strings that
// end an assistant turn.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "rlx/base/status.h"
#include "rlx/models/jinja.h"
#include "rlx/models/tokenizer.h"

namespace rlx::models {

enum class ChatTemplate { Llama3, ChatML, Gemma };

struct ChatMessage {
  std::string role;  ///< "system", "user" or "assistant"
  std::string content;
};

/// Recognises the template family from the Jinja source of `tokenizer.chat_template`;
/// nullopt when none of the known markers appears.
std::optional<ChatTemplate> detect_chat_template(const std::string& jinja);
/// Parses "llama3" / "chatml" / "gemma".
std::optional<ChatTemplate> parse_chat_template(const std::string& name);

/// The conversation as prompt text, ending with the opening of the assistant turn.
/// BOS is not included (the tokenizer adds it). Errors name an unknown role.
Expected<std::string> render_chat(ChatTemplate t, const std::vector<ChatMessage>& messages);

/// Text that marks the end of an assistant turn (used as stop strings).
std::vector<std::string> chat_stop_strings(ChatTemplate t);

/// The conversation rendered with a model's own Jinja chat template, with `bos` / `eos`
/// as bos_token / eos_token (the template places them; tokenize the result without
/// adding special tokens). Errors: the template's raise_exception message, or a
/// template error naming its line and column.
Expected<std::string> render_chat(const jinja::Template& t, const std::vector<ChatMessage>& messages,
                                  const std::string& bos, const std::string& eos,
                                  bool add_generation_prompt = true);

/// A model's chat template as shipped: GGUF `tokenizer.chat_template`; for a Hugging
/// Face folder its chat_template.jinja, else tokenizer_config.json's chat_template (a
/// string, or a list of {name, template}: the one named "default", else the first).
/// Empty when the model has none. Errors name a file that cannot be read or parsed, or
/// a malformed entry.
Expected<std::string> read_chat_template(const std::string& model_path);

/// How a model's conversation becomes a prompt (shared by rlx run, rlx serve and Python).
struct ChatFormat {
  std::optional<jinja::Template> jinja;  ///< the model's template, when it parses
  std::optional<ChatTemplate> builtin;   ///< the built-in format the template's markers name (its stop strings)
  std::string bos, eos;                  ///< bos_token / eos_token for the template
  std::string warning;                   ///< non-empty: the template did not parse; `builtin` is used instead
};

/// The format of a (non-empty) template source: the parsed template; one that does not
/// parse falls back to the built-in format its markers name (with `warning` set), and
/// is otherwise its parse error.
Expected<ChatFormat> chat_format_from_template(const std::string& source, const Tokenizer& tokenizer);

}  // namespace rlx::models
