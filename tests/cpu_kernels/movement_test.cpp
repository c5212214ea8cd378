// Movement kernels: gather (with out-of-range errors), concat, narrow, strided copy,
// transpose (general and the tiled 2-D path) and expand, checked element by element.
#include "backends/cpu/kernels/movement.h"

#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "cpu_kernels/test_util.h"

namespace rlx::cpu {
namespace {

std::vector<float> iota(int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), 0.0f);
  return v;
}

TEST(Movement, GatherRowsAndBounds) {
  const std::vector<float> table = iota(10 * 3);
  for (const KernelContext& ctx : test::contexts()) {
    const std::vector<int32_t> ids = {9, 0, 4, 4};
    std::vector<float> out(12);
    ASSERT_TRUE(gather_rows(ctx, table.data(), 10, 3 * sizeof(float), ids.data(), 4, out.data()).ok());
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 3; ++j) ASSERT_EQ(out[i * 3 + j], table[ids[i] * 3 + j]);
    const std::vector<int64_t> bad = {1, 10, -1};
    const Status s = gather_rows(ctx, table.data(), 10, 3 * sizeof(float), bad.data(), 3, out.data());
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.error().message().find("index 10 at position 1"), std::string::npos) << s.error().message();
  }
}

TEST(Movement, ConcatAlongEachAxis) {
  const Dims dims{2, 0, 3};  // axis 1 sizes come from axis_sizes
  const std::vector<float> a = iota(2 * 1 * 3), b = iota(2 * 4 * 3);
  const void* ins[2] = {a.data(), b.data()};
  const int64_t sizes[2] = {1, 4};
  for (const KernelContext& ctx : test::contexts()) {
    std::vector<float> out(2 * 5 * 3);
    concat(ctx, ins, sizes, 2, dims, 1, sizeof(float), out.data());
    for (int o = 0; o < 2; ++o)
      for (int r = 0; r < 5; ++r)
        for (int c = 0; c < 3; ++c) {
          const float want = r < 1 ? a[(o * 1 + r) * 3 + c] : b[(o * 4 + r - 1) * 3 + c];
          ASSERT_EQ(out[(o * 5 + r) * 3 + c], want);
        }
  }
}

TEST(Movement, NarrowAndTranspose) {
  const Dims dims{3, 5, 7};
  const std::vector<float> x = iota(dims.numel());
  const int perms[][3] = {{0, 2, 1}, {2, 1, 0}, {1, 0, 2}, {0, 1, 2}, {2, 0, 1}};
  for (const KernelContext& ctx : test::contexts()) {
    std::vector<float> y(3 * 2 * 7);
    narrow(ctx, x.data(), dims, 1, 2, 2, sizeof(float), y.data());
    for (int a = 0; a < 3; ++a)
      for (int b = 0; b < 2; ++b)
        for (int c = 0; c < 7; ++c) ASSERT_EQ(y[(a * 2 + b) * 7 + c], x[(a * 5 + b + 2) * 7 + c]);
    for (const auto& perm : perms) {
      std::vector<float> t(x.size());
      transpose(ctx, x.data(), dims, perm, sizeof(float), t.data());
      const int64_t od[3] = {dims.d[perm[0]], dims.d[perm[1]], dims.d[perm[2]]};
      for (int64_t i = 0; i < od[0]; ++i)
        for (int64_t j = 0; j < od[1]; ++j)
          for (int64_t k = 0; k < od[2]; ++k) {
            int64_t idx[3];
            idx[perm[0]] = i;
            idx[perm[1]] = j;
            idx[perm[2]] = k;
            ASSERT_EQ(t[(i * od[1] + j) * od[2] + k], x[(idx[0] * 5 + idx[1]) * 7 + idx[2]])
                << test::describe(ctx) << " perm " << perm[0] << perm[1] << perm[2];
          }
    }
  }
}

TEST(Movement, LargeTiledTransposeTwoBytes) {
  const int64_t rows = 67, cols = 130;
  std::vector<uint16_t> x(rows * cols), y(rows * cols);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<uint16_t>(i * 7);
  const int perm[2] = {1, 0};
  transpose(KernelContext{&test::test_pool(), IsaLevel::kAvx512}, x.data(), Dims{rows, cols}, perm, 2, y.data());
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) ASSERT_EQ(y[j * rows + i], x[i * cols + j]);
}

TEST(Movement, ExpandAndStridedCopy) {
  const std::vector<float> x = iota(3);
  for (const KernelContext& ctx : test::contexts()) {
    std::vector<float> y(2 * 4 * 3);
    ASSERT_TRUE(expand(ctx, x.data(), Dims{1, 3}, Dims{2, 4, 3}, sizeof(float), y.data()).ok());
    for (size_t i = 0; i < y.size(); ++i) ASSERT_EQ(y[i], x[i % 3]);
    EXPECT_FALSE(expand(ctx, x.data(), Dims{3}, Dims{2, 4}, sizeof(float), y.data()).ok());
    // Reversed view via a negative stride.
    const int64_t stride = -1;
    std::vector<float> r(3);
    copy_strided(ctx, x.data() + 2, Dims{3}, &stride, sizeof(float), r.data());
    EXPECT_EQ(r, (std::vector<float>{2, 1, 0}));
    std::vector<float> none(1, 5.0f);
    const int64_t strides2[2] = {3, 1};
    copy_strided(ctx, x.data(), Dims{0, 3}, strides2, sizeof(float), none.data());
    EXPECT_EQ(none[0], 5.0f);
  }
}

}  // namespace
}  // namespace rlx::cpu
