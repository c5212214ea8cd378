// Online choice of the decode GEMVs' far prefetch distance, then of their thread split
// (gemv_tuning.h): the first one-row GEMVs of at least 1 MiB rotate through the
// candidates, 128 MiB of weights per turn for four rounds (about one token of a 1B Q8_0
// model; the first round is not counted, as it pays for first touches of the weights),
// then the candidate with the most bytes per second stays. Before that, and for good
// when RLX_CPU_GEMV_PREFETCH / RLX_CPU_GEMV_SPLIT is set, the default applies (prefetch:
// 4 KiB on Intel, measured on a Sapphire Rapids host, 0 elsewhere; split: 8 tasks a
// thread).
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

constexpr size_t kTurnBytes = size_t{128} << 20;
constexpr int kRounds = 4;  // the first one only warms up

int vendor_prefetch() { return cpu_features().vendor == "GenuineIntel" ? 4096 : 0; }

// One setting measured on real one-row GEMVs: the candidates take turns of 128 MiB of
// weights for kRounds rounds (the first not counted), then the one with the most bytes
// a second stays. A value given in the environment is kept and nothing is measured.
class Tuner {
 public:
  struct Spec {
    std::string (*label)(int);   // how a candidate is printed: "4096 B", "2 runs"
    std::array<int, 3> candidates;
    int (*fallback)();           // the value before (or without) a measurement
    int from_env;                // -1: not set
    const char* env_name;
  };

  explicit Tuner(Spec spec) : spec_(spec) { start(); }

  // Back to the state before any measurement (the constructor; tests re-arm it).
  void start() {
    std::lock_guard<std::mutex> lock(mu_);
    turn_ = turns_ = 0;
    turn_bytes_ = 0;
    bytes_ = {};
    seconds_ = {};
    if (spec_.from_env >= 0) {
      current_ = spec_.from_env;
      how_ = std::string("set by ") + spec_.env_name;
      active_ = false;
      return;
    }
    current_ = spec_.fallback();
    for (size_t i = 0; i < spec_.candidates.size(); ++i)
      if (spec_.candidates[i] == current_) turn_ = static_cast<int>(i);
    active_ = true;
    how_ = "default; not measured yet (no decode GEMV of 1 MiB or more so far)";
  }

  int current() const { return current_.load(std::memory_order_relaxed); }
  bool active() const { return active_.load(std::memory_order_relaxed); }

  void record(size_t bytes, double seconds, int value) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!active_) return;
    const auto& cand = spec_.candidates;
    const int at = turn_;
    // A call that began under another value (a concurrent caller moved it) is dropped.
    if (cand[static_cast<size_t>(at)] != value) return;
    if (turns_ >= static_cast<int>(cand.size())) {
      bytes_[static_cast<size_t>(at)] += static_cast<double>(bytes);
      seconds_[static_cast<size_t>(at)] += seconds;
    }
    turn_bytes_ += bytes;
    if (turn_bytes_ < kTurnBytes) return;
    turn_bytes_ = 0;
    turn_ = (turn_ + 1) % static_cast<int>(cand.size());
    if (++turns_ < kRounds * static_cast<int>(cand.size())) {
      current_ = cand[static_cast<size_t>(turn_)];
      return;
    }
    size_t best = 0;
    std::string rates;
    for (size_t i = 0; i < cand.size(); ++i) {
      const double rate = seconds_[i] > 0 ? bytes_[i] / seconds_[i] : 0.0;
      if (rate > bytes_[best] / std::max(seconds_[best], 1e-12)) best = i;
      char buf[64];
      std::snprintf(buf, sizeof buf, "%s%s %.1f GB/s", i == 0 ? "" : ", ", spec_.label(cand[i]).c_str(), rate / 1e9);
      rates += buf;
    }
    current_ = cand[best];
    how_ = "measured on the first decode GEMVs: " + rates;
    active_ = false;
  }

  std::string how() const {
    std::lock_guard<std::mutex> lock(mu_);
    return how_;
  }

 private:
  const Spec spec_;
  mutable std::mutex mu_;
  std::atomic<int> current_{0};
  std::atomic<bool> active_{false};
  std::string how_;
  int turn_ = 0, turns_ = 0;
  size_t turn_bytes_ = 0;
  std::array<double, std::tuple_size_v<decltype(Spec::candidates)>> bytes_{}, seconds_{};  // per candidate
};

std::string bytes_label(int v) { return std::to_string(v) + " B"; }
std::string runs_label(int v) { return std::to_string(v) + (v == 1 ? " run" : " runs"); }

// The far prefetch distance, measured first.
Tuner& prefetch_tuner() {
  static Tuner t({&bytes_label, {0, 1024, 4096}, &vendor_prefetch, env_config().cpu_gemv_prefetch,
                  "RLX_CPU_GEMV_PREFETCH"});
  return t;
}

// Then, with that distance, how a one-row GEMV's rows are cut into tasks: one or two
// contiguous runs a thread (each thread streams its own part of the matrix) or eight
// smaller ones (balance, when threads are late to start). On this project's Zen VM one
// run a thread decoded Q8_0 3-18 % and Q4_K_M 6-34 % faster than eight (bench/NOTES.md,
// session 35).
int default_split() { return 8; }
Tuner& split_tuner() {
  static Tuner t({&runs_label, {1, 2, 8}, &default_split, env_config().cpu_gemv_split,
                  "RLX_CPU_GEMV_SPLIT"});
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

int detail::gemv_far_prefetch() { return prefetch_tuner().current(); }

int detail::gemv_split() { return split_tuner().current(); }

void detail::gemv_tuning_restart() {
  prefetch_tuner().start();
  split_tuner().start();
}

bool detail::gemv_tuning_active() { return prefetch_tuner().active() || split_tuner().active(); }

void detail::gemv_tuning_record(size_t bytes, double seconds, int prefetch, int split) {
  // One setting at a time: the split is measured once the distance has settled.
  if (prefetch_tuner().active()) {
    if (split == split_tuner().current()) prefetch_tuner().record(bytes, seconds, prefetch);
    return;
  }
  if (prefetch == prefetch_tuner().current()) split_tuner().record(bytes, seconds, split);
}

std::string describe_gemv_tuning() {
  const LoopShape& shape = loop_shape();
  return "L2 prefetch " + std::to_string(prefetch_tuner().current()) + " B ahead (" + prefetch_tuner().how() +
         "); one-row GEMV rows in " + runs_label(split_tuner().current()) + " a thread (" + split_tuner().how() +
         "); 512-bit one-row loops " + (shape.one_row ? "on" : "off") + " (" + shape.how + ")";
}

}  // namespace rlx::cpu
