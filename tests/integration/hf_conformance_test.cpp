// Conformance against transformers (float64 references; float32 for the MoE folders):
// every decoder folder of ../shared/conformance/hf/ is loaded from config.json +
// safetensors and its logits for each sequence must match with relative L2 error
// <= 1e-4 per position, for one batch forward and for one token at a time.
// Skipped when the data is absent.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "rlx/models/language_model.h"

namespace rlx {
namespace {

namespace fs = std::filesystem;

// The device the suite runs on: RLX_TEST_DEVICE (cpu, cuda), cpu by default. CI runs it
// on the CPU; on a GPU machine the same suite checks the CUDA backend.
Device test_device() {
  const char* env = std::getenv("RLX_TEST_DEVICE");
  if (env == nullptr) return Device::cpu();
  auto d = Device::parse(env);
  if (!d) {
    ADD_FAILURE() << "RLX_TEST_DEVICE: " << d.error().to_string();
    return Device::cpu();
  }
  return *d;
}

fs::path hf_dir() {
  if (const char* env = std::getenv("RLX_CONFORMANCE_DIR")) return fs::path(env) / "hf";
  return fs::path(RLX_SOURCE_DIR) / ".." / "shared" / "conformance" / "hf";
}

// The largest relative L2 error of one position's logits (rows of `vocab`).
double worst_relative_l2(const std::vector<float>& got, const std::vector<float>& ref, int64_t vocab) {
  EXPECT_EQ(got.size(), ref.size());
  if (got.size() != ref.size()) return INFINITY;
  double worst = 0;
  for (size_t i = 0; i < ref.size() / static_cast<size_t>(vocab); ++i) {
    double num = 0, den = 0;
    for (int64_t j = 0; j < vocab; ++j) {
      const double d = double(got[i * vocab + j]) - ref[i * vocab + j];
      num += d * d;
      den += double(ref[i * vocab + j]) * ref[i * vocab + j];
    }
    worst = std::max(worst, std::sqrt(num / den));
  }
  return worst;
}

class HfConformance : public ::testing::TestWithParam<std::string> {};

TEST_P(HfConformance, MatchesTransformers) {
  const fs::path dir = hf_dir() / GetParam();
  if (!fs::exists(dir / "manifest.json")) GTEST_SKIP() << dir << " not found (skipped)";
  std::ifstream in(dir / "manifest.json");
  const auto manifest = nlohmann::json::parse(in);
  for (const auto& [seq, info] : manifest["sequences"].items()) {
    const auto tokens = info["token_ids"].get<std::vector<int32_t>>();
    const int64_t vocab = info["shape"][1];
    std::ifstream lf(dir / ("logits-" + seq + ".f32"), std::ios::binary);
    std::vector<float> ref(tokens.size() * static_cast<size_t>(vocab));
    lf.read(reinterpret_cast<char*>(ref.data()), static_cast<std::streamsize>(ref.size() * sizeof(float)));
    ASSERT_TRUE(lf) << "short reference file for " << seq;

    models::LoadOptions lo;
    lo.ctx = static_cast<int64_t>(tokens.size()) + 8;
    lo.threads = 2;
    lo.device = test_device();
    auto model = models::LanguageModel::load(dir.string(), lo);
    ASSERT_TRUE(model) << model.error().to_string();
    auto logits = (*model)->forward(tokens, /*all_rows=*/true);
    ASSERT_TRUE(logits) << logits.error().to_string();
    EXPECT_LE(worst_relative_l2(*logits, ref, vocab), 1e-4) << GetParam() << " " << seq << " batch";
    // incremental: one token per step through the KV cache (the decode executable)
    (*model)->reset();
    std::vector<float> inc;
    for (int32_t t : tokens) {
      auto r = (*model)->forward(std::span<const int32_t>(&t, 1), true);
      ASSERT_TRUE(r) << r.error().to_string();
      inc.insert(inc.end(), r->begin(), r->end());
    }
    EXPECT_LE(worst_relative_l2(inc, ref, vocab), 1e-4) << GetParam() << " " << seq << " incremental";
  }
}

INSTANTIATE_TEST_SUITE_P(Models, HfConformance,
                         ::testing::Values("llama", "llama3-ropescaled", "qwen2", "qwen3", "mistral-swa", "gemma2",
                                           "gemma3", "phi3", "qwen3-moe", "mixtral"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& c : n)
                             if (c == '-') c = '_';
                           return n;
                         });

}  // namespace
}  // namespace rlx
