// available_memory_bytes from /proc/meminfo (Linux) or sysconf; the request checks.
#include "rlx/base/memory_budget.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <thread>

#include "rlx/base/env.h"

namespace rlx {

namespace {

int64_t system_available_bytes() {
  if (FILE* f = std::fopen("/proc/meminfo", "r")) {
    char line[256];
    long long kb = -1;
    while (std::fgets(line, sizeof line, f))
      if (std::sscanf(line, "MemAvailable: %lld kB", &kb) == 1) break;
    std::fclose(f);
    if (kb >= 0) return static_cast<int64_t>(kb) * 1024;
  }
  const long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  if (pages > 0 && page > 0) return static_cast<int64_t>(pages) * page;
  return -1;
}

}  // namespace

int64_t available_memory_bytes() {
  const int64_t avail = system_available_bytes();
  const int64_t cap = env_config().max_memory_mb * (int64_t{1} << 20);
  if (cap > 0 && (avail < 0 || cap < avail)) return cap;
  return avail;
}

Status check_memory_request(double bytes, std::string_view what) {
  const int64_t avail = available_memory_bytes();
  if (avail < 0 || bytes <= static_cast<double>(avail)) return {};
  return Error::invalid_argument("{} needs {:.1f} GB, more than the {:.1f} GB of memory available", what, bytes / 1e9,
                                 static_cast<double>(avail) / 1e9);
}

int max_worker_threads() {
  const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::max(64, kThreadsPerCore * hw);
}

Status check_thread_count(int threads, std::string_view what) {
  if (threads <= max_worker_threads()) return {};
  return Error::invalid_argument("{} {} is more than the {} threads RLX starts on this machine ({} per hardware thread)",
                                 what, threads, max_worker_threads(), kThreadsPerCore);
}

}  // namespace rlx
