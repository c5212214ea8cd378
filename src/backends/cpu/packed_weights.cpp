// PackedWeightCache: one packed copy per (shared param buffer, offset, layout, ISA).
#include "backends/cpu/packed_weights.h"

#include <iterator>

namespace rlx::cpu_backend {
namespace {

// Source bytes packed between two releases of a file-mapped weight's pages.
constexpr size_t kReleaseStepBytes = size_t{8} << 20;

}  // namespace

std::shared_ptr<const cpu::PackedB> PackedWeightCache::pack(const cpu::KernelContext& ctx, const uint8_t* data,
                                                            const PackRequest& req) {
  return std::make_shared<const cpu::PackedB>(cpu::pack_b(ctx, req.k, req.n, req.b_transposed, 0, data, req.type));
}

std::shared_ptr<const cpu::PackedB> PackedWeightCache::get(const cpu::KernelContext& ctx, const ByteView& source,
                                                           int64_t offset, const PackRequest& req) {
  const Key key{source.data(), offset, req.k, req.n, req.b_transposed, req.type, cpu::resolve_isa(ctx.isa)};
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = entries_.find(key); it != entries_.end()) {
    // The same owner (control block), so not new bytes reallocated at an old address.
    const std::weak_ptr<const void>& had = it->second.source;
    if (!had.owner_before(source.owner()) && !source.owner().owner_before(had)) {
      if (auto packed = it->second.packed.lock()) {
        ++hits_;
        return packed;
      }
    }
  }
  // Drop entries whose buffer or packed copy is gone, so the map stays one per live weight.
  for (auto it = entries_.begin(); it != entries_.end();)
    it = (it->second.has_owner && it->second.source.expired()) || it->second.packed.expired() ? entries_.erase(it)
                                                                                              : std::next(it);
  // Pages of a file mapping are released as they are consumed (an [N, K] weight is read
  // in row order), so packing holds about one step of the source at a time beside the
  // packed copy; a [K, N] weight is released whole at the end.
  const size_t esize = cpu::weight_type_size(req.type);
  const size_t bytes = static_cast<size_t>(req.k * req.n) * esize;
  auto done = [&](int64_t n_done) {
    if (!req.b_transposed && n_done < req.n) return;
    const size_t upto = req.b_transposed ? static_cast<size_t>(n_done * req.k) * esize : bytes;
    // From the start each time: a page that straddles two steps goes with the later one.
    source.release_pages(static_cast<size_t>(offset), upto);
  };
  std::function<void(int64_t)> on_step;
  if (source.is_file_backed()) on_step = done;
  auto packed = std::make_shared<const cpu::PackedB>(cpu::pack_b(
      ctx, req.k, req.n, req.b_transposed, 0, source.data() + offset, req.type, kReleaseStepBytes, on_step));
  ++packs_;
  entries_[key] = Entry{source.owner(), source.owner() != nullptr, packed};
  return packed;
}

PackedWeightStats PackedWeightCache::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  PackedWeightStats s;
  s.packs = packs_;
  s.hits = hits_;
  for (const auto& [key, e] : entries_) {
    if (auto p = e.packed.lock()) {
      ++s.live;
      s.live_bytes += static_cast<int64_t>(p->bytes());
    }
  }
  return s;
}

}  // namespace rlx::cpu_backend
