// Replays every input the fuzzers ever crashed on (tests/data/formats/fuzz_regressions/
// <target>/*) through the same in-memory parser: each must now be rejected with an
// error, never a crash or an escaped exception. Add a new crash input to its folder
// (and a test here for a target that has none yet).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

#include "rlx/formats/gguf.h"
#include "rlx/formats/quant.h"
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

TEST(FuzzRegressions, GgufInputsParseAndDecodeWithoutUndefinedBehaviour) {
  // What rlx_fuzz_gguf does with each input: parse, then dequantize every small tensor.
  const std::vector<fs::path> files = inputs("rlx_fuzz_gguf");
  ASSERT_FALSE(files.empty()) << "regression inputs missing";
  for (const fs::path& p : files) {
    const std::vector<uint8_t> raw = read_all(p);
    std::vector<uint64_t> storage((raw.size() + 7) / 8 + 4);
    auto* bytes = reinterpret_cast<uint8_t*>(storage.data());
    if (!raw.empty()) std::memcpy(bytes, raw.data(), raw.size());
    Expected<GgufFile> f = GgufFile::parse({bytes, raw.size()}, p.filename().string());
    if (!f) continue;  // rejected cleanly
    std::vector<float> out;
    for (const GgufTensor& t : f->tensors()) {
      const int64_t n = t.n_elements();
      if (n <= 0 || n > (1 << 16) || !can_dequantize(t.type)) continue;
      out.resize(static_cast<size_t>(n));
      EXPECT_TRUE(dequantize_row(t.type, t.data, out.data(), n).ok()) << p << " tensor " << t.name;
    }
  }
}

TEST(Quant, DequantizeRowAcceptsMisalignedRows) {
  std::vector<float> x(64);
  for (size_t i = 0; i < x.size(); ++i) x[i] = 0.1f * static_cast<float>(i) - 3.0f;
  for (GgmlType t : {GgmlType::Q4_0, GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::Q8_K}) {
    const int64_t n = ggml_block_size(t) == 256 ? 256 : 64;
    std::vector<float> src(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) src[i] = std::sin(0.3f * static_cast<float>(i));
    const size_t bytes = static_cast<size_t>(*ggml_bytes_for(t, n));
    std::vector<uint8_t> packed(bytes + 1);
    ASSERT_TRUE(quantize_row(t, src.data(), packed.data(), n).ok());
    std::vector<float> want(static_cast<size_t>(n)), got(static_cast<size_t>(n));
    ASSERT_TRUE(dequantize_row(t, packed.data(), want.data(), n).ok());
    std::memmove(packed.data() + 1, packed.data(), bytes);  // now at an odd address
    ASSERT_TRUE(dequantize_row(t, packed.data() + 1, got.data(), n).ok());
    EXPECT_EQ(want, got) << ggml_type_name(t);
  }
}

}  // namespace
}  // namespace rlx::formats
