// rlx: the command-line program. Each subcommand lives in its own cmd_*.cpp.
#include <unistd.h>

#include <cstdio>
#include <functional>
#include <memory>
#include <new>
#include <string>
#include <system_error>

#include "commands.h"
#include "progress.h"
#include "rlx/base/env.h"
#include "rlx/base/log.h"
#include "rlx/runtime/aot_cache.h"
#include "rlx/runtime/backend.h"
#include "rlx_git_commit.h"

namespace rlx::cli {

bool stderr_is_terminal() { return isatty(STDERR_FILENO) == 1; }

std::string device_help(bool tensor_parallel) {
  std::string kinds;
  bool cuda = false;
  for (DeviceKind kind : BackendRegistry::global().registered_kinds()) {
    const std::string name(device_kind_name(kind));
    kinds += (kinds.empty() ? "" : " | ") + name + (kind == DeviceKind::kCpu || kind == DeviceKind::kReference ? "" : "[:N]");
    cuda = cuda || kind == DeviceKind::kCuda;
  }
  if (tensor_parallel && cuda) kinds += " | cuda:0,1 (tensor parallel over those GPUs)";
  return "the devices this build has: " + kinds;
}

CLI::Option* add_device_option(CLI::App* cmd, std::string* device, bool tensor_parallel, const std::string& extra_help) {
  CLI::Option* opt = cmd->add_option("--device", *device, device_help(tensor_parallel) + extra_help);
  if (!tensor_parallel) return opt;
  auto ranks = std::make_shared<int>(1);
  cmd->add_option("--tensor-parallel", *ranks,
                  "split the model over this many devices of --device's kind, from its ordinal on (--device cuda "
                  "--tensor-parallel 2 is cuda:0,1)")
      ->check(CLI::Range(1, 64));
  cmd->parse_complete_callback([device, ranks] {
    if (*ranks == 1) return;
    auto d = Device::parse(*device);
    if (!d) throw CLI::ValidationError("--device", d.error().message());
    if (d->count > 1) {
      if (d->count == *ranks) return;
      throw CLI::ValidationError("--tensor-parallel",
                                 fmt::format("{} ranks, but --device {} names a group of {}", *ranks, *device, d->count));
    }
    std::string group = fmt::format("{}:{}", device_kind_name(d->kind), d->ordinal);
    for (int r = 1; r < *ranks; ++r) group += fmt::format(",{}", d->ordinal + r);
    if (auto g = Device::parse(group); !g)
      throw CLI::ValidationError("--tensor-parallel", fmt::format("--device {}: {}", *device, g.error().message()));
    *device = group;
  });
  return opt;
}

int report(const Error& e) {
  std::fprintf(stderr, "rlx: %s\n", e.to_string().c_str());
  switch (e.code()) {
    case ErrorCode::kInvalidArgument:
    case ErrorCode::kParse: return 2;
    default: return 1;
  }
}

}  // namespace rlx::cli

int main(int argc, char** argv) {
  CLI::App app{"rlx: compile and run transformer models"};
  app.require_subcommand(1);
  app.set_version_flag("--version", fmt::format("rlx {} (commit {})", rlx::kRlxVersion, RLX_GIT_COMMIT));
  // -v / -q anywhere on the line (before or after the command): the log level for this run,
  // over RLX_LOG.
  app.fallthrough();
  bool verbose = false, quiet = false;
  app.add_flag("-v,--verbose", verbose, "log debug messages (as RLX_LOG=debug)");
  app.add_flag("-q,--quiet", quiet, "log errors only (as RLX_LOG=error)");
  std::string progress = "auto";
  app.add_option("--progress", progress,
                 "progress of long jobs on stderr: auto (a bar on a terminal, plain lines otherwise, for jobs "
                 "past ~1 s), bar, plain, none")
      ->check(CLI::IsMember({"auto", "bar", "plain", "none"}));
  // Help shows every option's default value ("[512]").
  app.option_defaults()->always_capture_default();
  rlx::cli::Runner runner;
  rlx::cli::add_run_command(app, &runner);
  rlx::cli::add_info_command(app, &runner);
  rlx::cli::add_compile_command(app, &runner);
  rlx::cli::add_tokenize_commands(app, &runner);
  rlx::cli::add_logits_command(app, &runner);
  rlx::cli::add_synth_command(app, &runner);
  rlx::cli::add_bench_command(app, &runner);
  rlx::cli::add_quantize_command(app, &runner);
  rlx::cli::add_convert_command(app, &runner);
  rlx::cli::add_render_chat_command(app, &runner);
  rlx::cli::add_forward_command(app, &runner);
  rlx::cli::add_segment_command(app, &runner);
  rlx::cli::add_perplexity_command(app, &runner);
  rlx::cli::add_imatrix_command(app, &runner);
  rlx::cli::add_embed_command(app, &runner);
  rlx::cli::add_serve_command(app, &runner);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // "rlx --bogus" or "rlx bogus": CLI11 reports only the missing subcommand; name what
    // was given instead, and the commands there are.
    if (argc > 1 && dynamic_cast<const CLI::RequiredError*>(&e) != nullptr) {
      std::string commands;
      bool known = false;
      for (CLI::App* sub : app.get_subcommands(std::function<bool(CLI::App*)>{})) {
        known = known || sub->check_name(argv[1]);
        commands += (commands.empty() ? "" : ", ") + sub->get_name();
      }
      if (!known) {
        std::fprintf(stderr, "rlx: '%s' is not a command (commands: %s)\nRun with --help for more information.\n",
                     argv[1], commands.c_str());
        return 2;
      }
    }
    // CLI11's own codes (105-109) say nothing to a script; --help and --version are 0.
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (verbose && quiet) {
    std::fprintf(stderr, "rlx: --verbose and --quiet exclude each other\n");
    return 2;
  }
  rlx::cli::ProgressMode mode = rlx::cli::ProgressMode::kAuto;
  rlx::cli::parse_progress_mode(progress, &mode);
  rlx::cli::set_progress_mode(mode);
  // The environment is read (and a bad value warned about) before any command runs.
  (void)rlx::env_config();
  if (verbose) rlx::set_log_level(rlx::LogLevel::kDebug);
  if (quiet) rlx::set_log_level(rlx::LogLevel::kError);
  // What no check caught (an allocation beyond the machine, a thread the system refuses)
  // ends with one line and exit code 1, not an abort.
  try {
    return runner ? runner() : 0;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "rlx: out of memory (an allocation failed; try a smaller --ctx, --seq or model)\n");
  } catch (const std::system_error& e) {
    std::fprintf(stderr, "rlx: system error: %s\n", e.what());
  }
  return 1;
}
