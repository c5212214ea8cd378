// Levelled logging to stderr. The level comes from `Config` (env read once at
// start-up, see env.h) or is set by the program; messages below it cost one compare.
#pragma once

#include <fmt/format.h>

#include <string_view>

namespace rlx {

enum class LogLevel { kTrace = 0, kDebug = 1, kInfo = 2, kWarn = 3, kError = 4, kOff = 5 };

LogLevel log_level();
void set_log_level(LogLevel level);
/// Parses "trace|debug|info|warn|error|off"; returns false for anything else.
bool parse_log_level(std::string_view text, LogLevel* out);
void log_write(LogLevel level, std::string_view message);

template <typename... Args>
void log(LogLevel level, fmt::format_string<Args...> f, Args&&... args) {
  if (level < log_level()) return;
  log_write(level, fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace rlx

#define RLX_LOG_DEBUG(...) ::rlx::log(::rlx::LogLevel::kDebug, __VA_ARGS__)
#define RLX_LOG_INFO(...) ::rlx::log(::rlx::LogLevel::kInfo, __VA_ARGS__)
#define RLX_LOG_WARN(...) ::rlx::log(::rlx::LogLevel::kWarn, __VA_ARGS__)
#define RLX_LOG_ERROR(...) ::rlx::log(::rlx::LogLevel::kError, __VA_ARGS__)
