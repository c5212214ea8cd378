// libFuzzer target for what `rlx serve` reads from the network. Arbitrary bytes are what
// a client sends on one connection: cpp-httplib's server parser frames them into requests
// (process_request over an in-memory stream, up to four pipelined requests on the
// keep-alive connection), an API-key check and the OpenAI routes see each one, and the
// POST bodies go through the server's request readers: parse_request (chat,
// completion) and parse_embeddings_request. An accepted chat request's messages and tools
// are rendered by the Jinja chat formatter and tokenized; an accepted completion's prompt
// is tokenized; the response bodies (whole, streamed chunks with logprobs, the usage
// chunk, embeddings, errors) are then built from the request, with the prompt's tokens
// standing in for generated ones (no model runs here).
// Checks: every answer starts with a status line; every body built from a request
// (responses, stream events, errors) is valid JSON; the readers keep their promises.
#include <httplib.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "models/tokenizer/unicode_util.h"
#include "rlx/models/tokenizer.h"
#include "rlx/serve/api.h"

namespace {

using rlx::serve::Endpoint;

constexpr const char* kModel = "tiny";
constexpr const char* kKey = "sk-fuzz";
constexpr size_t kMaxBody = 64 * 1024;  // as a server started with a small --max-body
constexpr int kMaxRequestsPerConnection = 4;

// A template in the shape of those models ship: tools rendered with tojson, tool calls,
// loop controls, a raise on an unknown role.
constexpr const char* kTemplate =
    "{%- if tools %}<|system|>tools: {{ tools | tojson }}\n{% endif -%}"
    "{%- for m in messages %}"
    "{%- if m.role not in ['system', 'user', 'assistant', 'tool'] %}"
    "{{ raise_exception('unknown role ' + m.role) }}{% endif -%}"
    "<|{{ m.role }}|>{{ m.content | trim }}"
    "{%- if m.tool_calls is defined %}{% for c in m.tool_calls %}<call>{{ c | tojson }}</call>{% endfor %}{% endif %}\n"
    "{%- endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}";

// One connection's bytes in, the server's bytes out.
class MemoryStream final : public httplib::Stream {
 public:
  explicit MemoryStream(std::string_view in) : in_(in) {}
  bool is_readable() const override { return pos_ < in_.size(); }
  bool is_writable() const override { return true; }
  ssize_t read(char* ptr, size_t size) override {
    const size_t n = std::min(size, in_.size() - pos_);
    std::copy_n(in_.data() + pos_, n, ptr);
    pos_ += n;
    return static_cast<ssize_t>(n);
  }
  ssize_t write(const char* ptr, size_t size) override {
    out_.append(ptr, size);
    return static_cast<ssize_t>(size);
  }
  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    ip = "127.0.0.1";
    port = 40000;
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    ip = "127.0.0.1";
    port = 8080;
  }
  socket_t socket() const override { return INVALID_SOCKET; }
  bool exhausted() const { return pos_ >= in_.size(); }
  const std::string& output() const { return out_; }

 private:
  std::string_view in_;
  size_t pos_ = 0;
  std::string out_;
};

// httplib's server with its one-connection entry point reachable.
class FuzzServer final : public httplib::Server {
 public:
  using httplib::Server::process_request;
};

// A byte-level BPE vocabulary: every byte is a token, so any text encodes; a control
// token ends generation.
std::unique_ptr<rlx::Tokenizer> make_tokenizer() {
  rlx::VocabSpec s;
  s.model = "gpt2";
  s.pre = "llama-bpe";
  const auto& map = rlx::tok::byte_level_map();
  for (int b = 0; b < 256; ++b) s.tokens.push_back(map.byte_to_utf8[b]);
  s.tokens.insert(s.tokens.end(), {"ab",
                                   "\xC4\xA0"
                                   "a",
                                   "<|endoftext|>"});
  s.merges = {"a b", "\xC4\xA0 a"};
  s.token_types.assign(s.tokens.size(), rlx::TokenType::kNormal);
  s.token_types.back() = rlx::TokenType::kControl;
  auto t = rlx::make_tokenizer(s);
  if (!t) std::abort();  // the built-in vocabulary is valid: a failure is a bug
  return std::move(*t);
}

void require_json(std::string_view body) {
  if (!nlohmann::json::accept(body)) __builtin_trap();
}

// An SSE event "data: {...}\n\n" must carry valid JSON.
void require_event(std::string_view event) {
  constexpr std::string_view kData = "data: ";
  if (event.substr(0, kData.size()) != kData || event.size() < kData.size() + 2 ||
      event.substr(event.size() - 2) != "\n\n")
    __builtin_trap();
  require_json(event.substr(kData.size(), event.size() - kData.size() - 2));
}

struct Fixture {
  std::unique_ptr<rlx::Tokenizer> tok = make_tokenizer();
  rlx::serve::ChatFormatter chat;
  FuzzServer http;

  Fixture() : chat(make_chat(*tok)) {
    http.set_payload_max_length(kMaxBody);
    http.set_pre_routing_handler([](const httplib::Request& req, httplib::Response& res) {
      if (req.path.rfind("/v1/", 0) != 0 || req.get_header_value("Authorization") == std::string("Bearer ") + kKey)
        return httplib::Server::HandlerResponse::Unhandled;
      error(res, 401, "invalid or missing API key");
      return httplib::Server::HandlerResponse::Handled;
    });
    http.Get("/v1/models", [](const httplib::Request&, httplib::Response& res) {
      const std::string body = rlx::serve::models_body(kModel, 1);
      require_json(body);
      res.set_content(body, "application/json");
    });
    http.Post("/v1/chat/completions",
              [this](const httplib::Request& req, httplib::Response& res) { generate(req, res, Endpoint::kChat); });
    http.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
      generate(req, res, Endpoint::kCompletion);
    });
    http.Post("/v1/embeddings", [](const httplib::Request& req, httplib::Response& res) { embeddings(req, res); });
  }

  static rlx::serve::ChatFormatter make_chat(const rlx::Tokenizer& tok) {
    std::string note;
    auto chat = rlx::serve::ChatFormatter::create(kTemplate, tok, &note);
    if (!chat || !chat->uses_model_template()) std::abort();  // the template above parses
    return std::move(*chat);
  }

  static void error(httplib::Response& res, int status, std::string_view message) {
    const std::string body = rlx::serve::error_body(message, "invalid_request_error");
    require_json(body);
    res.status = status;
    res.set_content(body, "application/json");
  }

  void generate(const httplib::Request& http_req, httplib::Response& res, Endpoint endpoint) const {
    auto req = rlx::serve::parse_request(http_req.body, endpoint);
    if (!req) return error(res, 400, req.error().message());
    if (req->model != kModel) return error(res, 404, "unknown model");
    std::vector<int32_t> prompt;
    if (endpoint == Endpoint::kChat) {
      auto tokens = chat.prompt_tokens(req->messages, req->tools, *tok);
      if (!tokens) return error(res, 400, tokens.error().message());
      prompt = std::move(*tokens);
    } else if (req->prompt_ids) {
      prompt = *req->prompt_ids;
      for (int32_t id : prompt)
        if (id >= tok->n_tokens()) return error(res, 400, "token id out of range");
    } else {
      prompt = tok->encode(*req->prompt_text, /*add_special=*/true, /*parse_special=*/false);
    }
    // The prompt's first tokens stand in for generated ones, each with its logprobs.
    rlx::serve::Completion c;
    c.prompt_tokens = static_cast<int64_t>(prompt.size());
    c.finish = prompt.size() > 16 ? rlx::serve::FinishReason::kLength : rlx::serve::FinishReason::kStop;
    std::vector<rlx::serve::GenerationEvent> events;
    for (size_t i = 0; i < std::min<size_t>(prompt.size(), 16); ++i) {
      rlx::serve::GenerationEvent e;
      e.tokens = {prompt[i]};
      e.text = tok->token_to_piece(prompt[i], /*render_special=*/false);
      if (req->top_logprobs >= 0) {
        rlx::serve::StepLogprobs step{{prompt[i], -0.5f * static_cast<float>(i)}, {}};
        for (int32_t k = 0; k < req->top_logprobs; ++k) step.top.push_back({(prompt[i] + k) % tok->n_tokens(), -1.0f});
        e.logprobs.push_back(step);
        c.logprobs.push_back(step);
      }
      c.text += e.text;
      c.tokens.push_back(prompt[i]);
      events.push_back(std::move(e));
    }
    const rlx::serve::ResponseMeta meta{"cmpl-fuzz", 1, kModel};
    if (!req->stream) {
      const std::string body = rlx::serve::completion_body(endpoint, meta, c, *req, *tok);
      require_json(body);
      res.set_content(body, "application/json");
      return;
    }
    if (events.empty()) events.emplace_back();
    events.back().finish = c.finish;
    std::string sse;
    for (size_t i = 0; i < events.size(); ++i) {
      const std::string chunk = rlx::serve::stream_chunk(endpoint, meta, events[i], i == 0, *req, *tok);
      require_event(chunk);
      sse += chunk;
    }
    if (req->include_usage) {
      const std::string usage =
          rlx::serve::stream_usage_chunk(endpoint, meta, c.prompt_tokens, static_cast<int64_t>(c.tokens.size()), 0);
      require_event(usage);
      sse += usage;
    }
    sse += "data: [DONE]\n\n";
    res.set_content(sse, "text/event-stream");
  }

  static void embeddings(const httplib::Request& http_req, httplib::Response& res) {
    auto req = rlx::serve::parse_embeddings_request(http_req.body);
    if (!req) return error(res, 400, req.error().message());
    if (req->model != kModel) return error(res, 404, "unknown model");
    const size_t inputs = req->texts.empty() ? req->token_inputs.size() : req->texts.size();
    if (inputs == 0 || inputs > rlx::serve::kMaxEmbeddingInputs) __builtin_trap();  // the reader's promise
    const size_t width = static_cast<size_t>(std::clamp<int64_t>(req->dimensions == 0 ? 4 : req->dimensions, 1, 8));
    std::vector<std::vector<float>> vectors(inputs, std::vector<float>(width, 0.25f));
    const std::string body = rlx::serve::embeddings_body(kModel, vectors, req->base64, static_cast<int64_t>(inputs));
    require_json(body);
    res.set_content(body, "application/json");
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Fixture fixture;
  MemoryStream stream(std::string_view(reinterpret_cast<const char*>(data), size));
  for (int i = 0; i < kMaxRequestsPerConnection && !stream.exhausted(); ++i) {
    const size_t before = stream.output().size();
    bool closed = false;
    const bool kept = fixture.http.process_request(stream, /*close_connection=*/false, closed, nullptr);
    // Whatever httplib framed (or refused to frame) got an answer with a status line.
    if (stream.output().size() > before && stream.output().compare(before, 9, "HTTP/1.1 ") != 0) __builtin_trap();
    if (!kept || closed) break;
  }
  static const bool show = std::getenv("RLX_FUZZ_SHOW") != nullptr;  // prints the answers (reading seeds)
  if (show) std::fwrite(stream.output().data(), 1, stream.output().size(), stderr);
  return 0;
}
