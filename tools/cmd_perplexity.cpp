// `rlx perplexity --model M -f text.txt [-c N] [--stride S] [--chunks K]`: the perplexity of
// a language model on a text. Default: llama.cpp's perplexity tool — the text tokenized with
// BOS, cut into chunks of N tokens (at least two), each chunk's first token replaced by BOS,
// each chunk run from an empty cache and scored on the predictions of its second half — so
// the numbers compare with llama-perplexity's. --stride S: the sliding window of
// transformers' perplexity guide instead — windows of N tokens every S tokens, each scoring
// the tokens no earlier window scored. Prints the running estimate per window
// ("[1]8.1234,[2]...") and "Final estimate: PPL = P +/- E" (E from the per-token NLL's
// standard error, as llama.cpp reports it).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

#include "commands.h"
#include "model_path.h"
#include "progress.h"
#include "rlx/models/language_model.h"

namespace rlx::cli {
namespace {

struct PerplexityArgs {
  std::string model, file, device = "cpu", kv = "f32";
  int64_t ctx = 512, stride = 0, chunks = 0;
  int threads = 0;
  bool no_cache = false;
};

// Sums of the per-token negative log-likelihoods (and their squares) in double.
struct Nll {
  double sum = 0, sum2 = 0;
  int64_t count = 0;
  void add(std::span<const float> logits, int32_t target) {
    double mx = -INFINITY;
    for (float v : logits) mx = std::max(mx, static_cast<double>(v));
    double z = 0;
    for (float v : logits) z += std::exp(static_cast<double>(v) - mx);
    const double nll = std::log(z) + mx - static_cast<double>(logits[static_cast<size_t>(target)]);
    sum += nll;
    sum2 += nll * nll;
    ++count;
  }
  double ppl() const { return std::exp(sum / static_cast<double>(count)); }
  // The standard error of the mean NLL, carried to the perplexity (d ppl = ppl d nll).
  double error() const {
    if (count < 2) return 0;
    const double mean = sum / static_cast<double>(count), var = sum2 / static_cast<double>(count) - mean * mean;
    return var > 0 ? std::sqrt(var / static_cast<double>(count - 1)) * ppl() : 0;
  }
};

int run_perplexity(const PerplexityArgs& a) {
  if (a.ctx < 4 || a.ctx > (int64_t{1} << 20))
    return report(Error::invalid_argument("--ctx must be in [4, {}], got {}", int64_t{1} << 20, a.ctx));
  if (a.stride < 0 || a.stride > a.ctx)
    return report(Error::invalid_argument("--stride must be in [1, --ctx {}], got {}", a.ctx, a.stride));
  auto device = Device::parse(a.device);
  if (!device) return report(device.error());
  std::string text;
  {
    const bool from_stdin = a.file == "-";
    std::ifstream file;
    if (!from_stdin) file.open(a.file, std::ios::binary);
    std::istream& in = from_stdin ? std::cin : file;
    std::stringstream buf;
    buf << in.rdbuf();
    if (from_stdin ? in.bad() : !file) return report(Error::io("cannot read '{}'", a.file));
    text = buf.str();
  }
  auto where = resolve_model_path(a.model);
  if (!where) return report(where.error());
  auto tok = open_tokenizer(where->path);
  if (!tok) return report(tok.error());
  const std::vector<int32_t> tokens = (*tok)->encode(text, /*add_special=*/true);
  const auto n = static_cast<int64_t>(tokens.size());
  const bool sliding = a.stride > 0;
  if (!sliding && n < 2 * a.ctx)
    return report(Error::invalid_argument("{}: {} tokens; perplexity needs at least 2 x --ctx = {} (two chunks)", a.file,
                                          n, 2 * a.ctx));
  if (sliding && n < 2) return report(Error::invalid_argument("{}: {} tokens; perplexity needs at least 2", a.file, n));
  models::LoadOptions lo;
  lo.device = *device;
  lo.threads = a.threads;
  lo.kv_dtype = a.kv == "f16" ? ir::DType::F16 : ir::DType::F32;
  lo.ctx = std::max<int64_t>(64, a.ctx);
  lo.compile_cache = !a.no_cache;
  const std::shared_ptr<Progress> preparing = attach_load_progress(lo, "rlx: preparing the model");
  auto model = models::LanguageModel::load(where->path, lo);
  if (!model) return report(model.error());
  const int64_t vocab = (*model)->config().n_vocab;
  for (int32_t t : tokens)
    if (t < 0 || t >= vocab)
      return report(Error::invalid_file("{}: the tokenizer gives id {}, outside the model's {} logits", a.model, t, vocab));
  const int32_t bos = (*tok)->special_ids().bos;
  const bool add_bos = (*tok)->add_bos() && bos >= 0;

  Nll nll;
  int64_t windows = 0;
  auto score_window = [&](const std::vector<int32_t>& window, int64_t first_target) -> Status {
    (*model)->reset();
    ASSIGN_OR_RETURN(std::vector<float> logits, (*model)->forward(window, /*all_rows=*/true));
    preparing->finish();
    for (int64_t t = std::max<int64_t>(first_target, 1); t < static_cast<int64_t>(window.size()); ++t)
      nll.add(std::span<const float>(logits.data() + (t - 1) * vocab, static_cast<size_t>(vocab)),
              window[static_cast<size_t>(t)]);
    ++windows;
    std::fprintf(stderr, "[%lld]%.4f,", static_cast<long long>(windows), nll.ppl());
    return {};
  };
  if (!sliding) {
    int64_t chunks = n / a.ctx;
    if (a.chunks > 0) chunks = std::min(chunks, a.chunks);
    std::fprintf(stderr, "rlx: %lld tokens, %lld chunks of %lld, scoring each chunk's second half\n",
                 static_cast<long long>(n), static_cast<long long>(chunks), static_cast<long long>(a.ctx));
    for (int64_t c = 0; c < chunks; ++c) {
      std::vector<int32_t> window(tokens.begin() + c * a.ctx, tokens.begin() + (c + 1) * a.ctx);
      if (add_bos) window[0] = bos;
      // Positions first .. ctx-2 predict tokens first+1 .. ctx-1 (llama.cpp's first = ctx/2).
      if (Status s = score_window(window, a.ctx / 2 + 1); !s.ok()) return report(s.error());
    }
  } else {
    std::fprintf(stderr, "rlx: %lld tokens, windows of %lld every %lld\n", static_cast<long long>(n),
                 static_cast<long long>(a.ctx), static_cast<long long>(a.stride));
    int64_t scored_to = 0;  // tokens [0, scored_to) are predicted already
    for (int64_t begin = 0;; begin += a.stride) {
      const int64_t end = std::min(begin + a.ctx, n);
      const std::vector<int32_t> window(tokens.begin() + begin, tokens.begin() + end);
      if (Status s = score_window(window, scored_to - begin); !s.ok()) return report(s.error());
      scored_to = end;
      if (end == n || (a.chunks > 0 && windows >= a.chunks)) break;
    }
  }
  std::fprintf(stderr, "\n");
  std::printf("Final estimate: PPL = %.6f +/- %.6f (%lld tokens scored)\n", nll.ppl(), nll.error(),
              static_cast<long long>(nll.count));
  return 0;
}

}  // namespace

void add_perplexity_command(CLI::App& app, Runner* run) {
  auto* cmd = app.add_subcommand("perplexity", "Perplexity of a language model on a text (llama.cpp's method)");
  auto a = std::make_shared<PerplexityArgs>();
  cmd->add_option("-m,--model", a->model, "GGUF file or Hugging Face folder")->required()->check(model_path_check());
  cmd->add_option("-f,--file", a->file, "the text (- reads standard input)")
      ->required()
      ->check(CLI::Validator([](std::string& f) { return f == "-" ? std::string() : CLI::ExistingFile(f); },
                             "FILE or -", "file"));
  cmd->add_option("-c,--ctx,--ctx-size", a->ctx, "tokens per chunk or window")->capture_default_str();
  cmd->add_option("--stride", a->stride,
                  "slide windows of --ctx tokens by this many (transformers' sliding-window perplexity); 0: "
                  "llama.cpp's chunks")
      ->capture_default_str();
  cmd->add_option("--chunks", a->chunks, "score at most this many chunks or windows (0: all)")->capture_default_str();
  cmd->add_option("--kv", a->kv, "KV cache dtype")->check(CLI::IsMember({"f32", "f16"}))->capture_default_str();
  cmd->add_option("--device", a->device, device_help(false));
  cmd->add_option("-t,--threads", a->threads, "CPU threads")->check(kThreadCount);
  cmd->add_flag("--no-cache", a->no_cache, "compile everything (no AOT disk cache of compiled executables)");
  cmd->callback([run, a] { *run = [a] { return run_perplexity(*a); }; });
}

}  // namespace rlx::cli
