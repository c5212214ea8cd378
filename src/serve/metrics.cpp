// Metrics of `rlx serve` and their Prometheus text form (see rlx/serve/metrics.h).
#include "rlx/serve/metrics.h"

#include <fmt/format.h>

namespace rlx::serve {

void Histogram::observe(double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  size_t i = 0;
  while (i < kBounds.size() && seconds > kBounds[i]) ++i;
  ++counts_[i];
  sum_ += seconds;
  ++count_;
}

void Histogram::write(std::string& out, const std::string& name, const std::string& help) const {
  std::lock_guard<std::mutex> lock(mu_);
  out += fmt::format("# HELP {} {}\n# TYPE {} histogram\n", name, help, name);
  uint64_t cumulative = 0;
  for (size_t i = 0; i < kBounds.size(); ++i) {
    cumulative += counts_[i];
    out += fmt::format("{}_bucket{{le=\"{}\"}} {}\n", name, kBounds[i], cumulative);
  }
  cumulative += counts_.back();
  out += fmt::format("{}_bucket{{le=\"+Inf\"}} {}\n{}_sum {}\n{}_count {}\n", name, cumulative, name, sum_, name,
                     count_);
}

double Histogram::sum() const {
  std::lock_guard<std::mutex> lock(mu_);
  return sum_;
}

uint64_t Histogram::count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return count_;
}

void Metrics::count_request(const std::string& path, int status) {
  std::lock_guard<std::mutex> lock(requests_mu_);
  ++requests_[{path, status}];
}

namespace {
void write_scalar(std::string& out, const char* name, const char* type, const char* help, int64_t value) {
  out += fmt::format("# HELP {} {}\n# TYPE {} {}\n{} {}\n", name, help, name, type, name, value);
}
}  // namespace

std::string Metrics::prometheus() const {
  std::string out;
  out += "# HELP rlx_http_requests_total HTTP requests answered, by path and status code.\n"
         "# TYPE rlx_http_requests_total counter\n";
  {
    std::lock_guard<std::mutex> lock(requests_mu_);
    for (const auto& [key, n] : requests_)
      out += fmt::format("rlx_http_requests_total{{path=\"{}\",code=\"{}\"}} {}\n", key.first, key.second, n);
  }
  write_scalar(out, "rlx_prompt_tokens_total", "counter", "Prompt tokens of admitted requests.", prompt_tokens);
  write_scalar(out, "rlx_prefix_cache_hit_tokens_total", "counter",
               "Prompt tokens reused from a slot's KV cache (not computed).", prefix_hit_tokens);
  write_scalar(out, "rlx_prefix_copied_tokens_total", "counter",
               "Reused prompt tokens whose KV rows were copied from another slot's cache.", prefix_copied_tokens);
  write_scalar(out, "rlx_prefill_tokens_total", "counter", "Prompt tokens computed by prefill.", prefill_tokens);
  write_scalar(out, "rlx_generated_tokens_total", "counter", "Tokens generated.", generated_tokens);
  write_scalar(out, "rlx_decode_steps_total", "counter", "Batched model runs.", decode_steps);
  write_scalar(out, "rlx_requests_finished_total", "counter", "Generation requests finished (any reason).",
               requests_finished);
  write_scalar(out, "rlx_requests_cancelled_total", "counter",
               "Requests (generation and embeddings) cancelled by their client.", requests_cancelled);
  write_scalar(out, "rlx_queue_length", "gauge", "Requests waiting for a slot (or for the embedder).", queue_length);
  write_scalar(out, "rlx_slots_busy", "gauge", "Slots running a request.", slots_busy);
  write_scalar(out, "rlx_kv_budget_bytes", "gauge", "Memory the KV cache may hold (--kv-memory, or all of it).",
               kv_budget_bytes);
  write_scalar(out, "rlx_kv_reserved_bytes", "gauge", "The whole KV cache: every slot's full context.",
               kv_reserved_bytes);
  write_scalar(out, "rlx_kv_backed_bytes", "gauge", "KV cache memory the slots' rows have asked for (pages).",
               kv_backed_bytes);
  write_scalar(out, "rlx_kv_resident_bytes", "gauge", "KV cache memory the backend holds, as it measures it.",
               kv_resident_bytes);
  write_scalar(out, "rlx_kv_evicted_tokens_total", "counter",
               "Cached tokens of idle slots given back to keep the KV cache within its budget.", kv_evicted_tokens);
  write_scalar(out, "rlx_kv_refused_requests_total", "counter",
               "Running requests ended because the KV cache budget could not hold them.", kv_refused_requests);
  write_scalar(out, "rlx_slots_total", "gauge", "Slots (sequences served at once).", slots_total);
  time_to_first_token.write(out, "rlx_time_to_first_token_seconds", "Time from arrival to the first token.");
  inter_token.write(out, "rlx_inter_token_seconds", "Time between consecutive tokens of a request.");
  request_duration.write(out, "rlx_request_duration_seconds",
                         "Time from arrival to the end (the last token, or the embeddings).");
  step_duration.write(out, "rlx_step_duration_seconds", "Duration of one batched model run.");
  write_scalar(out, "rlx_embedding_requests_total", "counter", "Embedding requests answered.", embedding_requests);
  write_scalar(out, "rlx_embedding_inputs_total", "counter", "Inputs (sequences) embedded.", embedding_inputs);
  write_scalar(out, "rlx_embedding_tokens_total", "counter", "Tokens of the inputs embedded.", embedding_tokens);
  write_scalar(out, "rlx_embedding_turns_total", "counter",
               "Embedder turns: requests that arrived together share one turn's batched runs.", embedding_turns);
  embedding_turn_duration.write(out, "rlx_embedding_turn_seconds", "Duration of one embedder turn.");
  return out;
}

}  // namespace rlx::serve
