// `rlx imatrix --model M -f text.txt [-o imatrix.gguf] [-c N] [--chunks K]`: an importance
// matrix for quantization, as llama.cpp's llama-imatrix makes it — the text tokenized with
// BOS, cut into chunks of N tokens, each chunk's first token replaced by BOS and run from
// an empty context — written in llama.cpp's imatrix GGUF form, which `rlx quantize
// --imatrix` and llama-quantize read. `--in FILE` (repeatable) merges earlier imatrix
// files (GGUF or .dat) into the result; without -f it only merges them.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

#include "cli_io.h"
#include "commands.h"
#include "model_path.h"
#include "progress.h"
#include "rlx/models/imatrix.h"

namespace rlx::cli {
namespace {

struct ImatrixArgs {
  std::string model, file, out = "imatrix.gguf", device = "cpu";
  std::vector<std::string> inputs;
  int64_t ctx = 512, chunks = 0;
  int threads = 0;
};

Expected<std::string> read_text(const std::string& path) {
  const bool from_stdin = path == "-";
  std::ifstream file;
  if (!from_stdin) file.open(path, std::ios::binary);
  std::istream& in = from_stdin ? std::cin : file;
  std::stringstream buf;
  buf << in.rdbuf();
  if (from_stdin ? in.bad() : !file) return Error::io("cannot read '{}'", path);
  return buf.str();
}

int run_imatrix(const ImatrixArgs& a) {
  if (a.file.empty() && a.inputs.empty())
    return report(Error::invalid_argument("give a text to run (-f) or imatrix files to merge (--in)"));
  models::Imatrix result;
  for (const std::string& in : a.inputs) {
    auto m = models::read_imatrix(in);
    if (!m) return report(m.error());
    if (Status s = result.merge(*m); !s.ok()) return report(s.error().with_context(in));
  }
  if (!a.file.empty()) {
    if (a.model.empty()) return report(Error::invalid_argument("-f needs the model (-m)"));
    auto device = Device::parse(a.device);
    if (!device) return report(device.error());
    auto text = read_text(a.file);
    if (!text) return report(text.error());
    auto where = resolve_model_path(a.model);
    if (!where) return report(where.error());
    auto tok = open_tokenizer(where->path);
    if (!tok) return report(tok.error());
    const std::vector<int32_t> tokens = (*tok)->encode(*text, /*add_special=*/true);
    const int32_t bos = (*tok)->add_bos() ? (*tok)->special_ids().bos : -1;
    models::ImatrixOptions o;
    o.chunk = a.ctx;
    o.max_chunks = a.chunks;
    o.threads = a.threads;
    o.device = *device;
    o.dataset = a.file == "-" ? "stdin" : a.file;
    const int64_t total = a.ctx > 0 ? static_cast<int64_t>(tokens.size()) / a.ctx : 0;
    std::fprintf(stderr, "rlx: %zu tokens, %lld chunks of %lld\n", tokens.size(),
                 static_cast<long long>(a.chunks > 0 ? std::min(total, a.chunks) : total),
                 static_cast<long long>(a.ctx));
    o.progress = [](int64_t done, int64_t all, double ppl) {
      std::fprintf(stderr, "[%lld/%lld] PPL %.4f\n", static_cast<long long>(done), static_cast<long long>(all), ppl);
    };
    auto m = models::compute_imatrix(where->path, tokens, bos, o);
    if (!m) return report(m.error());
    if (Status s = result.merge(*m); !s.ok()) return report(s.error());
  }
  const std::string staged = staged_output_path(a.out);
  Status s = models::write_imatrix(result, staged);
  if (s.ok()) s = deliver_output(a.out, staged);
  if (!s.ok()) return report(s.error());
  std::fprintf(stderr, "rlx: wrote %s: %zu matrices, %lld chunks of %lld tokens\n",
               a.out == "-" ? "standard output" : a.out.c_str(), result.entries.size(),
               static_cast<long long>(result.chunk_count), static_cast<long long>(result.chunk_size));
  return 0;
}

}  // namespace

void add_imatrix_command(CLI::App& app, Runner* run) {
  auto* cmd = app.add_subcommand(
      "imatrix", "Importance matrix of a model on a text, for quantization (llama.cpp's imatrix GGUF form)");
  auto a = std::make_shared<ImatrixArgs>();
  cmd->add_option("-m,--model", a->model, "GGUF file or Hugging Face folder")->check(model_path_check());
  cmd->add_option("-f,--file", a->file, "the calibration text (- reads standard input)")
      ->check(CLI::Validator([](std::string& f) { return f == "-" ? std::string() : CLI::ExistingFile(f); },
                             "FILE or -", "file"));
  cmd->add_option("-o,--output", a->out, "imatrix file to write (- : standard output)")
      ->check(output_path_check())
      ->capture_default_str();
  cmd->add_option("--in", a->inputs, "imatrix file (GGUF or llama.cpp .dat) to merge in; repeatable")
      ->check(CLI::ExistingFile);
  cmd->add_option("-c,--ctx,--ctx-size", a->ctx, "tokens per chunk")
      ->check(CLI::Range(2, 1 << 20))
      ->capture_default_str();
  cmd->add_option("--chunks", a->chunks, "run at most this many chunks (0: all)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--device", a->device, device_help(false));
  cmd->add_option("-t,--threads", a->threads, "CPU threads")->check(kThreadCount);
  cmd->callback([run, a] { *run = [a] { return run_imatrix(*a); }; });
}

}  // namespace rlx::cli
