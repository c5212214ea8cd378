// Helpers for the runtime tests: deterministic random data, compiling a builder's
// graph on the CPU, and error measurement against double-precision references.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "rlx/rlx.h"

namespace rlx::rt_test {

inline std::vector<float> random_vec(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

inline double max_abs_diff(std::span<const float> a, std::span<const double> b) {
  EXPECT_EQ(a.size(), b.size());
  double m = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    const double d = std::fabs(double(a[i]) - b[i]);
    if (std::isnan(d)) return INFINITY;
    m = std::max(m, d);
  }
  return m;
}

inline double max_abs_diff(std::span<const float> a, std::span<const float> b) {
  EXPECT_EQ(a.size(), b.size());
  double m = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    const double d = std::fabs(double(a[i]) - double(b[i]));
    if (std::isnan(d)) return INFINITY;
    m = std::max(m, d);
  }
  return m;
}

inline std::vector<float> as_f32(const Tensor& t) {
  auto v = t.to_f32();
  EXPECT_TRUE(v.has_value());
  return v ? *v : std::vector<float>{};
}

/// Compiles `g` on the CPU with `opt`, failing the test on error.
inline CompiledGraph compile_cpu(const ir::Graph& g, const compile::CompileOptions& opt = {}) {
  Session s(Device::cpu());
  auto c = s.compile_with(g, opt);
  if (!c) ADD_FAILURE() << c.error().to_string();
  return std::move(c).value();
}

inline ir::Graph build(ir::GraphBuilder& b) {
  auto g = b.build();
  if (!g) ADD_FAILURE() << g.error().to_string();
  return std::move(g).value();
}

}  // namespace rlx::rt_test
