// What the machine can give a request before RLX allocates for it: memory that a flag
// or a file asks for (a KV cache for --ctx, an arena for --seq) and worker threads are
// compared with what is there, so that an absurd request is an error, not an abort.
#pragma once

#include <cstdint>
#include <string_view>

#include "rlx/base/status.h"

namespace rlx {

/// Bytes of memory the system can give now without swapping: MemAvailable of
/// /proc/meminfo, else free pages (sysconf), capped by RLX_MAX_MEMORY_MB when set; -1
/// when none of these is known.
int64_t available_memory_bytes();

/// kInvalidArgument naming `what` ("KV cache for ctx 16777216") with both sizes when
/// `bytes` exceeds available_memory_bytes(); nothing when it fits or is unknown. `bytes`
/// is a double so that a product of hostile sizes cannot overflow on the way here.
Status check_memory_request(double bytes, std::string_view what);

/// The most worker threads RLX starts: kThreadsPerCore for each hardware thread (at
/// least 64 in all). More only thrash, and thousands fail to start.
inline constexpr int kThreadsPerCore = 8;
int max_worker_threads();

/// kInvalidArgument naming `what` (a flag) when `threads` exceeds max_worker_threads().
Status check_thread_count(int threads, std::string_view what);

}  // namespace rlx
