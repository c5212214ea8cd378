// Shared helpers for the CPU kernel tests: fresh random seeds (printed on failure),
// the list of ISA levels this machine can force, thread-pool fixtures and
// tolerance checks against float64 references.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/kernels/cpu_features.h"
#include "backends/cpu/kernels/gemv_tuning.h"
#include "backends/cpu/kernels/isa_kernels.h"
#include "backends/cpu/kernels/kernel_context.h"
#include "backends/cpu/kernels/thread_pool.h"

namespace rlx::cpu::test {

/// Every ISA level up to the machine's best, so each path is forced in turn.
inline std::vector<IsaLevel> isa_levels() {
  std::vector<IsaLevel> out;
  for (int i = 0; i <= static_cast<int>(cpu_features().max_isa); ++i) out.push_back(static_cast<IsaLevel>(i));
  return out;
}

/// Starts the decode prefetch-distance and thread-split measurements over, then calls
/// `run` (a one-row product over 1 MiB or more of weights, returning its output) until
/// both settle: every call's result must be bit for bit the first one (neither setting
/// may change a result), the measurements must end within 8,000 calls, pick one of
/// their candidates each and say so in describe_gemv_tuning().
template <typename Run>
void expect_prefetch_measurement_settles(Run&& run) {
  detail::gemv_tuning_restart();
  const auto first = run();
  int calls = 0;
  while (detail::gemv_tuning_active() && calls < 8000) {
    ASSERT_EQ(run(), first) << "call " << calls;
    ++calls;
  }
  EXPECT_FALSE(detail::gemv_tuning_active()) << "still measuring after " << calls << " calls";
  const int chosen = detail::gemv_far_prefetch();
  EXPECT_TRUE(chosen == 0 || chosen == 1024 || chosen == 4096) << chosen;
  const int split = detail::gemv_split();
  EXPECT_TRUE(split == 1 || split == 2 || split == 8) << split;
  const std::string how = describe_gemv_tuning();
  EXPECT_NE(how.find("B ahead (measured on the first decode GEMVs"), std::string::npos) << how;
  EXPECT_NE(how.find(" a thread (measured on the first decode GEMVs"), std::string::npos) << how;
  EXPECT_EQ(run(), first);
}

/// A pool shared by the tests (3 threads: more than the CI cores, to shake out races).
inline ThreadPool& test_pool() {
  static ThreadPool pool(3);
  return pool;
}

/// Contexts to run each kernel under: every ISA, single-threaded and pooled.
inline std::vector<KernelContext> contexts() {
  std::vector<KernelContext> out;
  for (IsaLevel l : isa_levels()) {
    out.push_back(KernelContext{nullptr, l});
    out.push_back(KernelContext{&test_pool(), l});
  }
  return out;
}

inline std::string describe(const KernelContext& ctx) {
  return std::string("isa=") + isa_name(ctx.isa) + " threads=" + std::to_string(ctx.n_threads());
}

/// Random numbers from a fresh seed each run; the seed is part of every failure message.
struct Rng {
  uint64_t seed;
  std::mt19937_64 gen;
  Rng() : seed(std::random_device{}() ^ (uint64_t{std::random_device{}()} << 32)), gen(seed) {}
  float uniform(float lo, float hi) { return std::uniform_real_distribution<float>(lo, hi)(gen); }
  int64_t integer(int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(gen); }
  std::vector<float> vec(int64_t n, float lo = -1.0f, float hi = 1.0f) {
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = uniform(lo, hi);
    return v;
  }
};

#define RLX_TRACE_SEED(rng) SCOPED_TRACE(::testing::Message() << "seed=" << (rng).seed)

/// |got - want| <= atol + rtol * |want| for every element; reports the first few misses.
inline ::testing::AssertionResult all_close(const float* got, const double* want, int64_t n, double atol,
                                            double rtol) {
  int bad = 0;
  ::testing::AssertionResult r = ::testing::AssertionFailure();
  for (int64_t i = 0; i < n; ++i) {
    const double g = got[i], w = want[i];
    const bool both_nan = std::isnan(g) && std::isnan(w);
    const bool same_inf = std::isinf(g) && std::isinf(w) && (g > 0) == (w > 0);
    if (both_nan || same_inf) continue;
    if (!(std::fabs(g - w) <= atol + rtol * std::fabs(w))) {
      if (bad < 5) r << "[" << i << "] got " << g << " want " << w << " (diff " << std::fabs(g - w) << ")\n";
      ++bad;
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  r << bad << " of " << n << " elements out of tolerance (atol " << atol << ", rtol " << rtol << ")";
  return r;
}

inline ::testing::AssertionResult all_close(const std::vector<float>& got, const std::vector<double>& want,
                                            double atol, double rtol) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << "size mismatch";
  return all_close(got.data(), want.data(), static_cast<int64_t>(got.size()), atol, rtol);
}

}  // namespace rlx::cpu::test
