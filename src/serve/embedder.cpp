// The embedder of `rlx serve` (see rlx/serve/embedder.h): a bounded queue of embedding
// requests and the one thread that runs them on the EncoderModel, several requests per
// turn.
#include "rlx/serve/embedder.h"

#include <algorithm>

namespace rlx::serve {

EmbeddingJob::EmbeddingJob(std::vector<std::vector<int32_t>> inputs, int64_t dimensions)
    : inputs_(std::move(inputs)), dimensions_(dimensions) {
  for (const auto& s : inputs_) tokens_ += static_cast<int64_t>(s.size());
}

std::optional<Expected<std::vector<std::vector<float>>>> EmbeddingJob::wait(std::chrono::milliseconds wait) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, wait, [&] { return result_.has_value(); });
  return result_;
}

int64_t EmbeddingJob::shared_with() const {
  std::lock_guard<std::mutex> lock(mu_);
  return shared_with_;
}

void EmbeddingJob::finish(Expected<std::vector<std::vector<float>>> result, int64_t shared_with) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    result_ = std::move(result);
    shared_with_ = shared_with;
  }
  cv_.notify_all();
}

Expected<std::unique_ptr<Embedder>> Embedder::create(models::EncoderModel& model, Metrics& metrics,
                                                     EmbedderOptions options) {
  if (options.pooling == models::Pooling::None)
    return Error::invalid_argument("the embedder needs a pooling (cls, mean or last), not none");
  if (options.max_batch < 1 || options.max_batch > 4096)
    return Error::invalid_argument("the embedder's batch must be 1..4096 sequences, got {}", options.max_batch);
  if (options.max_queue < 0) return Error::invalid_argument("the embedder's queue limit is negative");
  if (options.max_request_tokens < 1) return Error::invalid_argument("the embedder's request token limit must be >= 1");
  return std::unique_ptr<Embedder>(new Embedder(model, metrics, options));
}

Embedder::Embedder(models::EncoderModel& model, Metrics& metrics, EmbedderOptions options)
    : model_(model),
      metrics_(metrics),
      options_(options),
      max_tokens_(model.max_tokens()),
      dim_(model.config().n_embd),
      n_vocab_(model.config().n_vocab) {
  thread_ = std::thread([this] { loop(); });
}

Embedder::~Embedder() { stop(); }

void Embedder::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  std::lock_guard<std::mutex> lock(join_mu_);  // stop() may come from two threads at once
  if (thread_.joinable()) thread_.join();
}

std::shared_ptr<EmbeddingJob> Embedder::submit(std::vector<std::vector<int32_t>> inputs, int64_t dimensions,
                                               SubmitRefusal* why, std::string* error) {
  auto refuse = [&](SubmitRefusal r, std::string message) -> std::shared_ptr<EmbeddingJob> {
    *why = r;
    if (error) *error = std::move(message);
    return nullptr;
  };
  if (inputs.empty()) return refuse(SubmitRefusal::kInvalid, "'input' holds no inputs");
  if (dimensions < 0 || dimensions > dim_)
    return refuse(SubmitRefusal::kInvalid,
                  fmt::format("'dimensions' must be between 1 and {} (the model's width), got {}", dim_, dimensions));
  int64_t total = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const auto n = static_cast<int64_t>(inputs[i].size());
    if (n < 1) return refuse(SubmitRefusal::kInvalid, fmt::format("input[{}] has no tokens", i));
    if (n > max_tokens_)
      return refuse(SubmitRefusal::kInvalid,
                    fmt::format("input[{}] has {} tokens; the model takes at most {}", i, n, max_tokens_));
    for (int32_t id : inputs[i])
      if (id < 0 || id >= n_vocab_)
        return refuse(SubmitRefusal::kInvalid,
                      fmt::format("input[{}]: token id {} is outside the vocabulary [0, {})", i, id, n_vocab_));
    total += n;
  }
  if (total > options_.max_request_tokens)
    return refuse(SubmitRefusal::kInvalid, fmt::format("the request holds {} tokens; at most {} per request", total,
                                                       options_.max_request_tokens));
  auto job = std::make_shared<EmbeddingJob>(std::move(inputs), dimensions);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return refuse(SubmitRefusal::kStopping, "the server is shutting down");
    if (static_cast<int64_t>(queue_.size()) >= options_.max_queue)
      return refuse(SubmitRefusal::kQueueFull,
                    fmt::format("too many requests are waiting ({}); try again later", queue_.size()));
    queue_.push_back(job);
    metrics_.queue_length.store(static_cast<int64_t>(queue_.size()));
  }
  *why = SubmitRefusal::kNone;
  cv_.notify_one();
  return job;
}

void Embedder::loop() {
  std::vector<std::shared_ptr<EmbeddingJob>> turn, cancelled;
  for (;;) {
    turn.clear();
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (stopping_) break;
      // The oldest request, and the next ones while their sequences fit one batch;
      // requests whose client has gone are dropped on the way.
      int64_t sequences = 0;
      while (!queue_.empty()) {
        if (queue_.front()->cancelled()) {
          cancelled.push_back(std::move(queue_.front()));
          queue_.pop_front();
          continue;
        }
        const auto n = static_cast<int64_t>(queue_.front()->inputs().size());
        if (!turn.empty() && sequences + n > options_.max_batch) break;
        sequences += n;
        turn.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
      metrics_.queue_length.store(static_cast<int64_t>(queue_.size()));
    }
    for (auto& job : cancelled) {
      metrics_.requests_cancelled.fetch_add(1);
      job->finish(Error::unsupported("the request was cancelled before it ran (its client left)"), 0);
    }
    cancelled.clear();
    if (!turn.empty()) run(turn);
  }
  // Stopping: whatever still waits ends with an error.
  std::deque<std::shared_ptr<EmbeddingJob>> left;
  {
    std::lock_guard<std::mutex> lock(mu_);
    left.swap(queue_);
    metrics_.queue_length.store(0);
  }
  for (auto& job : left) job->finish(Error::invalid_argument("the server is shutting down"), 0);
}

void Embedder::run(std::vector<std::shared_ptr<EmbeddingJob>>& jobs) {
  std::vector<std::vector<int32_t>> all;
  for (const auto& job : jobs) all.insert(all.end(), job->inputs().begin(), job->inputs().end());
  models::EmbedOptions o;
  o.pooling = options_.pooling;
  o.normalize = options_.normalize;
  o.max_batch = options_.max_batch;
  const auto t0 = std::chrono::steady_clock::now();
  Expected<std::vector<std::vector<float>>> out = model_.embed_all(all, o);
  const auto t1 = std::chrono::steady_clock::now();
  metrics_.embedding_turn_duration.observe(std::chrono::duration<double>(t1 - t0).count());
  metrics_.embedding_turns.fetch_add(1);
  const auto shared = static_cast<int64_t>(jobs.size());
  size_t next = 0;
  for (const auto& job : jobs) {
    if (!out) {
      job->finish(out.error(), shared);
      continue;
    }
    std::vector<std::vector<float>> mine(
        std::make_move_iterator(out->begin() + static_cast<std::ptrdiff_t>(next)),
        std::make_move_iterator(out->begin() + static_cast<std::ptrdiff_t>(next + job->inputs().size())));
    next += job->inputs().size();
    if (job->dimensions() > 0)
      for (auto& e : mine) models::truncate_embedding(e, job->dimensions());
    metrics_.embedding_inputs.fetch_add(static_cast<int64_t>(job->inputs().size()));
    metrics_.embedding_tokens.fetch_add(job->tokens());
    metrics_.embedding_requests.fetch_add(1);
    metrics_.request_duration.observe(std::chrono::duration<double>(t1 - job->arrival_).count());
    job->finish(std::move(mine), shared);
  }
}

}  // namespace rlx::serve
