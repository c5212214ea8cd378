// rlx_serve_load: a bounded loopback load generator for `rlx serve`. At each level of
// concurrent streams (default 1, 4, 16, 64) it runs that many client threads, each doing
// a few streamed /v1/completions requests one after another, and reports output tokens/s
// over the level's wall time, time to first token (p50/p99) and inter-token gaps
// (p50/p99). It targets a running server on 127.0.0.1:--port, or without --port starts
// one in-process (the same Scheduler + Server as `rlx serve`) over --model, by default a
// tiny synthetic model written to the temp folder (one server with as many slots as the
// largest level, or with --slots-per-level one per level). Before each level one request
// per stream warms the executables up. Connects to the loopback address only.
#include <httplib.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "rlx/models/language_model.h"
#include "rlx/models/synth.h"
#include "rlx/serve/server.h"

namespace {

using Clock = std::chrono::steady_clock;
using rlx::Expected;

struct Args {
  int port = 0;
  std::string model, levels = "1,4,16,64", preset = "tiny";
  int requests = 2;          // per stream, one after another
  int max_tokens = 64;
  int prompt_words = 24;
  int system_words = 0;      // a prefix every prompt shares (a system prompt)
  int64_t ctx = 512;
  int threads = 0;
  bool slots_per_level = false;  // a fresh in-process server with as many slots as streams
};

// One level's measurements (seconds).
struct Samples {
  std::vector<double> ttft, gaps;
  int64_t tokens = 0, failed = 0;
};

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5));
  return v[i];
}

// One streamed completion; appends its first-token time and token gaps to `out`.
void one_request(httplib::Client& cli, const std::string& body, Samples& out, std::mutex& mu) {
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.body = body;
  req.set_header("Content-Type", "application/json");
  std::string buffer;
  std::vector<double> stamps;
  int64_t tokens = 0;
  const Clock::time_point start = Clock::now();
  req.content_receiver = [&](const char* data, size_t len, uint64_t, uint64_t) {
    const double now = std::chrono::duration<double>(Clock::now() - start).count();
    buffer.append(data, len);
    for (size_t end; (end = buffer.find("\n\n")) != std::string::npos; buffer.erase(0, end + 2)) {
      const std::string event = buffer.substr(0, end);
      if (event.rfind("data: ", 0) != 0 || event == "data: [DONE]") continue;
      auto j = nlohmann::json::parse(event.substr(6), nullptr, false);
      if (j.is_discarded()) continue;
      if (j.contains("usage") && j["usage"].is_object()) tokens = j["usage"].value("completion_tokens", int64_t{0});
      if (j.contains("choices") && !j["choices"].empty()) stamps.push_back(now);
    }
    return true;
  };
  auto res = cli.send(req);
  std::lock_guard<std::mutex> lock(mu);
  if (!res || res->status != 200 || stamps.empty()) {
    // An error's body goes to the content receiver as well.
    const std::string& error_body = res && !res->body.empty() ? res->body : buffer;
    if (out.failed++ == 0)
      std::fprintf(stderr, "rlx_serve_load: a request failed: %s\n",
                   !res                   ? httplib::to_string(res.error()).c_str()
                   : res->status != 200 ? fmt::format("HTTP {}: {}", res->status, error_body).c_str()
                                        : "no token came back");
    return;
  }
  out.ttft.push_back(stamps.front());
  for (size_t i = 1; i < stamps.size(); ++i) out.gaps.push_back(stamps[i] - stamps[i - 1]);
  out.tokens += tokens;
}

std::string request_body(const std::string& model, int stream_index, int request_index, const Args& a) {
  std::ostringstream prompt;
  if (a.system_words > 0) {
    prompt << "System:";
    for (int w = 0; w < a.system_words; ++w) prompt << " rule" << (w * 17) % 89;
    prompt << "\n";
  }
  prompt << "Stream " << stream_index << " request " << request_index << ":";
  for (int w = 0; w < a.prompt_words; ++w) prompt << " word" << (stream_index * 7 + w * 13) % 97;
  const nlohmann::json body{{"model", model},          {"prompt", prompt.str()}, {"max_tokens", a.max_tokens},
                            {"temperature", 0},        {"stream", true},
                            {"stream_options", {{"include_usage", true}}}};
  return body.dump();
}

// An in-process server (the Scheduler + Server of `rlx serve`) with `slots` sequences.
struct InProcess {
  std::unique_ptr<rlx::models::LanguageModel> model;
  std::unique_ptr<rlx::Tokenizer> tok;
  rlx::serve::Metrics metrics;
  std::unique_ptr<rlx::serve::Scheduler> scheduler;
  std::unique_ptr<rlx::serve::Server> server;
  std::thread serving;
  int port = 0;

  ~InProcess() {
    if (!server) return;
    scheduler->stop();
    server->stop();
    if (serving.joinable()) serving.join();
  }
};

Expected<std::unique_ptr<InProcess>> start(const std::string& path, int slots, const Args& a) {
  auto p = std::make_unique<InProcess>();
  rlx::models::LoadOptions lo;
  lo.batch = slots;
  lo.ctx = a.ctx;
  lo.threads = a.threads;
  ASSIGN_OR_RETURN(p->model, rlx::models::LanguageModel::load(path, lo));
  ASSIGN_OR_RETURN(p->tok, rlx::load_tokenizer_from_gguf(path));
  std::string note;
  ASSIGN_OR_RETURN(rlx::serve::ChatFormatter chat, rlx::serve::ChatFormatter::create("", *p->tok, &note));
  p->scheduler = std::make_unique<rlx::serve::Scheduler>(*p->model, *p->tok, p->metrics, rlx::serve::SchedulerOptions{});
  rlx::serve::ServerOptions so;
  so.port = 0;
  so.model_name = "bench";
  so.threads = slots + 8;
  p->server = std::make_unique<rlx::serve::Server>(*p->scheduler, *p->tok, std::move(chat), p->metrics, so);
  ASSIGN_OR_RETURN(p->port, p->server->bind());
  InProcess* raw = p.get();
  p->serving = std::thread([raw] { (void)raw->server->serve(); });
  return p;
}

// A gauge of the server's GET /metrics (-1 when the server or the line is missing): the
// KV cache's memory after a level, in- or out-of-process alike.
double metric_value(int port, const std::string& name) {
  httplib::Client cli("127.0.0.1", port);
  auto res = cli.Get("/metrics");
  if (!res || res->status != 200) return -1;
  std::istringstream in(res->body);
  for (std::string line; std::getline(in, line);)
    if (line.rfind(name + " ", 0) == 0) return std::atof(line.c_str() + name.size() + 1);
  return -1;
}

int fail(const rlx::Error& e) {
  std::fprintf(stderr, "rlx_serve_load: %s\n", e.to_string().c_str());
  return 1;
}

int run(const Args& a) {
  std::vector<int> levels;
  std::stringstream ss(a.levels);
  for (std::string item; std::getline(ss, item, ',');) {
    const int c = std::atoi(item.c_str());
    if (c < 1 || c > 256) {
      std::fprintf(stderr, "rlx_serve_load: a level must be 1..256, got '%s'\n", item.c_str());
      return 2;
    }
    levels.push_back(c);
  }
  const int most = *std::max_element(levels.begin(), levels.end());

  std::string path = a.model, name = "bench";
  if (a.port == 0 && path.empty()) {
    path = (std::filesystem::temp_directory_path() / ("rlx_serve_load_" + a.preset + ".gguf")).string();
    rlx::models::SynthOptions so;
    so.preset = a.preset;
    if (!std::filesystem::exists(path))
      if (rlx::Status s = rlx::models::write_synthetic_gguf(so, path); !s.ok()) return fail(s.error());
  }
  if (a.port != 0) {
    httplib::Client cli("127.0.0.1", a.port);
    auto res = cli.Get("/v1/models");
    if (!res || res->status != 200) {
      std::fprintf(stderr, "rlx_serve_load: no server answers GET /v1/models on 127.0.0.1:%d\n", a.port);
      return 1;
    }
    auto j = nlohmann::json::parse(res->body, nullptr, false);
    if (!j.is_discarded() && j.contains("data") && j["data"].is_array() && !j["data"].empty())
      name = j["data"][0].value("id", name);
  }

  auto level = [&](int port, int streams, int requests, Samples& s) {
    std::mutex mu;
    std::vector<std::thread> threads;
    for (int i = 0; i < streams; ++i)
      threads.emplace_back([&, i] {
        // One kept-alive connection per stream, as the OpenAI client libraries do.
        httplib::Client cli("127.0.0.1", port);
        cli.set_read_timeout(600, 0);
        cli.set_keep_alive(true);
        cli.set_tcp_nodelay(true);
        for (int r = 0; r < requests; ++r) one_request(cli, request_body(name, i, r, a), s, mu);
      });
    for (std::thread& t : threads) t.join();
  };

  std::unique_ptr<InProcess> shared;
  if (a.port == 0 && !a.slots_per_level) {
    auto p = start(path, most, a);
    if (!p) return fail(p.error());
    shared = std::move(*p);
    std::printf("in-process server: %s, %d slots, context %lld\n", shared->model->config().summary().c_str(), most,
                static_cast<long long>(a.ctx));
  }
  std::printf("%-8s %6s %10s %8s %12s %12s %12s %12s %7s %9s %9s%s\n", "streams", "slots", "out tok/s", "tokens",
              "TTFT p50 ms", "TTFT p99 ms", "ITL p50 ms", "ITL p99 ms", "failed", "KV MiB", "of MiB",
              a.port == 0 ? "   steps  model ms  model tok/s   prompt tok  computed  copied" : "");
  for (int c : levels) {
    std::unique_ptr<InProcess> own;
    int port = a.port, slots = 0;
    if (shared) {
      port = shared->port;
      slots = most;
    } else if (a.port == 0) {
      auto p = start(path, c, a);
      if (!p) return fail(p.error());
      own = std::move(*p);
      port = own->port;
      slots = c;
    } else {  // a running server says how many slots it has
      slots = static_cast<int>(metric_value(port, "rlx_slots_total"));
    }
    {
      Samples warm;  // compiles (or loads) the executables of this level's batch shapes
      level(port, c, 1, warm);
    }
    InProcess* server = shared ? shared.get() : own.get();
    const double model_s0 = server ? server->metrics.step_duration.sum() : 0.0;
    const uint64_t steps0 = server ? server->metrics.step_duration.count() : 0;
    const int64_t prompt0 = server ? server->metrics.prompt_tokens.load() : 0;
    const int64_t computed0 = server ? server->metrics.prefill_tokens.load() : 0;
    const int64_t copied0 = server ? server->metrics.prefix_copied_tokens.load() : 0;
    Samples s;
    const Clock::time_point t0 = Clock::now();
    level(port, c, a.requests, s);
    const double wall = std::chrono::duration<double>(Clock::now() - t0).count();
    std::printf("%-8d %6d %10.1f %8lld %12.1f %12.1f %12.2f %12.2f %7lld", c, slots,
                static_cast<double>(s.tokens) / wall, static_cast<long long>(s.tokens), 1e3 * percentile(s.ttft, 0.5),
                1e3 * percentile(s.ttft, 0.99), 1e3 * percentile(s.gaps, 0.5), 1e3 * percentile(s.gaps, 0.99),
                static_cast<long long>(s.failed));
    // The KV cache's memory after the level (backed rows) and all of it reserved.
    const double kv_backed = metric_value(port, "rlx_kv_backed_bytes");
    const double kv_reserved = metric_value(port, "rlx_kv_reserved_bytes");
    std::printf(" %9.1f %9.1f", kv_backed / 1048576.0, kv_reserved / 1048576.0);
    // The limit in the same run: the model's batched runs alone (tokens over the time
    // spent inside forward_batch), without HTTP, threads and scheduling around them.
    if (server) {
      const double model_s = server->metrics.step_duration.sum() - model_s0;
      const auto steps = static_cast<long long>(server->metrics.step_duration.count() - steps0);
      std::printf(" %7lld %9.1f %11.1f", steps, 1e3 * model_s,
                  model_s > 0 ? static_cast<double>(s.tokens) / model_s : 0.0);
      // Prompt tokens of the level's requests, those prefill computed, and those whose
      // cache rows came from another slot (the prefix cache's share).
      std::printf(" %12lld %9lld %7lld", static_cast<long long>(server->metrics.prompt_tokens.load() - prompt0),
                  static_cast<long long>(server->metrics.prefill_tokens.load() - computed0),
                  static_cast<long long>(server->metrics.prefix_copied_tokens.load() - copied0));
    }
    std::printf("\n");
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"rlx_serve_load: loopback load generator for rlx serve"};
  Args a;
  app.add_option("--port", a.port, "port of a running rlx serve on 127.0.0.1 (default: start one in-process)")
      ->check(CLI::Range(0, 65535));
  app.add_option("--model", a.model, "in-process: the model (default: a synthetic one of --preset)");
  app.add_option("--preset", a.preset, "in-process: the synthetic model's preset (default tiny)");
  app.add_option("--levels", a.levels, "concurrent streams per level, comma-separated (default 1,4,16,64)");
  app.add_option("--system-words", a.system_words, "words of a prefix every prompt shares (default 0)")
      ->check(CLI::Range(0, 4000));
  app.add_option("--requests", a.requests, "requests per stream per level (default 2)")->check(CLI::Range(1, 100));
  app.add_option("--max-tokens", a.max_tokens, "tokens per request (default 64)")->check(CLI::Range(1, 4096));
  app.add_option("--prompt-words", a.prompt_words, "words per prompt (default 24)")->check(CLI::Range(1, 2000));
  app.add_option("--ctx", a.ctx, "in-process: context length per slot (default 512)")
      ->check(CLI::Range(int64_t{16}, int64_t{1} << 20));
  app.add_option("--threads", a.threads, "in-process: CPU threads (default all)")->check(CLI::Range(0, 4096));
  app.add_flag("--slots-per-level", a.slots_per_level,
               "in-process: a fresh server per level with as many slots as streams (default: one server with as "
               "many slots as the largest level)");
  CLI11_PARSE(app, argc, argv);
  return run(a);
}
