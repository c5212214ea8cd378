// Budgets for the JSON RLX reads from files it does not trust (config.json,
// tokenizer.json, safetensors headers and index files): checked on the raw text before
// any parser or reader recurses into it.
#pragma once

#include <cstdint>
#include <string_view>

#include "rlx/base/status.h"

namespace rlx {

/// The deepest nesting of arrays and objects accepted in any JSON input. Real model
/// files nest fewer than ten levels; the budget keeps every recursive walk over a
/// parsed document (readers, dump, copies) far from the end of the stack.
inline constexpr int kMaxJsonDepth = 128;

/// The byte offset in `text` of the first `[` or `{` that opens level max_depth + 1
/// (outside strings), or -1 when `text` nests no deeper than max_depth. One linear pass
/// without recursion; escapes inside strings are honoured.
int64_t json_too_deep_at(std::string_view text, int max_depth);

/// An error naming `what` (a file name) when `text` nests arrays / objects deeper than
/// `max_depth` (see json_too_deep_at). Says nothing else about validity: the parser does that.
Status check_json_depth(std::string_view text, std::string_view what, int max_depth = kMaxJsonDepth);

}  // namespace rlx
