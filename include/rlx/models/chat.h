// Chat prompts: the common chat templates (Llama 3, ChatML, Gemma), recognised from a
// GGUF's `tokenizer.chat_template` by their marker tokens, render a conversation into
// the text a model expects, plus the strings that end an assistant turn.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "rlx/base/status.h"

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

}  // namespace rlx::models
