// Token-id lists and output files shared by the rlx commands (see cli_io.h).
#include "cli_io.h"

#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

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

std::string output_path_problem(const std::string& path) {
  namespace fs = std::filesystem;
  if (path == "-") return {};
  if (path.empty()) return "an empty output path";
  std::error_code ec;
  const fs::path p(path);
  const fs::file_status st = fs::status(p, ec);
  if (fs::is_directory(st)) return fmt::format("'{}' is a folder, not a file", path);
  if (fs::exists(st)) {
    if (::access(path.c_str(), W_OK) != 0) return fmt::format("'{}' is not writable", path);
    return {};
  }
  const fs::path parent = p.has_parent_path() ? p.parent_path() : fs::path(".");
  if (!fs::is_directory(parent, ec)) return fmt::format("'{}': its folder '{}' does not exist", path, parent.string());
  if (::access(parent.c_str(), W_OK) != 0)
    return fmt::format("'{}': its folder '{}' is not writable", path, parent.string());
  return {};
}

CLI::Validator output_path_check() {
  return CLI::Validator([](std::string& path) { return output_path_problem(path); }, "FILE");
}

std::string staged_output_path(const std::string& out) {
  if (out != "-") return out;
  return (std::filesystem::temp_directory_path() / fmt::format("rlx-stdout-{}.tmp", ::getpid())).string();
}

Status deliver_output(const std::string& out, const std::string& staged) {
  if (out != "-") return {};
  std::ifstream in(staged, std::ios::binary);
  std::vector<char> buffer(size_t{1} << 20);
  bool ok = static_cast<bool>(in);
  while (ok && in) {
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    const auto n = static_cast<size_t>(in.gcount());
    ok = std::fwrite(buffer.data(), 1, n, stdout) == n;
  }
  ok = ok && std::fflush(stdout) == 0;
  std::error_code ec;
  std::filesystem::remove(staged, ec);
  if (!ok) return Error::io("writing to standard output failed");
  return {};
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
