// LanguageModel's KV memory: which of the backend's cache storages are paged, what each
// sequence has asked to be backed, and the budget (LoadOptions::kv_memory). A paged
// cache is reserved whole ([batch, ctx, row] per layer) but memory backs a sequence's rows
// only as its runs reach them, in steps of whole pages; rows a sequence no longer holds
// are given back when the budget needs them, and a server gives back whole sequences
// (release_sequence) to evict cached prefixes.
#include <algorithm>
#include <limits>

#include "rlx/base/log.h"
#include "rlx/models/language_model.h"

namespace rlx::models {

Status LanguageModel::index_state() {
  state_index_.clear();
  kv_paged_ = false;
  kv_row_bytes_ = kv_state_bytes_ = kv_fixed_bytes_ = kv_reserved_ = 0;
  kv_page_rows_ = 1;
  // Host memory reads as zeros where nothing backs it; a GPU's kernels would fault there.
  const DeviceKind kind = options_.device.kind;
  kv_read_ahead_ = kind == DeviceKind::kCpu || kind == DeviceKind::kReference ? 0 : kKvReadAheadRows;
  const int64_t batch = options_.batch, ctx = options_.ctx;
  kv_backed_.assign(static_cast<size_t>(batch), 0);
  for (const auto& [name, storage] : state_) {
    StateHandle h;
    h.storage = storage.get();
    const int64_t bytes = storage->bytes();
    kv_reserved_ += bytes;
    // KV caches ("cache.k.N" / "cache.v.N") are [batch, ctx, row]; the recurrent states
    // ([batch, ...]) are one block a sequence.
    const bool kv = name.starts_with("cache.k.") || name.starts_with("cache.v.");
    h.rows = kv ? ctx : 1;
    // Paged where a sequence's rows fill whole pages: then backing and releasing one
    // sequence's rows never touches a page of another, and the budget counts what memory
    // holds (a sequence of 512 rows of 2 KiB on CUDA's 2 MiB pages would share its pages).
    const int64_t page = storage->page_bytes();
    h.paged = page > 0 && bytes % batch == 0 && (bytes / batch) % page == 0 && (bytes / batch) % h.rows == 0;
    if (!h.paged) {
      kv_fixed_bytes_ += bytes;
    } else if (kv) {
      const int64_t row_bytes = bytes / (batch * ctx);
      kv_row_bytes_ += row_bytes;
      kv_page_rows_ = std::max(kv_page_rows_, (page + row_bytes - 1) / std::max<int64_t>(row_bytes, 1));
      kv_paged_ = true;
    } else {
      kv_state_bytes_ += bytes / batch;
      kv_paged_ = true;
    }
    state_index_.push_back(h);
  }
  if (!kv_paged_) {
    // Every row is backed from the start.
    std::fill(kv_backed_.begin(), kv_backed_.end(), ctx);
    if (options_.kv_memory > 0 && kv_reserved_ > options_.kv_memory)
      kv_error_ = Error::invalid_argument(
          "the {} backend allocates the whole KV cache up front ({:.1f} MiB for {} sequences of {} tokens), more "
          "than the KV memory budget of {:.1f} MiB",
          options_.device.to_string(), static_cast<double>(kv_reserved_) / 1048576.0, batch, ctx,
          static_cast<double>(options_.kv_memory) / 1048576.0);
  }
  if (kv_error_) return *kv_error_;  // (kept: every later run reports it too)
  RLX_LOG_DEBUG("kv cache: {:.1f} MiB reserved, {} (pages of {} rows), budget {:.1f} MiB",
                static_cast<double>(kv_reserved_) / 1048576.0, kv_paged_ ? "paged" : "backed whole", kv_page_rows_,
                static_cast<double>(options_.kv_memory > 0 ? options_.kv_memory : kv_reserved_) / 1048576.0);
  return {};
}

int64_t LanguageModel::kv_rows_held(int64_t n) const {
  if (n <= 0) return 0;
  return std::min(options_.ctx, (n + kv_page_rows_ - 1) / kv_page_rows_ * kv_page_rows_);
}

int64_t LanguageModel::kv_sequence_bytes(int64_t rows) const {
  return rows * kv_row_bytes_ + (rows > 0 ? kv_state_bytes_ : 0);
}

std::vector<int64_t> LanguageModel::kv_targets(std::span<const std::pair<int64_t, int64_t>> ends, bool release) const {
  std::vector<int64_t> target(kv_backed_.size());
  for (size_t b = 0; b < target.size(); ++b)
    target[b] = release ? std::min(kv_backed_[b], kv_rows_held(n_past_[b])) : kv_backed_[b];
  for (const auto& [seq, end] : ends) {
    int64_t& t = target[static_cast<size_t>(seq)];
    t = std::max(t, kv_rows_held(end + kv_read_ahead_));
  }
  return target;
}

int64_t LanguageModel::kv_bytes_of(const std::vector<int64_t>& rows) const {
  int64_t bytes = kv_fixed_bytes_;
  for (int64_t r : rows) bytes += kv_sequence_bytes(r);
  return bytes;
}

int64_t LanguageModel::kv_budget() const { return options_.kv_memory > 0 ? options_.kv_memory : kv_reserved_; }

Status LanguageModel::kv_back(std::span<const std::pair<int64_t, int64_t>> ends) {
  if (kv_error_) return *kv_error_;
  if (!kv_paged_) return {};
  return kv_back_paged(ends);
}

Status LanguageModel::kv_back_paged(std::span<const std::pair<int64_t, int64_t>> ends) {
  std::vector<int64_t> target = kv_targets(ends, /*release=*/false);
  if (kv_bytes_of(target) > kv_budget()) {
    // Past the budget: give back the rows no sequence holds any more (a finished
    // request's tail, a truncated sequence's rest), whole pages, then try again.
    target = kv_targets(ends, /*release=*/true);
    if (const int64_t after = kv_bytes_of(target); after > kv_budget())
      return Error::resource_exhausted(
          "KV memory: this run needs {:.1f} MiB of KV cache, more than the budget of {:.1f} MiB; free sequences "
          "(their cached tokens hold {:.1f} MiB) or give the cache more memory",
          static_cast<double>(after) / 1048576.0, static_cast<double>(kv_budget()) / 1048576.0,
          static_cast<double>(kv_bytes_of(kv_targets({}, true))) / 1048576.0);
    for (size_t b = 0; b < target.size(); ++b)
      if (target[b] < kv_backed_[b]) TRY(kv_resize(static_cast<int64_t>(b), target[b]));
  }
  for (size_t b = 0; b < target.size(); ++b)
    if (target[b] > kv_backed_[b]) TRY(kv_resize(static_cast<int64_t>(b), target[b]));
  return {};
}

Status LanguageModel::kv_resize(int64_t seq, int64_t rows) {
  int64_t& have = kv_backed_[static_cast<size_t>(seq)];
  const bool grow = rows > have;
  const int64_t from = std::min(rows, have), n = std::max(rows, have) - from;
  auto apply = [&](bool back) -> Status {
    for (const StateHandle& h : state_index_) {
      if (!h.paged) continue;
      // A KV cache's rows [from, from + n); a recurrent state whole, with the first row.
      const bool kv = h.rows == options_.ctx;
      if (!kv && from != 0) continue;
      const int64_t first = kv ? from : 0, count = kv ? n : 1;
      TRY(back ? h.storage->back_rows(options_.batch, h.rows, seq, first, count)
               : h.storage->release_rows(options_.batch, h.rows, seq, first, count));
    }
    return {};
  };
  if (Status st = apply(grow); !st.ok()) {
    // A grow that failed part way (the device out of memory) gives back what it backed.
    if (grow) (void)apply(false);
    return st;
  }
  have = rows;
  return {};
}

Status LanguageModel::release_sequence(int64_t seq) {
  if (seq < 0 || seq >= options_.batch)
    return Error::invalid_argument("release_sequence: sequence {} is outside [0, {})", seq, options_.batch);
  const auto b = static_cast<size_t>(seq);
  n_past_[b] = 0;
  intact_[b] = std::numeric_limits<int64_t>::max();
  return kv_paged_ ? kv_resize(seq, 0) : Status{};
}

Expected<int64_t> LanguageModel::kv_shortfall(std::span<const std::vector<int32_t>> tokens) {
  ASSIGN_OR_RETURN(BatchPlan plan, plan_batch(tokens));
  if (!kv_paged_) return int64_t{0};
  return std::max<int64_t>(kv_bytes_of(kv_targets(plan_ends(plan), /*release=*/true)) - kv_budget(), 0);
}

std::vector<std::pair<int64_t, int64_t>> LanguageModel::plan_ends(const BatchPlan& plan) {
  std::vector<std::pair<int64_t, int64_t>> ends;
  for (int64_t b = 0; b < plan.seqs; ++b) ends.emplace_back(b, plan.start[static_cast<size_t>(b)] + plan.rows);
  return ends;
}

KvMemoryState LanguageModel::kv_memory_state(bool measure_resident) const {
  KvMemoryState m;
  m.paged = kv_paged_;
  m.reserved = kv_reserved_;
  m.budget = kv_budget();
  m.page_rows = kv_page_rows_;
  m.backed = kv_paged_ ? kv_bytes_of(kv_backed_) : kv_reserved_;
  if (measure_resident)
    for (const StateHandle& h : state_index_) m.resident += h.storage->resident_bytes();
  return m;
}

}  // namespace rlx::models
