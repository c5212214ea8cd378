// What several rlx commands read and write the same way: token-id lists (commas and / or
// whitespace, so that `rlx tokenize` output feeds `rlx detokenize` and `rlx logits`) and
// output files, where "-" means standard output.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "rlx/base/status.h"

namespace rlx::cli {

/// Token ids in `text` separated by commas and / or whitespace ("1,2,3", "1 2 3").
/// Errors name `flag` and the first item that is no id in [0, 2^31).
Expected<std::vector<int32_t>> parse_token_ids(const std::string& text, const char* flag);

/// Writes `bytes` to the file `path`, or to standard output when `path` is "-".
Status write_output(const std::string& path, std::string_view bytes);

}  // namespace rlx::cli
