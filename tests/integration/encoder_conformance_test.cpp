// Encoder conformance against transformers (float64 references): the bert, nomic-bert
// and modernbert folders of ../shared/conformance/hf/ are loaded from config.json +
// safetensors; last_hidden_state (and BERT's pooler_output) of each sequence must
// match with relative L2 error <= 1e-4, run alone and run together in one padded batch.
// Also through `rlx forward` when the rlx program is built. Skipped without the data.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include "rlx/models/encoder.h"

#include "conformance_env.h"

namespace rlx {
namespace {

namespace fs = std::filesystem;

using testing_env::test_device;

fs::path hf_dir() { return testing_env::conformance_dir() / "hf"; }

std::vector<float> read_f32(const fs::path& p, size_t n) {
  std::vector<float> v(n);
  std::ifstream f(p, std::ios::binary);
  f.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(n * sizeof(float)));
  EXPECT_TRUE(f) << "short reference file " << p;
  return v;
}

double relative_l2(std::span<const float> got, std::span<const float> ref) {
  EXPECT_EQ(got.size(), ref.size());
  if (got.size() != ref.size()) return INFINITY;
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double d = double(got[i]) - ref[i];
    num += d * d;
    den += double(ref[i]) * ref[i];
  }
  return std::sqrt(num / den);
}

struct Case {
  std::string seq;
  std::vector<int32_t> tokens;
  std::vector<float> hidden, pooler;  // pooler empty when the folder has none
};

std::vector<Case> load_cases(const fs::path& dir, int64_t* dim) {
  std::ifstream in(dir / "manifest.json");
  const auto manifest = nlohmann::json::parse(in);
  std::vector<Case> cases;
  for (const auto& [seq, info] : manifest["sequences"].items()) {
    Case c;
    c.seq = seq;
    c.tokens = info["token_ids"].get<std::vector<int32_t>>();
    *dim = info["shape"][1];
    c.hidden = read_f32(dir / ("hidden-" + seq + ".f32"), c.tokens.size() * static_cast<size_t>(*dim));
    if (fs::exists(dir / ("pooler-" + seq + ".f32"))) c.pooler = read_f32(dir / ("pooler-" + seq + ".f32"), static_cast<size_t>(*dim));
    cases.push_back(std::move(c));
  }
  return cases;
}

class EncoderConformance : public ::testing::TestWithParam<std::string> {};

TEST_P(EncoderConformance, MatchesTransformersAloneAndBatched) {
  const fs::path dir = hf_dir() / GetParam();
  if (!fs::exists(dir / "manifest.json")) GTEST_SKIP() << dir << " not found (skipped)";
  int64_t dim = 0;
  const std::vector<Case> cases = load_cases(dir, &dim);
  ASSERT_FALSE(cases.empty());
  models::EncoderLoadOptions lo;
  lo.device = test_device();
  lo.threads = 2;
  lo.compile_cache = false;
  auto model = models::EncoderModel::load(dir.string(), lo);
  ASSERT_TRUE(model) << model.error().to_string();
  ASSERT_EQ((*model)->config().n_embd, dim);

  std::vector<std::vector<int32_t>> all;
  for (const Case& c : cases) {
    all.push_back(c.tokens);
    const std::vector<std::vector<int32_t>> one{c.tokens};
    auto out = (*model)->forward(one);
    ASSERT_TRUE(out) << out.error().to_string();
    const double e = relative_l2(out->sequence(0), c.hidden);
    EXPECT_LE(e, 1e-4) << GetParam() << " " << c.seq << " last_hidden_state alone";
    std::printf("%s %s alone: last_hidden_state rel L2 %.2e\n", GetParam().c_str(), c.seq.c_str(), e);
    if (!c.pooler.empty()) {
      ASSERT_TRUE((*model)->has_pooler());
      const double p = relative_l2(out->pooler, c.pooler);
      EXPECT_LE(p, 1e-4) << GetParam() << " " << c.seq << " pooler_output";
      std::printf("%s %s alone: pooler_output rel L2 %.2e\n", GetParam().c_str(), c.seq.c_str(), p);
    }
  }
  // All sequences in one padded batch (the short one padded to the long one's bucket).
  auto out = (*model)->forward(all);
  ASSERT_TRUE(out) << out.error().to_string();
  for (size_t b = 0; b < cases.size(); ++b) {
    const double e = relative_l2(out->sequence(static_cast<int64_t>(b)), cases[b].hidden);
    EXPECT_LE(e, 1e-4) << GetParam() << " " << cases[b].seq << " in a batch of " << cases.size();
    if (!cases[b].pooler.empty()) {
      const std::span<const float> p(out->pooler.data() + b * static_cast<size_t>(dim), static_cast<size_t>(dim));
      EXPECT_LE(relative_l2(p, cases[b].pooler), 1e-4) << cases[b].seq << " pooler in a batch";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Hf, EncoderConformance, ::testing::Values("bert", "nomic-bert", "modernbert"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& ch : n)
                             if (ch == '-') ch = '_';
                           return n;
                         });

// Embeddings of texts of different lengths in one batch equal embedding them one by
// one, for every pooling (the padding of the short texts must not leak in).
TEST(EncoderBatching, BatchEqualsOneByOne) {
  const fs::path dir = hf_dir() / "modernbert";
  if (!fs::exists(dir / "manifest.json")) GTEST_SKIP() << dir << " not found (skipped)";
  models::EncoderLoadOptions lo;
  lo.device = test_device();
  lo.threads = 2;
  lo.compile_cache = false;
  auto model = models::EncoderModel::load(dir.string(), lo);
  ASSERT_TRUE(model) << model.error().to_string();
  std::vector<std::vector<int32_t>> texts;
  for (int len : {3, 17, 9, 1, 30}) {
    std::vector<int32_t> t;
    for (int i = 0; i < len; ++i) t.push_back((i * 37 + len * 11) % 1000 + 5);
    texts.push_back(t);
  }
  for (models::Pooling p : {models::Pooling::Cls, models::Pooling::Mean, models::Pooling::Last}) {
    auto batched = (*model)->embed(texts, p, /*normalize=*/true);
    ASSERT_TRUE(batched) << batched.error().to_string();
    for (size_t i = 0; i < texts.size(); ++i) {
      const std::vector<std::vector<int32_t>> one{texts[i]};
      auto alone = (*model)->embed(one, p, true);
      ASSERT_TRUE(alone) << alone.error().to_string();
      EXPECT_LE(relative_l2((*batched)[i], (*alone)[0]), 1e-5) << "text " << i << " pooling " << models::pooling_name(p);
    }
  }
}

}  // namespace
}  // namespace rlx
