// Request parsing and response building of the OpenAI API (see rlx/serve/api.h).
#include "rlx/serve/api.h"

#include <bit>
#include <cmath>
#include <limits>

namespace rlx::serve {
namespace {

using Json = nlohmann::ordered_json;

/// Deepest bracket nesting a body may have: nlohmann's parser recurses per level, so a
/// body of a million '[' must be refused before it is parsed.
constexpr int kMaxJsonDepth = 64;

std::string dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

// The bracket depth of `text` outside strings, or -1 past `limit` (scanned without
// recursion; the text need not be valid JSON).
int json_depth(std::string_view text, int limit) {
  int depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') in_string = true;
    else if (c == '[' || c == '{') {
      if (++depth > limit) return -1;
      deepest = std::max(deepest, depth);
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return deepest;
}

const char* type_name(const Json& j) {
  switch (j.type()) {
    case Json::value_t::null: return "null";
    case Json::value_t::boolean: return "a boolean";
    case Json::value_t::string: return "a string";
    case Json::value_t::array: return "an array";
    case Json::value_t::object: return "an object";
    case Json::value_t::discarded: return "nothing";
    default: return "a number";
  }
}

Error wrong_type(const std::string& field, const char* expected, const Json& got) {
  return Error::invalid_argument("'{}' must be {}, not {}", field, expected, type_name(got));
}

// The field's value, or null when absent (null and absent mean the same in the API).
const Json& field(const Json& body, const char* name) {
  static const Json kNull;
  auto it = body.find(name);
  return it == body.end() ? kNull : *it;
}

Expected<std::optional<double>> number_in(const Json& body, const char* name, double lo, double hi) {
  const Json& v = field(body, name);
  if (v.is_null()) return std::optional<double>{};
  if (!v.is_number()) return wrong_type(name, "a number", v);
  const double x = v.get<double>();
  if (!(x >= lo && x <= hi)) return Error::invalid_argument("'{}' must be between {} and {}, got {}", name, lo, hi, x);
  return std::optional<double>{x};
}

Expected<std::optional<int64_t>> integer_in(const Json& body, const char* name, int64_t lo, int64_t hi) {
  const Json& v = field(body, name);
  if (v.is_null()) return std::optional<int64_t>{};
  if (!v.is_number_integer()) return wrong_type(name, "an integer", v);
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(hi))
    return Error::invalid_argument("'{}' must be between {} and {}", name, lo, hi);
  const int64_t x = v.get<int64_t>();
  if (x < lo || x > hi) return Error::invalid_argument("'{}' must be between {} and {}, got {}", name, lo, hi, x);
  return std::optional<int64_t>{x};
}

Expected<std::optional<bool>> boolean(const Json& body, const char* name) {
  const Json& v = field(body, name);
  if (v.is_null()) return std::optional<bool>{};
  if (!v.is_boolean()) return wrong_type(name, "a boolean", v);
  return std::optional<bool>{v.get<bool>()};
}

// A message's content as one string: a string, null, or a list of text parts.
Expected<std::string> flatten_content(const Json& content, size_t index) {
  const std::string where = fmt::format("messages[{}].content", index);
  if (content.is_null()) return std::string{};
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) return wrong_type(where, "a string or a list of content parts", content);
  std::string text;
  for (size_t i = 0; i < content.size(); ++i) {
    const Json& part = content[i];
    const std::string pw = fmt::format("{}[{}]", where, i);
    if (!part.is_object()) return wrong_type(pw, "an object", part);
    const Json& type = field(part, "type");
    if (!type.is_string()) return wrong_type(pw + ".type", "a string", type);
    if (type.get<std::string>() != "text")
      return Error::invalid_argument("'{}.type' is '{}': this server takes text parts only", pw,
                                     type.get<std::string>());
    const Json& t = field(part, "text");
    if (!t.is_string()) return wrong_type(pw + ".text", "a string", t);
    text += t.get<std::string>();
  }
  return text;
}

Status parse_messages(const Json& body, ApiRequest& r) {
  const Json& messages = field(body, "messages");
  if (messages.is_null()) return Error::invalid_argument("'messages' is required");
  if (!messages.is_array()) return wrong_type("messages", "a list", messages);
  if (messages.empty()) return Error::invalid_argument("'messages' must hold at least one message");
  r.messages = Json::array();
  for (size_t i = 0; i < messages.size(); ++i) {
    const Json& m = messages[i];
    if (!m.is_object()) return wrong_type(fmt::format("messages[{}]", i), "an object", m);
    const Json& role = field(m, "role");
    if (!role.is_string()) return wrong_type(fmt::format("messages[{}].role", i), "a string", role);
    Json copy = m;
    ASSIGN_OR_RETURN(copy["content"], flatten_content(field(m, "content"), i));
    r.messages.push_back(std::move(copy));
  }
  const Json& tools = field(body, "tools");
  if (!tools.is_null() && !tools.is_array()) return wrong_type("tools", "a list", tools);
  r.tools = tools;
  const Json& choice = field(body, "tool_choice");
  if (!choice.is_null() && !(choice.is_string() && (choice == "none" || choice == "auto")))
    return Error::invalid_argument("'tool_choice' may be \"none\" or \"auto\" only: this server cannot force a tool");
  return {};
}

Status parse_prompt(const Json& body, ApiRequest& r) {
  const Json& p = field(body, "prompt");
  if (p.is_null()) return Error::invalid_argument("'prompt' is required");
  if (p.is_string()) {
    r.prompt_text = p.get<std::string>();
    return {};
  }
  if (!p.is_array()) return wrong_type("prompt", "a string, a list of token ids or a list of one string", p);
  if (p.empty()) return Error::invalid_argument("'prompt' is an empty list");
  if (p[0].is_string() || p[0].is_array()) {
    if (p.size() != 1) return Error::invalid_argument("'prompt' holds {} prompts; this server takes one", p.size());
    if (p[0].is_string()) {
      r.prompt_text = p[0].get<std::string>();
      return {};
    }
  }
  const Json& ids = p[0].is_array() ? p[0] : p;
  std::vector<int32_t> out;
  for (size_t i = 0; i < ids.size(); ++i) {
    const Json& id = ids[i];
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > std::numeric_limits<int32_t>::max())
      return Error::invalid_argument("'prompt[{}]' must be a token id (a non-negative integer)", i);
    out.push_back(static_cast<int32_t>(id.get<int64_t>()));
  }
  r.prompt_ids = std::move(out);
  return {};
}

Status parse_common(const Json& body, ApiRequest& r) {
  const Json& model = field(body, "model");
  if (model.is_null()) return Error::invalid_argument("'model' is required");
  if (!model.is_string()) return wrong_type("model", "a string", model);
  r.model = model.get<std::string>();

  ASSIGN_OR_RETURN(auto n, integer_in(body, "n", 1, 1'000'000));
  if (n && *n != 1) return Error::invalid_argument("'n' must be 1: this server returns one choice per request");
  ASSIGN_OR_RETURN(auto best_of, integer_in(body, "best_of", 1, 1'000'000));
  if (best_of && *best_of != 1) return Error::invalid_argument("'best_of' must be 1");

  constexpr int64_t kMaxTokens = int64_t{1} << 24;
  ASSIGN_OR_RETURN(auto max_tokens, integer_in(body, "max_tokens", 1, kMaxTokens));
  ASSIGN_OR_RETURN(auto max_completion, integer_in(body, "max_completion_tokens", 1, kMaxTokens));
  r.max_tokens = max_completion ? max_completion : max_tokens;

  r.sampling.temperature = 1.0f;  // OpenAI's default
  r.sampling.penalty_last_n = 0;  // penalties look at every generated token
  ASSIGN_OR_RETURN(auto temperature, number_in(body, "temperature", 0.0, 2.0));
  if (temperature) r.sampling.temperature = static_cast<float>(*temperature);
  ASSIGN_OR_RETURN(auto top_p, number_in(body, "top_p", 0.0, 1.0));
  if (top_p) {
    if (*top_p <= 0.0) return Error::invalid_argument("'top_p' must be above 0");
    r.sampling.top_p = static_cast<float>(*top_p);
  }
  ASSIGN_OR_RETURN(auto frequency, number_in(body, "frequency_penalty", -2.0, 2.0));
  if (frequency) r.sampling.frequency_penalty = static_cast<float>(*frequency);
  ASSIGN_OR_RETURN(auto presence, number_in(body, "presence_penalty", -2.0, 2.0));
  if (presence) r.sampling.presence_penalty = static_cast<float>(*presence);
  ASSIGN_OR_RETURN(auto seed, integer_in(body, "seed", std::numeric_limits<int64_t>::min(),
                                         std::numeric_limits<int64_t>::max()));
  if (seed) {
    r.sampling.seed = static_cast<uint64_t>(*seed);
    r.seed_given = true;
  }

  const Json& stop = field(body, "stop");
  if (stop.is_string()) {
    r.stop.push_back(stop.get<std::string>());
  } else if (stop.is_array()) {
    if (stop.size() > kMaxStopStrings)
      return Error::invalid_argument("'stop' holds {} strings; at most {}", stop.size(), kMaxStopStrings);
    for (size_t i = 0; i < stop.size(); ++i) {
      if (!stop[i].is_string()) return wrong_type(fmt::format("stop[{}]", i), "a string", stop[i]);
      r.stop.push_back(stop[i].get<std::string>());
    }
  } else if (!stop.is_null()) {
    return wrong_type("stop", "a string or a list of strings", stop);
  }

  ASSIGN_OR_RETURN(auto stream, boolean(body, "stream"));
  r.stream = stream.value_or(false);
  const Json& so = field(body, "stream_options");
  if (!so.is_null()) {
    if (!so.is_object()) return wrong_type("stream_options", "an object", so);
    ASSIGN_OR_RETURN(auto usage, boolean(so, "include_usage"));
    r.include_usage = usage.value_or(false);
  }

  const Json& bias = field(body, "logit_bias");
  if (!bias.is_null() && !(bias.is_object() && bias.empty()))
    return Error::invalid_argument("'logit_bias' is not supported by this server");
  const Json& format = field(body, "response_format");
  if (!format.is_null()) {
    if (!format.is_object()) return wrong_type("response_format", "an object", format);
    if (field(format, "type") != "text")
      return Error::invalid_argument("'response_format' may be {{\"type\": \"text\"}} only");
  }
  return {};
}

Json usage_json(int64_t prompt, int64_t completion, int64_t cached) {
  return Json{{"prompt_tokens", prompt},
              {"completion_tokens", completion},
              {"total_tokens", prompt + completion},
              {"prompt_tokens_details", {{"cached_tokens", cached}}}};
}

Json bytes_of(const std::string& piece) {
  Json b = Json::array();
  for (unsigned char c : piece) b.push_back(static_cast<int>(c));
  return b;
}

// Chat logprobs: {"content": [{"token", "logprob", "bytes", "top_logprobs": [...]}]}.
Json chat_logprobs(const std::vector<StepLogprobs>& steps, const Tokenizer& tok) {
  Json content = Json::array();
  for (const StepLogprobs& s : steps) {
    auto entry = [&](const TokenLogprob& t) {
      const std::string piece = tok.token_to_piece(t.token);
      return Json{{"token", piece}, {"logprob", t.logprob}, {"bytes", bytes_of(piece)}};
    };
    Json e = entry(s.chosen);
    Json top = Json::array();
    for (const TokenLogprob& t : s.top) top.push_back(entry(t));
    e["top_logprobs"] = std::move(top);
    content.push_back(std::move(e));
  }
  return Json{{"content", std::move(content)}};
}

// Completion logprobs: parallel lists, top_logprobs as {piece: logprob} per token.
Json completion_logprobs(const std::vector<StepLogprobs>& steps, const Tokenizer& tok, int64_t text_offset) {
  Json tokens = Json::array(), lps = Json::array(), tops = Json::array(), offsets = Json::array();
  for (const StepLogprobs& s : steps) {
    const std::string piece = tok.token_to_piece(s.chosen.token);
    tokens.push_back(piece);
    lps.push_back(s.chosen.logprob);
    Json top = Json::object();
    for (const TokenLogprob& t : s.top) top[tok.token_to_piece(t.token)] = t.logprob;
    tops.push_back(std::move(top));
    offsets.push_back(text_offset);
    text_offset += static_cast<int64_t>(piece.size());
  }
  return Json{{"tokens", tokens}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offsets}};
}

Json logprobs_json(Endpoint endpoint, const std::vector<StepLogprobs>& steps, const ApiRequest& req,
                   const Tokenizer& tok) {
  if (req.top_logprobs < 0) return nullptr;
  return endpoint == Endpoint::kChat ? chat_logprobs(steps, tok) : completion_logprobs(steps, tok, 0);
}

Json finish_json(FinishReason f) {
  if (f == FinishReason::kNone) return nullptr;
  return finish_reason_name(f);
}

// A JSON token id: a non-negative integer that fits int32.
Expected<int32_t> token_id(const Json& v, const std::string& where) {
  if (!v.is_number_integer() || (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t{INT32_MAX}) ||
      v.get<int64_t>() < 0 || v.get<int64_t>() > std::numeric_limits<int32_t>::max())
    return Error::invalid_argument("'{}' must be a token id (a non-negative integer)", where);
  return static_cast<int32_t>(v.get<int64_t>());
}

Expected<std::vector<int32_t>> token_list(const Json& list, const std::string& where) {
  if (list.empty()) return Error::invalid_argument("'{}' is an empty list of tokens", where);
  std::vector<int32_t> ids;
  ids.reserve(list.size());
  for (size_t i = 0; i < list.size(); ++i) {
    ASSIGN_OR_RETURN(int32_t id, token_id(list[i], fmt::format("{}[{}]", where, i)));
    ids.push_back(id);
  }
  return ids;
}

// /v1/embeddings' input: a string, a list of strings, a list of token ids (one input)
// or a list of token-id lists.
Status parse_embedding_input(const Json& input, EmbeddingsRequest& r) {
  if (input.is_null()) return Error::invalid_argument("'input' is required");
  if (input.is_string()) {
    if (input.get_ref<const std::string&>().empty())
      return Error::invalid_argument("'input' must not be an empty string");
    r.texts.push_back(input.get<std::string>());
    return {};
  }
  if (!input.is_array())
    return wrong_type("input", "a string, a list of strings, a list of token ids or a list of token-id lists", input);
  if (input.empty()) return Error::invalid_argument("'input' is an empty list");
  if (input.size() > kMaxEmbeddingInputs)
    return Error::invalid_argument("'input' holds {} inputs; at most {}", input.size(), kMaxEmbeddingInputs);
  if (input[0].is_number()) {  // one input of token ids
    ASSIGN_OR_RETURN(std::vector<int32_t> ids, token_list(input, "input"));
    r.token_inputs.push_back(std::move(ids));
    return {};
  }
  if (!input[0].is_string() && !input[0].is_array())
    return wrong_type("input[0]", "a string, a token id or a list of token ids", input[0]);
  const bool texts = input[0].is_string();
  for (size_t i = 0; i < input.size(); ++i) {
    const Json& item = input[i];
    const std::string where = fmt::format("input[{}]", i);
    if (texts) {
      if (!item.is_string()) return wrong_type(where, "a string (like input[0])", item);
      if (item.get_ref<const std::string&>().empty())
        return Error::invalid_argument("'{}' must not be an empty string", where);
      r.texts.push_back(item.get<std::string>());
    } else {
      if (!item.is_array()) return wrong_type(where, "a list of token ids (like input[0])", item);
      ASSIGN_OR_RETURN(std::vector<int32_t> ids, token_list(item, where));
      r.token_inputs.push_back(std::move(ids));
    }
  }
  return {};
}

// The body as a JSON object (depth checked before parsing).
Expected<Json> parse_body(std::string_view body) {
  if (json_depth(body, kMaxJsonDepth) < 0)
    return Error::parse("the request body nests deeper than {} levels", kMaxJsonDepth);
  Json j = Json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Error::parse("the request body is not valid JSON");
  if (!j.is_object()) return Error::invalid_argument("the request body must be a JSON object, not {}", type_name(j));
  return j;
}

}  // namespace

Expected<ApiRequest> parse_request(std::string_view body, Endpoint endpoint) {
  ASSIGN_OR_RETURN(Json j, parse_body(body));
  ApiRequest r;
  r.endpoint = endpoint;
  TRY(parse_common(j, r));
  if (endpoint == Endpoint::kChat) {
    TRY(parse_messages(j, r));
    ASSIGN_OR_RETURN(auto logprobs, boolean(j, "logprobs"));
    ASSIGN_OR_RETURN(auto top, integer_in(j, "top_logprobs", 0, kMaxTopLogprobs));
    if (top && !logprobs.value_or(false)) return Error::invalid_argument("'top_logprobs' needs 'logprobs': true");
    if (logprobs.value_or(false)) r.top_logprobs = static_cast<int32_t>(top.value_or(0));
  } else {
    TRY(parse_prompt(j, r));
    ASSIGN_OR_RETURN(auto logprobs, integer_in(j, "logprobs", 0, 5));
    if (logprobs) r.top_logprobs = static_cast<int32_t>(*logprobs);
    ASSIGN_OR_RETURN(auto echo, boolean(j, "echo"));
    if (echo.value_or(false)) return Error::invalid_argument("'echo' is not supported by this server");
    const Json& suffix = field(j, "suffix");
    if (!suffix.is_null()) return Error::invalid_argument("'suffix' is not supported by this server");
  }
  return r;
}

Expected<ChatFormatter> ChatFormatter::create(const std::string& template_source, const Tokenizer& tokenizer,
                                              std::string* note) {
  ChatFormatter f;
  const SpecialTokenIds& ids = tokenizer.special_ids();
  if (ids.bos >= 0) f.bos_ = std::string(tokenizer.token_text(ids.bos));
  if (ids.eos >= 0) f.eos_ = std::string(tokenizer.token_text(ids.eos));
  if (template_source.empty()) {
    *note = "the model has no chat template (tokenizer.chat_template); chat uses ChatML";
    return f;
  }
  ASSIGN_OR_RETURN(models::ChatFormat format, models::chat_format_from_template(template_source, tokenizer));
  if (format.jinja) {
    f.jinja_ = std::move(format.jinja);
    *note = "chat uses the model's own template (tokenizer.chat_template)";
    return f;
  }
  f.builtin_ = *format.builtin;
  *note = "chat: " + format.warning;
  return f;
}

Expected<std::vector<int32_t>> ChatFormatter::prompt_tokens(const nlohmann::ordered_json& messages,
                                                            const nlohmann::ordered_json& tools,
                                                            const Tokenizer& tokenizer) const {
  if (jinja_) {
    jinja::ChatInputs in;
    ASSIGN_OR_RETURN(in.messages, jinja::Value::from_json(messages));
    if (!tools.is_null()) {
      ASSIGN_OR_RETURN(in.tools, jinja::Value::from_json(tools));
    }
    in.bos_token = bos_;
    in.eos_token = eos_;
    ASSIGN_OR_RETURN(std::string text, jinja::render_chat(*jinja_, in));
    // The template places BOS itself, as transformers' apply_chat_template does.
    return tokenizer.encode(text, /*add_special=*/false, /*parse_special=*/true);
  }
  std::vector<models::ChatMessage> list;
  for (const Json& m : messages) list.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
  ASSIGN_OR_RETURN(std::string text, models::render_chat(builtin_, list));
  return tokenizer.encode(text, /*add_special=*/true, /*parse_special=*/true);
}

std::vector<std::string> ChatFormatter::stop_strings() const {
  if (jinja_) return {};
  return models::chat_stop_strings(builtin_);
}

std::string error_body(std::string_view message, std::string_view type, std::string_view code) {
  Json e{{"message", message}, {"type", type}, {"param", nullptr}, {"code", nullptr}};
  if (!code.empty()) e["code"] = code;
  return dump(Json{{"error", std::move(e)}});
}

std::string completion_body(Endpoint endpoint, const ResponseMeta& meta, const Completion& c, const ApiRequest& req,
                            const Tokenizer& tokenizer) {
  Json choice{{"index", 0}};
  if (endpoint == Endpoint::kChat)
    choice["message"] = Json{{"role", "assistant"}, {"content", c.text}};
  else
    choice["text"] = c.text;
  choice["logprobs"] = logprobs_json(endpoint, c.logprobs, req, tokenizer);
  choice["finish_reason"] = finish_json(c.finish);
  Json body{{"id", meta.id},
            {"object", endpoint == Endpoint::kChat ? "chat.completion" : "text_completion"},
            {"created", meta.created},
            {"model", meta.model},
            {"choices", Json::array({std::move(choice)})},
            {"usage", usage_json(c.prompt_tokens, static_cast<int64_t>(c.tokens.size()), c.cached_tokens)}};
  return dump(body);
}

std::string stream_chunk(Endpoint endpoint, const ResponseMeta& meta, const GenerationEvent& event, bool first,
                         const ApiRequest& req, const Tokenizer& tokenizer) {
  Json choice{{"index", 0}};
  if (endpoint == Endpoint::kChat) {
    Json delta = Json::object();
    if (first) delta["role"] = "assistant";
    if (first || !event.text.empty()) delta["content"] = event.text;
    choice["delta"] = std::move(delta);
  } else {
    choice["text"] = event.text;
  }
  choice["logprobs"] = event.logprobs.empty() ? Json(nullptr) : logprobs_json(endpoint, event.logprobs, req, tokenizer);
  choice["finish_reason"] = finish_json(event.finish);
  Json chunk{{"id", meta.id},
             {"object", endpoint == Endpoint::kChat ? "chat.completion.chunk" : "text_completion"},
             {"created", meta.created},
             {"model", meta.model},
             {"choices", Json::array({std::move(choice)})}};
  return "data: " + dump(chunk) + "\n\n";
}

std::string stream_usage_chunk(Endpoint endpoint, const ResponseMeta& meta, int64_t prompt_tokens,
                               int64_t completion_tokens, int64_t cached_tokens) {
  Json chunk{{"id", meta.id},
             {"object", endpoint == Endpoint::kChat ? "chat.completion.chunk" : "text_completion"},
             {"created", meta.created},
             {"model", meta.model},
             {"choices", Json::array()},
             {"usage", usage_json(prompt_tokens, completion_tokens, cached_tokens)}};
  return "data: " + dump(chunk) + "\n\n";
}

std::string models_body(const std::string& model, int64_t created) {
  Json m{{"id", model}, {"object", "model"}, {"created", created}, {"owned_by", "rlx"}};
  return dump(Json{{"object", "list"}, {"data", Json::array({std::move(m)})}});
}

Expected<EmbeddingsRequest> parse_embeddings_request(std::string_view body) {
  ASSIGN_OR_RETURN(Json j, parse_body(body));
  EmbeddingsRequest r;
  const Json& model = field(j, "model");
  if (model.is_null()) return Error::invalid_argument("'model' is required");
  if (!model.is_string()) return wrong_type("model", "a string", model);
  r.model = model.get<std::string>();
  TRY(parse_embedding_input(field(j, "input"), r));
  const Json& format = field(j, "encoding_format");
  if (!format.is_null()) {
    if (!format.is_string()) return wrong_type("encoding_format", "a string", format);
    if (format != "float" && format != "base64")
      return Error::invalid_argument("'encoding_format' must be \"float\" or \"base64\", not '{}'",
                                     format.get<std::string>());
    r.base64 = format == "base64";
  }
  ASSIGN_OR_RETURN(auto dimensions, integer_in(j, "dimensions", 1, std::numeric_limits<int32_t>::max()));
  r.dimensions = dimensions.value_or(0);
  const Json& user = field(j, "user");
  if (!user.is_null() && !user.is_string()) return wrong_type("user", "a string", user);
  return r;
}

std::string base64_encode(std::span<const uint8_t> bytes) {
  static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    const uint32_t v = (uint32_t{bytes[i]} << 16) | (uint32_t{bytes[i + 1]} << 8) | bytes[i + 2];
    for (int shift : {18, 12, 6, 0}) out.push_back(kAlphabet[(v >> shift) & 63]);
  }
  if (const size_t rest = bytes.size() - i; rest > 0) {
    const uint32_t v = (uint32_t{bytes[i]} << 16) | (rest == 2 ? uint32_t{bytes[i + 1]} << 8 : 0);
    out.push_back(kAlphabet[(v >> 18) & 63]);
    out.push_back(kAlphabet[(v >> 12) & 63]);
    out.push_back(rest == 2 ? kAlphabet[(v >> 6) & 63] : '=');
    out.push_back('=');
  }
  return out;
}

std::string embeddings_body(const std::string& model, const std::vector<std::vector<float>>& embeddings, bool base64,
                            int64_t prompt_tokens) {
  Json data = Json::array();
  std::vector<uint8_t> bytes;
  for (size_t i = 0; i < embeddings.size(); ++i) {
    Json e{{"object", "embedding"}, {"index", i}};
    if (base64) {  // float32, little-endian whatever the host's order
      bytes.clear();
      for (float x : embeddings[i]) {
        const auto u = std::bit_cast<uint32_t>(x);
        for (int b = 0; b < 4; ++b) bytes.push_back(static_cast<uint8_t>(u >> (8 * b)));
      }
      e["embedding"] = base64_encode(bytes);
    } else {
      e["embedding"] = embeddings[i];
    }
    data.push_back(std::move(e));
  }
  return dump(Json{{"object", "list"},
                   {"data", std::move(data)},
                   {"model", model},
                   {"usage", {{"prompt_tokens", prompt_tokens}, {"total_tokens", prompt_tokens}}}});
}

}  // namespace rlx::serve
