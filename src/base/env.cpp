// Reads RLX_* environment variables exactly once.
#include "rlx/base/env.h"

#include <cstdlib>

namespace rlx {
namespace {

std::string get(const char* name) {
  const char* v = std::getenv(name);  // NOLINT(concurrency-mt-unsafe): read once, at start-up
  return v ? std::string(v) : std::string();
}

EnvConfig read_env() {
  EnvConfig c;
  c.log_level = get("RLX_LOG");
  const std::string threads = get("RLX_THREADS");
  if (!threads.empty()) {
    char* end = nullptr;
    const long n = std::strtol(threads.c_str(), &end, 10);
    if (end && *end == '\0' && n > 0 && n <= 1024) c.threads = static_cast<int>(n);
  }
  c.ir_dump_dir = get("RLX_IR_DUMP");
  c.cpu_isa = get("RLX_CPU_ISA");
  c.cpu_prepack = get("RLX_CPU_PREPACK") != "0";
  c.cache_dir = get("RLX_CACHE_DIR");
  if (c.cache_dir.empty()) {
    const std::string xdg = get("XDG_CACHE_HOME");
    const std::string home = get("HOME");
    if (!xdg.empty()) c.cache_dir = xdg + "/rlx";
    else if (!home.empty()) c.cache_dir = home + "/.cache/rlx";
    else c.cache_dir = ".rlx-cache";
  }
  return c;
}

}  // namespace

const EnvConfig& env_config() {
  static const EnvConfig config = read_env();
  return config;
}

}  // namespace rlx
