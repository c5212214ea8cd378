// What several rlx commands read and write the same way: token-id lists (commas and / or
// whitespace, so that `rlx tokenize` output feeds `rlx detokenize` and `rlx logits`) and
// output files, where "-" means standard output.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "rlx/base/status.h"

namespace rlx::cli {

/// Token ids in `text` separated by commas and / or whitespace ("1,2,3", "1 2 3").
/// Errors name `flag` and the first item that is no id in [0, 2^31).
Expected<std::vector<int32_t>> parse_token_ids(const std::string& text, const char* flag);

/// Why `path` cannot be written as an output file (empty when it can): a folder, a
/// missing or read-only parent folder, a read-only file. "-" (standard output) is fine.
/// Checked before any work, so a bad path is not found after a long job.
std::string output_path_problem(const std::string& path);

/// A CLI11 check of an output file argument by output_path_problem.
CLI::Validator output_path_check();

/// For writers that need a real file (GGUF: written to a temporary file and renamed): the
/// file to write for the output argument `out` — `out` itself, or for "-" a temporary
/// file that deliver_output() then copies to standard output and removes.
std::string staged_output_path(const std::string& out);
/// Completes an output staged by staged_output_path (nothing to do unless `out` is "-").
Status deliver_output(const std::string& out, const std::string& staged);

/// Writes `bytes` to the file `path`, or to standard output when `path` is "-".
Status write_output(const std::string& path, std::string_view bytes);

}  // namespace rlx::cli
