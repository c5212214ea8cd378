// The HTTP front end of `rlx serve` (see rlx/serve/server.h). Each connection runs on
// one of cpp-httplib's pool threads; a generation handler submits to the Scheduler and
// then waits on its RequestHandle, writing events as they come; an embeddings handler
// tokenizes its inputs, submits them to the Embedder and waits for its EmbeddingJob.
#include "rlx/serve/server.h"

#include <httplib.h>
#include <sys/socket.h>

#include <atomic>
#include <ctime>
#include <optional>
#include <random>

namespace rlx::serve {
namespace {

// Connections the kernel may hold for accept() (capped by net.core.somaxconn).
constexpr int kListenBacklog = 1024;

void send_error(httplib::Response& res, int status, std::string_view message, std::string_view type,
                std::string_view code = {}) {
  res.status = status;
  res.set_content(error_body(message, type, code), "application/json");
}

// Label of a path in the request counter: the known routes, else "other" (so that a
// client cannot grow the metrics without bound).
std::string path_label(const std::string& path) {
  for (const char* known :
       {"/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/models", "/health", "/metrics"})
    if (path == known) return known;
  return "other";
}

// A non-streamed completion as its events come in: the text, tokens and log
// probabilities so far, and how it ended.
struct CompletionState {
  std::shared_ptr<RequestHandle> handle;
  ApiRequest request;
  ResponseMeta meta;
  Completion completion;
  bool done = false;
  FinishReason end = FinishReason::kNone;  // kError / kCancelled: no body but an error
  std::string error;

  void absorb(GenerationEvent& e) {
    completion.text += e.text;
    completion.tokens.insert(completion.tokens.end(), e.tokens.begin(), e.tokens.end());
    for (StepLogprobs& s : e.logprobs) completion.logprobs.push_back(std::move(s));
    if (e.finish == FinishReason::kNone) return;
    done = true;
    end = e.finish;
    error = std::move(e.error);
    completion.finish = e.finish;
    completion.cached_tokens = handle->cached_tokens();
  }
  /// Takes events until the completion is done or `until` passes (waiting at least a
  /// millisecond for one, so that a caller looping on it never spins).
  void wait(std::chrono::steady_clock::time_point until) {
    using namespace std::chrono;
    for (bool first = true; !done; first = false) {
      milliseconds left = ceil<milliseconds>(until - steady_clock::now());
      if (left.count() <= 0) {
        if (!first) return;
        left = milliseconds(1);
      }
      if (std::optional<GenerationEvent> e = handle->next(left)) absorb(*e);
    }
  }
};

// The state a streamed response keeps between calls of its content provider.
struct StreamState {
  std::shared_ptr<RequestHandle> handle;
  ApiRequest request;
  ResponseMeta meta;
  bool first = true;
  int64_t completion_tokens = 0;
};

}  // namespace

struct Server::Impl {
  Scheduler* scheduler = nullptr;     // a language model served, or
  Embedder* embedder = nullptr;       // an encoder served
  const Tokenizer* tokenizer;         // null: an encoder without one (token-id inputs only)
  std::optional<ChatFormatter> chat;  // with the scheduler
  Metrics& metrics;
  ServerOptions options;
  httplib::Server http;
  int64_t created = static_cast<int64_t>(std::time(nullptr));
  std::atomic<uint64_t> next_id{0};
  std::atomic<int> listen_fd{-1};  // the listening socket, seen by the socket-options hook
  std::mutex rng_mu;
  std::mt19937_64 rng{std::random_device{}()};

  Impl(Scheduler& s, const Tokenizer& t, ChatFormatter c, Metrics& m, ServerOptions o)
      : scheduler(&s), tokenizer(&t), chat(std::move(c)), metrics(m), options(std::move(o)) {
    routes();
  }
  Impl(Embedder& e, const Tokenizer* t, Metrics& m, ServerOptions o)
      : embedder(&e), tokenizer(t), metrics(m), options(std::move(o)) {
    routes();
  }

  uint64_t random_seed() {
    std::lock_guard<std::mutex> lock(rng_mu);
    return rng();
  }

  void routes() {
    const size_t threads = static_cast<size_t>(std::max(options.threads, 4));
    http.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
    http.set_payload_max_length(options.max_body_bytes);
    // cpp-httplib 0.11 listens with a backlog of 5: a burst of clients connecting at once
    // overflows it and some see their connection reset. The hook notes the socket so that
    // bind() can raise the backlog (listen() again on a listening socket sets it anew).
    http.set_socket_options([this](socket_t sock) {
      httplib::default_socket_options(sock);
      listen_fd = static_cast<int>(sock);
    });
    // An SSE event is a few small writes, which Nagle's algorithm would hold back for the
    // client's delayed ACK (~40 ms a token).
    http.set_tcp_nodelay(true);
    http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
      if (options.api_key.empty() || req.path.rfind("/v1/", 0) != 0) return httplib::Server::HandlerResponse::Unhandled;
      if (req.get_header_value("Authorization") == "Bearer " + options.api_key)
        return httplib::Server::HandlerResponse::Unhandled;
      send_error(res, 401, "invalid or missing API key (send \"Authorization: Bearer <key>\")",
                 "invalid_request_error", "invalid_api_key");
      return httplib::Server::HandlerResponse::Handled;
    });
    // httplib's own refusals (unknown route, body too large, bad request line) get an
    // OpenAI error body too.
    http.set_error_handler(httplib::Server::HandlerWithResponse([](const httplib::Request& req, httplib::Response& res) {
      if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
      if (res.status == 404)
        send_error(res, 404, fmt::format("no route {} {}", req.method, req.path), "invalid_request_error");
      else if (res.status == 413)
        send_error(res, 413, "the request body is too large", "invalid_request_error");
      else
        send_error(res, res.status, fmt::format("HTTP {}", res.status), "invalid_request_error");
      return httplib::Server::HandlerResponse::Handled;
    }));
    http.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
      send_error(res, 500, "internal error", "server_error");
    });
    http.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
      metrics.count_request(path_label(req.path), res.status);
    });
    http.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
      nlohmann::json j{{"status", "ok"}};
      if (scheduler) {
        const int64_t busy = metrics.slots_busy.load();
        j["slots_idle"] = scheduler->slots() - busy;
        j["slots_busy"] = busy;
      }
      j["queue"] = metrics.queue_length.load();
      res.set_content(j.dump(), "application/json");
    });
    http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(metrics.prometheus(), "text/plain; version=0.0.4");
    });
    http.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(models_body(options.model_name, created), "application/json");
    });
    http.Post("/v1/chat/completions",
              [this](const httplib::Request& req, httplib::Response& res) { generate(req, res, Endpoint::kChat); });
    http.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
      generate(req, res, Endpoint::kCompletion);
    });
    http.Post("/v1/embeddings", [this](const httplib::Request& req, httplib::Response& res) { embeddings(req, res); });
  }

  void generate(const httplib::Request& http_req, httplib::Response& res, Endpoint endpoint) {
    if (!scheduler)
      return send_error(res, 400,
                        fmt::format("the model '{}' is an embedding model (an encoder): it does not generate text; "
                                    "this server answers POST /v1/embeddings",
                                    options.model_name),
                        "invalid_request_error");
    auto req = parse_request(http_req.body, endpoint);
    if (!req) return send_error(res, 400, req.error().message(), "invalid_request_error");
    if (req->model != options.model_name)
      return send_error(res, 404, fmt::format("the model '{}' does not exist (this server serves '{}')", req->model,
                                              options.model_name),
                        "invalid_request_error", "model_not_found");
    GenerationParams p;
    if (endpoint == Endpoint::kChat) {
      auto tokens = chat->prompt_tokens(req->messages, req->tools, *tokenizer);
      if (!tokens) return send_error(res, 400, tokens.error().message(), "invalid_request_error");
      p.prompt = std::move(*tokens);
      p.stop = chat->stop_strings();
    } else if (req->prompt_ids) {
      p.prompt = *req->prompt_ids;
    } else {
      p.prompt = tokenizer->encode(*req->prompt_text, /*add_special=*/true, /*parse_special=*/false);
    }
    p.stop.insert(p.stop.end(), req->stop.begin(), req->stop.end());
    p.sampling = req->sampling;
    if (!req->seed_given) p.sampling.seed = random_seed();
    p.top_logprobs = req->top_logprobs;
    const int64_t room = scheduler->context_length() - static_cast<int64_t>(p.prompt.size());
    p.max_tokens = static_cast<int32_t>(std::clamp<int64_t>(req->max_tokens.value_or(room), 1, std::max<int64_t>(room, 1)));

    SubmitRefusal why = SubmitRefusal::kNone;
    std::string error;
    std::shared_ptr<RequestHandle> handle = scheduler->submit(std::move(p), &why, &error);
    if (!handle) {
      if (why == SubmitRefusal::kQueueFull) return send_error(res, 429, error, "rate_limit_exceeded");
      if (why == SubmitRefusal::kStopping) return send_error(res, 503, error, "server_error");
      return send_error(res, 400, error, "invalid_request_error");
    }
    ResponseMeta meta{fmt::format("{}{:016x}", endpoint == Endpoint::kChat ? "chatcmpl-" : "cmpl-",
                                  (random_seed() & ~uint64_t{0xffff}) | (next_id++ & 0xffff)),
                      created, options.model_name};
    if (req->stream) return stream(res, std::move(handle), std::move(*req), std::move(meta));
    complete(res, std::move(handle), std::move(*req), std::move(meta));
  }

  // A non-streamed completion (ServerOptions::patience / keep_alive): done within the
  // patience, one body with its own status; else a chunked 200 whose spaces show whether
  // the client is still there, then the body.
  void complete(httplib::Response& res, std::shared_ptr<RequestHandle> handle, ApiRequest req, ResponseMeta meta) {
    auto state = std::make_shared<CompletionState>();
    state->handle = std::move(handle);
    state->request = std::move(req);
    state->meta = std::move(meta);
    state->completion.prompt_tokens = static_cast<int64_t>(state->handle->params().prompt.size());
    state->wait(std::chrono::steady_clock::now() + options.patience);
    if (state->done) {
      if (state->end == FinishReason::kError) return send_error(res, 500, state->error, "server_error");
      if (state->end == FinishReason::kCancelled)
        return send_error(res, 503, "the request was cancelled (the server is shutting down)", "server_error");
      return res.set_content(body_of(*state), "application/json");
    }
    res.set_chunked_content_provider(
        "application/json",
        [this, state](size_t, httplib::DataSink& sink) {
          state->wait(std::chrono::steady_clock::now() + options.keep_alive);
          if (!state->done) return sink.write(" ", 1);  // false: the client went away
          const std::string body = state->end == FinishReason::kError ? error_body(state->error, "server_error")
                                   : state->end == FinishReason::kCancelled
                                       ? error_body("the request was cancelled (the server is shutting down)", "server_error")
                                       : body_of(*state);
          if (!sink.write(body.data(), body.size())) return false;
          sink.done();
          return true;
        },
        // Done or the client gone: a request still running is cancelled and its slot freed.
        [state](bool) { state->handle->cancel(); });
  }

  std::string body_of(const CompletionState& s) const {
    return completion_body(s.request.endpoint, s.meta, s.completion, s.request, *tokenizer);
  }

  void embeddings(const httplib::Request& http_req, httplib::Response& res) {
    if (!embedder)
      return send_error(res, 400,
                        fmt::format("the model '{}' is a language model: it has no embeddings; serve an encoder "
                                    "(bert, nomic-bert, modern-bert) for POST /v1/embeddings",
                                    options.model_name),
                        "invalid_request_error");
    auto req = parse_embeddings_request(http_req.body);
    if (!req) return send_error(res, 400, req.error().message(), "invalid_request_error");
    if (req->model != options.model_name)
      return send_error(
          res, 404,
          fmt::format("the model '{}' does not exist (this server serves '{}')", req->model, options.model_name),
          "invalid_request_error", "model_not_found");
    std::vector<std::vector<int32_t>> inputs = std::move(req->token_inputs);
    if (!req->texts.empty()) {
      if (!tokenizer)
        return send_error(res, 400,
                          fmt::format("the model '{}' has no tokenizer (tokenizer.json): give 'input' as token ids",
                                      options.model_name),
                          "invalid_request_error");
      for (const std::string& text : req->texts) inputs.push_back(models::encoder_tokens(*tokenizer, text));
    }
    SubmitRefusal why = SubmitRefusal::kNone;
    std::string error;
    std::shared_ptr<EmbeddingJob> job = embedder->submit(std::move(inputs), req->dimensions, &why, &error);
    if (!job) {
      if (why == SubmitRefusal::kQueueFull) return send_error(res, 429, error, "rate_limit_exceeded");
      if (why == SubmitRefusal::kStopping) return send_error(res, 503, error, "server_error");
      return send_error(res, 400, error, "invalid_request_error");
    }
    // As a non-streamed completion: done within the patience, one body with its own
    // status; else a chunked 200 whose keep-alive spaces show whether the client is still
    // there (a client gone cancels the job if it still waits), then the body.
    const bool base64 = req->base64;
    auto answer = [this, job, base64](const Expected<std::vector<std::vector<float>>>& result, int* status) {
      if (result) {
        *status = 200;
        return embeddings_body(options.model_name, *result, base64, job->tokens());
      }
      *status = job->shared_with() == 0 ? 503 : 500;  // never run (stopping), or the model failed
      return error_body(result.error().message(), "server_error");
    };
    std::optional<Expected<std::vector<std::vector<float>>>> result = job->wait(options.patience);
    if (result) {
      int status = 0;
      std::string body = answer(*result, &status);
      res.status = status;
      return res.set_content(std::move(body), "application/json");
    }
    res.set_chunked_content_provider(
        "application/json",
        [this, job, answer](size_t, httplib::DataSink& sink) {
          std::optional<Expected<std::vector<std::vector<float>>>> r = job->wait(options.keep_alive);
          if (!r) return sink.write(" ", 1);  // false: the client went away
          int status = 0;
          const std::string body = answer(*r, &status);
          if (!sink.write(body.data(), body.size())) return false;
          sink.done();
          return true;
        },
        [job](bool) { job->cancel(); });  // (done: nothing to cancel)
  }

  void stream(httplib::Response& res, std::shared_ptr<RequestHandle> handle, ApiRequest req, ResponseMeta meta) {
    auto state = std::make_shared<StreamState>(StreamState{std::move(handle), std::move(req), std::move(meta)});
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, state](size_t, httplib::DataSink& sink) {
          std::optional<GenerationEvent> e = state->handle->next(options.keep_alive);
          if (!e) {
            static constexpr std::string_view kComment = ": keep-alive\n\n";
            return sink.write(kComment.data(), kComment.size());
          }
          std::string out;
          if (e->finish == FinishReason::kError || e->finish == FinishReason::kCancelled) {
            const std::string msg = e->finish == FinishReason::kError ? e->error : "the server is shutting down";
            out = "data: " + error_body(msg, "server_error") + "\n\n";
          } else {
            out = stream_chunk(state->request.endpoint, state->meta, *e, state->first, state->request, *tokenizer);
            state->first = false;
            state->completion_tokens += static_cast<int64_t>(e->tokens.size());
            if (e->finish != FinishReason::kNone && state->request.include_usage)
              out += stream_usage_chunk(state->request.endpoint, state->meta,
                                        static_cast<int64_t>(state->handle->params().prompt.size()),
                                        state->completion_tokens, state->handle->cached_tokens());
          }
          if (e->finish != FinishReason::kNone) out += "data: [DONE]\n\n";
          if (!sink.write(out.data(), out.size())) return false;
          if (e->finish != FinishReason::kNone) sink.done();
          return true;
        },
        // Whether the stream ended or the client went away, the request is over: a
        // request still running is cancelled and its slot freed.
        [state](bool) { state->handle->cancel(); });
  }
};

Server::Server(Scheduler& scheduler, const Tokenizer& tokenizer, ChatFormatter chat, Metrics& metrics,
               ServerOptions options)
    : impl_(std::make_unique<Impl>(scheduler, tokenizer, std::move(chat), metrics, std::move(options))) {}

Server::Server(Embedder& embedder, const Tokenizer* tokenizer, Metrics& metrics, ServerOptions options)
    : impl_(std::make_unique<Impl>(embedder, tokenizer, metrics, std::move(options))) {}

Server::~Server() { stop(); }

Expected<int> Server::bind() {
  const ServerOptions& o = impl_->options;
  if (o.port < 0 || o.port > 65535) return Error::invalid_argument("--port {} is outside 0..65535", o.port);
  int port = o.port;
  if (o.port == 0) {
    port = impl_->http.bind_to_any_port(o.host);
    if (port < 0) return Error::io("cannot listen on {} (any port)", o.host);
  } else if (!impl_->http.bind_to_port(o.host, o.port)) {
    return Error::io("cannot listen on {}:{} (in use, or not an address of this machine?)", o.host, o.port);
  }
  if (const int fd = impl_->listen_fd.load(); fd >= 0) (void)::listen(fd, kListenBacklog);
  return port;
}

Status Server::serve() {
  if (!impl_->http.listen_after_bind()) return Error::io("the HTTP server stopped with an error");
  return {};
}

void Server::stop() {
  if (impl_) impl_->http.stop();
}

}  // namespace rlx::serve
