// The embedder of `rlx serve` on a synthetic BERT: requests that arrive while the model
// is busy share the next turn's batched runs and get the embeddings each would get alone;
// dimensions truncate and renormalize; bad requests, a full queue and a stopped embedder
// are refused. No timing is asserted: waits are bounded only to end a hang.
#include "rlx/serve/embedder.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "rlx/models/synth.h"

namespace rlx::serve {
namespace {

namespace fs = std::filesystem;
using Embeddings = std::vector<std::vector<float>>;

const std::string& bert_tiny() {
  static const std::string path = [] {
    const fs::path dir = fs::temp_directory_path() / "rlx_serve_embedder_test";
    fs::create_directories(dir);
    const fs::path p = dir / "bert-tiny.gguf";
    if (!fs::exists(p)) {
      models::SynthOptions o;
      o.preset = "bert-tiny";
      o.seed = 4;
      Status s = models::write_synthetic_gguf(o, p.string());
      EXPECT_TRUE(s.ok()) << s.error().to_string();
    }
    return p.string();
  }();
  return path;
}

std::unique_ptr<models::EncoderModel> load() {
  models::EncoderLoadOptions lo;
  lo.threads = 2;
  auto m = models::EncoderModel::load(bert_tiny(), lo);
  EXPECT_TRUE(m) << m.error().to_string();
  return m ? std::move(*m) : nullptr;
}

// Token sequences of the given lengths with ids drawn from a small deterministic walk.
std::vector<std::vector<int32_t>> sequences(std::initializer_list<int> lengths, int32_t salt) {
  std::vector<std::vector<int32_t>> out;
  for (int n : lengths) {
    std::vector<int32_t> s;
    for (int i = 0; i < n; ++i) s.push_back(static_cast<int32_t>(5 + (salt * 131 + i * 17) % 1000));
    out.push_back(std::move(s));
    ++salt;
  }
  return out;
}

Embeddings result(EmbeddingJob& job) {
  for (int i = 0; i < 600; ++i) {
    auto r = job.wait(std::chrono::milliseconds(1000));
    if (!r) continue;
    EXPECT_TRUE(*r) << r->error().to_string();
    return *r ? **r : Embeddings{};
  }
  ADD_FAILURE() << "the job never finished";
  return {};
}

void expect_near(const Embeddings& got, const Embeddings& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i].size(), want[i].size()) << what << " " << i;
    for (size_t d = 0; d < got[i].size(); ++d)
      EXPECT_NEAR(got[i][d], want[i][d], 1e-5f) << what << " " << i << "," << d;
  }
}

TEST(Embedder, RequestsWaitingTogetherShareATurnAndEqualEachAlone) {
  auto model = load();
  ASSERT_TRUE(model);
  // A long request that keeps the model busy, then four small ones of mixed lengths.
  std::vector<std::vector<int32_t>> big;
  for (int i = 0; i < 192; ++i) big.push_back(sequences({128}, i)[0]);
  const std::vector<std::vector<std::vector<int32_t>>> small{sequences({3, 40}, 1), sequences({9}, 7),
                                                             sequences({128, 1, 20}, 11), sequences({60, 5}, 20)};
  // What each gives alone (the model is the caller's until the embedder exists).
  models::EmbedOptions o;
  std::vector<Embeddings> alone;
  for (const auto& s : small) {
    auto e = model->embed_all(s, o);
    ASSERT_TRUE(e) << e.error().to_string();
    alone.push_back(std::move(*e));
  }
  auto big_alone = model->embed_all(std::vector<std::vector<int32_t>>(big.begin(), big.begin() + 2), o);
  ASSERT_TRUE(big_alone);

  Metrics metrics;
  auto embedder = Embedder::create(*model, metrics, EmbedderOptions{});
  ASSERT_TRUE(embedder) << embedder.error().to_string();
  SubmitRefusal why = SubmitRefusal::kNone;
  auto first = (*embedder)->submit(big, 0, &why);
  ASSERT_TRUE(first);
  std::vector<std::shared_ptr<EmbeddingJob>> jobs;
  for (const auto& s : small) {
    jobs.push_back((*embedder)->submit(s, 0, &why));
    ASSERT_TRUE(jobs.back());
  }
  const Embeddings big_out = result(*first);
  ASSERT_EQ(big_out.size(), big.size());
  expect_near(Embeddings(big_out.begin(), big_out.begin() + 2), *big_alone, "big");
  for (size_t j = 0; j < jobs.size(); ++j) {
    expect_near(result(*jobs[j]), alone[j], "request " + std::to_string(j));
    // They waited while the big one ran, and then ran in one turn together.
    EXPECT_EQ(jobs[j]->shared_with(), 4) << j;
  }
  EXPECT_EQ(first->shared_with(), 1);
  EXPECT_EQ(metrics.embedding_turns.load(), 2);
  EXPECT_EQ(metrics.embedding_requests.load(), 5);
  EXPECT_EQ(metrics.embedding_inputs.load(), 192 + 2 + 1 + 3 + 2);
  EXPECT_EQ(metrics.queue_length.load(), 0);
}

// A request cancelled while it waits (its client gone) is dropped, not run: it ends with
// an error and counts as cancelled; the one running and those after it are unaffected.
TEST(Embedder, CancelledRequestsThatStillWaitAreDropped) {
  auto model = load();
  ASSERT_TRUE(model);
  Metrics metrics;
  EmbedderOptions o;
  o.max_batch = 1;  // a turn per request, so the second waits while the first runs
  auto e = Embedder::create(*model, metrics, o);
  ASSERT_TRUE(e) << e.error().to_string();
  SubmitRefusal why = SubmitRefusal::kNone;
  // The first request holds enough work (32 runs of the longest sequence the model takes,
  // hundreds of milliseconds) that the two after it are still queued when the second is
  // cancelled, microseconds after its submit.
  std::vector<std::vector<int32_t>> long_ones;
  for (int i = 0; i < 32; ++i) long_ones.push_back(sequences({static_cast<int>((*e)->max_tokens())}, 1 + i)[0]);
  auto first = (*e)->submit(std::move(long_ones), 0, &why);
  auto second = (*e)->submit(sequences({7}, 2), 0, &why);
  auto third = (*e)->submit(sequences({9}, 3), 0, &why);
  ASSERT_TRUE(first && second && third);
  second->cancel();
  EXPECT_EQ(result(*first).size(), 32u);
  EXPECT_EQ(result(*third).size(), 1u);
  std::optional<Expected<Embeddings>> r;
  for (int i = 0; i < 600 && !r; ++i) r = second->wait(std::chrono::milliseconds(1000));
  ASSERT_TRUE(r.has_value());
  ASSERT_FALSE(*r) << "a cancelled request ran";
  EXPECT_NE(r->error().message().find("cancelled"), std::string::npos) << r->error().message();
  EXPECT_EQ(second->shared_with(), 0);
  EXPECT_EQ(metrics.requests_cancelled.load(), 1);
  EXPECT_EQ(metrics.embedding_requests.load(), 2);
}

TEST(Embedder, DimensionsTruncateAndRenormalize) {
  auto model = load();
  ASSERT_TRUE(model);
  const auto input = sequences({12, 30}, 3);
  auto full = model->embed_all(input, models::EmbedOptions{});
  ASSERT_TRUE(full);
  Metrics metrics;
  auto embedder = Embedder::create(*model, metrics, EmbedderOptions{});
  ASSERT_TRUE(embedder);
  SubmitRefusal why = SubmitRefusal::kNone;
  auto job = (*embedder)->submit(input, 8, &why);
  ASSERT_TRUE(job);
  const Embeddings short_ones = result(*job);
  ASSERT_EQ(short_ones.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    ASSERT_EQ(short_ones[i].size(), 8u);
    double norm = 0;
    for (int d = 0; d < 8; ++d) norm += double((*full)[i][d]) * (*full)[i][d];
    norm = std::sqrt(norm);
    for (int d = 0; d < 8; ++d) EXPECT_NEAR(short_ones[i][d], (*full)[i][d] / norm, 1e-5) << i << "," << d;
  }
}

TEST(Embedder, Refusals) {
  auto model = load();
  ASSERT_TRUE(model);
  Metrics metrics;
  EmbedderOptions no_pooling;
  no_pooling.pooling = models::Pooling::None;
  EXPECT_FALSE(Embedder::create(*model, metrics, no_pooling));
  EmbedderOptions no_batch;
  no_batch.max_batch = 0;
  EXPECT_FALSE(Embedder::create(*model, metrics, no_batch));
  EmbedderOptions opt;
  opt.max_request_tokens = 100;
  auto embedder = Embedder::create(*model, metrics, opt);
  ASSERT_TRUE(embedder);
  struct Case {
    std::vector<std::vector<int32_t>> inputs;
    int64_t dimensions;
    std::string says;
  };
  const Case cases[] = {
      {{}, 0, "no inputs"},
      {{{1, 2}, {}}, 0, "input[1] has no tokens"},
      {{std::vector<int32_t>(129, 3)}, 0, "input[0] has 129 tokens; the model takes at most 128"},
      {{{1, 1024}}, 0, "input[0]: token id 1024 is outside the vocabulary [0, 1024)"},
      {{{1, -1}}, 0, "token id -1"},
      {{{1, 2}}, 129, "'dimensions' must be between 1 and 128"},
      {{std::vector<int32_t>(60, 3), std::vector<int32_t>(60, 3)}, 0, "120 tokens; at most 100"},
  };
  for (const Case& c : cases) {
    SubmitRefusal why = SubmitRefusal::kNone;
    std::string error;
    EXPECT_FALSE((*embedder)->submit(c.inputs, c.dimensions, &why, &error)) << c.says;
    EXPECT_EQ(why, SubmitRefusal::kInvalid) << c.says;
    EXPECT_NE(error.find(c.says), std::string::npos) << error;
  }
  (*embedder)->stop();
  SubmitRefusal why = SubmitRefusal::kNone;
  EXPECT_FALSE((*embedder)->submit({{1, 2}}, 0, &why));
  EXPECT_EQ(why, SubmitRefusal::kStopping);

  EmbedderOptions none_waiting;
  none_waiting.max_queue = 0;
  auto full = Embedder::create(*model, metrics, none_waiting);
  ASSERT_TRUE(full);
  EXPECT_FALSE((*full)->submit({{1, 2}}, 0, &why));
  EXPECT_EQ(why, SubmitRefusal::kQueueFull);
}

}  // namespace
}  // namespace rlx::serve
