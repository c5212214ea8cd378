// `rlx bench --model FILE [--device cpu|cuda] [--threads N] [--batch B,...] [--json OUT]`:
// the time to the first token of a model start with an empty compile cache (cold) and
// with the cache that start filled (warm), load time, prefill tokens/s with the time to
// the first token of a fresh prompt, decode tokens/s at several contexts, batched decode
// of B streams of different lengths (aggregate tokens/s), peak memory, each figure next
// to its limit measured in the same process: on the CPU the read bandwidth and the f32
// FMA / int8 dot peaks; on a GPU its device-to-device copy bandwidth and the vendor
// GEMM's time at the model's own linear shapes.
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdarg>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fmt/format.h>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>

#include "backends/cpu/kernels/bf16_dot_matmul.h"
#include "backends/cpu/kernels/gemv_tuning.h"
#include "cli_io.h"
#include "commands.h"
#include "machine_limits.h"
#include "model_path.h"
#include "progress.h"
#include "rlx_git_commit.h"
#include "rlx/models/language_model.h"
#include "rlx/runtime/aot_cache.h"
#include "rlx/runtime/backend.h"


namespace rlx::cli {
namespace {

struct BenchArgs {
  std::string model, json_out, kv = "f32", device = "cpu";
  int threads = 0;
  int decode_steps = 16;
  int repeat = 3;  // timed runs per figure; the median is reported (a shared machine's load moves single runs)
  int64_t chunk = 0;  // the device's default (LoadOptions::max_chunk)
  std::vector<int64_t> prefill = {64, 512};
  std::vector<int64_t> contexts = {128, 1024};
  std::vector<int64_t> batches;  // batched decode: streams decoding together (none: not run)
  bool no_cache = false;
};

// A GPU's defaults when --prefill / --ctx are not given: long prompts and contexts (a
// short prefill is launch-bound there, and long-context decode is where attention shows).
const std::vector<int64_t> kDevicePrefill = {512, 2048};
const std::vector<int64_t> kDeviceContexts = {128, 2048, 8192};

double ms_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

double peak_rss_bytes() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) * 1024.0;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t h = v.size() / 2;
  return v.size() % 2 == 1 ? v[h] : 0.5 * (v[h - 1] + v[h]);
}

/// printf into `out` (the report is printed when the benchmark ends, after its progress).
__attribute__((format(printf, 2, 3))) void appendf(std::string& out, const char* format, ...) {
  va_list args;
  va_start(args, format);
  va_list copy;
  va_copy(copy, args);
  const int n = std::vsnprintf(nullptr, 0, format, copy);
  va_end(copy);
  if (n > 0) {
    const size_t at = out.size();
    out.resize(at + static_cast<size_t>(n) + 1);
    std::vsnprintf(out.data() + at, static_cast<size_t>(n) + 1, format, args);
    out.resize(at + static_cast<size_t>(n));
  }
  va_end(args);
}

std::vector<int32_t> token_run(int64_t n, int64_t vocab) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) t[i] = static_cast<int32_t>((i * 7919 + 13) % std::max<int64_t>(vocab, 1));
  return t;
}

/// The block linear layers' weight shapes [n_out, n_in] with how often each occurs (the
/// products a prefill runs per token row; not the embedding gather, not the LM head of
/// one row, not the stacked experts).
std::map<std::pair<int64_t, int64_t>, int> linear_shapes(const std::vector<StoredTensor>& tensors) {
  std::map<std::pair<int64_t, int64_t>, int> shapes;
  for (const StoredTensor& t : tensors) {
    // GGUF blocks (blk.N.*) and a Hugging Face language model's (model.layers.N.*; not a
    // vision tower's encoder.layers)
    const bool in_block = t.name.rfind("blk.", 0) == 0 || t.name.rfind("model.layers.", 0) == 0 ||
                          t.name.find("language_model.model.layers.") != std::string::npos;
    if (!in_block || t.shape.size() != 2 || is_expert_tensor(t.name) || t.shape[0] < 64 || t.shape[1] < 64) continue;
    ++shapes[{t.shape[0], t.shape[1]}];
  }
  return shapes;
}

/// What a GPU's figures are held against, measured on its backend in this process. A
/// part that could not be measured is left out (`missing` says why); the figures are
/// still reported.
struct DeviceBounds {
  DeviceLimits limits;
  std::string missing;
  /// Per prefill length: the ms the vendor GEMM takes for all block linear layers of
  /// the model (every block) at that many rows (f16 operands, f32 out), and their FLOP.
  std::map<int64_t, std::pair<double, double>> gemm_ms_flops;
};

DeviceBounds measure_device_bounds(Backend& backend, const std::vector<StoredTensor>& tensors,
                                   const std::vector<int64_t>& lengths) {
  DeviceBounds d;
  if (auto limits = backend.measure_device_limits()) d.limits = *limits;
  else d.missing = limits.error().message();
  const auto shapes = linear_shapes(tensors);
  if (shapes.empty() && d.missing.empty()) d.missing = "no block linear layers found for the GEMM bound";
  for (int64_t n : lengths) {
    if (shapes.empty()) break;
    double ms = 0, flops = 0;
    for (const auto& [nk, count] : shapes) {
      auto t = backend.measure_gemm_ms(n, nk.first, nk.second, ir::DType::F32);
      if (!t) {
        d.missing = t.error().message();
        return d;
      }
      ms += *t * count;
      flops += 2.0 * static_cast<double>(n * nk.first * nk.second) * count;
    }
    d.gemm_ms_flops[n] = {ms, flops};
  }
  return d;
}

/// Decode of `batch` streams at once (LanguageModel::forward_batch_greedy, one token back
/// per stream): streams of different lengths from `base` to about 1.9 x `base` are
/// prefilled in one run, then `repeat` x `steps` steps feed each stream the token it got.
/// Returns the median ms per step, with the mean cached tokens per stream.
struct BatchFigure {
  double ms_per_step = 0, mean_keys = 0;  // keys a stream's timed step attends to, on average
  std::vector<double> runs_ms;
};
Expected<BatchFigure> time_batch(const std::string& path, models::LoadOptions lo, int64_t batch, int64_t base,
                                 int steps, int repeat) {
  std::vector<std::vector<int32_t>> prompts(static_cast<size_t>(batch));
  int64_t longest = 0;
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t len = base + (b % 8) * base / 8;
    prompts[static_cast<size_t>(b)] = token_run(len, 32);
    for (int32_t& t : prompts[static_cast<size_t>(b)]) t = (t + static_cast<int32_t>(b)) % 32;
    longest = std::max(longest, len);
  }
  lo.batch = batch;
  // Room for the prefill's padded rows (a power-of-two bucket: under twice the longest
  // prompt, or min_bucket), three warm steps and the timed ones.
  lo.ctx = std::max(2 * longest, lo.min_bucket) + static_cast<int64_t>(repeat) * steps + 3 + 8;
  ASSIGN_OR_RETURN(auto m, models::LanguageModel::load(path, lo));
  ASSIGN_OR_RETURN(std::vector<int32_t> next, m->forward_batch_greedy(prompts));
  std::vector<std::vector<int32_t>> step(static_cast<size_t>(batch), std::vector<int32_t>(1));
  auto run_step = [&]() -> Status {
    for (size_t b = 0; b < step.size(); ++b) step[b][0] = next[b];
    ASSIGN_OR_RETURN(next, m->forward_batch_greedy(step));
    return {};
  };
  for (int i = 0; i < 3; ++i) TRY(run_step());  // the first run step by step, the second captures (CUDA graphs)
  BatchFigure f;
  for (int k = 0; k < repeat; ++k) {
    const auto t = std::chrono::steady_clock::now();
    for (int i = 0; i < steps; ++i) TRY(run_step());
    f.runs_ms.push_back(ms_since(t) / steps);
  }
  f.ms_per_step = median(f.runs_ms);
  double past = 0;
  for (int64_t b = 0; b < batch; ++b) past += static_cast<double>(m->n_past(b));
  // After the timed steps a stream holds len + 3 + repeat * steps tokens (three warm
  // steps); timed step t attends to len + 4 + t keys.
  f.mean_keys = past / static_cast<double>(batch) - 0.5 * (repeat * steps - 1);
  return f;
}

int run_bench(const BenchArgs& a) {
  auto device = Device::parse(a.device);
  if (!device) return report(device.error());
  const bool on_cpu = device->kind == DeviceKind::kCpu;
  const int threads = a.threads > 0 ? a.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  nlohmann::json out;
  out["rlx_version"] = std::string(kRlxVersion);
  out["commit"] = RLX_GIT_COMMIT;
  out["device"] = device->to_string();
  out["machine"] = cpu_description();
  out["kernels"] = kernel_isa_description();
  out["threads"] = threads;
  out["model"] = a.model;
  // The report, printed at the end (standard output, or stderr when the JSON goes there).
  std::string text;
  // Progress: the start-ups, the load, each prefill length and decode context, each
  // batch, the limits.
  Progress progress("rlx bench");
  const double n_stages = (a.no_cache ? 1 : 2) + 1 +
                          static_cast<double>(a.prefill.size() + a.contexts.size() + a.batches.size()) + 1;
  int stage = 0;
  auto next_stage = [&](const std::string& what) { progress.update(stage++ / n_stages, what); };

  // A decode step reads every weight once, except the stacked experts of a mixture of
  // experts, of which it reads the n_expert_used chosen per layer: `active_bytes`; a
  // token's multiply-adds are those of `active_params` likewise.
  int64_t weight_bytes = 0, n_params = 0, expert_bytes = 0, expert_params = 0;
  double active_bytes = 0, active_params = 0;
  auto where = resolve_model_path(a.model);
  if (!where) return report(where.error());
  const std::string& path = where->path;
  auto tensors = list_stored_tensors(*where);
  if (!tensors) return report(tensors.error());
  int64_t n_expert = 0, n_expert_used = 0;
  {
    for (const StoredTensor& t : *tensors) {
      weight_bytes += t.n_bytes;
      n_params += t.n_elements;
      if (is_expert_tensor(t.name)) {
        expert_bytes += t.n_bytes;
        expert_params += t.n_elements;
      }
    }
    active_bytes = static_cast<double>(weight_bytes);
    active_params = static_cast<double>(n_params);
    auto opened = open_model(*where);
    if (!opened) return report(opened.error());
    if (const models::ModelConfig& config = opened->config; config.n_expert > 0) {
      n_expert = config.n_expert;
      n_expert_used = config.n_expert_used;
      const double unused = 1.0 - static_cast<double>(config.n_expert_used) / static_cast<double>(config.n_expert);
      active_bytes -= static_cast<double>(expert_bytes) * unused;
      active_params -= static_cast<double>(expert_params) * unused;
      out["experts"] = {{"count", config.n_expert}, {"used", config.n_expert_used}, {"expert_bytes", expert_bytes}};
    }
    out["active_weight_bytes_per_token"] = active_bytes;
    out["active_params_per_token"] = active_params;
  }
  const int64_t max_ctx = *std::max_element(a.contexts.begin(), a.contexts.end());
  const int64_t max_prefill = *std::max_element(a.prefill.begin(), a.prefill.end());
  models::LoadOptions lo;
  lo.device = *device;
  lo.threads = threads;
  lo.ctx = std::max(max_ctx, max_prefill) + static_cast<int64_t>(a.repeat) * a.decode_steps + 8;
  lo.kv_dtype = a.kv == "f16" ? ir::DType::F16 : ir::DType::F32;
  lo.max_chunk = a.chunk;
  lo.compile_cache = !a.no_cache;

  // Start-up as a new process sees it: load, compile (or load from the AOT cache) and
  // the first forward of a prompt of the first prefill length, with a compile cache of
  // its own that starts empty (cold) and then holds what the cold start stored (warm).
  // Before the main model, one instance at a time, so that peak memory is unchanged.
  {
    namespace fs = std::filesystem;
    const fs::path dir = fs::temp_directory_path() / fmt::format("rlx-bench-cache-{}", getpid());
    std::error_code ec;
    fs::remove_all(dir, ec);
    const auto prompt = token_run(a.prefill.front(), 32);  // any ids below the smallest vocabulary
    auto start = [&](const char* what) -> Expected<double> {
      next_stage(fmt::format("start-up, {} compile cache", what));
      models::LoadOptions so = lo;
      so.cache_dir = dir.string();
      const auto t = std::chrono::steady_clock::now();
      ASSIGN_OR_RETURN(auto sm, models::LanguageModel::load(path, so));
      TRY(sm->forward(prompt, false));
      const double ms = ms_since(t);
      const models::CompileStats& cs = sm->compile_stats();
      out["start"][what] = {{"time_to_first_token_ms", ms},
                            {"compile_ms", cs.compile_ms},
                            {"executables", cs.executables},
                            {"from_aot_cache", cs.aot_loads}};
      appendf(text, "start   %-4s first token of a %lld-token prompt %.1f ms (compile %.1f ms, %lld of %lld executables "
                  "from the AOT cache)\n",
                  what, static_cast<long long>(a.prefill.front()), ms, cs.compile_ms,
                  static_cast<long long>(cs.aot_loads), static_cast<long long>(cs.executables));
      return ms;
    };
    auto cold = start("cold");
    if (!cold) return report(cold.error());
    if (!a.no_cache) {
      auto warm = start("warm");
      if (!warm) return report(warm.error());
    }
    fs::remove_all(dir, ec);
  }
  next_stage("load");
  auto t0 = std::chrono::steady_clock::now();
  auto model = models::LanguageModel::load(path, lo);
  if (!model) return report(model.error());
  const double load_ms = ms_since(t0);
  auto& m = **model;
  const models::ModelConfig c = m.config();  // (a copy: the model is released before the limits)
  out["load_ms"] = load_ms;
  appendf(text, "model   %s\n        %s\n", a.model.c_str(), c.summary().c_str());
  if (on_cpu)
    appendf(text, "machine %s, %d threads, %s kernels\n", cpu_description(), threads, kernel_isa_description());
  else
    appendf(text, "device  %s (host %s)\n", device->to_string().c_str(), cpu_description());
  appendf(text, "load    %.1f ms (mmap; weights %.1f MB", load_ms, weight_bytes / 1e6);
  if (expert_bytes > 0) appendf(text, "; a decode step reads %.1f MB of them: the chosen experts", active_bytes / 1e6);
  appendf(text, ")\n");

  // Model figures first (peak RSS must not include the 1 GiB bandwidth probe).
  struct Row {
    std::string phase;
    double tps, ms;
    bool decode;
    double work;  // FLOP per token (prefill) or bytes per token (decode)
    double first_ms = 0;  // prefill: the first forward of this length (compile included)
    double tps_min = 0, tps_max = 0;  // over the timed runs
  };
  std::vector<Row> rows;
  const double flops_per_token = 2.0 * active_params;  // a token's k experts, not all of them
  for (int64_t n : a.prefill) {
    next_stage(fmt::format("prefill {} tokens", n));
    const auto toks = token_run(n, c.n_vocab);
    m.reset();
    auto first = std::chrono::steady_clock::now();
    auto r = m.forward(toks, false);  // compiles the bucket on first use: time to first token
    if (!r) return report(r.error());
    const double ttft_ms = ms_since(first);
    std::vector<double> runs_ms;
    for (int i = 0; i < a.repeat; ++i) {
      m.reset();
      auto t = std::chrono::steady_clock::now();
      r = m.forward(toks, false);
      if (!r) return report(r.error());
      runs_ms.push_back(ms_since(t));
    }
    const double ms = median(runs_ms);
    const double tps = n * 1000.0 / ms;
    const auto [fastest, slowest] = std::minmax_element(runs_ms.begin(), runs_ms.end());
    rows.push_back({"prefill " + std::to_string(n), tps, ms, false, flops_per_token, ttft_ms, n * 1000.0 / *slowest,
                    n * 1000.0 / *fastest});
    out["prefill"][std::to_string(n)] = {
        {"tokens_per_s", tps}, {"ms", ms}, {"ms_runs", runs_ms}, {"time_to_first_token_ms", ttft_ms}};
  }
  const double kv_bytes_per_pos = 2.0 * static_cast<double>(c.n_layer * c.kv_width()) *
                                  (a.kv == "f16" ? 2 : 4);
  for (int64_t ctx : a.contexts) {
    next_stage(fmt::format("decode at context {}", ctx));
    m.reset();
    auto r = m.forward(token_run(ctx, c.n_vocab), false);
    if (!r) return report(r.error());
    int32_t next = 1;
    for (int w = 0; w < 2; ++w) {  // warm the decode executable (on a GPU the second run captures its graph)
      r = m.forward(std::span<const int32_t>(&next, 1), false);
      if (!r) return report(r.error());
    }
    // Timed runs of decode_steps tokens each, one after the other (the context grows by
    // repeat * decode_steps; the KV bytes count the mean position read).
    std::vector<double> runs_ms;
    for (int k = 0; k < a.repeat; ++k) {
      auto t = std::chrono::steady_clock::now();
      for (int i = 0; i < a.decode_steps; ++i) {
        r = m.forward(std::span<const int32_t>(&next, 1), false);
        if (!r) return report(r.error());
      }
      runs_ms.push_back(ms_since(t) / a.decode_steps);
    }
    const double ms = median(runs_ms);
    const double tps = 1000.0 / ms;
    const auto [fastest, slowest] = std::minmax_element(runs_ms.begin(), runs_ms.end());
    // (timed step t attends to ctx + 3 + t keys: the prefill, two warm steps, itself)
    const double mean_pos = static_cast<double>(ctx) + 2.5 + 0.5 * a.repeat * a.decode_steps;
    const double bytes_per_token = active_bytes + kv_bytes_per_pos * mean_pos;
    rows.push_back({"decode @ctx " + std::to_string(ctx), tps, ms, true, bytes_per_token, 0.0, 1000.0 / *slowest,
                    1000.0 / *fastest});
    out["decode"][std::to_string(ctx)] = {{"tokens_per_s", tps},
                                          {"ms_per_token", ms},
                                          {"ms_per_token_runs", runs_ms},
                                          {"bytes_per_token", bytes_per_token},
                                          {"bytes_per_s", tps * bytes_per_token}};
  }
  const double rss = peak_rss_bytes();
  Backend* backend = m.pipeline().session().backend();
  const int64_t device_peak = backend != nullptr ? backend->peak_device_bytes() : -1;
  out["config"] = c.summary();
  model->reset();  // (the batched models below load their own copy)

  // Batched decode: aggregate tokens/s of B streams stepping together.
  struct BatchRow {
    int64_t batch;
    BatchFigure f;
    double bytes_per_step;
  };
  std::vector<BatchRow> batch_rows;
  const int64_t batch_base = *std::min_element(a.contexts.begin(), a.contexts.end());
  for (int64_t b : a.batches) {
    next_stage(fmt::format("decode of {} streams", b));
    auto f = time_batch(path, lo, b, batch_base, a.decode_steps, a.repeat);
    if (!f) return report(f.error().with_context(fmt::format("batched decode of {} streams", b)));
    // One step reads the weights once for all streams (of a mixture of experts, the
    // union of the experts they chose: E (1 - (1 - k/E)^B) per layer on average) and the
    // cache of every stream.
    double weights = active_bytes;
    if (n_expert > 0) {
      const double kE = static_cast<double>(n_expert_used) / static_cast<double>(n_expert);
      const double union_share = 1.0 - std::pow(1.0 - kE, static_cast<double>(b));
      weights += static_cast<double>(expert_bytes) * (union_share - kE);
    }
    batch_rows.push_back({b, *f, weights + kv_bytes_per_pos * static_cast<double>(b) * f->mean_keys});
  }

  next_stage(on_cpu ? fmt::format("machine limits ({} threads)", threads) : "device limits");
  double bandwidth = 0, peak = 0, peak_int8 = 0, peak_amx = 0, peak_bf16 = 0;
  DeviceBounds bounds;
  if (on_cpu) {
    const Bandwidth bw = measure_read_bandwidth(threads);
    bandwidth = bw.best;  // the ceiling uses the fastest pass: the strictest limit
    peak = measure_peak_flops(threads);
    peak_int8 = measure_peak_int8_ops(threads);
    peak_amx = measure_peak_amx_bf16_flops(threads);
    peak_bf16 = measure_peak_bf16_dot_flops(threads);
    out["limits"] = {{"read_bandwidth_bytes_per_s", bandwidth},
                     {"read_bandwidth_median_bytes_per_s", bw.median},
                     {"peak_f32_flops", peak},
                     {"peak_int8_ops", peak_int8},
                     {"peak_amx_bf16_flops", peak_amx},
                     {"peak_bf16_dot_flops", peak_bf16}};
    appendf(text, "limits  read bandwidth %.1f GB/s (best of 7 passes; median %.1f), f32 FMA peak %.1f GFLOP/s,\n"
                "        int8 dot peak %.1f GOP/s",
                bandwidth / 1e9, bw.median / 1e9, peak / 1e9, peak_int8 / 1e9);
    if (peak_amx > 0) appendf(text, ", AMX-BF16 tile peak %.1f GFLOP/s", peak_amx / 1e9);
    if (peak_bf16 > 0) appendf(text, ",\n        AVX-512 BF16 dot peak %.1f GFLOP/s", peak_bf16 / 1e9);
    appendf(text, " (measured in this run)\n\n");
  } else {
    if (backend == nullptr) return report(Error::internal("bench: the model's session has no backend"));
    bounds = measure_device_bounds(*backend, *tensors, a.prefill);
    bandwidth = bounds.limits.copy_bytes_per_s;
    if (!bounds.missing.empty()) {
      appendf(text, "limits  not all measured: %s\n", bounds.missing.c_str());
      out["limits_missing"] = bounds.missing;
    }
    out["limits"] = {{"device_name", bounds.limits.device_name},
                     {"device_memory_bytes", bounds.limits.memory_bytes},
                     {"copy_bandwidth_bytes_per_s", bandwidth}};
    appendf(text, "limits  %s, %.1f GB: copy bandwidth %.0f GB/s (device to device, read + write, median of 20 "
                "copies)", bounds.limits.device_name.c_str(), bounds.limits.memory_bytes / 1e9, bandwidth / 1e9);
    for (const auto& [n, ms_flops] : bounds.gemm_ms_flops) {
      appendf(text, ";\n        vendor GEMM (f16, f32 out) at the model's linear layers, %lld rows: %.3f ms for "
                  "all blocks = %.1f TFLOP/s",
                  static_cast<long long>(n), ms_flops.first, ms_flops.second / ms_flops.first * 1e-9);
      out["limits"]["gemm"][std::to_string(n)] = {{"ms_all_blocks", ms_flops.first},
                                                 {"flops_all_blocks", ms_flops.second},
                                                 {"flops_per_s", ms_flops.second / ms_flops.first * 1e3}};
    }
    appendf(text, " (measured in this run)\n\n");
  }
  appendf(text, "%-22s %12s %12s   %s\n", "phase", "tokens/s", "ms", "vs limit");
  for (const Row& r : rows) {
    if (r.decode && bandwidth <= 0) {
      appendf(text, "%-22s %12.1f %12.2f   (%.2f GB/s; no bandwidth measured)\n", r.phase.c_str(), r.tps, r.ms,
                  r.tps * r.work / 1e9);
    } else if (r.decode) {
      const double ceiling = bandwidth / r.work;
      appendf(text, "%-22s %12.1f %12.2f   %5.1f%% of the %.1f tok/s %s ceiling (%.2f GB/s)\n", r.phase.c_str(),
                  r.tps, r.ms, 100.0 * r.tps / ceiling, ceiling, on_cpu ? "bandwidth" : "copy-bandwidth",
                  r.tps * r.work / 1e9);
      auto& d = out["decode"][r.phase.substr(r.phase.find("ctx ") + 4)];
      d["ceiling_tokens_per_s"] = ceiling;
      d["pct_of_ceiling"] = 100.0 * r.tps / ceiling;
    } else if (!on_cpu && bounds.gemm_ms_flops.count(std::stoll(r.phase.substr(8))) == 0) {
      appendf(text, "%-22s %12.1f %12.2f   %.1f TFLOP/s (no GEMM bound measured)\n", r.phase.c_str(), r.tps, r.ms,
                  r.tps * r.work / 1e12);
    } else if (!on_cpu) {
      // The bound: the vendor GEMM's time for the model's linear layers at this many
      // rows (attention, norms and the LM head not counted): tokens/s they alone allow.
      const int64_t n = std::stoll(r.phase.substr(8));
      const double bound_tps = static_cast<double>(n) * 1000.0 / bounds.gemm_ms_flops.at(n).first;
      appendf(text, "%-22s %12.1f %12.2f   %.1f TFLOP/s: %.1f%% of the %.0f tok/s vendor-GEMM bound of its linear "
                  "layers\n",
                  r.phase.c_str(), r.tps, r.ms, r.tps * r.work / 1e12, 100.0 * r.tps / bound_tps, bound_tps);
      auto& pf = out["prefill"][r.phase.substr(8)];
      pf["gemm_bound_tokens_per_s"] = bound_tps;
      pf["pct_of_gemm_bound"] = 100.0 * r.tps / bound_tps;
    } else {
      const double pct = 100.0 * r.tps * r.work / peak;
      const double pct_int8 = peak_int8 > 0 ? 100.0 * r.tps * r.work / peak_int8 : 0.0;
      appendf(text, "%-22s %12.1f %12.1f   %.1f GFLOP/s: %.1f%% of f32 FMA peak, %.1f%% of int8 dot peak",
                  r.phase.c_str(), r.tps, r.ms, r.tps * r.work / 1e9, pct, pct_int8);
      out["prefill"][r.phase.substr(8)]["pct_of_peak_flops"] = pct;
      out["prefill"][r.phase.substr(8)]["pct_of_peak_int8_ops"] = pct_int8;
      if (peak_bf16 > 0) {
        const double pct_bf16 = 100.0 * r.tps * r.work / peak_bf16;
        appendf(text, ", %.1f%% of BF16 dot peak", pct_bf16);
        out["prefill"][r.phase.substr(8)]["pct_of_peak_bf16_dot_flops"] = pct_bf16;
      }
      if (peak_amx > 0) {
        const double pct_amx = 100.0 * r.tps * r.work / peak_amx;
        appendf(text, ", %.1f%% of AMX-BF16 peak", pct_amx);
        out["prefill"][r.phase.substr(8)]["pct_of_peak_amx_bf16_flops"] = pct_amx;
      }
      appendf(text, "\n");
    }
  }
  std::string first_tokens;
  for (const Row& r : rows) {
    if (r.decode) continue;
    first_tokens +=
        fmt::format("{}{} tokens {:.1f} ms", first_tokens.empty() ? "" : ", ", r.phase.substr(8), r.first_ms);
  }
  if (!first_tokens.empty())
    appendf(text, "first token            %s (a fresh prompt: the first forward of its length, compile included)\n",
                first_tokens.c_str());
  if (a.repeat > 1) {
    std::string spread;
    for (const Row& r : rows)
      spread += fmt::format("{}{} {:.1f}-{:.1f}", spread.empty() ? "" : ", ", r.phase, r.tps_min, r.tps_max);
    appendf(text, "runs                   %d per figure, median shown; tokens/s range: %s\n", a.repeat, spread.c_str());
  }
  out["runs_per_figure"] = a.repeat;
  if (on_cpu) {
    // The decode GEMV settings this process chose (measured on its first decode steps).
    const std::string gemv = cpu::describe_gemv_tuning();
    appendf(text, "gemv                   %s\n", gemv.c_str());
    out["cpu_decode_gemv"] = gemv;
    // Which many-row f16 / bf16 matmuls ran on the BF16 dot products (prefill).
    const std::string dot = cpu::describe_bf16_dot();
    appendf(text, "bf16 dot               %s\n", dot.c_str());
    out["cpu_bf16_dot"] = dot;
  }
  if (!batch_rows.empty()) {
    appendf(text, "\n%-22s %12s %12s   %s\n", "batched decode", "tokens/s", "ms/step", "vs batch 1, vs limit");
    const auto one = std::find_if(batch_rows.begin(), batch_rows.end(), [](const BatchRow& r) { return r.batch == 1; });
    for (const BatchRow& r : batch_rows) {
      const double tps = static_cast<double>(r.batch) * 1000.0 / r.f.ms_per_step;
      const double ceiling = static_cast<double>(r.batch) * bandwidth / r.bytes_per_step;
      std::string vs_one;
      if (one != batch_rows.end()) vs_one = fmt::format("{:.2f}x batch 1, ", tps * one->f.ms_per_step / 1000.0);
      const std::string vs_limit =
          bandwidth > 0 ? fmt::format("{:.1f}% of the {:.1f} tok/s {} ceiling", 100.0 * tps / ceiling, ceiling,
                                      on_cpu ? "bandwidth" : "copy-bandwidth")
                        : std::string("no bandwidth measured");
      appendf(text, "%-22s %12.1f %12.2f   %s%s (streams at about %.0f tokens)\n",
                  fmt::format("batch {}", r.batch).c_str(), tps, r.f.ms_per_step, vs_one.c_str(), vs_limit.c_str(),
                  r.f.mean_keys);
      out["batch"][std::to_string(r.batch)] = {{"tokens_per_s", tps},
                                               {"tokens_per_s_per_stream", tps / static_cast<double>(r.batch)},
                                               {"ms_per_step", r.f.ms_per_step},
                                               {"ms_per_step_runs", r.f.runs_ms},
                                               {"mean_cached_tokens", r.f.mean_keys},
                                               {"bytes_per_step", r.bytes_per_step},
                                               {"ceiling_tokens_per_s", ceiling},
                                               {"pct_of_ceiling", 100.0 * tps / ceiling}};
    }
  }
  const double kv_total = kv_bytes_per_pos * static_cast<double>(lo.ctx);
  if (on_cpu) {
    appendf(text, "\npeak resident %.1f MB (file %.1f MB + KV cache %.1f MB = %.1f MB)\n", rss / 1e6,
                weight_bytes / 1e6, kv_total / 1e6, (weight_bytes + kv_total) / 1e6);
  } else {
    appendf(text, "\npeak device memory %.1f MB held by RLX (file %.1f MB + KV cache %.1f MB = %.1f MB; the rest: "
                "activations, workspaces); host peak resident %.1f MB\n",
                device_peak / 1e6, weight_bytes / 1e6, kv_total / 1e6, (weight_bytes + kv_total) / 1e6, rss / 1e6);
    out["peak_device_bytes"] = device_peak;
  }
  out["peak_rss_bytes"] = rss;
  out["kv_cache_bytes"] = kv_total;
  out["weight_bytes"] = weight_bytes;
  progress.update(1.0);
  progress.finish();
  if (!a.json_out.empty() && a.json_out != "-") appendf(text, "json    %s\n", a.json_out.c_str());
  // With --json -, standard output holds the JSON alone and the table goes to stderr.
  std::fputs(text.c_str(), a.json_out == "-" ? stderr : stdout);
  if (!a.json_out.empty()) {
    if (Status s = write_output(a.json_out, out.dump(2) + "\n"); !s.ok()) return report(s.error());
  }
  return 0;
}

}  // namespace

void add_bench_command(CLI::App& app, Runner* run) {
  auto* cmd = app.add_subcommand("bench", "Benchmark a model: load, prefill, decode, batched decode, memory, vs machine limits");
  auto a = std::make_shared<BenchArgs>();
  cmd->add_option("-m,--model", a->model, "GGUF file or Hugging Face folder")->required()->check(model_path_check());
  add_device_option(cmd, &a->device, true, " (a GPU's default prompt lengths are 512,2048 and contexts 128,2048,8192)");
  cmd->add_option("-t,--threads", a->threads, "threads (0 = all cores)")->check(kThreadCount);
  cmd->add_option("--batch", a->batches, "also time decode of this many streams at once, each list entry a run "
                  "(e.g. 1,4,16,64): aggregate tokens/s")
      ->delimiter(',')
      ->check(CLI::Range(1, 256));
  cmd->add_option("--json", a->json_out, "write the figures as JSON to this file (- : standard output, the table then goes to stderr)")
      ->check(output_path_check());
  cmd->add_option("--kv", a->kv, "KV cache dtype")->check(CLI::IsMember({"f32", "f16"}));
  auto* prefill = cmd->add_option("--prefill", a->prefill, "prompt lengths to time")->delimiter(',')->check(kTokenCount);
  auto* contexts =
      cmd->add_option("--ctx", a->contexts, "contexts at which decode is timed")->delimiter(',')->check(kTokenCount);
  cmd->add_option("--steps", a->decode_steps, "decode steps per context and run")->check(kTokenCount);
  cmd->add_option("--repeat", a->repeat, "timed runs per figure (the median is shown)")
      ->check(CLI::Range(1, 100));
  auto* chunk_opt = cmd->add_option("--chunk", a->chunk,
                              "most prompt tokens per prefill run (longer prompts run in chunks; 0: the device's "
                              "default, on a GPU the longest prompt length: one run)")
                  ->check(CLI::Range(int64_t{0}, int64_t{1} << 24));
  cmd->add_flag("--no-cache", a->no_cache, "compile everything (no AOT disk cache; no warm-start figure)");
  cmd->callback([run, a, prefill, contexts, chunk_opt] {
    if (a->device.rfind("cuda", 0) == 0) {  // a GPU: its defaults, unless given
      if (prefill->count() == 0) a->prefill = kDevicePrefill;
      if (contexts->count() == 0) a->contexts = kDeviceContexts;
      // (a GPU's prefill speed grows with the rows of a run well past the CPU's chunk,
      // and the activations are on the device)
      if (chunk_opt->count() == 0)
        a->chunk = std::max(models::kGpuMaxChunk, *std::max_element(a->prefill.begin(), a->prefill.end()));
    }
    *run = [a] { return run_bench(*a); };
  });
}

}  // namespace rlx::cli
