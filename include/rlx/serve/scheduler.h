// The scheduler of `rlx serve`: one thread owns the LanguageModel (its `batch()`
// sequences are the slots) and runs continuous batching. Requests wait in a bounded
// queue, join the running batch at any step and leave it when done; a new request's
// prompt is prefilled in chunks inside the same batched runs that decode the running
// requests, so their streams keep flowing. A free slot keeps its KV cache: a request
// whose prompt starts with what a slot holds (a shared system prompt, earlier chat
// turns) takes that slot and computes only the rest (prefix caching). The HTTP front
// end talks to it through RequestHandle only.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "rlx/base/status.h"
#include "rlx/models/language_model.h"
#include "rlx/models/sampler.h"
#include "rlx/models/tokenizer.h"
#include "rlx/serve/metrics.h"

namespace rlx::serve {

/// Most alternatives a request may ask logprobs for (OpenAI's limit).
inline constexpr int32_t kMaxTopLogprobs = 20;

/// What to generate.
struct GenerationParams {
  std::vector<int32_t> prompt;      ///< at least one token, fewer than the context length
  int32_t max_tokens = 16;          ///< >= 1; generation also ends where the context is full
  models::SamplingOptions sampling;
  std::vector<std::string> stop;    ///< stop strings (not emitted)
  int32_t top_logprobs = -1;        ///< -1: no logprobs; 0..kMaxTopLogprobs: the chosen token's and this many alternatives
};

/// A token's log-probability under the model (log-softmax of its logits, temperature 1).
struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0.0f;
};
struct StepLogprobs {
  TokenLogprob chosen;
  std::vector<TokenLogprob> top;  ///< best first
};

enum class FinishReason : uint8_t {
  kNone,       ///< not finished
  kStop,       ///< end-of-generation token or a stop string
  kLength,     ///< max_tokens, or the context is full
  kCancelled,  ///< cancelled (client gone, or the server stopping)
  kError,      ///< the model failed; see GenerationEvent::error
};
/// "stop", "length", "cancelled", "error" (OpenAI's finish_reason for the first two).
constexpr const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::kNone: return "none";
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kCancelled: return "cancelled";
    case FinishReason::kError: return "error";
  }
  return "unknown";
}

/// One step of a request's output. The last event has finish != kNone.
struct GenerationEvent {
  std::string text;                    ///< text made final (may be empty: held back for a stop string)
  std::vector<int32_t> tokens;         ///< tokens sampled since the previous event
  std::vector<StepLogprobs> logprobs;  ///< one per token when logprobs were asked
  FinishReason finish = FinishReason::kNone;
  std::string error;                   ///< kError: what failed
};

/// The front end's side of a request: events in order, and cancellation. Thread-safe.
class RequestHandle {
 public:
  explicit RequestHandle(GenerationParams params);
  /// The next event, waiting at most `wait`; nullopt when none came in that time or
  /// after the final event was taken.
  std::optional<GenerationEvent> next(std::chrono::milliseconds wait);
  /// Asks the scheduler to stop this request and free its slot (idempotent).
  void cancel() { cancelled_.store(true); }
  bool cancelled() const { return cancelled_.load(); }
  const GenerationParams& params() const { return params_; }
  /// Prompt tokens reused from a slot's cache (set when the request joins a slot).
  int64_t cached_tokens() const { return cached_tokens_.load(); }

 private:
  friend class Scheduler;
  void push(GenerationEvent e);

  GenerationParams params_;
  std::chrono::steady_clock::time_point arrival_ = std::chrono::steady_clock::now();
  std::atomic<bool> cancelled_{false};
  std::atomic<int64_t> cached_tokens_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<GenerationEvent> events_;
  bool ended_ = false;  // the final event was pushed
};

struct SchedulerOptions {
  int64_t max_queue = 64;      ///< requests waiting for a slot; submit refuses more
  int64_t prefill_chunk = 64;  ///< prompt tokens a request prefills per batched run
  /// While a stream decodes, the most rows one run may compute: its sequences times the
  /// padded chunk (every sequence of a run is padded to its rows, decoding ones too).
  /// Prompts then prefill in smaller chunks (down to the model's min_bucket) instead of
  /// holding every decoding stream behind one long step. 0: no limit.
  int64_t step_rows = 0;
};

/// The prompt chunk of a step over `seqs` sequences while a stream decodes, so that
/// seqs x chunk stays within `step_rows` (0: no limit): the largest power of two from
/// `min_bucket` up (a multi-token run pads to one anyway), never above `chunk`.
int64_t chunk_within_step_rows(int64_t chunk, int64_t step_rows, int64_t seqs, int64_t min_bucket);

/// Why submit refused a request.
enum class SubmitRefusal : uint8_t { kNone, kQueueFull, kStopping, kInvalid };

class Scheduler {
 public:
  /// Starts the scheduler thread. `model`, `tokenizer` and `metrics` must outlive it;
  /// nothing else may use `model` meanwhile.
  Scheduler(models::LanguageModel& model, const Tokenizer& tokenizer, Metrics& metrics, SchedulerOptions options);
  /// Stops the thread; requests still running or queued end with kCancelled.
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  /// Queues a request. On refusal returns null and sets *why (queue full, stopping, or
  /// params out of range: *error says which).
  std::shared_ptr<RequestHandle> submit(GenerationParams params, SubmitRefusal* why, std::string* error = nullptr);
  /// Ends the thread early (as the destructor does); later submits are refused.
  void stop();

  int64_t slots() const;
  int64_t context_length() const { return model_.context_length(); }

 private:
  struct Slot;
  void loop();
  void admit(std::deque<std::shared_ptr<RequestHandle>>& incoming);
  /// The slot other than `dst` whose cache holds the longest prefix of `prompt` that it
  /// can give (all of the prompt but its last token at most; none for a model with
  /// recurrent layers): the source of LanguageModel::copy_prefix.
  struct Donor {
    int64_t seq = -1;
    size_t tokens = 0;
  };
  Donor best_donor(const std::vector<int32_t>& prompt, int64_t dst) const;
  void step();
  void sample(Slot& slot, size_t index, std::span<const float> logits);
  /// Hands `token` (picked from `logits`, or on the device when they are empty) to the
  /// slot's request: text, logprobs, stop conditions, metrics.
  void emit(Slot& slot, size_t index, int32_t token, std::span<const float> logits);
  /// True when every running request decodes greedily without penalties or logprobs:
  /// the step can take forward_batch_greedy (one token a sequence back from the device
  /// instead of its logits, and no sampling on the host).
  bool all_greedy() const;
  /// A paged KV cache over its budget for the step of `tokens`: gives back the cached
  /// prefixes of free slots (least recently used first), then ends the newest running
  /// requests with an error (their tokens cleared) until the step fits. False when no
  /// token is left to run.
  bool fit_kv_budget(std::vector<std::vector<int32_t>>& tokens);
  /// The prefill chunk of this step: options_.prefill_chunk, within options_.step_rows
  /// while a stream decodes (chunk_within_step_rows).
  int64_t step_chunk() const;
  /// Frees KV memory: gives back the cached prefix of the least recently used free slot
  /// (returns slots()), else ends the newest running request with `why` (returns its
  /// slot); -1 when there is neither.
  int64_t make_room(const std::string& why);
  /// The KV memory gauges of /metrics (resident measured every 256 steps).
  void publish_kv_memory();
  void finish(Slot& slot, GenerationEvent e);

  models::LanguageModel& model_;
  const Tokenizer& tokenizer_;
  Metrics& metrics_;
  SchedulerOptions options_;
  std::vector<Slot> slots_;  // only the scheduler thread touches these
  int64_t kv_steps_ = 0;     // steps since start (publish_kv_memory)

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<RequestHandle>> queue_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace rlx::serve
