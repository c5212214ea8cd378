// Chat template rendering: a model's own Jinja template (through src/models/jinja), or
// the built-in Llama 3, ChatML and Gemma formats.
#include "rlx/models/chat.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "rlx/base/json_limits.h"
#include "rlx/formats/gguf.h"

namespace rlx::models {

std::optional<ChatTemplate> detect_chat_template(const std::string& jinja) {
  if (jinja.find("<|start_header_id|>") != std::string::npos) return ChatTemplate::Llama3;
  if (jinja.find("<|im_start|>") != std::string::npos) return ChatTemplate::ChatML;
  if (jinja.find("<start_of_turn>") != std::string::npos) return ChatTemplate::Gemma;
  return std::nullopt;
}

std::optional<ChatTemplate> parse_chat_template(const std::string& name) {
  if (name == "llama3") return ChatTemplate::Llama3;
  if (name == "chatml") return ChatTemplate::ChatML;
  if (name == "gemma") return ChatTemplate::Gemma;
  return std::nullopt;
}

Expected<std::string> render_chat(ChatTemplate t, const std::vector<ChatMessage>& messages) {
  std::string out;
  std::string pending_system;  // Gemma has no system role: it prefixes the first user turn
  for (const ChatMessage& m : messages) {
    if (m.role != "system" && m.role != "user" && m.role != "assistant")
      return Error::invalid_argument("chat: unknown role '{}' (system, user, assistant)", m.role);
    switch (t) {
      case ChatTemplate::Llama3:
        out += "<|start_header_id|>" + m.role + "<|end_header_id|>\n\n" + m.content + "<|eot_id|>";
        break;
      case ChatTemplate::ChatML:
        out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
        break;
      case ChatTemplate::Gemma:
        if (m.role == "system") {
          pending_system += m.content + "\n\n";
          break;
        }
        out += "<start_of_turn>" + std::string(m.role == "assistant" ? "model" : "user") + "\n" +
               (m.role == "user" ? pending_system : std::string()) + m.content + "<end_of_turn>\n";
        if (m.role == "user") pending_system.clear();
        break;
    }
  }
  switch (t) {
    case ChatTemplate::Llama3: out += "<|start_header_id|>assistant<|end_header_id|>\n\n"; break;
    case ChatTemplate::ChatML: out += "<|im_start|>assistant\n"; break;
    case ChatTemplate::Gemma: out += "<start_of_turn>model\n"; break;
  }
  return out;
}

Expected<std::string> render_chat(const jinja::Template& t, const std::vector<ChatMessage>& messages,
                                  const std::string& bos, const std::string& eos, bool add_generation_prompt) {
  std::vector<jinja::Value> list;
  list.reserve(messages.size());
  for (const ChatMessage& m : messages) {
    ASSIGN_OR_RETURN(jinja::Value v, jinja::Value::dict({{"role", jinja::Value(m.role)}, {"content", jinja::Value(m.content)}}));
    list.push_back(std::move(v));
  }
  jinja::ChatInputs in;
  ASSIGN_OR_RETURN(in.messages, jinja::Value::list(std::move(list)));
  in.bos_token = bos;
  in.eos_token = eos;
  in.add_generation_prompt = add_generation_prompt;
  return jinja::render_chat(t, in);
}

std::vector<std::string> chat_stop_strings(ChatTemplate t) {
  switch (t) {
    case ChatTemplate::Llama3: return {"<|eot_id|>", "<|end_of_text|>"};
    case ChatTemplate::ChatML: return {"<|im_end|>", "<|endoftext|>"};
    case ChatTemplate::Gemma: return {"<end_of_turn>", "<eos>"};
  }
  return {};
}

Expected<std::string> read_chat_template(const std::string& model_path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(model_path, ec)) {
    ASSIGN_OR_RETURN(formats::GgufFile file, formats::GgufFile::open(model_path));
    if (auto src = file.get_string("tokenizer.chat_template")) return std::string(*src);
    return std::string();
  }
  auto read = [](const fs::path& p) -> Expected<std::string> {
    std::ifstream in(p, std::ios::binary);
    if (!in) return Error::io("cannot read '{}'", p.string());
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  };
  const fs::path dir(model_path);
  if (fs::is_regular_file(dir / "chat_template.jinja", ec)) return read(dir / "chat_template.jinja");
  const fs::path p = dir / "tokenizer_config.json";
  if (!fs::is_regular_file(p, ec)) return std::string();
  ASSIGN_OR_RETURN(const std::string text, read(p));
  TRY(check_json_depth(text, p.string()));
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Error::parse("'{}' is not a JSON object", p.string());
  const auto it = j.find("chat_template");
  if (it == j.end() || it->is_null()) return std::string();
  if (it->is_string()) return it->get<std::string>();
  if (!it->is_array()) return Error::parse("'{}': chat_template is neither a string nor a list", p.string());
  const nlohmann::json* chosen = nullptr;
  for (const nlohmann::json& e : *it) {
    if (!e.is_object() || !e.contains("template") || !e["template"].is_string())
      return Error::parse("'{}': chat_template list entries need a string \"template\"", p.string());
    if (chosen == nullptr || (e.contains("name") && e["name"] == "default")) chosen = &e;
  }
  return chosen != nullptr ? (*chosen)["template"].get<std::string>() : std::string();
}

Expected<ChatFormat> chat_format_from_template(const std::string& source, const Tokenizer& tokenizer) {
  ChatFormat f;
  f.builtin = detect_chat_template(source);
  Expected<jinja::Template> t = jinja::parse(source);
  if (!t) {
    if (!f.builtin) return t.error().with_context("chat template");
    f.warning = fmt::format("the model's chat template does not parse ({}); using the built-in format it names",
                            t.error().message());
    return f;
  }
  f.jinja = std::move(*t);
  const SpecialTokenIds& ids = tokenizer.special_ids();
  if (ids.bos >= 0) f.bos = std::string(tokenizer.token_text(ids.bos));
  if (ids.eos >= 0) f.eos = std::string(tokenizer.token_text(ids.eos));
  return f;
}

}  // namespace rlx::models
