// Helpers shared by the CUDA test files: skipping without a device, deterministic random
// tensors and the relative L2 error the CPU-vs-CUDA comparisons use.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "rlx/rlx.h"

namespace rlx::cuda_test {

/// Skips the calling test when no CUDA device is available (CI has none).
#define REQUIRE_CUDA()                                                                      \
  do {                                                                                      \
    if (!::rlx::is_available(::rlx::Device::cuda())) GTEST_SKIP() << "no CUDA device: skipped"; \
  } while (0)

inline std::vector<float> random_vec(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

/// A random f32 tensor of `shape`, values uniform in [lo, hi).
inline Tensor f32(std::vector<int64_t> shape, uint32_t seed, float lo = -1, float hi = 1) {
  int64_t n = 1;
  for (auto d : shape) n *= d;
  return Tensor::from_f32(random_vec(static_cast<size_t>(n), seed, lo, hi), std::move(shape));
}

/// ||a - b|| / ||b|| (||a - b|| when b is zero); NaN counts as a mismatch.
inline double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = double(a[i]) - double(b[i]);
    if (std::isnan(d)) return INFINITY;
    num += d * d;
    den += double(b[i]) * b[i];
  }
  return den == 0 ? std::sqrt(num) : std::sqrt(num / den);
}

}  // namespace rlx::cuda_test
