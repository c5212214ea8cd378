// Reads RLX_* environment variables exactly once.
#include "rlx/base/env.h"

#include <cstdlib>
#include <optional>

namespace rlx {
namespace {

std::string get(const char* name) {
  const char* v = std::getenv(name);  // NOLINT(concurrency-mt-unsafe): read once, at start-up
  return v ? std::string(v) : std::string();
}

// The integer in `name` when it is one, whole, within [lo, hi]; else nothing.
std::optional<long long> get_int(const char* name, long long lo, long long hi) {
  const std::string v = get(name);
  if (v.empty()) return std::nullopt;
  char* end = nullptr;
  const long long n = std::strtoll(v.c_str(), &end, 10);
  if (end == nullptr || *end != '\0' || n < lo || n > hi) return std::nullopt;
  return n;
}

EnvConfig read_env() {
  EnvConfig c;
  c.log_level = get("RLX_LOG");
  if (auto n = get_int("RLX_THREADS", 1, 1024)) c.threads = static_cast<int>(*n);
  if (auto n = get_int("RLX_MAX_MEMORY_MB", 1, 1ll << 30)) c.max_memory_mb = *n;
  c.ir_dump_dir = get("RLX_IR_DUMP");
  c.cpu_isa = get("RLX_CPU_ISA");
  if (auto n = get_int("RLX_CPU_AMX_MIN_ROWS", 1, 1000000)) c.cpu_amx_min_rows = static_cast<int>(*n);
  if (auto n = get_int("RLX_CPU_VNNI_MIN_ROWS", 1, 1000000)) c.cpu_vnni_min_rows = static_cast<int>(*n);
  if (auto n = get_int("RLX_CPU_GEMV_PREFETCH", 0, 1 << 20); n && *n % 64 == 0)
    c.cpu_gemv_prefetch = static_cast<int>(*n);
  if (const std::string zmm = get("RLX_CPU_GEMV_ZMM"); zmm == "0" || zmm == "1") c.cpu_gemv_zmm = zmm == "1";
  c.cpu_prepack = get("RLX_CPU_PREPACK") != "0";
  if (auto n = get_int("RLX_PACKED_CACHE_MB", 0, 1ll << 30)) c.packed_cache_mb = *n;
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
