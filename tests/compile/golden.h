// Golden-file helper for the compiler tests: compares text with
// tests/golden/compile/<name>; RLX_UPDATE_GOLDEN=1 rewrites the file instead.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "rlx/ir/text.h"

namespace rlx::compile::testing {

/// The MIR module of `text`; a parse error fails the test (and gives an empty module).
inline ir::MirModule mir(const char* text) {
  auto m = ir::parse_mir(text);
  if (!m) ADD_FAILURE() << m.error().to_string();
  return m.has_value() ? std::move(m).value() : ir::MirModule{};
}

inline std::string golden_path(const std::string& name) {
  return std::string(RLX_SOURCE_DIR) + "/tests/golden/compile/" + name;
}

inline void expect_golden(const std::string& name, const std::string& actual) {
  const std::string path = golden_path(name);
  if (const char* u = std::getenv("RLX_UPDATE_GOLDEN"); u && std::string(u) == "1") {
    std::ofstream(path) << actual;
    return;
  }
  std::ifstream f(path);
  ASSERT_TRUE(f.good()) << "missing golden file " << path << " (run with RLX_UPDATE_GOLDEN=1)";
  std::stringstream s;
  s << f.rdbuf();
  EXPECT_EQ(actual, s.str()) << "golden " << path;
}

}  // namespace rlx::compile::testing
