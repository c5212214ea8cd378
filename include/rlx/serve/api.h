// The OpenAI API of `rlx serve` as plain functions, without HTTP: request bodies of
// /v1/chat/completions and /v1/completions parsed and checked into ApiRequest, and of
// /v1/embeddings into EmbeddingsRequest (errors name the field), chat messages rendered
// with the model's template into prompt tokens, and the response bodies (whole
// responses, server-sent-event chunks, embeddings, errors) built as the official
// clients expect them.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "rlx/base/status.h"
#include "rlx/models/chat.h"
#include "rlx/models/jinja.h"
#include "rlx/models/tokenizer.h"
#include "rlx/serve/scheduler.h"

namespace rlx::serve {

enum class Endpoint : uint8_t { kChat, kCompletion };

/// Most stop strings a request may give (OpenAI's limit).
inline constexpr size_t kMaxStopStrings = 4;

/// A checked request body.
struct ApiRequest {
  Endpoint endpoint = Endpoint::kChat;
  std::string model;                 ///< as given ("model" is required)
  nlohmann::ordered_json messages;   ///< chat: the list, each content flattened to a string
  nlohmann::ordered_json tools;      ///< chat: the tool list, or null
  std::optional<std::string> prompt_text;      ///< completion: text ...
  std::optional<std::vector<int32_t>> prompt_ids;  ///< ... or token ids
  std::optional<int64_t> max_tokens;  ///< unset: until the context is full
  models::SamplingOptions sampling;   ///< temperature (default 1), top_p, penalties, seed
  bool seed_given = false;
  std::vector<std::string> stop;
  bool stream = false;
  bool include_usage = false;  ///< stream_options.include_usage
  int32_t top_logprobs = -1;   ///< -1: no logprobs
};

/// Parses and checks a request body. Errors (kParse for malformed JSON, else
/// kInvalidArgument) name the offending field: wrong type, out of range, missing, or a
/// feature this server does not offer (n != 1, logit_bias, tool choice forcing...).
Expected<ApiRequest> parse_request(std::string_view body, Endpoint endpoint);

/// How chat messages become a prompt: the model's own Jinja template (GGUF
/// `tokenizer.chat_template`), else a built-in format.
class ChatFormatter {
 public:
  /// From the model file's template source (may be empty). A template that does not
  /// parse falls back to the built-in format its markers point to; with no template
  /// at all, ChatML. `note` receives a line saying which format is used.
  static Expected<ChatFormatter> create(const std::string& template_source, const Tokenizer& tokenizer,
                                        std::string* note);
  /// Renders `messages` (and `tools`, null for none) with the generation prompt and
  /// tokenizes the text. Errors: the template's raise_exception message, a render error,
  /// or a role the built-in format does not know.
  Expected<std::vector<int32_t>> prompt_tokens(const nlohmann::ordered_json& messages,
                                               const nlohmann::ordered_json& tools, const Tokenizer& tokenizer) const;
  /// Stop strings that end an assistant turn in the built-in format (none for Jinja:
  /// the template's end-of-turn token is an end-of-generation token).
  std::vector<std::string> stop_strings() const;
  bool uses_model_template() const { return jinja_.has_value(); }

 private:
  std::optional<jinja::Template> jinja_;
  models::ChatTemplate builtin_ = models::ChatTemplate::ChatML;
  std::string bos_, eos_;
};

/// What a finished (non-streamed) request produced.
struct Completion {
  std::string text;
  std::vector<int32_t> tokens;
  std::vector<StepLogprobs> logprobs;
  FinishReason finish = FinishReason::kNone;
  int64_t prompt_tokens = 0;
  int64_t cached_tokens = 0;
};

/// Identity of one response: its id ("chatcmpl-..." / "cmpl-..."), creation time and model.
struct ResponseMeta {
  std::string id;
  int64_t created = 0;
  std::string model;
};

/// {"error": {"message", "type", "param": null, "code"}}; code may be empty (null).
std::string error_body(std::string_view message, std::string_view type, std::string_view code = {});

/// The whole response of a non-streamed request.
std::string completion_body(Endpoint endpoint, const ResponseMeta& meta, const Completion& c, const ApiRequest& req,
                            const Tokenizer& tokenizer);

/// One server-sent event ("data: {...}\n\n") of a streamed response carrying `event`'s
/// text (and logprobs); the first chat chunk also carries the assistant role. The final
/// event's chunk carries its finish_reason.
std::string stream_chunk(Endpoint endpoint, const ResponseMeta& meta, const GenerationEvent& event, bool first,
                         const ApiRequest& req, const Tokenizer& tokenizer);
/// The usage chunk of stream_options.include_usage (choices empty).
std::string stream_usage_chunk(Endpoint endpoint, const ResponseMeta& meta, int64_t prompt_tokens,
                               int64_t completion_tokens, int64_t cached_tokens);

/// GET /v1/models: one model.
std::string models_body(const std::string& model, int64_t created);

/// Most inputs one /v1/embeddings request may hold (OpenAI's limit).
inline constexpr size_t kMaxEmbeddingInputs = 2048;

/// A checked /v1/embeddings body. `input` is a string, a list of strings, a list of token
/// ids (one input) or a list of token-id lists; exactly one of texts / token_inputs is
/// filled, with 1..kMaxEmbeddingInputs inputs, none empty.
struct EmbeddingsRequest {
  std::string model;
  std::vector<std::string> texts;
  std::vector<std::vector<int32_t>> token_inputs;  ///< ids of the model's vocabulary, used as given
  bool base64 = false;                             ///< encoding_format "base64" (default "float")
  int64_t dimensions = 0;                          ///< 0: not given (the model's width)
};

/// Parses and checks a /v1/embeddings body; errors (kParse for malformed JSON, else
/// kInvalidArgument) name the field: a missing or empty input, an empty string, a list
/// mixing kinds, a token id that is not a non-negative int32, an unknown encoding_format,
/// dimensions below 1. (Token ranges, lengths and the width are the Embedder's to check.)
Expected<EmbeddingsRequest> parse_embeddings_request(std::string_view body);

/// The /v1/embeddings response: {"object": "list", "data": [{"object": "embedding",
/// "index": i, "embedding": [...]}], "model", "usage": {"prompt_tokens", "total_tokens"}}.
/// With `base64` each embedding is the base64 of its float32 little-endian bytes.
std::string embeddings_body(const std::string& model, const std::vector<std::vector<float>>& embeddings, bool base64,
                            int64_t prompt_tokens);

/// RFC 4648 base64 (standard alphabet, '=' padding).
std::string base64_encode(std::span<const uint8_t> bytes);

}  // namespace rlx::serve
