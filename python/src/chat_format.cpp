// Chat formats of loaded models (see chat_format.h).
#include "chat_format.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "rlx/formats/gguf.h"

namespace rlx::python {

Expected<std::string> read_chat_template(const std::string& model_path, bool hf_folder) {
  if (!hf_folder) {
    ASSIGN_OR_RETURN(formats::GgufFile file, formats::GgufFile::open(model_path));
    if (auto src = file.get_string("tokenizer.chat_template")) return std::string(*src);
    return std::string();
  }
  const std::filesystem::path p = std::filesystem::path(model_path) / "tokenizer_config.json";
  std::error_code ec;
  if (!std::filesystem::is_regular_file(p, ec)) return std::string();
  std::ifstream in(p, std::ios::binary);
  if (!in) return Error::io("cannot read '{}'", p.string());
  std::stringstream text;
  text << in.rdbuf();
  const nlohmann::json j = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Error::parse("'{}' is not a JSON object", p.string());
  const auto it = j.find("chat_template");
  if (it == j.end() || it->is_null()) return std::string();
  if (it->is_string()) return it->get<std::string>();
  if (it->is_array()) {
    const nlohmann::json* chosen = nullptr;
    for (const nlohmann::json& e : *it) {
      if (!e.is_object() || !e.contains("template") || !e["template"].is_string())
        return Error::parse("'{}': chat_template list entries need a string \"template\"", p.string());
      if (chosen == nullptr || (e.contains("name") && e["name"] == "default")) chosen = &e;
    }
    if (chosen != nullptr) return (*chosen)["template"].get<std::string>();
    return std::string();
  }
  return Error::parse("'{}': chat_template is neither a string nor a list", p.string());
}

Expected<ChatFormat> chat_format(const std::string& model_path, const std::string& template_source,
                                 const std::string& builtin_name, const Tokenizer& tok) {
  ChatFormat f;
  if (!builtin_name.empty()) {
    f.builtin = models::parse_chat_template(builtin_name);
    if (!f.builtin)
      return Error::invalid_argument("unknown chat template '{}' (built-in: llama3, chatml, gemma)", builtin_name);
    return f;
  }
  if (template_source.empty())
    return Error::unsupported("{}: the model has no chat template; pass template=\"llama3\", \"chatml\" or \"gemma\"",
                              model_path);
  f.builtin = models::detect_chat_template(template_source);  // for its stop strings
  Expected<jinja::Template> t = jinja::parse(template_source);
  if (!t) {
    if (!f.builtin) return t.error().with_context(model_path + ": chat template");
    f.warning = model_path + ": the model's chat template does not parse (" + t.error().message() +
                "); using the built-in format it resembles";
    return f;
  }
  f.jinja = std::move(*t);
  const SpecialTokenIds& ids = tok.special_ids();
  if (ids.bos >= 0) f.bos = std::string(tok.token_text(ids.bos));
  if (ids.eos >= 0) f.eos = std::string(tok.token_text(ids.eos));
  return f;
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
