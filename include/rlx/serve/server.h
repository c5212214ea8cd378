// The HTTP front end of `rlx serve` (cpp-httplib): routes the OpenAI endpoints
// (POST /v1/chat/completions, POST /v1/completions, POST /v1/embeddings, GET /v1/models)
// and GET /health, GET /metrics to the api functions and the Scheduler (a language
// model) or the Embedder (an encoder); streams server-sent events; checks the API key,
// the body size and the queue limit, answering every refusal with an OpenAI error body
// and a 4xx status. An endpoint the served model has no use for (embeddings from a
// language model, chat from an encoder) is refused with a 400 that says so. A streaming
// client that goes away cancels its request, which frees its slot.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "rlx/base/status.h"
#include "rlx/models/tokenizer.h"
#include "rlx/serve/api.h"
#include "rlx/serve/embedder.h"
#include "rlx/serve/metrics.h"
#include "rlx/serve/scheduler.h"

namespace rlx::serve {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;                           ///< 0: any free port (see Server::bind)
  std::string api_key;                       ///< empty: none asked; else "Authorization: Bearer <key>" on /v1/*
  std::string model_name;                    ///< the id /v1/models lists and requests must name
  size_t max_body_bytes = size_t{4} << 20;   ///< larger request bodies get 413
  int threads = 32;                          ///< connections served at once (a stream holds one)
  /// A non-streamed completion or embeddings request not done within `patience` starts
  /// its response (200, chunked) and sends a space (JSON allows whitespace before a
  /// value) every `keep_alive` until the body follows: a client that went away is then
  /// seen (a write fails) and its request cancelled (a completion's slot freed, an
  /// embeddings request still queued dropped). An error after that point is the body's
  /// error object. Streams send an SSE comment every `keep_alive` without an event.
  std::chrono::milliseconds patience{1000};
  std::chrono::milliseconds keep_alive{1000};
};

class Server {
 public:
  /// Serves a language model. `scheduler`, `tokenizer` and `metrics` must outlive the server.
  Server(Scheduler& scheduler, const Tokenizer& tokenizer, ChatFormatter chat, Metrics& metrics,
         ServerOptions options);
  /// Serves an encoder's embeddings. `embedder`, `tokenizer` and `metrics` must outlive
  /// the server; `tokenizer` may be null (a model without one): requests must then give
  /// token ids.
  Server(Embedder& embedder, const Tokenizer* tokenizer, Metrics& metrics, ServerOptions options);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  /// Binds the listening socket; returns the port (the one chosen when options.port
  /// is 0). Errors name the host and port.
  Expected<int> bind();
  /// Serves until stop() (call bind() first). Errors: the listening loop failed.
  Status serve();
  /// Makes serve() return; safe from any thread (e.g. a signal handler's thread).
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace rlx::serve
