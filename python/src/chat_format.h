// The chat format of a loaded model, for rlx.Model.chat: the model's own Jinja template
// (GGUF tokenizer.chat_template, or a Hugging Face folder's tokenizer_config.json
// chat_template) or a built-in format (llama3, chatml, gemma) named by the caller or
// recognised from a template that does not parse.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "rlx/base/status.h"
#include "rlx/models/chat.h"
#include "rlx/models/jinja.h"
#include "rlx/models/tokenizer.h"

namespace rlx::python {

/// The format of a loaded model (models::ChatFormat, shared with rlx run and rlx serve).
using ChatFormat = models::ChatFormat;

/// The format for `template_source` (the model's template, may be empty) or, when
/// `builtin_name` is not empty, the built-in format it names. Errors: an unknown
/// built-in name; no template at all; a template that neither parses nor is recognised.
Expected<ChatFormat> chat_format(const std::string& model_path, const std::string& template_source,
                                 const std::string& builtin_name, const Tokenizer& tok);

/// The conversation as prompt tokens (ending with the opening of the assistant turn).
Expected<std::vector<int32_t>> chat_prompt(const ChatFormat& f, const std::vector<models::ChatMessage>& messages,
                                           const Tokenizer& tok);

}  // namespace rlx::python
