// What the encoder front ends share (rlx/models/encoder.h): Hugging Face's padded batch
// to sequences and back, Matryoshka truncation, texts to encoder tokens, and embed_all
// (length-sorted power-of-two batches, results in input order equal to each alone), on
// hand-made values and a synthetic BERT.
#include <gtest/gtest.h>

#include <filesystem>

#include "rlx/models/encoder.h"
#include "rlx/models/synth.h"

namespace rlx::models {
namespace {

namespace fs = std::filesystem;

std::string message(const Expected<EncoderBatch>& r) { return r ? std::string{} : r.error().message(); }

TEST(EncoderInputs, UnpadRightPaddedBatch) {
  const std::vector<int64_t> ids{101, 7, 8, 102, 101, 9, 102, 0};
  const std::vector<int64_t> mask{1, 1, 1, 1, 1, 1, 1, 0};
  const std::vector<int64_t> types{0, 0, 1, 1, 0, 1, 1, 0};
  auto b = unpad_encoder_batch(ids, mask, types, 2, 4);
  ASSERT_TRUE(b) << b.error().to_string();
  ASSERT_EQ(b->tokens.size(), 2u);
  EXPECT_EQ(b->tokens[0], (std::vector<int32_t>{101, 7, 8, 102}));
  EXPECT_EQ(b->tokens[1], (std::vector<int32_t>{101, 9, 102}));
  EXPECT_EQ(b->types[1], (std::vector<int32_t>{0, 1, 1}));
  auto plain = unpad_encoder_batch(ids, {}, {}, 2, 4);
  ASSERT_TRUE(plain);
  EXPECT_EQ(plain->tokens[1].size(), 4u);  // no mask: every token is real
  EXPECT_TRUE(plain->types.empty());
}

TEST(EncoderInputs, UnpadRefusalsNameTheInputAndRow) {
  const std::vector<int64_t> ids{1, 2, 3, 4};
  EXPECT_NE(message(unpad_encoder_batch(ids, {}, {}, 2, 3)).find("input_ids: 4 values for a batch of 2 x 3"),
            std::string::npos);
  EXPECT_NE(message(unpad_encoder_batch({}, {}, {}, 0, 3)).find("empty batch"), std::string::npos);
  EXPECT_NE(message(unpad_encoder_batch(ids, std::vector<int64_t>{1, 1, 1}, {}, 2, 2)).find("attention_mask: 3 values"),
            std::string::npos);
  EXPECT_NE(message(unpad_encoder_batch(ids, std::vector<int64_t>{1, 1, 1, 0, 1}, {}, 1, 4)).find("attention_mask: 5"),
            std::string::npos);
  EXPECT_NE(
      message(unpad_encoder_batch(ids, std::vector<int64_t>{1, 1, 0, 1}, {}, 2, 2)).find("row 1 must be ones then"),
      std::string::npos);
  EXPECT_NE(message(unpad_encoder_batch(ids, std::vector<int64_t>{1, 2, 1, 1}, {}, 2, 2)).find("found 2 at 1"),
            std::string::npos);
  EXPECT_NE(
      message(unpad_encoder_batch(ids, std::vector<int64_t>{0, 0, 1, 1}, {}, 2, 2)).find("row 0 masks every token"),
      std::string::npos);
  EXPECT_NE(message(unpad_encoder_batch(std::vector<int64_t>{1, int64_t{1} << 40}, {}, {}, 1, 2)).find("outside int32"),
            std::string::npos);
  EXPECT_NE(message(unpad_encoder_batch(ids, {}, std::vector<int64_t>{0, 0, -(int64_t{1} << 33), 0}, 2, 2))
                .find("token_type_ids: row 1"),
            std::string::npos);
}

TEST(EncoderInputs, PaddedHiddenStates) {
  EncoderOutput o;
  o.batch = 2;
  o.seq = 3;
  o.dim = 2;
  o.lengths = {3, 1};
  o.hidden = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};  // [2, 3, 2]
  EXPECT_EQ(padded_hidden_states(o, 4), (std::vector<float>{1, 2, 3, 4, 5, 6, 0, 0, 7, 8, 9, 10, 11, 12, 0, 0}));
  EXPECT_EQ(padded_hidden_states(o, 2), (std::vector<float>{1, 2, 3, 4, 7, 8, 9, 10}));
}

TEST(EncoderInputs, TruncateEmbedding) {
  std::vector<float> v{3, 4, 12};
  truncate_embedding(v, 2);
  ASSERT_EQ(v.size(), 2u);
  EXPECT_FLOAT_EQ(v[0], 0.6f);
  EXPECT_FLOAT_EQ(v[1], 0.8f);
  std::vector<float> w{3, 4, 12};
  truncate_embedding(w, 3);  // all kept: normalized
  EXPECT_FLOAT_EQ(w[2], 12.0f / 13.0f);
}

class EncoderEmbedAll : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const fs::path dir = fs::temp_directory_path() / "rlx_encoder_inputs_test";
    fs::create_directories(dir);
    path_ = (dir / "bert-tiny.gguf").string();
    if (!fs::exists(path_)) {
      SynthOptions o;
      o.preset = "bert-tiny";
      o.seed = 21;
      ASSERT_TRUE(write_synthetic_gguf(o, path_).ok());
    }
  }
  static std::string path_;
};
std::string EncoderEmbedAll::path_;

TEST_F(EncoderEmbedAll, EncoderTokensAddSpecialsAndTruncate) {
  auto tok = load_tokenizer_from_gguf(path_);
  ASSERT_TRUE(tok) << tok.error().to_string();
  const SpecialTokenIds& s = (*tok)->special_ids();
  const std::vector<int32_t> hello = encoder_tokens(**tok, "hello world");
  ASSERT_GE(hello.size(), 3u);
  EXPECT_EQ(hello.front(), s.cls);
  EXPECT_EQ(hello.back(), s.sep);
  std::string text;
  for (int i = 0; i < 50; ++i) text += "hello world ";
  const std::vector<int32_t> full = encoder_tokens(**tok, text);
  ASSERT_GT(full.size(), 20u);
  const std::vector<int32_t> cut = encoder_tokens(**tok, text, 20);
  ASSERT_EQ(cut.size(), 20u);
  EXPECT_EQ(std::vector<int32_t>(cut.begin(), cut.end() - 1), std::vector<int32_t>(full.begin(), full.begin() + 19));
  EXPECT_EQ(cut.back(), s.sep);
}

TEST_F(EncoderEmbedAll, BatchesInInputOrderEqualEachAlone) {
  EncoderLoadOptions lo;
  lo.threads = 2;
  auto model = EncoderModel::load(path_, lo);
  ASSERT_TRUE(model) << model.error().to_string();
  std::vector<std::vector<int32_t>> seqs;
  for (int n : {5, 70, 1, 33, 9, 128, 12}) {
    std::vector<int32_t> s;
    for (int i = 0; i < n; ++i) s.push_back(static_cast<int32_t>(3 + (n * 37 + i * 11) % 1000));
    seqs.push_back(std::move(s));
  }
  EmbedOptions o;
  o.pooling = Pooling::Mean;
  o.normalize = true;
  o.max_batch = 3;  // runs of 2, 2, 2, 1 (powers of two)
  int interrupts = 0;
  o.interrupt = [&] {
    ++interrupts;
    return Status();
  };
  auto all = (*model)->embed_all(seqs, o);
  ASSERT_TRUE(all) << all.error().to_string();
  ASSERT_EQ(all->size(), seqs.size());
  EXPECT_EQ(interrupts, 4);
  for (size_t i = 0; i < seqs.size(); ++i) {
    auto alone = (*model)->embed(std::vector<std::vector<int32_t>>{seqs[i]}, Pooling::Mean, true);
    ASSERT_TRUE(alone);
    ASSERT_EQ((*all)[i].size(), 128u);
    for (size_t d = 0; d < 128; ++d) EXPECT_NEAR((*all)[i][d], (*alone)[0][d], 1e-5f) << i << "," << d;
  }
  o.dimensions = 8;
  auto short_ones = (*model)->embed_all(seqs, o);
  ASSERT_TRUE(short_ones);
  std::vector<float> want((*all)[3].begin(), (*all)[3].begin() + 8);
  l2_normalize(want);
  for (size_t d = 0; d < 8; ++d) EXPECT_NEAR((*short_ones)[3][d], want[d], 1e-6f);
  // An interrupt stops it with its error; bad options are refused.
  o.interrupt = [] { return Status(Error::invalid_argument("interrupted")); };
  auto stopped = (*model)->embed_all(seqs, o);
  ASSERT_FALSE(stopped);
  EXPECT_EQ(stopped.error().message(), "interrupted");
  o.interrupt = nullptr;
  o.pooling = Pooling::None;
  EXPECT_FALSE((*model)->embed_all(seqs, o));
  o.pooling = Pooling::Cls;
  o.max_batch = 0;
  EXPECT_FALSE((*model)->embed_all(seqs, o));
  o.max_batch = 4;
  o.dimensions = 129;
  EXPECT_FALSE((*model)->embed_all(seqs, o));
}

}  // namespace
}  // namespace rlx::models
