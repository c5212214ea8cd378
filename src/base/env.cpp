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
  const std::string max_memory = get("RLX_MAX_MEMORY_MB");
  if (!max_memory.empty()) {
    char* end = nullptr;
    const long long n = std::strtoll(max_memory.c_str(), &end, 10);
    if (end && *end == '\0' && n > 0 && n <= (1ll << 30)) c.max_memory_mb = n;
  }
  c.ir_dump_dir = get("RLX_IR_DUMP");
  c.cpu_isa = get("RLX_CPU_ISA");
  auto min_rows = [&](const char* name, int& out) {
    const std::string rows = get(name);
    if (rows.empty()) return;
    char* end = nullptr;
    const long n = std::strtol(rows.c_str(), &end, 10);
    if (end && *end == '\0' && n > 0 && n <= 1000000) out = static_cast<int>(n);
  };
  min_rows("RLX_CPU_AMX_MIN_ROWS", c.cpu_amx_min_rows);
  min_rows("RLX_CPU_VNNI_MIN_ROWS", c.cpu_vnni_min_rows);
  const std::string gemv_prefetch = get("RLX_CPU_GEMV_PREFETCH");
  if (!gemv_prefetch.empty()) {
    char* end = nullptr;
    const long n = std::strtol(gemv_prefetch.c_str(), &end, 10);
    if (end && *end == '\0' && n >= 0 && n <= (1 << 20) && n % 64 == 0) c.cpu_gemv_prefetch = static_cast<int>(n);
  }
  if (const std::string zmm = get("RLX_CPU_GEMV_ZMM"); zmm == "0" || zmm == "1") c.cpu_gemv_zmm = zmm == "1";
  c.cpu_prepack = get("RLX_CPU_PREPACK") != "0";
  const std::string packed_mb = get("RLX_PACKED_CACHE_MB");
  if (!packed_mb.empty()) {
    char* end = nullptr;
    const long long n = std::strtoll(packed_mb.c_str(), &end, 10);
    if (end && *end == '\0' && n >= 0 && n <= (1ll << 30)) c.packed_cache_mb = n;
  }
  c.cpu_profile = get("RLX_CPU_PROFILE") == "1";
  auto on = [](const char* name) {
    const std::string v = get(name);
    return v != "0" && v != "off";
  };
  c.cuda_graphs = on("RLX_CUDA_GRAPHS");
  c.cuda_programmatic_launch = on("RLX_CUDA_PDL");
  c.cuda_group_gemvs = on("RLX_CUDA_GROUP_GEMV");
  c.cuda_gemv_int8 = on("RLX_CUDA_GEMV_INT8");
  c.cuda_int8_prefill = on("RLX_CUDA_INT8_PREFILL");
  c.cuda_mmq_pipelined = on("RLX_CUDA_MMQ_PIPELINE");
  if (const std::string f = get("RLX_CUDA_FUSE"); !f.empty()) c.cuda_fuse = f;
  if (const std::string f = get("RLX_NCCL_LIBRARY"); !f.empty()) c.nccl_library = f;
  c.cuda_attention_tensor_cores = on("RLX_CUDA_ATTN_TC");
  c.cuda_profile = get("RLX_CUDA_PROFILE") == "1";
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
