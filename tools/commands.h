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

/// Help text of a --device flag: the device kinds this build has ("cpu | cuda[:N] |
/// reference"), with the tensor-parallel group form when `tensor_parallel` and a CUDA
/// backend is built in; the default is cpu.
std::string device_help(bool tensor_parallel);

/// Adds --device (into *device, with `extra_help` after device_help's text) and, when
/// `tensor_parallel`, --tensor-parallel N: once the command line is parsed, a device of
/// one rank becomes the group of N consecutive devices of its kind from its ordinal on
/// (--device cuda --tensor-parallel 2 is cuda:0,1). A group --device of another size,
/// or a device string that does not parse, is a usage error naming both flags.
CLI::Option* add_device_option(CLI::App* cmd, std::string* device, bool tensor_parallel,
                               const std::string& extra_help = "");

/// True when stderr is a terminal (progress.h draws a bar then, plain lines otherwise).
bool stderr_is_terminal();

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
void add_imatrix_command(CLI::App& app, Runner* run);
void add_embed_command(CLI::App& app, Runner* run);
void add_serve_command(CLI::App& app, Runner* run);

}  // namespace rlx::cli
