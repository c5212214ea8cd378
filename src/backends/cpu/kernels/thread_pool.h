// Persistent fork-join thread pool used by every CPU kernel: workers are created
// once, `parallel_for` hands out task indices dynamically, the calling thread takes
// part, and no memory is allocated per call.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

namespace rlx::cpu {

/// A fixed set of `size() - 1` worker threads plus the caller.
///
/// Semantics:
///  - `parallel_for(n, fn)` calls `fn(i)` exactly once for every i in [0, n) and
///    returns when all calls have finished. Tasks are claimed dynamically, so uneven
///    tasks balance. `fn` must not throw.
///  - A pool of size 1 (or n == 1) runs the loop inline on the caller.
///  - Re-entrancy: a `parallel_for` issued from inside a task of the same pool runs
///    its loop inline on that thread (no deadlock, no extra parallelism).
///  - Calls from several outside threads at once are serialised (each one still gets
///    the whole pool).
///  - The destructor wakes and joins the workers; it must not race with a call.
class ThreadPool {
 public:
  /// `n_threads` counts the caller: 1 means no workers. Values < 1 mean
  /// std::thread::hardware_concurrency().
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  /// Threads that execute tasks, the caller included.
  int size() const { return n_threads_; }
  /// The thread_scratch_raises() value (kernel_context.h) to which this pool's threads
  /// were last grown; a fresh pool's threads have grown to nothing.
  std::atomic<uint64_t> scratch_caught_up_at{0};

  template <typename F>
  void parallel_for(int64_t n_tasks, F&& fn) {
    using Fn = std::remove_reference_t<F>;
    run(n_tasks, [](void* c, int64_t i) { (*static_cast<Fn*>(c))(i); },
        const_cast<void*>(static_cast<const void*>(&fn)));
  }
  /// Calls `fn()` once on every thread of the pool, the caller's included (for per-thread
  /// state such as scratch buffers). Each thread holds its task until all have started,
  /// so no thread takes two. Not from inside a task of this pool (it then runs once,
  /// inline).
  template <typename F>
  void broadcast(F&& fn) {
    using Fn = std::remove_reference_t<F>;
    broadcast_impl([](void* c, int64_t) { (*static_cast<Fn*>(c))(); }, const_cast<void*>(static_cast<const void*>(&fn)));
  }

 private:
  using TaskFn = void (*)(void* ctx, int64_t i);
  void run(int64_t n_tasks, TaskFn fn, void* ctx);
  void broadcast_impl(TaskFn fn, void* ctx);
  void worker_loop(int worker_id);
  void drain(TaskFn fn, void* ctx, int64_t n_tasks);

  int n_threads_ = 1;
  std::vector<std::thread> workers_;
  std::mutex submit_mu_;  // serialises outside callers
  std::mutex mu_;         // guards the job fields below and the condition variables
  std::condition_variable cv_work_;
  std::condition_variable cv_done_;
  bool stop_ = false;
  TaskFn fn_ = nullptr;
  void* ctx_ = nullptr;
  int64_t n_tasks_ = 0;
  int wanted_workers_ = 0;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int64_t> next_{0};
  std::atomic<int> pending_{0};
};

}  // namespace rlx::cpu
