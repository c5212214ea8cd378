// Online choice of the decode GEMVs' far prefetch distance (gemv_tuning.h): the first
// one-row GEMVs of at least 1 MiB rotate through the candidates, 128 MiB of weights per
// turn for four rounds (about one token of a 1B Q8_0 model; the first round is not
// counted, as it pays for first touches of the weights), then the distance with the
// most bytes per second stays. Before that, and for good when RLX_CPU_GEMV_PREFETCH
// is set, the vendor default applies (4 KiB on Intel, measured on a Sapphire Rapids
// host; 0 elsewhere).
#include "backends/cpu/kernels/gemv_tuning.h"

#include <array>
#include <atomic>
#include <cstdio>
#include <mutex>

#include "backends/cpu/kernels/cpu_features.h"
#include "backends/cpu/kernels/isa_kernels.h"
#include "rlx/base/env.h"

namespace rlx::cpu {
namespace {

constexpr std::array<int, 3> kCandidates = {0, 1024, 4096};
constexpr size_t kTurnBytes = size_t{128} << 20;
constexpr int kRounds = 4;  // the first one only warms up

int vendor_default() { return cpu_features().vendor == "GenuineIntel" ? 4096 : 0; }

class Tuner {
 public:
  Tuner() {
    if (env_config().cpu_gemv_prefetch >= 0) {
      current_ = env_config().cpu_gemv_prefetch;
      how_ = "set by RLX_CPU_GEMV_PREFETCH";
      return;
    }
    current_ = vendor_default();
    for (size_t i = 0; i < kCandidates.size(); ++i)
      if (kCandidates[i] == current_) turn_ = static_cast<int>(i);
    active_ = true;
    how_ = "vendor default; not measured yet (no decode GEMV of 1 MiB or more so far)";
  }

  int current() const { return current_.load(std::memory_order_relaxed); }
  bool active() const { return active_.load(std::memory_order_relaxed); }

  void record(size_t bytes, double seconds) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!active_) return;
    const int at = turn_;
    // A call that began under another distance (a concurrent caller moved it) is dropped.
    if (kCandidates[static_cast<size_t>(at)] != current_.load(std::memory_order_relaxed)) return;
    if (turns_ >= static_cast<int>(kCandidates.size())) {
      bytes_[static_cast<size_t>(at)] += static_cast<double>(bytes);
      seconds_[static_cast<size_t>(at)] += seconds;
    }
    turn_bytes_ += bytes;
    if (turn_bytes_ < kTurnBytes) return;
    turn_bytes_ = 0;
    turn_ = (turn_ + 1) % static_cast<int>(kCandidates.size());
    if (++turns_ < kRounds * static_cast<int>(kCandidates.size())) {
      current_ = kCandidates[static_cast<size_t>(turn_)];
      return;
    }
    size_t best = 0;
    std::string rates;
    for (size_t i = 0; i < kCandidates.size(); ++i) {
      const double rate = seconds_[i] > 0 ? bytes_[i] / seconds_[i] : 0.0;
      if (rate > bytes_[best] / std::max(seconds_[best], 1e-12)) best = i;
      char buf[64];
      std::snprintf(buf, sizeof buf, "%s%d B %.1f GB/s", i == 0 ? "" : ", ", kCandidates[i], rate / 1e9);
      rates += buf;
    }
    current_ = kCandidates[best];
    how_ = "measured on the first decode GEMVs: " + rates;
    active_ = false;
  }

  std::string how() const {
    std::lock_guard<std::mutex> lock(mu_);
    return how_;
  }

 private:
  mutable std::mutex mu_;
  std::atomic<int> current_{0};
  std::atomic<bool> active_{false};
  std::string how_;
  int turn_ = 0, turns_ = 0;
  size_t turn_bytes_ = 0;
  std::array<double, kCandidates.size()> bytes_{}, seconds_{};
};

Tuner& tuner() {
  static Tuner t;
  return t;
}

}  // namespace

int detail::gemv_far_prefetch() { return tuner().current(); }

bool detail::gemv_tuning_active() { return tuner().active(); }

void detail::gemv_tuning_record(size_t bytes, double seconds) { tuner().record(bytes, seconds); }

std::string describe_gemv_tuning() {
  const bool zmm = detail::gemv_one_row_zmm();
  return "L2 prefetch " + std::to_string(tuner().current()) + " B ahead (" + tuner().how() +
         "); 512-bit one-row loops " + (zmm ? "on" : "off") + " (" +
         (env_config().cpu_gemv_zmm >= 0 ? "set by RLX_CPU_GEMV_ZMM" : "vendor default") + ")";
}

}  // namespace rlx::cpu
