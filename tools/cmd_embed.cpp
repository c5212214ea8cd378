// `rlx embed --model M (--text T ... | --file F) [--pooling P] [--normalize] [--batch N]
// [--out F.npy|F.jsonl]`: one embedding per text from an encoder model (BERT,
// NomicBERT, ModernBERT). Texts are tokenized with the model's tokenizer, grouped by
// length into batches of up to N (padding stays small; EncoderModel::embed_all), run,
// pooled and written in input order: a NumPy .npy (float32 [texts, dim]), JSON lines, or JSON lines on stdout.
// Prints texts/s on stderr. With --bench, measures throughput per sequence length and
// batch size on random token ids instead (embed_bench.h).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli_io.h"
#include "commands.h"
#include "embed_bench.h"
#include "model_path.h"
#include "rlx/models/encoder.h"

namespace rlx::cli {
namespace {

struct EmbedArgs {
  std::string model, file, pooling, out, device = "cpu";
  std::vector<std::string> texts;
  bool normalize = false, no_normalize = false, no_cache = false;
  int64_t batch = 32;
  bool bench = false, json = false;
  std::vector<int64_t> bench_seqs{32, 128, 512}, bench_batches{1, 32};
  int threads = 0;
};

/// float32 [rows, dim] as NumPy's .npy format (version 1.0, little-endian, C order).
Status write_npy(const std::string& path, const std::vector<std::vector<float>>& rows, int64_t dim) {
  std::string header = fmt::format("{{'descr': '<f4', 'fortran_order': False, 'shape': ({}, {}), }}", rows.size(), dim);
  const size_t total = 10 + header.size() + 1;  // magic(6) version(2) length(2) header '\n'
  header.append((64 - total % 64) % 64, ' ');
  header.push_back('\n');
  std::ofstream f(path, std::ios::binary);
  if (!f) return Error::io("cannot write '{}'", path);
  const char magic[8] = {'\x93', 'N', 'U', 'M', 'P', 'Y', 1, 0};
  f.write(magic, 8);
  const auto len = static_cast<uint16_t>(header.size());
  const char len_le[2] = {static_cast<char>(len & 0xff), static_cast<char>(len >> 8)};
  f.write(len_le, 2);
  f.write(header.data(), static_cast<std::streamsize>(header.size()));
  for (const auto& r : rows) f.write(reinterpret_cast<const char*>(r.data()), static_cast<std::streamsize>(r.size() * 4));
  if (!f) return Error::io("writing '{}' failed", path);
  return {};
}

std::string json_line(const std::vector<float>& v) {
  nlohmann::json j = nlohmann::json::array();
  for (float x : v) j.push_back(x);
  return j.dump();
}

int run_bench(const EmbedArgs& a) {
  auto device = Device::parse(a.device);
  if (!device) return report(device.error());
  auto where = resolve_model_path(a.model);
  if (!where) return report(where.error());
  models::EncoderLoadOptions lo;
  lo.device = *device;
  lo.threads = a.threads;
  lo.compile_cache = !a.no_cache;
  auto model = models::EncoderModel::load(where->path, lo);
  if (!model) return report(model.error());
  EmbedBenchOptions bo;
  bo.seqs = a.bench_seqs;
  bo.batches = a.bench_batches;
  bo.device = *device;
  bo.threads = a.threads;
  bo.json = a.json;
  return run_embed_bench(**model, bo);
}

int run_embed(const EmbedArgs& a) {
  if (a.bench) return run_bench(a);
  if (a.texts.empty() == a.file.empty())
    return report(Error::invalid_argument("give the texts with --text (repeatable) or --file (one per line), not both"));
  std::vector<std::string> texts = a.texts;
  if (!a.file.empty()) {
    std::ifstream f(a.file);
    if (!f) return report(Error::io("cannot read '{}'", a.file));
    for (std::string line; std::getline(f, line);) {
      if (!line.empty() && line.back() == '\r') line.pop_back();
      texts.push_back(line);
    }
    if (texts.empty()) return report(Error::invalid_argument("'{}' has no lines", a.file));
  }
  auto device = Device::parse(a.device);
  if (!device) return report(device.error());
  auto where = resolve_model_path(a.model);
  if (!where) return report(where.error());
  auto tokenizer = open_tokenizer(where->path);
  if (!tokenizer) return report(tokenizer.error());
  models::EncoderLoadOptions lo;
  lo.device = *device;
  lo.threads = a.threads;
  lo.compile_cache = !a.no_cache;
  auto model = models::EncoderModel::load(where->path, lo);
  if (!model) return report(model.error());
  models::Pooling pooling = (*model)->default_pooling();
  if (!a.pooling.empty()) {
    auto p = models::parse_pooling(a.pooling);
    if (!p) return report(p.error());
    pooling = *p;
  }
  if (pooling == models::Pooling::None)
    return report(Error::invalid_argument("--pooling none gives token states, not one embedding per text (use rlx forward)"));
  const bool normalize = a.normalize || (!a.no_normalize && (*model)->default_normalize());

  // Tokenize; a text longer than the model takes keeps its first tokens and its last
  // (the [SEP] / EOS the tokenizer appends).
  std::vector<std::vector<int32_t>> ids;
  int64_t tokens = 0;
  for (const std::string& text : texts) {
    ids.push_back(models::encoder_tokens(**tokenizer, text, (*model)->max_tokens()));
    tokens += static_cast<int64_t>(ids.back().size());
  }
  models::EmbedOptions eo;
  eo.pooling = pooling;
  eo.normalize = normalize;
  eo.max_batch = a.batch;
  const auto t0 = std::chrono::steady_clock::now();
  auto embedded = (*model)->embed_all(ids, eo);
  if (!embedded) return report(embedded.error());
  const std::vector<std::vector<float>>& result = *embedded;
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const int64_t dim = (*model)->config().n_embd;
  if (a.out.empty()) {
    for (const auto& r : result) std::printf("%s\n", json_line(r).c_str());
  } else if (a.out.size() > 4 && a.out.substr(a.out.size() - 4) == ".npy") {
    if (Status st = write_npy(a.out, result, dim); !st.ok()) return report(st.error());
  } else {
    std::ofstream f(a.out);
    if (!f) return report(Error::io("cannot write '{}'", a.out));
    for (const auto& r : result) f << json_line(r) << '\n';
    if (!f) return report(Error::io("writing '{}' failed", a.out));
  }
  std::fprintf(stderr, "rlx: %zu texts (%lld tokens), dim %lld, pooling %s%s: %.3f s, %.1f texts/s\n", texts.size(),
               static_cast<long long>(tokens), static_cast<long long>(dim), models::pooling_name(pooling),
               normalize ? ", normalized" : "", s, static_cast<double>(texts.size()) / std::max(s, 1e-9));
  return 0;
}

}  // namespace

void add_embed_command(CLI::App& app, Runner* run) {
  auto* cmd = app.add_subcommand("embed", "Embeddings of texts from an encoder model (BERT, NomicBERT, ModernBERT)");
  auto a = std::make_shared<EmbedArgs>();
  cmd->add_option("-m,--model", a->model, "GGUF file or Hugging Face folder (config.json + safetensors)")
      ->required()
      ->check(model_path_check());
  cmd->add_option("--text", a->texts, "a text to embed (repeatable)")->default_str("");
  cmd->add_option("-f,--file", a->file, "a file of texts, one per line");
  cmd->add_option("--pooling", a->pooling, "cls | mean | last (default: what the model's files say)")
      ->check(CLI::IsMember({"cls", "mean", "last", "none"}));
  cmd->add_flag("--normalize", a->normalize, "L2-normalize each embedding");
  cmd->add_flag("--no-normalize", a->no_normalize, "do not normalize, even when the model's files ask for it");
  cmd->add_option("--batch", a->batch, "most texts per run (runs take powers of two up to it)")
      ->check(CLI::Range(int64_t{1}, int64_t{4096}));
  cmd->add_option("--out", a->out, "output: F.npy (float32 [texts, dim]) or F.jsonl; default JSON lines on stdout")
      ->check(output_path_check());
  cmd->add_option("--device", a->device, device_help(true));
  cmd->add_option("-t,--threads", a->threads, "CPU threads")->check(kThreadCount);
  cmd->add_flag("--no-cache", a->no_cache, "compile everything (no AOT disk cache of compiled executables)");
  cmd->add_flag("--bench", a->bench, "measure texts/s on random token ids next to the machine's compute limit");
  cmd->add_option("--bench-seq", a->bench_seqs, "--bench: sequence lengths")
      ->delimiter(',')
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  cmd->add_option("--bench-batch", a->bench_batches, "--bench: batch sizes")
      ->delimiter(',')
      ->check(CLI::Range(int64_t{1}, int64_t{4096}));
  cmd->add_flag("--json", a->json, "--bench: print one JSON object instead of the table");
  cmd->callback([run, a] { *run = [a] { return run_embed(*a); }; });
}

}  // namespace rlx::cli
