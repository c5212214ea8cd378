// The embedding side of `rlx serve`: one thread owns the EncoderModel and runs the
// /v1/embeddings requests. Requests wait in a bounded queue; each turn the thread takes
// the oldest request and as many of the next ones as fit in one batch (max_batch
// sequences), so that concurrent requests share the model's batched runs
// (EncoderModel::embed_all: length-sorted, power-of-two batches), and hands each request
// its own embeddings; requests cancelled while they wait (their client gone) are dropped.
// The HTTP front end talks to it through EmbeddingJob only.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "rlx/base/status.h"
#include "rlx/models/encoder.h"
#include "rlx/serve/metrics.h"
#include "rlx/serve/scheduler.h"

namespace rlx::serve {

struct EmbedderOptions {
  models::Pooling pooling = models::Pooling::Cls;  ///< Cls, Mean or Last
  bool normalize = false;                          ///< L2-normalize each embedding
  int64_t max_batch = 32;                          ///< sequences per model run, and per turn of requests sharing runs
  int64_t max_queue = 64;                          ///< requests waiting; submit refuses more
  int64_t max_request_tokens = 300'000;            ///< tokens one request may hold in all (OpenAI's limit)
};

/// One request's token sequences and, once run, its embeddings. Thread-safe.
class EmbeddingJob {
 public:
  EmbeddingJob(std::vector<std::vector<int32_t>> inputs, int64_t dimensions);
  /// The embeddings (one per input, in order) or what failed, waiting at most `wait`;
  /// nullopt while the job is still queued or running.
  std::optional<Expected<std::vector<std::vector<float>>>> wait(std::chrono::milliseconds wait);
  const std::vector<std::vector<int32_t>>& inputs() const { return inputs_; }
  int64_t dimensions() const { return dimensions_; }
  int64_t tokens() const { return tokens_; }
  /// Requests (this one included) whose inputs ran in the same turn; 0 until done, and
  /// for a request that never ran (the embedder stopped first, or it was cancelled).
  int64_t shared_with() const;
  /// The client is gone: a job still queued is dropped (it ends with an error and counts
  /// in Metrics::requests_cancelled) instead of running; one already running finishes.
  void cancel() { cancelled_.store(true); }
  bool cancelled() const { return cancelled_.load(); }

 private:
  friend class Embedder;
  void finish(Expected<std::vector<std::vector<float>>> result, int64_t shared_with);

  std::vector<std::vector<int32_t>> inputs_;
  int64_t dimensions_ = 0;
  int64_t tokens_ = 0;
  std::chrono::steady_clock::time_point arrival_ = std::chrono::steady_clock::now();
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::optional<Expected<std::vector<std::vector<float>>>> result_;
  int64_t shared_with_ = 0;
  std::atomic<bool> cancelled_{false};
};

class Embedder {
 public:
  /// Starts the thread. `model` and `metrics` must outlive it; nothing else may use
  /// `model` meanwhile. Errors: options out of range (pooling None, max_batch outside
  /// 1..4096, max_queue below 0, max_request_tokens below 1).
  static Expected<std::unique_ptr<Embedder>> create(models::EncoderModel& model, Metrics& metrics,
                                                    EmbedderOptions options);
  /// Stops the thread; requests still queued or running end with an error.
  ~Embedder();
  Embedder(const Embedder&) = delete;
  Embedder& operator=(const Embedder&) = delete;

  /// Queues a request: `inputs` (1 or more sequences of token ids) and `dimensions`
  /// (0: the model's width; else 1..width, the embeddings truncated and renormalized).
  /// On refusal returns null and sets *why (queue full, stopping, or kInvalid: an empty
  /// input, a sequence longer than max_tokens(), a token id outside the vocabulary, too
  /// many tokens, dimensions out of range — *error names the input).
  std::shared_ptr<EmbeddingJob> submit(std::vector<std::vector<int32_t>> inputs, int64_t dimensions, SubmitRefusal* why,
                                       std::string* error = nullptr);
  /// Ends the thread early (as the destructor does); later submits are refused.
  void stop();

  int64_t max_tokens() const { return max_tokens_; }
  int64_t dim() const { return dim_; }
  const EmbedderOptions& options() const { return options_; }

 private:
  Embedder(models::EncoderModel& model, Metrics& metrics, EmbedderOptions options);
  void loop();
  void run(std::vector<std::shared_ptr<EmbeddingJob>>& jobs);

  models::EncoderModel& model_;
  Metrics& metrics_;
  EmbedderOptions options_;
  int64_t max_tokens_ = 0, dim_ = 0, n_vocab_ = 0;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<EmbeddingJob>> queue_;
  bool stopping_ = false;
  std::mutex join_mu_;
  std::thread thread_;
};

}  // namespace rlx::serve
