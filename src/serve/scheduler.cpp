// The continuous-batching scheduler of `rlx serve` (see rlx/serve/scheduler.h): one
// thread, one LanguageModel whose sequences are the slots; each loop turn admits queued
// requests into free slots (the slot whose cache gives the prompt the most tokens, else
// the lowest: a run covers the slots up to the last busy one), then runs one batched
// forward that decodes one token for every running request and prefills the next chunk
// of every request still reading its prompt.
#include "rlx/serve/scheduler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include "rlx/base/token_choice.h"
#include "rlx/models/decoder.h"
#include "rlx/models/text_stream.h"

namespace rlx::serve {

using Clock = std::chrono::steady_clock;

RequestHandle::RequestHandle(GenerationParams params) : params_(std::move(params)) {}

std::optional<GenerationEvent> RequestHandle::next(std::chrono::milliseconds wait) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!cv_.wait_for(lock, wait, [&] { return !events_.empty(); })) return std::nullopt;
  GenerationEvent e = std::move(events_.front());
  events_.pop_front();
  return e;
}

void RequestHandle::push(GenerationEvent e) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (ended_) return;
    ended_ = e.finish != FinishReason::kNone;
    events_.push_back(std::move(e));
  }
  cv_.notify_all();
}

// One sequence of the model. `cached` mirrors what the model's KV cache holds for it
// (model.n_past(seq) == cached.size()); a free slot keeps it for prefix reuse.
struct Scheduler::Slot {
  std::shared_ptr<RequestHandle> req;  // null: free
  std::vector<int32_t> cached;
  size_t fed = 0;            // prompt tokens in the cache (prefill progress)
  int32_t next_token = -1;   // sampled, to be fed by the next run (>= 0: decoding)
  std::optional<models::Sampler> sampler;
  std::optional<models::TextStream> text;
  std::vector<int32_t> generated;
  Clock::time_point last_token;
  Clock::time_point last_used;  // when a request last joined or left it (eviction order)
};

namespace {

size_t common_prefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  const size_t n = std::min(a.size(), b.size());
  size_t i = 0;
  while (i < n && a[i] == b[i]) ++i;
  return i;
}

// The final event of a request that produced nothing more.
GenerationEvent ended(FinishReason reason, std::string error = {}) {
  GenerationEvent e;
  e.finish = reason;
  e.error = std::move(error);
  return e;
}

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// The chosen token's log-probability and the `top` best ones, from raw logits.
StepLogprobs logprobs_of(std::span<const float> logits, int32_t chosen, int32_t top) {
  float max = -std::numeric_limits<float>::infinity();
  for (float v : logits) max = std::max(max, v);
  double sum = 0.0;
  for (float v : logits) sum += std::exp(static_cast<double>(v) - max);
  const double log_z = static_cast<double>(max) + std::log(sum);
  auto lp = [&](int32_t id) { return static_cast<float>(static_cast<double>(logits[static_cast<size_t>(id)]) - log_z); };
  StepLogprobs s;
  s.chosen = {chosen, lp(chosen)};
  const auto n = static_cast<int32_t>(logits.size());
  const int32_t k = std::min(top, n);
  if (k > 0) {
    std::vector<int32_t> ids(static_cast<size_t>(n));
    for (int32_t i = 0; i < n; ++i) ids[static_cast<size_t>(i)] = i;
    // Ranked as the samplers rank (a total order: NaN last, ties to the lower id).
    std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), [&](int32_t a, int32_t b) {
      const uint32_t ka = logit_rank_key(logits[static_cast<size_t>(a)]);
      const uint32_t kb = logit_rank_key(logits[static_cast<size_t>(b)]);
      return ka > kb || (ka == kb && a < b);
    });
    for (int32_t i = 0; i < k; ++i) s.top.push_back({ids[static_cast<size_t>(i)], lp(ids[static_cast<size_t>(i)])});
  }
  return s;
}

}  // namespace

Scheduler::Scheduler(models::LanguageModel& model, const Tokenizer& tokenizer, Metrics& metrics,
                     SchedulerOptions options)
    : model_(model), tokenizer_(tokenizer), metrics_(metrics), options_(options) {
  options_.prefill_chunk = std::max<int64_t>(options_.prefill_chunk, 1);
  slots_.resize(static_cast<size_t>(model_.batch()));
  model_.reset();
  metrics_.slots_total = model_.batch();
  thread_ = std::thread([this] { loop(); });
}

Scheduler::~Scheduler() { stop(); }

int64_t Scheduler::slots() const { return static_cast<int64_t>(slots_.size()); }

void Scheduler::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::shared_ptr<RequestHandle> Scheduler::submit(GenerationParams params, SubmitRefusal* why, std::string* error) {
  auto refuse = [&](SubmitRefusal r, std::string msg) -> std::shared_ptr<RequestHandle> {
    *why = r;
    if (error) *error = std::move(msg);
    return nullptr;
  };
  const int64_t ctx = model_.context_length();
  if (params.prompt.empty()) return refuse(SubmitRefusal::kInvalid, "the prompt has no tokens");
  if (static_cast<int64_t>(params.prompt.size()) >= ctx)
    return refuse(SubmitRefusal::kInvalid, fmt::format("the prompt has {} tokens; the context length is {}",
                                                       params.prompt.size(), ctx));
  for (int32_t id : params.prompt)
    if (id < 0 || id >= model_.config().n_vocab)
      return refuse(SubmitRefusal::kInvalid,
                    fmt::format("token id {} is outside the vocabulary [0, {})", id, model_.config().n_vocab));
  if (params.max_tokens < 1) return refuse(SubmitRefusal::kInvalid, "max_tokens must be at least 1");
  if (params.top_logprobs > kMaxTopLogprobs)
    return refuse(SubmitRefusal::kInvalid, fmt::format("top_logprobs must be at most {}", kMaxTopLogprobs));
  if (Status s = params.sampling.validate(); !s.ok()) return refuse(SubmitRefusal::kInvalid, s.error().message());
  auto handle = std::make_shared<RequestHandle>(std::move(params));
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return refuse(SubmitRefusal::kStopping, "the server is shutting down");
    if (static_cast<int64_t>(queue_.size()) >= options_.max_queue)
      return refuse(SubmitRefusal::kQueueFull,
                    fmt::format("{} requests are already waiting; try again later", queue_.size()));
    queue_.push_back(handle);
    metrics_.queue_length = static_cast<int64_t>(queue_.size());
  }
  cv_.notify_all();
  *why = SubmitRefusal::kNone;
  return handle;
}

void Scheduler::loop() {
  for (;;) {
    std::deque<std::shared_ptr<RequestHandle>> incoming;
    {
      std::unique_lock<std::mutex> lock(mu_);
      const bool busy = std::any_of(slots_.begin(), slots_.end(), [](const Slot& s) { return s.req != nullptr; });
      if (!busy) cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (stopping_) break;
      // Requests cancelled while waiting leave the queue; then take as many as there
      // are free slots.
      for (auto it = queue_.begin(); it != queue_.end();) {
        if (!(*it)->cancelled()) {
          ++it;
          continue;
        }
        ++metrics_.requests_cancelled;
        ++metrics_.requests_finished;
        (*it)->push(ended(FinishReason::kCancelled));
        it = queue_.erase(it);
      }
      size_t free = 0;
      for (const Slot& s : slots_) free += s.req == nullptr;
      while (free > 0 && !queue_.empty()) {
        incoming.push_back(std::move(queue_.front()));
        queue_.pop_front();
        --free;
      }
      metrics_.queue_length = static_cast<int64_t>(queue_.size());
    }
    admit(incoming);
    step();
  }
  // Stopping: every request still here ends as cancelled.
  std::deque<std::shared_ptr<RequestHandle>> left;
  {
    std::lock_guard<std::mutex> lock(mu_);
    left.swap(queue_);
    metrics_.queue_length = 0;
  }
  for (auto& r : left) r->push(ended(FinishReason::kCancelled));
  for (Slot& s : slots_)
    if (s.req) finish(s, ended(FinishReason::kCancelled));
}

Scheduler::Donor Scheduler::best_donor(const std::vector<int32_t>& prompt, int64_t dst) const {
  Donor best;
  if (!model_.can_truncate() || prompt.size() < 2) return best;
  for (const Slot& s : slots_) {
    const auto seq = static_cast<int64_t>(&s - slots_.data());
    if (seq == dst) continue;
    size_t len = std::min(common_prefix(s.cached, prompt), prompt.size() - 1);
    len = std::min(len, static_cast<size_t>(std::max<int64_t>(model_.max_keep(seq), 0)));
    if (len > best.tokens) best = Donor{seq, len};
  }
  return best;
}

void Scheduler::admit(std::deque<std::shared_ptr<RequestHandle>>& incoming) {
  for (auto& req : incoming) {
    const std::vector<int32_t>& prompt = req->params().prompt;
    // The free slot whose cache gives the prompt the most tokens; ties: the lowest slot (a
    // run covers the slots up to the last busy one, so low slots keep runs narrow).
    Slot* best = nullptr;
    size_t reuse = 0;
    for (Slot& s : slots_) {
      if (s.req) continue;
      const auto seq = static_cast<int64_t>(&s - slots_.data());
      // At least the prompt's last token is fed, to get the logits of the first pick;
      // fewer where a batched run padded over the slot's last rows while it sat out full;
      // a recurrent state (Qwen3.5) cannot be rolled back: all of a slot or none.
      size_t len = std::min(common_prefix(s.cached, prompt), prompt.size() - 1);
      len = std::min(len, static_cast<size_t>(std::max<int64_t>(model_.max_keep(seq), 0)));
      if (!model_.can_truncate() && static_cast<int64_t>(len) != model_.n_past(seq)) len = 0;
      if (!best || len > reuse) {
        best = &s;
        reuse = len;
      }
    }
    const auto seq = static_cast<int64_t>(best - slots_.data());
    // Another slot, busy or free, may hold more of the prompt (a system prompt that a
    // running request computed): its rows are copied into the chosen slot on the device.
    if (const Donor d = best_donor(prompt, seq); d.tokens > reuse) {
      if (Status c = model_.copy_prefix(d.seq, seq, static_cast<int64_t>(d.tokens)); c.ok()) {
        best->cached.assign(prompt.begin(), prompt.begin() + static_cast<std::ptrdiff_t>(d.tokens));
        reuse = d.tokens;
        metrics_.prefix_copied_tokens += static_cast<int64_t>(d.tokens);
      } else {
        best->cached.clear();  // the slot's cache may be half overwritten
        reuse = 0;
      }
    }
    if (Status s = model_.truncate(seq, static_cast<int64_t>(reuse)); !s.ok()) {
      ++metrics_.requests_finished;
      req->push(ended(FinishReason::kError, s.error().message()));
      continue;
    }
    best->cached.resize(reuse);
    best->fed = reuse;
    best->next_token = -1;
    best->generated.clear();
    best->sampler.emplace(req->params().sampling);
    best->text.emplace(tokenizer_, req->params().stop);
    req->cached_tokens_ = static_cast<int64_t>(reuse);
    metrics_.prompt_tokens += static_cast<int64_t>(prompt.size());
    metrics_.prefix_hit_tokens += static_cast<int64_t>(reuse);
    best->req = std::move(req);
    best->last_used = Clock::now();
    ++metrics_.slots_busy;
  }
}

void Scheduler::finish(Slot& slot, GenerationEvent e) {
  if (e.finish == FinishReason::kCancelled) ++metrics_.requests_cancelled;
  if (e.finish == FinishReason::kError) {
    // The cache may be half written: forget it, and give its memory back.
    slot.cached.clear();
    (void)model_.release_sequence(static_cast<int64_t>(&slot - slots_.data()));
  }
  slot.last_used = Clock::now();
  metrics_.request_duration.observe(seconds_since(slot.req->arrival_));
  // The counters first: a client that sees the final event sees the slot free.
  --metrics_.slots_busy;
  ++metrics_.requests_finished;
  std::shared_ptr<RequestHandle> req = std::move(slot.req);
  slot.sampler.reset();
  slot.text.reset();
  slot.next_token = -1;
  req->push(std::move(e));
}

void Scheduler::step() {
  const int64_t ctx = model_.context_length();
  for (Slot& s : slots_)
    if (s.req && s.req->cancelled()) finish(s, ended(FinishReason::kCancelled));

  // Tokens per running slot: the sampled token of a decoding one, the next prompt chunk
  // of a prefilling one. Every run pads all sequences to its row count, so the chunk is
  // bounded by the room left in every running sequence's cache.
  int64_t chunk = step_chunk();
  bool any = false;
  for (const Slot& s : slots_)
    if (s.req) {
      chunk = std::min(chunk, ctx - static_cast<int64_t>(s.cached.size()));
      any = true;
    }
  if (!any) return;
  chunk = std::max<int64_t>(chunk, 1);
  std::vector<std::vector<int32_t>> tokens(slots_.size());
  int64_t longest = 0;
  for (size_t b = 0; b < slots_.size(); ++b) {
    Slot& s = slots_[b];
    if (!s.req) continue;
    const std::vector<int32_t>& prompt = s.req->params().prompt;
    if (s.next_token >= 0) {
      tokens[b] = {s.next_token};
    } else {
      const size_t n = std::min(prompt.size() - s.fed, static_cast<size_t>(chunk));
      tokens[b].assign(prompt.begin() + static_cast<std::ptrdiff_t>(s.fed),
                       prompt.begin() + static_cast<std::ptrdiff_t>(s.fed + n));
    }
    longest = std::max<int64_t>(longest, static_cast<int64_t>(tokens[b].size()));
  }
  // A free slot's cache must stay clear of the padding rows the run writes after its
  // end: keep only the prefix that the longest possible padded run leaves alone.
  int64_t rows = 1;
  if (longest > 1) {
    rows = std::max<int64_t>(model_.min_bucket(), 1);
    while (rows < longest) rows *= 2;
  }
  for (size_t b = 0; b < slots_.size(); ++b) {
    Slot& s = slots_[b];
    if (s.req || static_cast<int64_t>(s.cached.size()) + rows <= ctx) continue;
    const int64_t keep = model_.can_truncate() ? std::max<int64_t>(ctx - rows, 0) : 0;
    s.cached.resize(static_cast<size_t>(keep));
    (void)model_.truncate(static_cast<int64_t>(b), keep);
  }

  if (!fit_kv_budget(tokens)) {
    publish_kv_memory();
    return;
  }

  // Greedy streams only: the executable picks each token (on a GPU, a run copies back
  // one token a sequence instead of its logits, and the host samples nothing).
  const bool greedy = all_greedy();
  std::vector<std::vector<float>> logits;
  std::vector<int32_t> picked;
  const Clock::time_point t0 = Clock::now();
  Status run;
  if (greedy) {
    auto out = model_.forward_batch_greedy(tokens, /*mark_non_finite=*/true);
    if (out) picked = std::move(*out);
    else run = out.error();
  } else {
    auto out = model_.forward_batch(tokens, /*all_rows=*/false);
    if (out) logits = std::move(*out);
    else run = out.error();
  }
  metrics_.step_duration.observe(seconds_since(t0));
  ++metrics_.decode_steps;
  publish_kv_memory();
  if (!run.ok()) {
    // The device's memory ran out backing the KV cache (a budget larger than the device
    // holds): make room as for the budget -- an idle slot's cached prefix, else the newest
    // request -- and run the step again on the next turn. Nothing ran, nothing moved.
    if (model_.kv_memory_failed() && make_room(fmt::format("KV memory: {}", run.error().message())) >= 0) return;
    for (Slot& s : slots_)
      if (s.req) finish(s, ended(FinishReason::kError, run.error().message()));
    return;
  }
  for (size_t b = 0; b < slots_.size(); ++b) {
    Slot& s = slots_[b];
    if (!s.req) continue;
    s.cached.insert(s.cached.end(), tokens[b].begin(), tokens[b].end());
    if (s.next_token < 0) {
      s.fed += tokens[b].size();
      metrics_.prefill_tokens += static_cast<int64_t>(tokens[b].size());
      if (s.fed < s.req->params().prompt.size()) continue;  // more prompt to read
    }
    if (!greedy) {
      sample(s, b, logits[b]);
    } else if (picked[b] == models::kNonFiniteToken) {  // this request alone fails
      const int64_t position = static_cast<int64_t>(s.cached.size()) - 1;
      finish(s, ended(FinishReason::kError, models::non_finite_logits_error(position).message()));
    } else {
      emit(s, b, picked[b], {});
    }
  }
}

int64_t chunk_within_step_rows(int64_t chunk, int64_t step_rows, int64_t seqs, int64_t min_bucket) {
  if (step_rows <= 0) return chunk;
  int64_t cap = std::max<int64_t>(min_bucket, 1);
  while (cap < chunk && std::max<int64_t>(seqs, 1) * cap * 2 <= step_rows) cap *= 2;
  return std::min(chunk, cap);
}

int64_t Scheduler::step_chunk() const {
  bool decoding = false;
  int64_t last = 0;  // the run covers the slots up to the last busy one
  for (size_t b = 0; b < slots_.size(); ++b)
    if (slots_[b].req) {
      last = static_cast<int64_t>(b) + 1;
      decoding = decoding || slots_[b].next_token >= 0;
    }
  if (!decoding) return options_.prefill_chunk;  // no stream waits on this step
  return chunk_within_step_rows(options_.prefill_chunk, options_.step_rows, model_.run_sequences(last),
                                model_.min_bucket());
}

bool Scheduler::fit_kv_budget(std::vector<std::vector<int32_t>>& tokens) {
  for (;;) {
    Expected<int64_t> short_by = model_.kv_shortfall(tokens);
    if (!short_by || *short_by == 0) return true;  // (an error surfaces from the run itself)
    const int64_t refused = make_room(fmt::format(
        "KV memory: the cache's budget cannot hold this request next to the others running (short by {:.1f} MiB); "
        "retry later or start the server with more --kv-memory", static_cast<double>(*short_by) / 1048576.0));
    if (refused < 0) return false;
    if (refused < static_cast<int64_t>(tokens.size())) tokens[static_cast<size_t>(refused)].clear();
    if (std::all_of(tokens.begin(), tokens.end(), [](const auto& t) { return t.empty(); })) return false;
  }
}

int64_t Scheduler::make_room(const std::string& why) {
  // First the cached prefixes of free slots, least recently used first; those that hold
  // more than a page first (a slot a run covers backs a page for its padding anyway, so
  // evicting a shorter prefix may free nothing).
  const auto page_rows = static_cast<size_t>(model_.kv_memory_state(false).page_rows);
  Slot* victim = nullptr;
  for (const bool small : {false, true}) {
    for (Slot& s : slots_)
      if (!s.req && !s.cached.empty() && (small || s.cached.size() > page_rows) &&
          (!victim || s.last_used < victim->last_used))
        victim = &s;
    if (victim) break;
  }
  if (victim) {
    metrics_.kv_evicted_tokens += static_cast<int64_t>(victim->cached.size());
    victim->cached.clear();
    (void)model_.release_sequence(static_cast<int64_t>(victim - slots_.data()));
    return static_cast<int64_t>(slots_.size());
  }
  // Then the request that came last: the older ones keep their memory and finish.
  Slot* newest = nullptr;
  for (Slot& s : slots_)
    if (s.req && (!newest || s.req->arrival_ > newest->req->arrival_)) newest = &s;
  if (!newest) return -1;
  ++metrics_.kv_refused_requests;
  finish(*newest, ended(FinishReason::kError, why));
  return static_cast<int64_t>(newest - slots_.data());
}

void Scheduler::publish_kv_memory() {
  const bool measure = kv_steps_++ % 256 == 0;  // (the CPU walks the mapping's pages)
  const models::KvMemoryState m = model_.kv_memory_state(measure);
  metrics_.kv_budget_bytes = m.budget;
  metrics_.kv_reserved_bytes = m.reserved;
  metrics_.kv_backed_bytes = m.backed;
  if (measure) metrics_.kv_resident_bytes = m.resident;
}

bool Scheduler::all_greedy() const {
  for (const Slot& s : slots_) {
    if (!s.req) continue;
    const GenerationParams& p = s.req->params();
    if (p.sampling.temperature > 0.0f || p.sampling.has_penalties() || p.top_logprobs >= 0) return false;
  }
  return true;
}

void Scheduler::sample(Slot& s, size_t index, std::span<const float> logits) {
  if (Status finite = models::check_logits_finite(logits, static_cast<int64_t>(s.cached.size()) - 1); !finite.ok()) {
    finish(s, ended(FinishReason::kError, finite.error().message()));
    return;
  }
  emit(s, index, s.sampler->sample(logits, s.generated), logits);
}

void Scheduler::emit(Slot& s, size_t index, int32_t token, std::span<const float> logits) {
  const GenerationParams& p = s.req->params();
  s.generated.push_back(token);
  ++metrics_.generated_tokens;
  if (s.generated.size() == 1)
    metrics_.time_to_first_token.observe(seconds_since(s.req->arrival_));
  else
    metrics_.inter_token.observe(seconds_since(s.last_token));
  s.last_token = Clock::now();

  GenerationEvent e;
  e.tokens = {token};
  if (p.top_logprobs >= 0 && !logits.empty()) e.logprobs.push_back(logprobs_of(logits, token, p.top_logprobs));
  if (tokenizer_.is_end_of_generation(token)) {
    e.text = s.text->finish();
    e.finish = FinishReason::kStop;
  } else {
    bool stopped = false;
    auto piece = s.text->push(token, &stopped);
    if (!piece) {
      e.finish = FinishReason::kError;
      e.error = piece.error().message();
    } else {
      e.text = std::move(*piece);
      if (stopped) {
        e.finish = FinishReason::kStop;
      } else if (static_cast<int64_t>(s.generated.size()) >= p.max_tokens ||
                 model_.n_past(static_cast<int64_t>(index)) >= model_.context_length()) {
        e.text += s.text->finish();
        e.finish = FinishReason::kLength;
      }
    }
  }
  if (e.finish != FinishReason::kNone) {
    finish(s, std::move(e));
    return;
  }
  s.next_token = token;
  s.req->push(std::move(e));
}

}  // namespace rlx::serve
