// Replays every input the fuzzers ever crashed on (tests/data/formats/fuzz_regressions/
// <target>/*) through the same in-memory parser: each must now be rejected with an
// error, never a crash or an escaped exception. Add a new crash input to its folder
// (and a test here for a target that has none yet).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

#include "rlx/formats/safetensors.h"

namespace rlx::formats {
namespace {

namespace fs = std::filesystem;

std::vector<fs::path> inputs(const char* target) {
  std::vector<fs::path> out;
  const fs::path dir = fs::path(RLX_TEST_DATA_DIR) / "formats" / "fuzz_regressions" / target;
  if (fs::is_directory(dir)) {
    for (const fs::directory_entry& e : fs::directory_iterator(dir)) out.push_back(e.path());
  }
  return out;
}

std::vector<uint8_t> read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

TEST(FuzzRegressions, SafetensorsInputsAreRejectedCleanly) {
  const std::vector<fs::path> files = inputs("rlx_fuzz_safetensors");
  ASSERT_FALSE(files.empty()) << "regression inputs missing";
  for (const fs::path& p : files) {
    const std::vector<uint8_t> bytes = read_all(p);
    Expected<SafetensorsFile> f = SafetensorsFile::parse(bytes, p.filename().string());
    EXPECT_FALSE(f.has_value()) << p;
  }
}

}  // namespace
}  // namespace rlx::formats
