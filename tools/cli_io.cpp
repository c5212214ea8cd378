// Token-id lists and output files shared by the rlx commands (see cli_io.h).
#include "cli_io.h"

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <fstream>

namespace rlx::cli {

Expected<std::vector<int32_t>> parse_token_ids(const std::string& text, const char* flag) {
  std::vector<int32_t> ids;
  size_t i = 0;
  auto separator = [](char c) { return c == ',' || std::isspace(static_cast<unsigned char>(c)) != 0; };
  while (i < text.size()) {
    while (i < text.size() && separator(text[i])) ++i;
    if (i == text.size()) break;
    size_t j = i;
    while (j < text.size() && !separator(text[j])) ++j;
    const std::string item = text.substr(i, j - i);
    char* end = nullptr;
    const long long v = std::strtoll(item.c_str(), &end, 10);
    if (*end != '\0' || v < 0 || v > INT32_MAX)
      return Error::invalid_argument("{}: '{}' is not a token id (expected e.g. 1,2,3 or 1 2 3)", flag, item);
    ids.push_back(static_cast<int32_t>(v));
    i = j;
  }
  if (ids.empty()) return Error::invalid_argument("{}: no token ids given", flag);
  return ids;
}

Status write_output(const std::string& path, std::string_view bytes) {
  if (path == "-") {
    if (std::fwrite(bytes.data(), 1, bytes.size(), stdout) != bytes.size() || std::fflush(stdout) != 0)
      return Error::io("writing to standard output failed");
    return {};
  }
  std::ofstream f(path, std::ios::binary);
  if (!f) return Error::io("cannot write '{}'", path);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!f) return Error::io("writing '{}' failed", path);
  return {};
}

}  // namespace rlx::cli
