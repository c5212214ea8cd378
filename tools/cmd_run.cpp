// `rlx run`: generate text with a GGUF model (default: a tiny synthetic model written
// by `rlx synth` into the cache folder on first use), streaming tokens and printing
// load time and prefill / decode speed. `--demo` instead builds one transformer block
// in HIR, compiles it, runs it on random data and prints the compile report.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <random>
#include <sstream>
#include <vector>

#include "commands.h"
#include "demo_graph.h"
#include "cli_io.h"
#include "model_path.h"
#include "progress.h"
#include "rlx/base/env.h"
#include "rlx/base/hash.h"
#include "rlx/base/memory_budget.h"
#include "rlx/formats/gguf.h"
#include "rlx/models/chat.h"
#include "rlx/models/generate.h"
#include "rlx/models/jinja.h"
#include "rlx/models/synth.h"
#include "rlx/runtime/session.h"

namespace rlx::cli {
namespace {

struct RunArgs {
  std::string device = "cpu", model;
  std::vector<std::string> prompts{"Once upon a time"};  // several: one batched run
  int64_t seq = 16, ctx = 512;
  int threads = 0;
  int32_t n = 32;
  bool demo = false, chat = false, prompt_given = false, no_cache = false, seed_given = false;
  std::string chat_template, system, prompt_file;
  std::string token_ids;  // --tokens: the prompt as ids (a model without a tokenizer too)
  models::SamplingOptions sampling;
};

// --tokens: generation from token ids, printed as ids (and as text when the model has a
// tokenizer), so that a model folder without tokenizer.json runs too. Sampling on the
// host from each step's logits, stopping at end of text (with a tokenizer), -n or a full
// context.
int run_token_ids(models::LanguageModel& model, const Tokenizer* tok, const std::vector<int32_t>& prompt,
                  const models::GenerateOptions& go, Progress& preparing, double load_ms) {
  models::Sampler sampler(go.sampling);
  std::vector<int32_t> history = prompt, generated;
  // The executables first (as generate() does), so that the timings are the model's.
  const double compiled_before = model.compile_stats().compile_ms;
  if (Status s = model.prepare_generation(static_cast<int64_t>(prompt.size()), models::LanguageModel::Output::kLogits);
      !s.ok()) {
    preparing.finish();
    return report(s.error());
  }
  const double compile_ms = model.compile_stats().compile_ms - compiled_before;
  const auto t0 = std::chrono::steady_clock::now();
  auto logits = model.forward(prompt, /*all_rows=*/false);
  preparing.finish();
  if (!logits) return report(logits.error());
  const double prefill_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  const auto t1 = std::chrono::steady_clock::now();
  const char* stop = "length";
  for (int32_t step = 0; step < go.max_tokens; ++step) {
    if (Status s = models::check_logits_finite(*logits, model.n_past() - 1); !s.ok()) return report(s.error());
    const int32_t next = sampler.sample(*logits, history);
    generated.push_back(next);
    history.push_back(next);
    std::printf("%s%d", generated.size() == 1 ? "" : " ", next);
    std::fflush(stdout);
    if (tok != nullptr && tok->is_end_of_generation(next)) {
      stop = "end of text";
      break;
    }
    if (step + 1 == go.max_tokens) break;
    if (model.n_past() >= model.context_length()) {
      stop = "context full";
      break;
    }
    logits = model.forward(std::span<const int32_t>(&next, 1), false);
    if (!logits) return report(logits.error());
  }
  std::printf("\n");
  if (tok != nullptr) {
    if (auto text = tok->decode(generated, /*render_special=*/false)) std::printf("%s\n", text->c_str());
  }
  std::fflush(stdout);
  const double decode_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t1).count();
  // (decode: the steps after the first token, which the prefill gave)
  const size_t steps = generated.empty() ? 0 : generated.size() - 1;
  std::fprintf(stderr,
               "rlx: load %.1f ms | compile %.1f ms | prefill %zu tokens %.1f ms (%.1f tok/s) | decode %zu tokens %.1f ms "
               "(%.1f tok/s) | stop: %s\n",
               load_ms, compile_ms, prompt.size(), prefill_ms, prefill_ms > 0 ? prompt.size() * 1000.0 / prefill_ms : 0.0,
               generated.size(), decode_ms, decode_ms > 0 ? steps * 1000.0 / decode_ms : 0.0, stop);
  return 0;
}

int run_demo(const RunArgs& a) {
  auto device = Device::parse(a.device);
  if (!device) return report(device.error());
  if (Status s = check_thread_count(a.threads, "--threads"); !s.ok()) return report(s.error());
  const DemoShape shape;
  // A lower bound of what the demo allocates per row (input, output, norms, q/k/v,
  // attention, the FFN's gate/up/down), in f32: an absurd --seq is refused up front.
  const double row_bytes = 4.0 * static_cast<double>(8 * shape.dim + 3 * shape.ffn);
  if (Status s = check_memory_request(row_bytes * static_cast<double>(a.seq), fmt::format("--seq {}", a.seq)); !s.ok())
    return report(s.error());
  BackendOptions backend_options;
  backend_options.threads = a.threads;
  auto session = Session::create(*device, backend_options);
  if (!session) return report(session.error());

  std::printf("rlx demo: one transformer block (dim %lld, %lld/%lld heads, ffn %lld), SEQ=%lld, device %s\n",
              static_cast<long long>(shape.dim), static_cast<long long>(shape.n_heads),
              static_cast<long long>(shape.n_kv_heads), static_cast<long long>(shape.ffn),
              static_cast<long long>(a.seq), a.device.c_str());
  auto hir = demo_block(shape, ir::FusionPolicy::Fusable);
  if (!hir) return report(hir.error());
  compile::CompileOptions options;
  options.binding.set(ir::SEQ, a.seq);
  const auto t0 = std::chrono::steady_clock::now();
  auto graph = session->compile_hir_with(*hir, options);
  if (!graph) return report(graph.error());
  const double compile_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();

  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 0.05f);
  for (const auto& p : graph->manifest().params) {
    std::vector<float> values(static_cast<size_t>(*p.type.shape.num_elements()));
    const bool is_norm = p.name.find("norm") != std::string::npos;
    for (float& v : values) v = is_norm ? 1.0f + normal(rng) : normal(rng);
    if (Status s = graph->set_param(p.name, values); !s.ok()) return report(s.error());
  }
  std::vector<float> x(static_cast<size_t>(a.seq * shape.dim));
  for (float& v : x) v = normal(rng) * 20.0f;
  std::vector<float> pos(static_cast<size_t>(a.seq));
  for (size_t i = 0; i < pos.size(); ++i) pos[i] = static_cast<float>(i);
  const std::vector<int64_t> x_shape{a.seq, shape.dim}, pos_shape{a.seq};

  Expected<std::vector<Tensor>> out = Error::internal("not run");
  const int runs = 20;
  const auto t1 = std::chrono::steady_clock::now();
  for (int i = 0; i < runs; ++i) out = graph->run({{"x", x, x_shape}, {"pos", pos, pos_shape}});
  const double run_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t1).count() / runs;
  if (!out) return report(out.error());

  const auto y = (*out)[0].as<float>();
  double sum = 0, sq = 0;
  for (float v : y) {
    sum += v;
    sq += double(v) * v;
  }
  std::printf("\nfusion report:\n%s\n", graph->fusion_report().to_string().c_str());
  std::printf("dispatch report:\n%s\n", graph->dispatch_report().to_string().c_str());
  std::printf("output y: [%lld, %lld], mean %.6f, rms %.6f\n", static_cast<long long>(a.seq),
              static_cast<long long>(shape.dim), sum / double(y.size()), std::sqrt(sq / double(y.size())));
  std::printf("compile %.2f ms, run %.3f ms (mean of %d)\n", compile_ms, run_ms, runs);
  return 0;
}

// The built-in default model: a tiny synthetic llama, written once into the cache folder.
// The 64-bit content hash of the file `path` as 16 hex digits (empty when unreadable).
std::string file_checksum(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return {};
  StableHasher h;
  std::vector<char> buffer(size_t{1} << 16);
  while (in) {
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    h.bytes(buffer.data(), static_cast<size_t>(in.gcount()));
  }
  return in.bad() ? std::string() : fmt::format("{:016x}", h.digest());
}

// The built-in default model in the cache folder, written on first use with its checksum
// next to it (NAME.gguf.sum); a file whose checksum does not match (damaged, truncated,
// replaced) is written again rather than trusted.
Expected<std::string> default_model() {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(env_config().cache_dir) / "models";
  const fs::path path = dir / "rlx-synth-llama-tiny-f32-seed0.gguf";
  fs::path sum_path = path;
  sum_path += ".sum";
  std::error_code ec;
  if (fs::exists(path, ec)) {
    std::ifstream in(sum_path);
    std::string want;
    in >> want;
    const std::string got = file_checksum(path);
    if (!want.empty() && got == want) return path.string();
    std::fprintf(stderr, "rlx: the cached default model %s does not match its checksum; writing it again\n",
                 path.string().c_str());
  }
  fs::create_directories(dir, ec);
  if (ec) return Error::io("cannot create cache folder '{}': {}", dir.string(), ec.message());
  std::fprintf(stderr, "rlx: no --model given; writing the built-in default (rlx synth --arch llama --preset tiny "
                       "--type f32 --seed 0) to %s\n", path.string().c_str());
  models::SynthOptions so;
  TRY(models::write_synthetic_gguf(so, path.string()));
  const std::string sum = file_checksum(path);
  std::ofstream out(sum_path, std::ios::trunc);
  out << sum << "\n";
  if (sum.empty() || !out) return Error::io("cannot write '{}'", sum_path.string());
  return path.string();
}

// The prompt format of a chat: the model's own Jinja template (GGUF
// tokenizer.chat_template, or a Hugging Face folder's) unless --template names a built-in
// one; the built-in format the template's markers point to when it does not parse; an
// error when there is none.
Expected<models::ChatFormat> chat_format(const RunArgs& a, const std::string& path, const Tokenizer& tok) {
  if (!a.chat_template.empty()) {
    models::ChatFormat f;
    f.builtin = models::parse_chat_template(a.chat_template);
    return f;
  }
  ASSIGN_OR_RETURN(const std::string source, models::read_chat_template(path));
  if (source.empty())
    return Error::unsupported("{}: the model has no chat template (tokenizer.chat_template); pass --template "
                              "llama3|chatml|gemma",
                              path);
  auto f = models::chat_format_from_template(source, tok);
  if (!f) return f.error().with_context(path);
  if (!f->warning.empty()) std::fprintf(stderr, "rlx: %s: %s\n", path.c_str(), f->warning.c_str());
  return f;
}

// Chat mode: the model's chat template (or --template) renders the conversation; with
// -p a single turn, otherwise one turn per line read from standard input.
int run_chat(const RunArgs& a, const std::string& path, models::LanguageModel& model, const Tokenizer& tok,
             models::GenerateOptions go, Progress& preparing) {
  auto format = chat_format(a, path, tok);
  if (!format) return report(format.error());
  if (format->builtin) go.stop = models::chat_stop_strings(*format->builtin);
  std::fprintf(stderr, "rlx chat: %s\n",
               format->jinja ? "the model's own chat template (tokenizer.chat_template)" : "a built-in chat format");
  std::vector<models::ChatMessage> messages;
  if (!a.system.empty()) messages.push_back({"system", a.system});
  auto turn = [&](const std::string& user) -> int {
    messages.push_back({"user", user});
    // The model's template places BOS itself (as transformers does, the text is then
    // tokenized without special tokens); the built-in formats leave it to the tokenizer.
    auto text = format->jinja ? models::render_chat(*format->jinja, messages, format->bos, format->eos)
                              : models::render_chat(*format->builtin, messages);
    if (!text) {
      report(text.error());
      return 1;
    }
    const auto prompt = tok.encode(*text, /*add_special=*/!format->jinja, /*parse_special=*/true);
    auto r = models::generate(model, tok, prompt, go, [&preparing](const std::string& piece) {
      preparing.finish();
      std::fputs(piece.c_str(), stdout);
      std::fflush(stdout);
    });
    preparing.finish();
    std::fputc('\n', stdout);
    std::fflush(stdout);
    if (!r) return report(r.error());
    messages.push_back({"assistant", r->text});
    // Each turn's figures, as a single run prints them (the whole conversation is prefilled).
    std::fprintf(stderr, "rlx: prefill %zu tokens %.1f ms (%.1f tok/s) | decode %zu tokens %.1f ms (%.1f tok/s) | stop: %s\n",
                 r->prompt_tokens.size(), r->prefill_ms, r->prefill_tokens_per_s(), r->tokens.size(), r->decode_ms,
                 r->decode_tokens_per_s(), models::stop_reason_name(r->stop));
    return 0;
  };
  const bool single = a.prompt_given;
  if (single) return turn(a.prompts[0]);
  std::string line;
  std::fprintf(stderr, "rlx chat: one message per line, end with Ctrl-D\n> ");
  while (std::getline(std::cin, line)) {
    if (int rc = turn(line); rc != 0) return rc;
    std::fprintf(stderr, "> ");
  }
  std::fputc('\n', stderr);  // end the last "> " line at end of input
  return 0;
}

int run_model(const RunArgs& a) {
  std::string path = a.model;
  if (!path.empty()) {
    auto where = resolve_model_path(path);
    if (!where) return report(where.error());
    path = where->path;
  } else {
    auto d = default_model();
    if (!d) return report(d.error());
    path = *d;
    std::fprintf(stderr, "rlx: running the built-in default model %s (random weights: expect gibberish)\n",
                 path.c_str());
  }
  auto device = Device::parse(a.device);
  if (!device) return report(device.error());
  models::LoadOptions lo;
  lo.device = *device;
  lo.ctx = a.ctx;
  lo.threads = a.threads;
  lo.batch = static_cast<int64_t>(a.prompts.size());
  lo.compile_cache = !a.no_cache;
  if (a.chat && lo.batch > 1) return report(Error::invalid_argument("--chat takes one -p prompt, got {}", lo.batch));
  // Compiling the executables and binding the weights happen on the first run: one
  // progress job, ended by the first output.
  const std::shared_ptr<Progress> preparing = attach_load_progress(lo, "rlx: preparing the model");
  const auto t0 = std::chrono::steady_clock::now();
  auto model = models::LanguageModel::load(path, lo);
  if (!model) return report(model.error());
  auto tok = open_tokenizer(path);
  if (!tok && a.token_ids.empty()) return report(tok.error());
  if (tok) warn_vocab_mismatch(**tok, (*model)->config().n_vocab, path);
  const double load_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::fprintf(stderr, "rlx: %s\n", (*model)->config().summary().c_str());

  models::GenerateOptions go;
  // -n -1 (llama.cpp): until end of text or a full context.
  go.max_tokens = a.n >= 0 ? a.n : static_cast<int32_t>(std::min<int64_t>(a.ctx, INT32_MAX));
  go.sampling = a.sampling;
  if (!a.seed_given && go.sampling.temperature > 0) {  // as llama.cpp: a new seed each run, said so it can be repeated
    go.sampling.seed = std::random_device{}();
    std::fprintf(stderr, "rlx: seed %llu (--seed %llu repeats this run)\n",
                 static_cast<unsigned long long>(go.sampling.seed), static_cast<unsigned long long>(go.sampling.seed));
  }
  if (!a.token_ids.empty()) {
    auto ids = parse_token_ids(a.token_ids, "--tokens");
    if (!ids) return report(ids.error());
    return run_token_ids(**model, tok ? tok->get() : nullptr, *ids, go, *preparing, load_ms);
  }
  if (a.chat) return run_chat(a, path, **model, **tok, go, *preparing);
  if (a.prompts.size() > 1) {
    // Several prompts: one batched generation, printed when all are done.
    std::vector<std::vector<int32_t>> prompts;
    for (const std::string& p : a.prompts) prompts.push_back((*tok)->encode(p, /*add_special=*/true, false));
    auto rs = models::generate_batch(**model, **tok, prompts, go);
    preparing->finish();
    if (!rs) return report(rs.error());
    size_t generated = 0, prompt_tokens = 0;
    for (size_t b = 0; b < rs->size(); ++b) {
      std::printf("[%zu] %s%s\n", b, a.prompts[b].c_str(), (*rs)[b].text.c_str());
      generated += (*rs)[b].tokens.size();
      prompt_tokens += (*rs)[b].prompt_tokens.size();
    }
    std::fflush(stdout);
    const models::GenerateResult& r0 = rs->front();
    std::fprintf(stderr,
                 "rlx: load %.1f ms | batch %zu | prefill %zu tokens %.1f ms (%.1f tok/s) | decode %zu tokens %.1f ms "
                 "(%.1f tok/s over all sequences)\n",
                 load_ms, rs->size(), prompt_tokens, r0.prefill_ms,
                 r0.prefill_ms > 0 ? prompt_tokens * 1000.0 / r0.prefill_ms : 0.0, generated, r0.decode_ms,
                 r0.decode_ms > 0 ? (generated - rs->size()) * 1000.0 / r0.decode_ms : 0.0);
    return 0;
  }
  const std::string& text = a.prompts[0];
  const std::vector<int32_t> prompt = (*tok)->encode(text, /*add_special=*/true, /*parse_special=*/false);
  // The prompt is echoed when the model is ready, so that progress lines come before it.
  bool echoed = false;
  auto echo_prompt = [&] {
    if (echoed) return;
    preparing->finish();
    std::fputs(text.c_str(), stdout);
    echoed = true;
  };
  auto r = models::generate(**model, **tok, prompt, go, [&](const std::string& piece) {
    echo_prompt();
    std::fputs(piece.c_str(), stdout);
    std::fflush(stdout);
  });
  echo_prompt();
  std::fputc('\n', stdout);
  std::fflush(stdout);  // the timing line goes to stderr after the text
  if (!r) return report(r.error());
  const models::CompileStats& cs = (*model)->compile_stats();
  std::fprintf(stderr,
               "rlx: load %.1f ms | compile %.1f ms (%lld executables, %lld from the AOT cache%s) | prefill %zu tokens "
               "%.1f ms (%.1f tok/s) | decode %zu tokens %.1f ms (%.1f tok/s) | stop: %s\n",
               load_ms, r->compile_ms, static_cast<long long>(cs.executables), static_cast<long long>(cs.aot_loads),
               a.no_cache ? ", cache off" : "", r->prompt_tokens.size(), r->prefill_ms, r->prefill_tokens_per_s(),
               r->tokens.size(), r->decode_ms, r->decode_tokens_per_s(), models::stop_reason_name(r->stop));
  return 0;
}

}  // namespace

void add_run_command(CLI::App& app, Runner* run) {
  auto* cmd = app.add_subcommand(
      "run", "Generate text with a model (no --model: a built-in tiny synthetic model; --demo: one compiled block)");
  auto a = std::make_shared<RunArgs>();
  cmd->add_option("-m,--model", a->model,
                  "GGUF file or Hugging Face folder (default: built-in tiny synthetic model)")
      ->check(model_path_check());
  auto* prompt = cmd->add_option("-p,--prompt", a->prompts, "prompt text (repeat for a batched run of several)");
  auto* file = cmd->add_option("-f,--file", a->prompt_file, "read the prompt from this file (- : standard input)");
  file
      ->check(CLI::Validator([](std::string& f) { return f == "-" ? std::string() : CLI::ExistingFile(f); },
                             "FILE or -"))
      ->excludes(prompt);
  cmd->add_option("--tokens", a->token_ids,
                  "the prompt as token ids (commas or spaces); prints the generated ids (and their text when the "
                  "model has a tokenizer): runs a model folder without tokenizer.json too")
      ->excludes(prompt)
      ->excludes(file)
      ->excludes(cmd->add_flag("--chat", a->chat,
                               "chat with the model's template (-p: one turn; else read turns from stdin)"));
  cmd->add_option("--template", a->chat_template, "a built-in chat format instead of the model's own template")
      ->check(CLI::IsMember({"llama3", "chatml", "gemma"}));
  cmd->add_option("--system", a->system, "system message for --chat");
  cmd->add_option("-n,--n-predict", a->n, "tokens to generate (-1: until end of text or a full context)")
      ->check(CLI::Range(int64_t{-1}, kMaxTokens));
  cmd->add_option("--temp", a->sampling.temperature, "temperature (0 = greedy)")->check(CLI::Range(0.0, 100.0));
  cmd->add_option("--top-k", a->sampling.top_k, "top-k (0 = off)")->check(CLI::Range(0, 1 << 24));
  cmd->add_option("--top-p", a->sampling.top_p, "top-p (1 = off)")->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--min-p", a->sampling.min_p, "min-p (0 = off)")->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--repeat-penalty", a->sampling.repetition_penalty, "repetition penalty (1 = off)");
  auto* seed = cmd->add_option("-s,--seed", a->sampling.seed, "sampling seed (default: a new one each run, printed)")
                   ->default_str("random");;
  cmd->add_option("-c,--ctx,--ctx-size", a->ctx, "context length (KV cache rows)")->check(kTokenCount);
  add_device_option(cmd, &a->device, true);
  cmd->add_option("-t,--threads", a->threads, "CPU threads (0: RLX_THREADS or all cores)")->check(kThreadCount);
  cmd->add_flag("--demo", a->demo, "compile and run one transformer block and print the compile report");
  cmd->add_flag("--no-cache", a->no_cache, "compile everything (no AOT disk cache of compiled executables)");
  cmd->add_option("--seq", a->seq, "rows for --demo")->check(kTokenCount);
  cmd->callback([run, a, prompt, seed] {
    a->prompt_given = prompt->count() > 0;
    a->seed_given = seed->count() > 0;
    if (!a->prompt_file.empty()) {  // the whole file, or all of standard input for "-"
      const bool stdin_prompt = a->prompt_file == "-";
      std::ifstream file;
      if (!stdin_prompt) file.open(a->prompt_file, std::ios::binary);
      std::istream& in = stdin_prompt ? std::cin : file;
      std::stringstream text;
      text << in.rdbuf();
      if (stdin_prompt ? in.bad() : !in)
        throw CLI::ValidationError("--file", stdin_prompt ? std::string("cannot read standard input")
                                                          : fmt::format("cannot read '{}'", a->prompt_file));
      a->prompts = {text.str()};
      a->prompt_given = true;
    }
    *run = [a] { return a->demo ? run_demo(*a) : run_model(*a); };
  });
}

}  // namespace rlx::cli
