// Chat formats of loaded models (see chat_format.h).
#include "chat_format.h"

namespace rlx::python {

Expected<ChatFormat> chat_format(const std::string& model_path, const std::string& template_source,
                                 const std::string& builtin_name, const Tokenizer& tok) {
  if (!builtin_name.empty()) {
    ChatFormat f;
    f.builtin = models::parse_chat_template(builtin_name);
    if (!f.builtin)
      return Error::invalid_argument("unknown chat template '{}' (built-in: llama3, chatml, gemma)", builtin_name);
    return f;
  }
  if (template_source.empty())
    return Error::unsupported("{}: the model has no chat template; pass template=\"llama3\", \"chatml\" or \"gemma\"",
                              model_path);
  auto format = models::chat_format_from_template(template_source, tok);
  if (!format) return format.error().with_context(model_path);
  if (!format->warning.empty()) format->warning = model_path + ": " + format->warning;
  return format;
}

Expected<std::vector<int32_t>> chat_prompt(const ChatFormat& f, const std::vector<models::ChatMessage>& messages,
                                           const Tokenizer& tok) {
  // The model's template places BOS itself (the text is then tokenized without special
  // tokens, as transformers does); the built-in formats leave BOS to the tokenizer.
  ASSIGN_OR_RETURN(std::string text, f.jinja ? models::render_chat(*f.jinja, messages, f.bos, f.eos)
                                             : models::render_chat(*f.builtin, messages));
  return tok.encode(text, /*add_special=*/!f.jinja, /*parse_special=*/true);
}

}  // namespace rlx::python
