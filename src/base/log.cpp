// Logging sink: one atomic level, one mutex around stderr writes.
#include "rlx/base/log.h"

#include <atomic>
#include <cstdio>
#include <mutex>

#include "rlx/base/env.h"

namespace rlx {
namespace {

std::atomic<int>& level_storage() {
  static std::atomic<int> level{[] {
    LogLevel l = LogLevel::kWarn;
    const auto& text = env_config().log_level;
    if (!text.empty()) parse_log_level(text, &l);
    return static_cast<int>(l);
  }()};
  return level;
}

const char* level_name(LogLevel l) {
  switch (l) {
    case LogLevel::kTrace: return "trace";
    case LogLevel::kDebug: return "debug";
    case LogLevel::kInfo: return "info";
    case LogLevel::kWarn: return "warn";
    case LogLevel::kError: return "error";
    case LogLevel::kOff: return "off";
  }
  return "?";
}

}  // namespace

LogLevel log_level() { return static_cast<LogLevel>(level_storage().load(std::memory_order_relaxed)); }
void set_log_level(LogLevel level) { level_storage().store(static_cast<int>(level)); }

bool parse_log_level(std::string_view text, LogLevel* out) {
  for (int i = 0; i <= static_cast<int>(LogLevel::kOff); ++i) {
    if (text == level_name(static_cast<LogLevel>(i))) {
      *out = static_cast<LogLevel>(i);
      return true;
    }
  }
  return false;
}

void log_write(LogLevel level, std::string_view message) {
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  std::fprintf(stderr, "[rlx %s] %.*s\n", level_name(level), static_cast<int>(message.size()), message.data());
}

}  // namespace rlx
