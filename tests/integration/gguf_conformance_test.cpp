// Conformance against llama.cpp: every case of ../shared/conformance/index.json (and of
// its mixture-of-experts set, moe/index.json) is run
// through LanguageModel in batch and incremental mode and compared with the
// reference logits using the README's tolerances:
//   f32 weights + f32 KV: max |Δ| <= 1e-3, greedy tokens equal until a small margin;
//   f32 weights + f16 KV: max |Δ| <= 3e-2;
//   quantized weights:    max |Δ| <= 0.15 * logit std, argmax agreement >= 95%.
// Skipped (with the reason) when the data is absent or a feature is not built yet.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "rlx/models/language_model.h"
#include "rlx/models/sampler.h"

#include "conformance_env.h"

namespace rlx {
namespace {

namespace fs = std::filesystem;

using testing_env::test_device;

using testing_env::conformance_dir;

std::vector<float> read_f32(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<float> out(bytes.size() / sizeof(float));
  std::memcpy(out.data(), bytes.data(), out.size() * sizeof(float));
  return out;
}

struct Case {
  std::string name, model, kv;
  fs::path dir;  // the set's folder: paths in its index and manifests are relative to it
  nlohmann::json manifest;
};

// The main set (index.json) and the mixture-of-experts set (moe/index.json).
std::vector<Case> cases() {
  std::vector<Case> out;
  for (const fs::path& dir : {conformance_dir(), conformance_dir() / "moe"}) {
    std::ifstream in(dir / "index.json");
    if (!in) continue;
    const auto index = nlohmann::json::parse(in);
    for (const auto& c : index["cases"]) {
      Case k;
      k.name = c["case"];
      k.model = (dir / c["model"].get<std::string>()).string();
      k.kv = c["kv"];
      k.dir = dir;
      std::ifstream m(dir / c["manifest"].get<std::string>());
      // A missing or broken manifest fails its case (below), not the whole binary.
      k.manifest = nlohmann::json::parse(m, nullptr, /*allow_exceptions=*/false);
      out.push_back(std::move(k));
    }
  }
  return out;
}

bool is_f32_model(const Case& c) { return c.name.find("-F32__") != std::string::npos; }

struct Comparison {
  double max_abs = 0;
  int64_t argmax_agree = 0, rows = 0;  // over positions whose reference top-2 margin exceeds `margin`
};

// Max |Δ| over everything; argmax agreement over the positions where the reference's
// top1 - top2 margin is at least `margin` (below the allowed error the top token is a
// coin toss: the README's own float64 emulation agrees on 87.5% of such a case).
Comparison compare(const std::vector<float>& got, const std::vector<float>& ref, int64_t n_vocab, double margin) {
  Comparison c;
  const int64_t rows = static_cast<int64_t>(ref.size()) / n_vocab;
  for (size_t i = 0; i < ref.size(); ++i) c.max_abs = std::max(c.max_abs, double(std::fabs(got[i] - ref[i])));
  for (int64_t r = 0; r < rows; ++r) {
    const std::span<const float> g(got.data() + r * n_vocab, static_cast<size_t>(n_vocab));
    const std::span<const float> f(ref.data() + r * n_vocab, static_cast<size_t>(n_vocab));
    const int32_t top = models::argmax(f);
    float second = -INFINITY;
    for (int64_t j = 0; j < n_vocab; ++j)
      if (j != top) second = std::max(second, f[static_cast<size_t>(j)]);
    if (f[static_cast<size_t>(top)] - second < margin) continue;
    ++c.rows;
    c.argmax_agree += models::argmax(g) == top;
  }
  return c;
}

class GgufConformance : public ::testing::TestWithParam<Case> {};

TEST_P(GgufConformance, MatchesLlamaCpp) {
  const Case& c = GetParam();
  ASSERT_FALSE(c.manifest.is_discarded()) << c.name << ": its manifest is missing or not JSON";
  const bool f32_weights = is_f32_model(c);
  const auto& m = c.manifest;
  const double logit_std = m["logits"]["stats"]["std"];
  // README tolerances: f32 weights with an f32 / f16 KV cache, or 0.15 x the logit std
  // (plus >= 95% argmax agreement) for quantized weights.
  const double tol = !f32_weights ? 0.15 * logit_std : (c.kv == "f16" ? 3e-2 : 1e-3);
  std::vector<int32_t> tokens = m["sequence"]["token_ids"].get<std::vector<int32_t>>();
  const int64_t n_vocab = m["model"]["n_vocab"];
  const auto ref = read_f32(c.dir / m["logits"]["file"].get<std::string>());
  ASSERT_EQ(ref.size(), tokens.size() * static_cast<size_t>(n_vocab));

  models::LoadOptions lo;
  lo.ctx = m["settings"]["n_ctx"];
  lo.threads = 2;
  lo.device = test_device();
  lo.kv_dtype = c.kv == "f16" ? ir::DType::F16 : ir::DType::F32;
  auto model = models::LanguageModel::load(c.model, lo);
  ASSERT_TRUE(model) << model.error().to_string();

  // batch: one prefill of all tokens
  auto batch = (*model)->forward(tokens, /*all_rows=*/true);
  ASSERT_TRUE(batch) << batch.error().to_string();
  const Comparison cb = compare(*batch, ref, n_vocab, tol);
  EXPECT_LE(cb.max_abs, tol) << c.name << " batch";
  if (!f32_weights) {
    EXPECT_GE(cb.argmax_agree, 0.95 * cb.rows) << c.name << " batch argmax";
  }

  // incremental: one decode step per token through the KV cache
  (*model)->reset();
  std::vector<float> inc;
  for (int32_t t : tokens) {
    auto r = (*model)->forward(std::span<const int32_t>(&t, 1), true);
    ASSERT_TRUE(r) << r.error().to_string();
    inc.insert(inc.end(), r->begin(), r->end());
  }
  const Comparison ci = compare(inc, ref, n_vocab, tol);
  EXPECT_LE(ci.max_abs, tol) << c.name << " incremental";
  if (!f32_weights) {
    EXPECT_GE(ci.argmax_agree, 0.95 * ci.rows) << c.name << " incremental argmax";
  }
  if (!f32_weights || c.kv == "f16") return;  // greedy tokens are compared for f32 weights + f32 KV

  // greedy continuation, compared until the reference margin drops below 1e-3
  const auto greedy = m["greedy"]["tokens"].get<std::vector<int32_t>>();
  const auto margins = m["greedy"]["top1_minus_top2"].get<std::vector<double>>();
  const std::span<const float> last(batch->data() + (tokens.size() - 1) * n_vocab, static_cast<size_t>(n_vocab));
  int32_t next = models::argmax(last);
  (*model)->reset();
  ASSERT_TRUE((*model)->forward(tokens, false));
  for (size_t step = 0; step < greedy.size(); ++step) {
    if (margins[step] < 1e-3) break;
    ASSERT_EQ(next, greedy[step]) << c.name << " greedy step " << step;
    auto r = (*model)->forward(std::span<const int32_t>(&next, 1), false);
    ASSERT_TRUE(r) << r.error().to_string();
    next = models::argmax(*r);
  }
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  std::string n = info.param.name;
  for (char& ch : n)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return n;
}

INSTANTIATE_TEST_SUITE_P(Cases, GgufConformance, ::testing::ValuesIn(cases()), case_name);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(GgufConformance);

TEST(GgufConformanceData, PresentOrSkipped) {
  if (!fs::exists(conformance_dir() / "index.json"))
    GTEST_SKIP() << "conformance data not found at " << conformance_dir() << " (skipped)";
  EXPECT_FALSE(cases().empty());
}

}  // namespace
}  // namespace rlx
