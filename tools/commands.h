// The rlx program's subcommands. Each registers its options on a CLI11 app and
// returns the function that runs it (exit code; errors printed as one line).
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <functional>
#include <string>

#include "rlx/base/status.h"

namespace rlx::cli {

using Runner = std::function<int()>;

/// Bounds of the numeric flags, so that a bad value is reported against a sensible range
/// ("--threads: Value x not in range 0 to 4096").
inline constexpr int64_t kMaxTokens = int64_t{1} << 24;
inline const CLI::Range kThreadCount{0, 4096};
inline const CLI::Range kTokenCount{int64_t{1}, kMaxTokens};

/// Prints "rlx: <error>" on stderr and returns the exit code for it.
int report(const Error& e);

/// True when stderr is a terminal: progress lines (rewritten in place with '\r') are
/// shown only then, so that logs get the final messages alone.
bool stderr_is_terminal();

/// A progress callback (fraction done, 0..1) that rewrites "\r<label>: NN%" on stderr
/// every `step_pct` percent and ends the line at 1; empty when stderr is no terminal.
std::function<void(double)> terminal_progress(const char* label, int step_pct);

void add_info_command(CLI::App& app, Runner* run);
void add_compile_command(CLI::App& app, Runner* run);
void add_run_command(CLI::App& app, Runner* run);
void add_tokenize_commands(CLI::App& app, Runner* run);
void add_logits_command(CLI::App& app, Runner* run);
void add_synth_command(CLI::App& app, Runner* run);
void add_bench_command(CLI::App& app, Runner* run);
void add_quantize_command(CLI::App& app, Runner* run);
void add_convert_command(CLI::App& app, Runner* run);
void add_render_chat_command(CLI::App& app, Runner* run);
void add_forward_command(CLI::App& app, Runner* run);
void add_segment_command(CLI::App& app, Runner* run);
void add_perplexity_command(CLI::App& app, Runner* run);
void add_embed_command(CLI::App& app, Runner* run);
void add_serve_command(CLI::App& app, Runner* run);

}  // namespace rlx::cli
