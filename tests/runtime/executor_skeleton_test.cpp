// The executors' shared skeleton: storage resolution over a plan with every slot kind
// (views followed to their root, manifest indices, constants numbered in value order),
// the errors for plans that do not match the graph, set_active_extent's argument
// checks, and broadcast strides.
#include "runtime/executor_skeleton.h"

#include <gtest/gtest.h>

#include "../ir/ir_test_util.h"

namespace rlx::runtime {
namespace {

using ir::SlotKind;

TEST(ExecutorSkeleton, ResolvesEverySlotKind) {
  const ir::LirModule lir = ir::testing::small_lir();
  auto s = resolve_storage(lir, "test");
  ASSERT_TRUE(s.has_value()) << s.error().to_string();
  ASSERT_EQ(s->refs.size(), 7u);
  auto expect = [&](ir::ValueId v, StorageKind kind, int32_t index, int64_t offset, int64_t bytes) {
    const ValueRef& r = s->refs[static_cast<size_t>(v)];
    EXPECT_EQ(r.kind, kind) << "%" << v;
    EXPECT_EQ(r.index, index) << "%" << v;
    EXPECT_EQ(r.offset, offset) << "%" << v;
    EXPECT_EQ(r.bytes, bytes) << "%" << v;
  };
  expect(0, StorageKind::kArena, 0, 0, 256);
  expect(1, StorageKind::kParam, 0, 0, 2304);
  expect(2, StorageKind::kHandle, 0, 0, 4096);
  expect(3, StorageKind::kConstant, 0, 0, 4);
  expect(4, StorageKind::kArena, 0, 256, 512);
  expect(5, StorageKind::kArena, 0, 256, 512);  // the view: its root's bytes
  expect(6, StorageKind::kArena, 0, 0, 512);
  ASSERT_EQ(s->constants.size(), 1u);
  EXPECT_EQ(s->constants[0], 3);
}

TEST(ExecutorSkeleton, RejectsPlansThatDoNotMatchTheGraph) {
  auto error_of = [](const ir::LirModule& m) {
    auto s = resolve_storage(m, "test");
    return s.has_value() ? std::string("no error") : s.error().message();
  };
  {
    ir::LirModule m = ir::testing::small_lir();
    m.plan.slots.pop_back();
    EXPECT_NE(error_of(m).find("6 slots for 7 values"), std::string::npos) << error_of(m);
  }
  {
    ir::LirModule m = ir::testing::small_lir();
    m.plan.slots[5].root = 6;  // a view of a later value
    EXPECT_NE(error_of(m).find("view of invalid root 6"), std::string::npos) << error_of(m);
  }
  {
    ir::LirModule m = ir::testing::small_lir();
    m.manifest.params.clear();  // the plan says param, the manifest does not list it
    EXPECT_NE(error_of(m).find("not in the manifest"), std::string::npos) << error_of(m);
  }
  {
    ir::LirModule m = ir::testing::small_lir();
    m.plan.slots[0] = {SlotKind::kConstant, 0, 256, ir::kNoValue};  // an input is no constant
    EXPECT_NE(error_of(m).find("is not a constant"), std::string::npos) << error_of(m);
  }
  {
    ir::LirModule m = ir::testing::small_lir();
    m.manifest.handles[0].value = 99;
    EXPECT_NE(error_of(m).find("names value %99"), std::string::npos) << error_of(m);
  }
  {
    ir::LirModule m = ir::testing::small_lir();
    m.plan.arena_size = -1;
    EXPECT_NE(error_of(m).find("negative arena size"), std::string::npos) << error_of(m);
  }
}

TEST(ExecutorSkeleton, ActiveExtentArguments) {
  EXPECT_FALSE(check_active_extent(ExtentInfo{}, 1, 1).ok());  // no bucket symbol
  ExtentInfo ex;
  ex.symbol = ir::SEQ;
  ex.upper = 16;
  EXPECT_TRUE(check_active_extent(ex, 1, 16).ok());
  EXPECT_TRUE(check_active_extent(ex, 16, 16).ok());
  EXPECT_FALSE(check_active_extent(ex, 3, 8).ok());  // not the compiled size
  EXPECT_FALSE(check_active_extent(ex, 0, 16).ok());
  EXPECT_FALSE(check_active_extent(ex, 17, 16).ok());
  EXPECT_NE(check_active_extent(ex, 3, 8).error().message().find("differs from the compiled size"), std::string::npos);
}

TEST(ExecutorSkeleton, BroadcastStrides) {
  using V = std::vector<int64_t>;
  EXPECT_EQ(broadcast_strides(V{2, 3, 4}, V{2, 3, 4}), (V{12, 4, 1}));
  EXPECT_EQ(broadcast_strides(V{3, 1}, V{2, 3, 4}), (V{0, 1, 0}));
  EXPECT_EQ(broadcast_strides(V{4}, V{2, 3, 4}), (V{0, 0, 1}));
  EXPECT_EQ(broadcast_strides(V{}, V{5}), (V{0}));
  EXPECT_EQ(broadcast_strides(V{1, 1, 5}, V{5}), (V{1}));  // more dims than the output: the extra ones are 1s
}

}  // namespace
}  // namespace rlx::runtime
