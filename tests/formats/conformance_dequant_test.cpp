// Conformance against llama.cpp data (/work/shared/conformance): every tensor of every
// GGUF listed in dequant.json must dequantize to exactly the reference float32 values
// (sha256), and re-quantizing llama-tiny-F32 must reproduce llama-quantize's Q8_0, Q4_K
// and Q6_K blocks byte for byte. Skips, saying so, when the data is absent.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "rlx/formats/gguf.h"
#include "rlx/formats/quant.h"
#include "sha256.h"

namespace rlx::formats {
namespace {

std::string conformance_dir() {
  if (const char* env = std::getenv("RLX_CONFORMANCE_DIR"); env != nullptr && *env != '\0') return env;
  return RLX_SOURCE_DIR "/../shared/conformance";
}

TEST(Sha256, KnownVectors) {
  EXPECT_EQ(testing::sha256_hex("", 0), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(testing::sha256_hex("abc", 3), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  const std::string long_input(1000, 'a');
  EXPECT_EQ(testing::sha256_hex(long_input.data(), long_input.size()),
            "41edece42d63e8d9bf515a9ba6932e1c20cbc9f5a5d134645adb5db1b9737ea3");
}

TEST(ConformanceDequant, EveryTensorMatchesReferenceChecksum) {
  const std::string dir = conformance_dir();
  const std::string json_path = dir + "/dequant.json";
  if (!std::filesystem::exists(json_path)) GTEST_SKIP() << "skipped: no conformance data at " << json_path;
  std::ifstream in(json_path);
  const nlohmann::json ref = nlohmann::json::parse(in);
  int checked = 0;
  for (const auto& [model_file, tensors] : ref.at("models").items()) {
    Expected<GgufFile> file = GgufFile::open(dir + "/models/" + model_file);
    ASSERT_TRUE(file.has_value()) << file.error().to_string();
    EXPECT_EQ(file->tensors().size(), tensors.size()) << model_file;
    for (const auto& [name, expect] : tensors.items()) {
      SCOPED_TRACE(model_file + " / " + name);
      Expected<const GgufTensor*> t = file->tensor(name);
      ASSERT_TRUE(t.has_value()) << t.error().to_string();
      EXPECT_EQ(ggml_type_name((*t)->type), expect.at("type").get<std::string>());
      EXPECT_EQ((*t)->dims, expect.at("shape_ne").get<std::vector<int64_t>>());
      const int64_t n = (*t)->n_elements();
      ASSERT_EQ(n, expect.at("n").get<int64_t>());
      std::vector<float> values(static_cast<size_t>(n));
      ASSERT_TRUE(dequantize_row((*t)->type, (*t)->data, values.data(), n).ok());
      const std::vector<double> first8 = expect.at("first8").get<std::vector<double>>();
      for (size_t i = 0; i < first8.size() && i < values.size(); ++i) EXPECT_EQ(values[i], first8[i]) << "index " << i;
      EXPECT_EQ(testing::sha256_hex(values.data(), values.size() * sizeof(float)),
                expect.at("sha256_f32").get<std::string>());
      ++checked;
    }
  }
  EXPECT_GT(checked, 0);
}

// Quantizes each F32 tensor of `source` that `quantized` stores as `type` and expects
// identical bytes. Returns how many tensors were compared.
int expect_requantization_matches(const GgufFile& source, const GgufFile& quantized, GgmlType type,
                                  int64_t max_elements) {
  int compared = 0;
  for (const GgufTensor& q : quantized.tensors()) {
    if (q.type != type || q.n_elements() > max_elements) continue;
    SCOPED_TRACE(quantized.name() + " / " + q.name);
    const GgufTensor* f = source.find_tensor(q.name);
    if (f == nullptr || f->type != GgmlType::F32) continue;
    std::vector<float> values(f->n_bytes / sizeof(float));
    std::memcpy(values.data(), f->data, f->n_bytes);
    std::vector<uint8_t> packed(q.n_bytes);
    EXPECT_TRUE(quantize_row(type, values.data(), packed.data(), q.n_elements()).ok());
    EXPECT_EQ(std::memcmp(packed.data(), q.data, q.n_bytes), 0) << "blocks differ from llama-quantize's";
    ++compared;
  }
  return compared;
}

TEST(ConformanceQuantize, ReproducesLlamaQuantizeBlocks) {
  const std::string dir = conformance_dir() + "/models/";
  if (!std::filesystem::exists(dir + "llama-tiny-F32.gguf"))
    GTEST_SKIP() << "skipped: no conformance models at " << dir;
  Expected<GgufFile> f32 = GgufFile::open(dir + "llama-tiny-F32.gguf");
  Expected<GgufFile> q8 = GgufFile::open(dir + "llama-tiny-Q8_0.gguf");
  Expected<GgufFile> q4km = GgufFile::open(dir + "llama-tiny-Q4_K_M.gguf");
  ASSERT_TRUE(f32.has_value() && q8.has_value() && q4km.has_value());
  // The 8M-element embedding is left out to keep the Debug run short; every other matrix is compared.
  constexpr int64_t kMaxElements = 1 << 20;
  EXPECT_GT(expect_requantization_matches(*f32, *q8, GgmlType::Q8_0, kMaxElements), 0);
  EXPECT_GT(expect_requantization_matches(*f32, *q4km, GgmlType::Q4_K, kMaxElements), 0);
  EXPECT_GT(expect_requantization_matches(*f32, *q4km, GgmlType::Q6_K, kMaxElements), 0);
}

}  // namespace
}  // namespace rlx::formats
