// ThreadPool: every index runs exactly once, many back-to-back calls, nested calls run
// inline, concurrent outside callers serialise, size-1 pools run inline, broadcast
// reaches every thread once, and construction/destruction is clean (also under
// ASan/TSan). Per-thread scratch: the high-water reservation reaches every thread. Plus
// CPU feature sanity.
#include "backends/cpu/kernels/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "backends/cpu/kernels/cpu_features.h"
#include "backends/cpu/kernels/kernel_context.h"

namespace rlx::cpu {
namespace {

TEST(ThreadPool, EachIndexExactlyOnce) {
  ThreadPool pool(4);
  EXPECT_EQ(pool.size(), 4);
  for (int64_t n : {0, 1, 2, 3, 5, 17, 1000}) {
    std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
    pool.parallel_for(n, [&](int64_t i) { hits[static_cast<size_t>(i)].fetch_add(1); });
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1) << "n=" << n << " i=" << i;
  }
}

TEST(ThreadPool, ManyCallsBackToBack) {
  ThreadPool pool(3);
  std::atomic<int64_t> sum{0};
  for (int call = 0; call < 2000; ++call) pool.parallel_for(7, [&](int64_t i) { sum.fetch_add(i + 1); });
  EXPECT_EQ(sum.load(), 2000 * 28);
}

TEST(ThreadPool, UsesSeveralThreads) {
  ThreadPool pool(2);
  std::atomic<int> inside{0}, max_inside{0};
  // Tasks wait (bounded) until both threads are inside, proving two run at once.
  pool.parallel_for(2, [&](int64_t) {
    const int now = inside.fetch_add(1) + 1;
    int m = max_inside.load();
    while (now > m && !max_inside.compare_exchange_weak(m, now)) {
    }
    for (int spin = 0; spin < 200000000 && inside.load() < 2; ++spin) std::this_thread::yield();
  });
  EXPECT_EQ(max_inside.load(), 2);
}

TEST(ThreadPool, BroadcastRunsOnceOnEveryThread) {
  for (int n : {1, 2, 4}) {
    ThreadPool pool(n);
    for (int call = 0; call < 50; ++call) {
      std::mutex mu;
      std::multiset<std::thread::id> seen;
      pool.broadcast([&] {
        std::lock_guard<std::mutex> lock(mu);
        seen.insert(std::this_thread::get_id());
      });
      ASSERT_EQ(seen.size(), static_cast<size_t>(n)) << "pool of " << n << ", call " << call;
      for (const std::thread::id& id : seen) ASSERT_EQ(seen.count(id), 1u) << "a thread ran twice";
      EXPECT_EQ(seen.count(std::this_thread::get_id()), 1u) << "the caller takes part";
    }
  }
}

// One thread asks for a large scratch buffer; after every thread caught up, each already
// holds that much: asking for it moves no thread's buffer.
TEST(ThreadScratch, CatchUpReachesEveryThread) {
  ThreadPool pool(4);
  constexpr size_t kBig = size_t{3} << 20;  // larger than any other test's kTemp need
  (void)thread_scratch(ScratchSlot::kTemp, kBig);  // (on this thread, one of the pool's)
  const uint64_t raises = thread_scratch_raises();
  pool.broadcast([] { thread_scratch_catch_up(); });
  std::atomic<int> moved{0};
  pool.broadcast([&] {
    void* before = thread_scratch(ScratchSlot::kTemp, 1);
    if (thread_scratch(ScratchSlot::kTemp, kBig) != before) moved.fetch_add(1);
  });
  EXPECT_EQ(moved.load(), 0);
  EXPECT_EQ(thread_scratch_raises(), raises) << "asking within the high-water mark raised it";
}

TEST(ThreadPool, NestedCallRunsInline) {
  ThreadPool pool(3);
  std::atomic<int64_t> count{0};
  pool.parallel_for(6, [&](int64_t) {
    const std::thread::id me = std::this_thread::get_id();
    pool.parallel_for(5, [&](int64_t) {
      EXPECT_EQ(std::this_thread::get_id(), me);
      count.fetch_add(1);
    });
  });
  EXPECT_EQ(count.load(), 30);
}

TEST(ThreadPool, SizeOneRunsInlineInOrder) {
  ThreadPool pool(1);
  std::vector<int64_t> order;
  const std::thread::id me = std::this_thread::get_id();
  pool.parallel_for(5, [&](int64_t i) {
    EXPECT_EQ(std::this_thread::get_id(), me);
    order.push_back(i);
  });
  EXPECT_EQ(order, (std::vector<int64_t>{0, 1, 2, 3, 4}));
}

TEST(ThreadPool, ConcurrentOutsideCallers) {
  ThreadPool pool(3);
  std::atomic<int64_t> sum{0};
  std::vector<std::thread> callers;
  for (int c = 0; c < 3; ++c)
    callers.emplace_back([&] {
      for (int k = 0; k < 200; ++k) pool.parallel_for(4, [&](int64_t i) { sum.fetch_add(i); });
    });
  for (std::thread& t : callers) t.join();
  EXPECT_EQ(sum.load(), 3 * 200 * 6);
}

TEST(ThreadPool, CreateAndDestroyRepeatedly) {
  for (int i = 0; i < 50; ++i) {
    ThreadPool pool(1 + i % 4);
    std::atomic<int> n{0};
    if (i % 2 == 0) pool.parallel_for(10, [&](int64_t) { n.fetch_add(1); });
    EXPECT_EQ(n.load(), i % 2 == 0 ? 10 : 0);
  }
}

TEST(CpuFeatures, ConsistentLevels) {
  const CpuFeatures& f = cpu_features();
  if (f.max_isa >= IsaLevel::kAvx2) {
    EXPECT_TRUE(f.avx2 && f.fma && f.os_avx);
  }
  if (f.max_isa >= IsaLevel::kAvx512) {
    EXPECT_TRUE(f.avx512f && f.avx512bw && f.avx512vl && f.os_avx512);
  }
  if (f.max_isa == IsaLevel::kAmx) {
    EXPECT_TRUE(f.amx_usable && f.amx_bf16 && f.amx_int8 && f.avx512bf16);
  }
  EXPECT_EQ(resolve_isa(IsaLevel::kScalar), IsaLevel::kScalar);
  EXPECT_LE(static_cast<int>(resolve_isa(IsaLevel::kAvx512)), static_cast<int>(f.max_isa));
  EXPECT_FALSE(describe_cpu_features(f).empty());
}

// RLX_CPU_ISA's names as the runtime, `rlx bench` and the benchmarks read them.
TEST(CpuFeatures, IsaCapFromName) {
  EXPECT_EQ(isa_cap_from_name("scalar"), IsaLevel::kScalar);
  EXPECT_EQ(isa_cap_from_name("avx2"), IsaLevel::kAvx2);
  EXPECT_EQ(isa_cap_from_name("avx512"), IsaLevel::kAvx512);
  EXPECT_EQ(isa_cap_from_name(""), IsaLevel::kAmx);
  EXPECT_EQ(isa_cap_from_name("amx"), IsaLevel::kAmx);
}

}  // namespace
}  // namespace rlx::cpu
