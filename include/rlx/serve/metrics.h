// Counters, gauges and latency histograms of `rlx serve`, written by the scheduler (or
// the embedder) and the HTTP front end from their own threads and read as Prometheus text by GET /metrics.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

namespace rlx::serve {

/// A Prometheus histogram of seconds with fixed bucket bounds (5 ms .. 60 s).
class Histogram {
 public:
  static constexpr std::array<double, 13> kBounds{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                                                  1.0,   2.5,  5.0,   10.0, 30.0, 60.0};
  void observe(double seconds);
  /// Appends the `name_bucket`, `name_sum` and `name_count` lines (cumulative buckets).
  void write(std::string& out, const std::string& name, const std::string& help) const;
  double sum() const;      ///< seconds observed in all
  uint64_t count() const;  ///< observations

 private:
  mutable std::mutex mu_;
  std::array<uint64_t, kBounds.size() + 1> counts_{};  // the last one is +Inf
  double sum_ = 0.0;
  uint64_t count_ = 0;
};

/// Everything /metrics reports. Thread-safe: counters are atomics, histograms lock.
struct Metrics {
  // Requests answered, by path and HTTP status (the front end counts them).
  void count_request(const std::string& path, int status);

  std::atomic<int64_t> prompt_tokens{0};       ///< prompt tokens of admitted requests
  std::atomic<int64_t> prefix_hit_tokens{0};   ///< of those, reused from a slot's cache
  std::atomic<int64_t> prefix_copied_tokens{0};  ///< of those, copied from another slot's cache
  std::atomic<int64_t> prefill_tokens{0};      ///< prompt tokens computed (prompt - reused)
  std::atomic<int64_t> generated_tokens{0};    ///< tokens sampled
  std::atomic<int64_t> decode_steps{0};        ///< batched model runs
  std::atomic<int64_t> requests_finished{0};   ///< by the scheduler, any reason
  std::atomic<int64_t> requests_cancelled{0};  ///< client gone or cancelled before the end
  std::atomic<int64_t> queue_length{0};        ///< requests waiting for a slot or the embedder (gauge)
  std::atomic<int64_t> slots_busy{0};          ///< slots running a request (gauge)
  std::atomic<int64_t> slots_total{0};         ///< --parallel (gauge)
  // The KV cache's memory (LanguageModel::kv_memory_state after each step; gauges) and
  // the cached prefixes evicted to stay within its budget.
  std::atomic<int64_t> kv_budget_bytes{0};
  std::atomic<int64_t> kv_backed_bytes{0};
  std::atomic<int64_t> kv_resident_bytes{0};
  std::atomic<int64_t> kv_reserved_bytes{0};
  std::atomic<int64_t> kv_evicted_tokens{0};   ///< cached tokens of idle slots given back
  std::atomic<int64_t> kv_refused_requests{0};  ///< running requests failed for KV memory
  Histogram time_to_first_token;  ///< submit -> first sampled token
  Histogram inter_token;          ///< between a request's consecutive tokens
  Histogram request_duration;     ///< submit -> finish
  Histogram step_duration;        ///< one batched model run
  // Embeddings (an encoder served): requests, their inputs and tokens, and the turns of
  // the embedder (requests sharing batched runs).
  std::atomic<int64_t> embedding_requests{0};  ///< requests answered with embeddings
  std::atomic<int64_t> embedding_inputs{0};    ///< sequences embedded
  std::atomic<int64_t> embedding_tokens{0};    ///< their tokens
  std::atomic<int64_t> embedding_turns{0};     ///< embedder turns (one or more requests each)
  Histogram embedding_turn_duration;           ///< one turn's model runs

  /// The Prometheus text exposition (format 0.0.4) of all of the above.
  std::string prometheus() const;

 private:
  mutable std::mutex requests_mu_;
  std::map<std::pair<std::string, int>, int64_t> requests_;
};

}  // namespace rlx::serve
