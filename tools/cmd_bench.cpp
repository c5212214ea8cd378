// `rlx bench --model FILE [--threads N] [--json OUT]`: the time to the first token of a
// model start with an empty compile cache (cold) and with the cache that start filled
// (warm), load time, prefill tokens/s at 64 and 512 tokens with the time to the first
// token of a fresh prompt, decode tokens/s at contexts 128 and 1024, peak resident
// memory, and decode bytes/s against the read bandwidth and prefill FLOP/s against the
// f32 FMA and int8 dot peaks, all measured in the same process.
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdarg>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <thread>

#include "backends/cpu/kernels/gemv_tuning.h"
#include "cli_io.h"
#include "commands.h"
#include "machine_limits.h"
#include "model_path.h"
#include "progress.h"
#include "rlx_git_commit.h"
#include "rlx/models/language_model.h"
#include "rlx/runtime/aot_cache.h"


namespace rlx::cli {
namespace {

struct BenchArgs {
  std::string model, json_out, kv = "f32";
  int threads = 0;
  int decode_steps = 16;
  int repeat = 3;  // timed runs per figure; the median is reported (a shared machine's load moves single runs)
  int64_t chunk = models::LoadOptions{}.max_chunk;
  std::vector<int64_t> prefill = {64, 512};
  std::vector<int64_t> contexts = {128, 1024};
  bool no_cache = false;
};

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

int run_bench(const BenchArgs& a) {
  const int threads = a.threads > 0 ? a.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  nlohmann::json out;
  out["rlx_version"] = std::string(kRlxVersion);
  out["commit"] = RLX_GIT_COMMIT;
  out["machine"] = cpu_description();
  out["kernels"] = kernel_isa_description();
  out["threads"] = threads;
  out["model"] = a.model;
  // The report, printed at the end (standard output, or stderr when the JSON goes there).
  std::string text;
  // Progress: the start-ups, the load, each prefill length and decode context, the limits.
  Progress progress("rlx bench");
  const double n_stages = (a.no_cache ? 1 : 2) + 1 + static_cast<double>(a.prefill.size() + a.contexts.size()) + 1;
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
  {
    auto tensors = list_stored_tensors(*where);
    if (!tensors) return report(tensors.error());
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
  const auto& c = m.config();
  out["config"] = c.summary();
  out["load_ms"] = load_ms;
  appendf(text, "model   %s\n        %s\n", a.model.c_str(), c.summary().c_str());
  appendf(text, "machine %s, %d threads, %s kernels\n", cpu_description(), threads, kernel_isa_description());
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
  const double kv_bytes_per_pos = 2.0 * static_cast<double>(c.n_layer * c.n_head_kv * c.head_dim) *
                                  (a.kv == "f16" ? 2 : 4);
  for (int64_t ctx : a.contexts) {
    next_stage(fmt::format("decode at context {}", ctx));
    m.reset();
    auto r = m.forward(token_run(ctx, c.n_vocab), false);
    if (!r) return report(r.error());
    int32_t next = 1;
    r = m.forward(std::span<const int32_t>(&next, 1), false);  // warm the decode executable
    if (!r) return report(r.error());
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
    const double mean_pos = static_cast<double>(ctx) + 1.0 + 0.5 * a.repeat * a.decode_steps;
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

  next_stage(fmt::format("machine limits ({} threads)", threads));
  const Bandwidth bw = measure_read_bandwidth(threads);
  const double bandwidth = bw.best;  // the ceiling uses the fastest pass: the strictest limit
  const double peak = measure_peak_flops(threads);
  const double peak_int8 = measure_peak_int8_ops(threads);
  const double peak_amx = measure_peak_amx_bf16_flops(threads);
  out["limits"] = {{"read_bandwidth_bytes_per_s", bandwidth},
                   {"read_bandwidth_median_bytes_per_s", bw.median},
                   {"peak_f32_flops", peak},
                   {"peak_int8_ops", peak_int8},
                   {"peak_amx_bf16_flops", peak_amx}};
  appendf(text, "limits  read bandwidth %.1f GB/s (best of 7 passes; median %.1f), f32 FMA peak %.1f GFLOP/s,\n"
              "        int8 dot peak %.1f GOP/s",
              bandwidth / 1e9, bw.median / 1e9, peak / 1e9, peak_int8 / 1e9);
  if (peak_amx > 0) appendf(text, ", AMX-BF16 tile peak %.1f GFLOP/s", peak_amx / 1e9);
  appendf(text, " (measured in this run)\n\n");
  appendf(text, "%-22s %12s %12s   %s\n", "phase", "tokens/s", "ms", "vs limit");
  for (const Row& r : rows) {
    if (r.decode) {
      const double ceiling = bandwidth / r.work;
      appendf(text, "%-22s %12.1f %12.2f   %5.1f%% of the %.1f tok/s bandwidth ceiling (%.2f GB/s)\n", r.phase.c_str(),
                  r.tps, r.ms, 100.0 * r.tps / ceiling, ceiling, r.tps * r.work / 1e9);
      auto& d = out["decode"][r.phase.substr(r.phase.find("ctx ") + 4)];
      d["ceiling_tokens_per_s"] = ceiling;
      d["pct_of_ceiling"] = 100.0 * r.tps / ceiling;
    } else {
      const double pct = 100.0 * r.tps * r.work / peak;
      const double pct_int8 = peak_int8 > 0 ? 100.0 * r.tps * r.work / peak_int8 : 0.0;
      appendf(text, "%-22s %12.1f %12.1f   %.1f GFLOP/s: %.1f%% of f32 FMA peak, %.1f%% of int8 dot peak",
                  r.phase.c_str(), r.tps, r.ms, r.tps * r.work / 1e9, pct, pct_int8);
      out["prefill"][r.phase.substr(8)]["pct_of_peak_flops"] = pct;
      out["prefill"][r.phase.substr(8)]["pct_of_peak_int8_ops"] = pct_int8;
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
  // The decode GEMV settings this process chose (measured on its first decode steps).
  const std::string gemv = cpu::describe_gemv_tuning();
  appendf(text, "gemv                   %s\n", gemv.c_str());
  out["cpu_decode_gemv"] = gemv;
  const double kv_total = kv_bytes_per_pos * static_cast<double>(lo.ctx);
  appendf(text, "\npeak resident %.1f MB (file %.1f MB + KV cache %.1f MB = %.1f MB)\n", rss / 1e6, weight_bytes / 1e6,
              kv_total / 1e6, (weight_bytes + kv_total) / 1e6);
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
  auto* cmd = app.add_subcommand("bench", "Benchmark a GGUF model: load, prefill, decode, memory, vs machine limits");
  auto a = std::make_shared<BenchArgs>();
  cmd->add_option("-m,--model", a->model, "GGUF file or Hugging Face folder")->required()->check(model_path_check());
  cmd->add_option("-t,--threads", a->threads, "threads (0 = all cores)")->check(kThreadCount);
  cmd->add_option("--json", a->json_out, "write the figures as JSON to this file (- : standard output, the table then goes to stderr)")
      ->check(output_path_check());
  cmd->add_option("--kv", a->kv, "KV cache dtype")->check(CLI::IsMember({"f32", "f16"}));
  cmd->add_option("--prefill", a->prefill, "prompt lengths to time")->check(kTokenCount);
  cmd->add_option("--ctx", a->contexts, "contexts at which decode is timed")->check(kTokenCount);
  cmd->add_option("--steps", a->decode_steps, "decode steps per context and run")->check(kTokenCount);
  cmd->add_option("--repeat", a->repeat, "timed runs per figure (the median is shown)")
      ->check(CLI::Range(1, 100));
  cmd->add_option("--chunk", a->chunk, "most prompt tokens per prefill run (longer prompts run in chunks)")
      ->check(kTokenCount);
  cmd->add_flag("--no-cache", a->no_cache, "compile everything (no AOT disk cache; no warm-start figure)");
  cmd->callback([run, a] { *run = [a] { return run_bench(*a); }; });
}

}  // namespace rlx::cli
