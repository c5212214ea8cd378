// `rlx serve --model M [--host H] [--port P] [--device cpu|cuda] [--parallel N] [--ctx N]
// [--api-key K]`: an OpenAI-compatible HTTP server over one model (src/serve). A language
// model: the scheduler runs continuous batching over --parallel sequences, the front end
// speaks /v1/chat/completions and /v1/completions. An encoder (bert, nomic-bert,
// modern-bert): the embedder runs /v1/embeddings, requests sharing batched runs of up to
// --batch sequences. Both: /v1/models, /health, /metrics. Runs until SIGINT or SIGTERM.
#include <pthread.h>

#include <csignal>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <thread>

#include "commands.h"
#include "model_path.h"
#include "progress.h"
#include "rlx/base/memory_budget.h"
#include "rlx/models/chat.h"
#include "rlx/models/encoder.h"
#include "rlx/models/language_model.h"
#include "rlx/serve/server.h"

namespace rlx::cli {
namespace {

// --step-rows on the CPU: 16 slots x 16-row chunks. A step of 256 rows of a 1B model takes
// about half a second on two cores, where 16 x 64 rows took two (bench/NOTES.md).
constexpr int64_t kCpuStepRows = 256;

struct ServeArgs {
  std::string model, host = "127.0.0.1", device = "cpu", api_key, name;
  int port = 8080, threads = 0;
  int64_t parallel = 4, ctx = 2048, max_queue = 64, prefill_chunk = 64;
  int64_t kv_memory_mb = 0;
  int64_t step_rows = -1;  // -1: the device's default (kCpuStepRows on the CPU, no limit elsewhere)
  size_t max_body = size_t{4} << 20;
  bool no_cache = false;
  bool padded_steps = false;
  // Encoders.
  int64_t batch = 32;
  std::string pooling;
  bool normalize = false, no_normalize = false;
};

// Serves `server` until SIGINT / SIGTERM (blocked in every thread by run_serve; taken
// here by one thread with sigwait), then stops `stop_work` and the server.
int serve_until_signal(serve::Server& server, const sigset_t& signals, const std::function<void()>& stop_work,
                       const std::string& banner) {
  std::thread waiter([&] {
    int sig = 0;
    sigwait(&signals, &sig);
    if (sig != SIGUSR1) std::fprintf(stderr, "rlx serve: %s, stopping\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    stop_work();  // running requests end; new ones are refused
    server.stop();
  });
  std::fprintf(stderr, "%s\n", banner.c_str());
  std::fflush(stderr);
  Status served = server.serve();
  pthread_kill(waiter.native_handle(), SIGUSR1);
  waiter.join();
  if (!served.ok()) return report(served.error());
  return 0;
}

serve::ServerOptions server_options(const ServeArgs& a, const ModelPath& where) {
  serve::ServerOptions opt;
  opt.host = a.host;
  opt.port = a.port;
  opt.api_key = a.api_key;
  opt.model_name = a.name.empty() ? std::filesystem::path(where.path).stem().string() : a.name;
  opt.max_body_bytes = a.max_body;
  return opt;
}

// An encoder: the embedder behind /v1/embeddings.
int serve_encoder(const ServeArgs& a, const ModelPath& where, const Device& device, const sigset_t& signals) {
  models::EncoderLoadOptions lo;
  lo.device = device;
  lo.threads = a.threads;
  lo.compile_cache = !a.no_cache;
  auto model = models::EncoderModel::load(where.path, lo);
  if (!model) return report(model.error());
  serve::EmbedderOptions eo;
  eo.pooling = (*model)->default_pooling();
  if (!a.pooling.empty()) {
    auto p = models::parse_pooling(a.pooling);
    if (!p) return report(p.error());
    eo.pooling = *p;
  }
  if (eo.pooling == models::Pooling::None)
    return report(
        Error::invalid_argument("{}: the model's pooling is 'none' (token states); give --pooling cls, mean "
                                "or last to serve embeddings",
                                where.path));
  eo.normalize = a.normalize || (!a.no_normalize && (*model)->default_normalize());
  eo.max_batch = a.batch;
  eo.max_queue = a.max_queue;
  // Texts need the tokenizer; a folder without one still serves token-id inputs.
  std::unique_ptr<Tokenizer> tok;
  if (auto t = open_tokenizer(where.path); t) {
    tok = std::move(*t);
  } else {
    std::fprintf(stderr, "rlx serve: %s; requests must give token ids\n", t.error().message().c_str());
  }
  std::fprintf(stderr, "rlx serve: %s\nrlx serve: embeddings: pooling %s%s, dim %lld, at most %lld tokens per input\n",
               (*model)->config().summary().c_str(), models::pooling_name(eo.pooling),
               eo.normalize ? ", normalized" : "", static_cast<long long>((*model)->config().n_embd),
               static_cast<long long>((*model)->max_tokens()));
  // Compile the smallest run before listening: a model that cannot run fails here.
  const std::vector<std::vector<int32_t>> probe{{0}};
  if (auto e = (*model)->embed(probe, eo.pooling, eo.normalize); !e) return report(e.error());

  serve::Metrics metrics;
  auto embedder = serve::Embedder::create(**model, metrics, eo);
  if (!embedder) return report(embedder.error());
  serve::ServerOptions opt = server_options(a, where);
  opt.threads = static_cast<int>(a.max_queue + 8);
  serve::Server server(**embedder, tok.get(), metrics, opt);
  auto port = server.bind();
  if (!port) return report(port.error());
  return serve_until_signal(
      server, signals, [&] { (*embedder)->stop(); },
      fmt::format("rlx serve: model '{}' (embeddings), batches of up to {}; listening on "
                  "http://{}:{}",
                  opt.model_name, a.batch, a.host, *port));
}

// Compiles the executables the scheduler's runs use (one-row decode steps and the
// prefill buckets up to the chunk, for each sequence count, both output kinds) before
// the first request, then runs each row bucket once on the first sequence alone (the
// narrowest runs: the weights are read in and per-thread scratch is sized), and empties
// the caches.
Status warm_up(models::LanguageModel& model, int64_t prefill_chunk) {
  TRY(model.prepare_batch(prefill_chunk, /*greedy=*/false));
  TRY(model.prepare_batch(prefill_chunk, /*greedy=*/true));
  std::vector<std::vector<int32_t>> tokens(static_cast<size_t>(model.batch()));
  for (int64_t rows = 1; rows <= prefill_chunk && rows < model.context_length();
       rows = rows == 1 ? std::max<int64_t>(model.min_bucket(), 2) : rows * 2) {
    tokens[0].assign(static_cast<size_t>(rows), 0);
    model.reset();
    auto out = model.forward_batch_greedy(tokens, /*mark_non_finite=*/true);  // (padding tokens: any logits)
    if (!out) return out.error();
  }
  model.reset();
  return {};
}

int run_serve(const ServeArgs& a) {
  // SIGINT / SIGTERM are taken by one thread (sigwait), blocked in every other: they are
  // blocked here, before the model's thread pool and the server's threads exist, which
  // inherit the mask. SIGUSR1 wakes that thread when serving ends for another reason.
  std::signal(SIGPIPE, SIG_IGN);
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  if (Status s = check_thread_count(a.threads, "--threads"); !s.ok()) return report(s.error());
  auto where = resolve_model_path(a.model);
  if (!where) return report(where.error());
  auto device = Device::parse(a.device);
  if (!device) return report(device.error());
  auto opened = open_model(*where);
  if (!opened) return report(opened.error());
  if (models::is_encoder(opened->config.arch)) return serve_encoder(a, *where, *device, signals);
  if (!a.pooling.empty() || a.normalize || a.no_normalize)
    return report(
        Error::invalid_argument("--pooling, --normalize and --no-normalize are for encoders; '{}' is a {} "
                                "language model",
                                where->path, models::arch_name(opened->config.arch)));
  models::LoadOptions lo;
  lo.device = *device;
  lo.ctx = a.ctx;
  lo.threads = a.threads;
  lo.batch = a.parallel;
  lo.compile_cache = !a.no_cache;
  lo.kv_memory = a.kv_memory_mb << 20;
  lo.compact_rows = !a.padded_steps;
  const std::shared_ptr<Progress> preparing = attach_load_progress(lo, "rlx serve: preparing the model");
  auto model = models::LanguageModel::load(where->path, lo);
  if (!model) return report(model.error());
  auto tok = open_tokenizer(where->path);
  if (!tok) return report(tok.error());
  warn_vocab_mismatch(**tok, (*model)->config().n_vocab, where->path);
  std::string note;
  auto source = models::read_chat_template(where->path);
  if (!source) return report(source.error());
  auto chat = serve::ChatFormatter::create(*source, **tok, &note);
  if (!chat) return report(chat.error());
  std::fprintf(stderr, "rlx serve: %s\nrlx serve: %s\n", (*model)->config().summary().c_str(), note.c_str());
  const int64_t chunk = std::min(a.prefill_chunk, a.ctx);
  const Status warmed = warm_up(**model, chunk);
  preparing->finish();
  if (!warmed.ok()) return report(warmed.error());
  if (const models::KvMemoryState kv = (*model)->kv_memory_state(); kv.reserved > 0)
    std::fprintf(stderr, "rlx serve: KV cache %.1f MiB for %lld slots x %lld tokens, %s, budget %.1f MiB\n",
                 static_cast<double>(kv.reserved) / 1048576.0, static_cast<long long>(a.parallel),
                 static_cast<long long>(a.ctx),
                 kv.paged ? fmt::format("paged: memory backs each slot's rows as they fill ({} rows a page)",
                                        kv.page_rows).c_str()
                          : "allocated whole",
                 static_cast<double>(kv.budget) / 1048576.0);

  serve::Metrics metrics;
  serve::SchedulerOptions so;
  so.max_queue = a.max_queue;
  so.prefill_chunk = chunk;
  so.step_rows = a.step_rows >= 0 ? a.step_rows : device->kind == DeviceKind::kCpu ? kCpuStepRows : 0;
  serve::Scheduler scheduler(**model, **tok, metrics, so);
  serve::ServerOptions opt = server_options(a, *where);
  opt.threads = static_cast<int>(a.parallel + a.max_queue + 8);
  serve::Server server(scheduler, **tok, std::move(*chat), metrics, opt);
  auto port = server.bind();
  if (!port) return report(port.error());
  return serve_until_signal(
      server, signals, [&] { scheduler.stop(); },
      fmt::format("rlx serve: model '{}', {} slots, context {}; listening on http://{}:{}", opt.model_name, a.parallel,
                  a.ctx, a.host, *port));
}

}  // namespace

void add_serve_command(CLI::App& app, Runner* run) {
  auto* cmd =
      app.add_subcommand("serve", "OpenAI-compatible HTTP server (chat/completions, completions, embeddings, models)");
  auto a = std::make_shared<ServeArgs>();
  cmd->add_option("-m,--model", a->model, "GGUF file or Hugging Face folder")->required()->check(model_path_check());
  cmd->add_option("--host", a->host, "address to listen on");
  cmd->add_option("--port", a->port, "TCP port (0: any free port, printed at start)")->check(CLI::Range(0, 65535));
  add_device_option(cmd, &a->device, true);
  cmd->add_option("--parallel", a->parallel, "sequences decoded together (slots)")
      ->check(CLI::Range(int64_t{1}, int64_t{256}));
  cmd->add_option("--ctx", a->ctx, "context length of each slot, in tokens")->check(kTokenCount);
  cmd->add_option("--kv-memory", a->kv_memory_mb,
                  "MiB the KV cache may hold (0: every slot's whole context); memory backs the slots' rows as "
                  "they fill, idle slots' cached prefixes are evicted past this")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 30));
  cmd->add_option("--api-key", a->api_key, "require \"Authorization: Bearer KEY\" on /v1/*");
  cmd->add_option("--name", a->name, "model id of /v1/models and requests (default: the file name's stem)");
  cmd->add_option("--threads", a->threads, "CPU threads (0 = RLX_THREADS or all cores)")->check(kThreadCount);
  cmd->add_option("--max-queue", a->max_queue, "requests that may wait for a slot; more get 429")
      ->check(CLI::Range(int64_t{0}, int64_t{100000}));
  cmd->add_option("--prefill-chunk", a->prefill_chunk, "prompt tokens a request prefills per step")
      ->check(kTokenCount);
  cmd->add_option("--step-rows", a->step_rows,
                  "while streams decode, the most rows a step computes (slots x padded prompt chunk): prompts "
                  "prefill in smaller chunks so decoding streams are not held up (default 256 on the CPU, no "
                  "limit on CUDA; 0: no limit)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 30));
  cmd->add_option("--max-body", a->max_body, "largest request body in bytes (4 MiB); larger get 413")
      ->check(CLI::Range(size_t{1024}, size_t{1} << 30));
  cmd->add_flag("--no-cache", a->no_cache, "do not use the AOT compile cache on disk");
  cmd->add_flag("--padded-steps", a->padded_steps,
                "compute every slot of a step padded to the step's longest input, as before compact rows "
                "(a step's products otherwise run on its real rows only); for comparisons");
  cmd->add_option("--batch", a->batch, "encoders: most sequences per batched run")
      ->check(CLI::Range(int64_t{1}, int64_t{4096}));
  cmd->add_option("--pooling", a->pooling, "encoders: cls | mean | last (default: what the model's files say)")
      ->check(CLI::IsMember({"cls", "mean", "last"}));
  cmd->add_flag("--normalize", a->normalize, "encoders: L2-normalize each embedding");
  cmd->add_flag("--no-normalize", a->no_normalize,
                "encoders: do not normalize, even when the model's files ask for it");
  cmd->callback([run, a] { *run = [a] { return run_serve(*a); }; });
}

}  // namespace rlx::cli
