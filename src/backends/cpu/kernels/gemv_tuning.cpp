// Online choice of the decode GEMVs' far prefetch distance (gemv_tuning.h): the first
// one-row GEMVs of at least 1 MiB rotate through the candidates, 128 MiB of weights per
// turn for four rounds (about one token of a 1B Q8_0 model; the first round is not
// counted, as it pays for first touches of the weights), then the distance with the
// most bytes per second stays. Before that, and for good when RLX_CPU_GEMV_PREFETCH
// is set, the vendor default applies (4 KiB on Intel, measured on a Sapphire Rapids
// host; 0 elsewhere).
#include "backends/cpu/kernels/gemv_tuning.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <random>
#include <vector>

#include "backends/cpu/kernels/cpu_features.h"
#include "backends/cpu/kernels/isa_kernels.h"
#include "backends/cpu/kernels/qmatmul_kernels.h"
#include "rlx/base/env.h"
#include "rlx/base/half.h"
#include "rlx/formats/quant_blocks.h"

namespace rlx::cpu {
namespace {

constexpr std::array<int, 3> kCandidates = {0, 1024, 4096};
constexpr size_t kTurnBytes = size_t{128} << 20;
constexpr int kRounds = 4;  // the first one only warms up

int vendor_default() { return cpu_features().vendor == "GenuineIntel" ? 4096 : 0; }

class Tuner {
 public:
  Tuner() { start(); }

  // Back to the state before any measurement (the constructor; tests re-arm it).
  void start() {
    std::lock_guard<std::mutex> lock(mu_);
    turn_ = turns_ = 0;
    turn_bytes_ = 0;
    bytes_ = {};
    seconds_ = {};
    if (env_config().cpu_gemv_prefetch >= 0) {
      current_ = env_config().cpu_gemv_prefetch;
      how_ = "set by RLX_CPU_GEMV_PREFETCH";
      active_ = false;
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

  void record(size_t bytes, double seconds, int prefetch) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!active_) return;
    const int at = turn_;
    // A call that began under another distance (a concurrent caller moved it) is dropped.
    if (kCandidates[static_cast<size_t>(at)] != prefetch) return;
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

// The loop shape of one-row GEMVs, chosen once before any real call (the two shapes
// round differently, so it never changes within a process): the 512-bit one-row loops
// against the shared ones on an L2-resident matrix of each kind that has both (1 x 2048
// x 512: about 0.6 MiB of Q4_K), on the calling thread, best of 15 calls each, taken
// when they are at least 15 % faster: a margin that a busy moment does not flip, so
// processes on one machine choose alike (Zen 5: ~30 % faster; Zen 4: no gain). That is the loops' own speed, which
// bounds decode wherever DRAM can feed more (Zen 5 runs 512-bit operations at full width; Zen 4 splits them in two
// halves).
struct LoopShape {
  bool one_row = false;
  std::string how;
};

LoopShape measure_loop_shape() {
  LoopShape out;
  if (env_config().cpu_gemv_zmm >= 0) {
    out.one_row = env_config().cpu_gemv_zmm == 1;
    out.how = "set by RLX_CPU_GEMV_ZMM";
    return out;
  }
  const detail::QKernels& qk = detail::qkernels(IsaLevel::kAmx);
  constexpr int64_t kK = 2048, kN = 512;
  const detail::QKind kinds[] = {detail::QKind::kQ4_K, detail::QKind::kQ6_K, detail::QKind::kQ8_0};
  std::mt19937 gen(1);
  double shared_s = 0, one_row_s = 0;
  for (detail::QKind kind : kinds) {
    const int ki = static_cast<int>(kind);
    if (qk.gemv_one_row[ki] == nullptr) continue;
    const bool q8 = kind == detail::QKind::kQ8_0;
    const size_t block_bytes = q8                             ? sizeof(formats::BlockQ8_0)
                               : kind == detail::QKind::kQ4_K ? sizeof(formats::BlockQ4_K)
                                                              : sizeof(formats::BlockQ6_K);
    const int64_t block = q8 ? 32 : 256, nb = kK / block;
    const size_t row_bytes = static_cast<size_t>(nb) * block_bytes;
    std::vector<uint8_t> w(row_bytes * kN);
    for (uint8_t& b : w) b = static_cast<uint8_t>(gen());
    // Sane f16 scales (random bits could be NaN or subnormal, which some CPUs run slower).
    const uint16_t half = f32_to_f16_bits(0.01f);
    for (size_t at = 0; at < w.size(); at += block_bytes) {
      const size_t d_at = q8 ? 0 : kind == detail::QKind::kQ4_K ? 0 : block_bytes - 2;
      std::memcpy(w.data() + at + d_at, &half, 2);
      if (kind == detail::QKind::kQ4_K) std::memcpy(w.data() + at + 2, &half, 2);
    }
    const size_t act_bytes = q8 ? static_cast<size_t>(nb) * sizeof(formats::BlockQ8_0)
                                : static_cast<size_t>(nb) * sizeof(formats::BlockQ8_K);
    std::vector<uint8_t> act(act_bytes);
    for (uint8_t& b : act) b = static_cast<uint8_t>(gen() % 200);
    const size_t act_block = q8 ? sizeof(formats::BlockQ8_0) : sizeof(formats::BlockQ8_K);
    const float scale = 0.01f;
    for (size_t at = 0; at < act.size(); at += act_block) {
      if (q8) {
        std::memcpy(act.data() + at, &half, 2);
      } else {
        std::memcpy(act.data() + at, &scale, 4);
      }
    }
    std::vector<float> y(kN);
    auto best_of = [&](detail::QGemvFn fn) {
      double best = 1e30;
      for (int rep = 0; rep < 15; ++rep) {
        const auto t0 = std::chrono::steady_clock::now();
        fn(1, nb, w.data(), row_bytes, act.data(), act_bytes, 0, kN, y.data(), kN);
        best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      }
      return best;
    };
    best_of(qk.gemv[ki]);                      // warm the caches
    for (int round = 0; round < 2; ++round) {  // alternated, so a busy moment hits both
      shared_s += best_of(qk.gemv[ki]);
      one_row_s += best_of(qk.gemv_one_row[ki]);
    }
  }
  if (shared_s == 0) {
    out.how = "no 512-bit one-row loops with this ISA";
    return out;
  }
  out.one_row = one_row_s < 0.85 * shared_s;
  char buf[160];
  std::snprintf(buf, sizeof buf,
                "measured at start-up on L2-resident Q4_K, Q6_K and Q8_0: one-row %.1f us, shared %.1f us",
                one_row_s * 1e6, shared_s * 1e6);
  out.how = buf;
  return out;
}

const LoopShape& loop_shape() {
  static const LoopShape shape = measure_loop_shape();
  return shape;
}

}  // namespace

bool detail::gemv_one_row_zmm() { return loop_shape().one_row; }

int detail::gemv_far_prefetch() { return tuner().current(); }

void detail::gemv_tuning_restart() { tuner().start(); }

bool detail::gemv_tuning_active() { return tuner().active(); }

void detail::gemv_tuning_record(size_t bytes, double seconds, int prefetch) {
  tuner().record(bytes, seconds, prefetch);
}

std::string describe_gemv_tuning() {
  const LoopShape& shape = loop_shape();
  return "L2 prefetch " + std::to_string(tuner().current()) + " B ahead (" + tuner().how() +
         "); 512-bit one-row loops " + (shape.one_row ? "on" : "off") + " (" + shape.how + ")";
}

}  // namespace rlx::cpu
