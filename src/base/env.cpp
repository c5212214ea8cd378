// Reads RLX_* environment variables exactly once.
#include "rlx/base/env.h"

#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <optional>

#include <fmt/format.h>

namespace rlx {
namespace {

std::string get(const char* name) {
  const char* v = std::getenv(name);  // NOLINT(concurrency-mt-unsafe): read once, at start-up
  return v ? std::string(v) : std::string();
}

// Every read records what it ignored in `warnings`.
struct Reader {
  std::vector<std::string>* warnings;

  // The integer in `name` when it is one, whole, within [lo, hi]; else nothing (and a
  // warning when the variable is set).
  std::optional<long long> integer(const char* name, long long lo, long long hi) const {
    const std::string v = get(name);
    if (v.empty()) return std::nullopt;
    char* end = nullptr;
    const long long n = std::strtoll(v.c_str(), &end, 10);
    if (end == nullptr || *end != '\0' || n < lo || n > hi) {
      warnings->push_back(fmt::format("{}='{}' is not a whole number in [{}, {}]; ignored", name, v, lo, hi));
      return std::nullopt;
    }
    return n;
  }

  // The value of `name` when it is one of `allowed` (or unset: empty); else empty and a
  // warning.
  std::string choice(const char* name, std::initializer_list<const char*> allowed) const {
    const std::string v = get(name);
    if (v.empty()) return v;
    std::string list;
    for (const char* a : allowed) {
      if (v == a) return v;
      list += (list.empty() ? "" : ", ") + std::string(a);
    }
    warnings->push_back(fmt::format("{}='{}' is not one of {}; ignored", name, v, list));
    return {};
  }
};

EnvConfig read_env() {
  EnvConfig c;
  const Reader r{&c.warnings};
  c.log_level = r.choice("RLX_LOG", {"trace", "debug", "info", "warn", "error", "off"});
  if (auto n = r.integer("RLX_THREADS", 1, 1024)) c.threads = static_cast<int>(*n);
  if (auto n = r.integer("RLX_MAX_MEMORY_MB", 1, 1ll << 30)) c.max_memory_mb = *n;
  c.ir_dump_dir = get("RLX_IR_DUMP");
  c.cpu_isa = r.choice("RLX_CPU_ISA", {"scalar", "avx2", "avx512", "amx"});
  if (auto n = r.integer("RLX_CPU_AMX_MIN_ROWS", 1, 1000000)) c.cpu_amx_min_rows = static_cast<int>(*n);
  if (auto n = r.integer("RLX_CPU_VNNI_MIN_ROWS", 1, 1000000)) c.cpu_vnni_min_rows = static_cast<int>(*n);
  c.cpu_bf16_dot = r.choice("RLX_CPU_BF16_DOT", {"auto", "all", "off"});
  if (auto n = r.integer("RLX_CPU_GEMV_PREFETCH", 0, 1 << 20)) {
    if (*n % 64 == 0) c.cpu_gemv_prefetch = static_cast<int>(*n);
    else c.warnings.push_back(fmt::format("RLX_CPU_GEMV_PREFETCH={} is no multiple of 64; ignored", *n));
  }
  if (const std::string zmm = r.choice("RLX_CPU_GEMV_ZMM", {"0", "1"}); !zmm.empty()) c.cpu_gemv_zmm = zmm == "1";
  if (auto n = r.integer("RLX_CPU_GEMV_SPLIT", 1, 64)) c.cpu_gemv_split = static_cast<int>(*n);
  c.cpu_prepack = r.choice("RLX_CPU_PREPACK", {"0", "1"}) != "0";
  if (auto n = r.integer("RLX_PACKED_CACHE_MB", 0, 1ll << 30)) c.packed_cache_mb = *n;
  c.cpu_profile = r.choice("RLX_CPU_PROFILE", {"0", "1"}) == "1";
  c.check_finite = r.choice("RLX_CHECK_FINITE", {"0", "1"}) == "1";
  auto on = [&r](const char* name) {
    const std::string v = r.choice(name, {"0", "off", "1", "on"});
    return v != "0" && v != "off";
  };
  c.cuda_graphs = on("RLX_CUDA_GRAPHS");
  c.cuda_programmatic_launch = on("RLX_CUDA_PDL");
  c.cuda_group_gemvs = on("RLX_CUDA_GROUP_GEMV");
  c.cuda_gemv_int8 = on("RLX_CUDA_GEMV_INT8");
  c.cuda_int8_prefill = on("RLX_CUDA_INT8_PREFILL");
  c.cuda_mmq_pipelined = on("RLX_CUDA_MMQ_PIPELINE");
  c.cuda_kqmma_staged = on("RLX_CUDA_KQMMA_STAGED");
  c.cuda_half_rows = on("RLX_CUDA_HALF_ROWS");
  c.cuda_moe_grouped = on("RLX_CUDA_MOE_GROUPED");
  c.cuda_paged_handles = on("RLX_CUDA_PAGED_HANDLES");
  if (const std::string f = get("RLX_CUDA_FUSE"); !f.empty()) c.cuda_fuse = f;
  if (const std::string f = get("RLX_NCCL_LIBRARY"); !f.empty()) c.nccl_library = f;
  c.cuda_attention_tensor_cores = on("RLX_CUDA_ATTN_TC");
  c.cuda_attention_flash = on("RLX_CUDA_ATTN_FLASH");
  c.cuda_attention_rows = on("RLX_CUDA_ATTN_ROWS");
  c.cuda_profile = r.choice("RLX_CUDA_PROFILE", {"0", "1"}) == "1";
  c.cuda_rel_pos = r.choice("RLX_CUDA_REL_POS", {"flash", "gemm"});
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
  static const EnvConfig config = [] {
    EnvConfig c = read_env();
    // Said once, as the logger says warnings (the logger's level itself comes from here).
    if (c.log_level != "error" && c.log_level != "off")
      for (const std::string& w : c.warnings) std::fprintf(stderr, "[rlx warn] %s\n", w.c_str());
    return c;
  }();
  return config;
}

}  // namespace rlx
