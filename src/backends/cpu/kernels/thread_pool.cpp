// ThreadPool implementation: one job at a time, published under a mutex with a
// generation counter; workers spin briefly, then sleep on a condition variable.
#include "backends/cpu/kernels/thread_pool.h"

#include <algorithm>
#include <chrono>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace rlx::cpu {
namespace {

thread_local const ThreadPool* tl_current_pool = nullptr;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#endif
}

// Spin this many polls before sleeping: keeps back-to-back kernels cheap without
// burning a shared core for long.
constexpr int kSpinPolls = 4000;

}  // namespace

ThreadPool::ThreadPool(int n_threads) {
  if (n_threads < 1) n_threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  n_threads_ = n_threads;
  workers_.reserve(static_cast<size_t>(n_threads - 1));
  for (int i = 0; i < n_threads - 1; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_work_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void ThreadPool::drain(TaskFn fn, void* ctx, int64_t n_tasks) {
  for (;;) {
    const int64_t i = next_.fetch_add(1, std::memory_order_relaxed);
    if (i >= n_tasks) break;
    fn(ctx, i);
  }
}

void ThreadPool::run(int64_t n_tasks, TaskFn fn, void* ctx) {
  if (n_tasks <= 0) return;
  if (n_threads_ == 1 || n_tasks == 1 || tl_current_pool == this) {
    for (int64_t i = 0; i < n_tasks; ++i) fn(ctx, i);
    return;
  }
  std::lock_guard<std::mutex> submit(submit_mu_);
  const int wanted = static_cast<int>(std::min<int64_t>(n_tasks, n_threads_)) - 1;
  {
    std::lock_guard<std::mutex> lk(mu_);
    fn_ = fn;
    ctx_ = ctx;
    n_tasks_ = n_tasks;
    wanted_workers_ = wanted;
    next_.store(0, std::memory_order_relaxed);
    pending_.store(wanted, std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_release);
  }
  cv_work_.notify_all();

  const ThreadPool* outer = tl_current_pool;
  tl_current_pool = this;
  drain(fn, ctx, n_tasks);
  tl_current_pool = outer;

  for (int spin = 0; spin < kSpinPolls; ++spin) {
    if (pending_.load(std::memory_order_acquire) == 0) return;
    cpu_relax();
  }
  std::unique_lock<std::mutex> lk(mu_);
  cv_done_.wait(lk, [this] { return pending_.load(std::memory_order_acquire) == 0; });
}

void ThreadPool::broadcast_impl(TaskFn fn, void* ctx) {
  if (n_threads_ == 1 || tl_current_pool == this) {
    fn(ctx, 0);
    return;
  }
  // One task a thread: each holds its task until all n have been claimed, so no thread
  // can claim a second one (run wakes every worker for n_threads_ tasks).
  struct Held {
    std::atomic<int> started{0};
    int n;
    TaskFn fn;
    void* ctx;
  } held{{}, n_threads_, fn, ctx};
  run(
      n_threads_,
      [](void* c, int64_t i) {
        auto* h = static_cast<Held*>(c);
        h->started.fetch_add(1, std::memory_order_acq_rel);
        while (h->started.load(std::memory_order_acquire) < h->n) std::this_thread::yield();
        h->fn(h->ctx, i);
      },
      &held);
}

void ThreadPool::worker_loop(int worker_id) {
  tl_current_pool = this;
  uint64_t seen = 0;
  for (;;) {
    for (int spin = 0; spin < kSpinPolls; ++spin) {
      if (generation_.load(std::memory_order_acquire) != seen) break;
      cpu_relax();
    }
    TaskFn fn = nullptr;
    void* ctx = nullptr;
    int64_t n_tasks = 0;
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_work_.wait(lk, [&] { return stop_ || generation_.load(std::memory_order_relaxed) != seen; });
      if (stop_) return;
      seen = generation_.load(std::memory_order_relaxed);
      if (worker_id >= wanted_workers_) continue;  // not needed for this job
      fn = fn_;
      ctx = ctx_;
      n_tasks = n_tasks_;
    }
    drain(fn, ctx, n_tasks);
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      std::lock_guard<std::mutex> lk(mu_);
      cv_done_.notify_one();
    }
  }
}

}  // namespace rlx::cpu
