// How the decode GEMVs run, measured on this CPU instead of guessed per vendor: the far
// prefetch distance and then the thread split (how many contiguous tasks a thread a
// one-row GEMV's rows are cut into) on the process's own first decode GEMVs (one-row
// quantized GEMVs and one-row products over packed f16 / bf16 / f32 panels; both only
// move prefetch hints and which thread computes a row, so trying each candidate on real
// calls changes no result bit), and the loop
// shape of one-row GEMVs (512-bit one-row loops or the loops shared with more rows)
// once, on synthetic L2-resident matrices, before any real call (the two shapes round
// differently, so it never changes within a process).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace rlx::cpu {

/// One line on the decode GEMV settings and how they were chosen, e.g. "L2 prefetch 0 B
/// ahead (measured on the first decode GEMVs: 0 B 41.3 GB/s, 1024 B 40.1 GB/s, 4096 B
/// 37.9 GB/s); one-row GEMV rows in 1 run a thread (measured ...: 1 run 47.0 GB/s, ...);
/// 512-bit one-row loops on (measured at start-up ...: one-row 44.4 us, shared
/// 63.2 us)".
std::string describe_gemv_tuning();

namespace detail {

/// Weight bytes of a one-row GEMV below which calls are not timed (small matrices sit
/// in cache and would say nothing about the DRAM stream).
inline constexpr size_t kGemvTuneMinBytes = size_t{1} << 20;

/// True while the prefetch distance or the thread split is still being measured (not set
/// in the environment and not yet settled): the caller times its one-row GEMV and
/// reports it.
bool gemv_tuning_active();

/// Tasks a thread that a one-row GEMV cuts its rows into (contiguous runs of rows,
/// handed out in order): 1, 2 or 8, measured, or RLX_CPU_GEMV_SPLIT.
int gemv_split();

/// Starts both measurements over (the defaults until they settle again), for tests that
/// check a kind of GEMV feeds them; a process never needs it.
void gemv_tuning_restart();

/// One timed one-row GEMV over `bytes` of weights in `seconds`, run with the distance
/// `prefetch` and the split `split` (gemv_far_prefetch() and gemv_split() when it
/// started; a call that began under other values than the ones being measured is not
/// counted). Thread-safe.
void gemv_tuning_record(size_t bytes, double seconds, int prefetch, int split);

}  // namespace detail
}  // namespace rlx::cpu
