// json_too_deep_at / check_json_depth: a bracket count over raw JSON text, outside strings.
#include "rlx/base/json_limits.h"

namespace rlx {

int64_t json_too_deep_at(std::string_view text, int max_depth) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char ch = text[i];
    if (in_string) {
      if (ch == '\\') ++i;  // skip the escaped character (\" and \\ included)
      else if (ch == '"') in_string = false;
      continue;
    }
    if (ch == '"') {
      in_string = true;
    } else if (ch == '[' || ch == '{') {
      if (++depth > max_depth) return static_cast<int64_t>(i);
    } else if ((ch == ']' || ch == '}') && depth > 0) {
      --depth;
    }
  }
  return -1;
}

Status check_json_depth(std::string_view text, std::string_view what, int max_depth) {
  if (const int64_t at = json_too_deep_at(text, max_depth); at >= 0)
    return Error::parse("{}: JSON nests deeper than {} levels (at byte {})", what, max_depth, at);
  return {};
}

}  // namespace rlx
