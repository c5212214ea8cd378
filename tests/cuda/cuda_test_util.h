// Helpers shared by the CUDA test files: skipping without a device, deterministic random
// tensors (float and packed GGUF blocks) and the relative L2 error the CPU-vs-CUDA
// comparisons use.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "rlx/formats/quant.h"
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

/// Random weights in a packed block type: the tensor a param takes and the exact
/// dequantization of its blocks (what a float64 reference multiplies with).
struct PackedWeights {
  Tensor packed;
  std::vector<float> deq;
};

/// rows x cols values uniform in [-1, 1) from `seed`, quantized row by row to `t`
/// (a packed dtype whose block divides cols). Failures are reported to the running test.
inline PackedWeights packed_weights(ir::DType t, int64_t rows, int64_t cols, uint32_t seed) {
  const std::vector<float> wf = random_vec(static_cast<size_t>(rows * cols), seed);
  const auto gt = formats::ggml_type_from_name(ir::dtype_name(t));
  const auto row_bytes = ir::dtype_bytes(t, cols);
  EXPECT_TRUE(gt.has_value() && row_bytes.has_value()) << ir::dtype_name(t) << " is not a packed type";
  if (!gt || !row_bytes) return {};
  std::vector<uint8_t> bytes(static_cast<size_t>(rows * *row_bytes));
  std::vector<float> deq(wf.size());
  for (int64_t r = 0; r < rows; ++r) {
    EXPECT_TRUE(formats::quantize_row(*gt, wf.data() + r * cols, bytes.data() + r * *row_bytes, cols).ok());
    EXPECT_TRUE(formats::dequantize_row(*gt, bytes.data() + r * *row_bytes, deq.data() + r * cols, cols).ok());
  }
  return PackedWeights{Tensor(t, {rows, cols}, std::move(bytes)), std::move(deq)};
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
