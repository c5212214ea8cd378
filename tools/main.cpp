// rlx: the command-line program. Each subcommand lives in its own cmd_*.cpp.
#include <unistd.h>

#include <cstdio>
#include <functional>
#include <new>
#include <string>
#include <system_error>

#include "commands.h"
#include "rlx/base/log.h"
#include "rlx/runtime/aot_cache.h"
#include "rlx_git_commit.h"

namespace rlx::cli {

bool stderr_is_terminal() { return isatty(STDERR_FILENO) == 1; }

std::function<void(double)> terminal_progress(const char* label, int step_pct) {
  if (!stderr_is_terminal()) return {};
  return [label, step_pct, last = -1](double f) mutable {
    const int pct = static_cast<int>(f * 100);
    if (pct / step_pct != last / step_pct) std::fprintf(stderr, "\r%s: %3d%%", label, pct);
    last = pct;
    if (f >= 1.0) std::fputc('\n', stderr);
  };
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
