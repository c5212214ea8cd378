// Self-contained model tests on synthetic tiny models of each family (written by
// write_synthetic_gguf into a temp folder): batch vs incremental logits, padded vs
// unpadded prefill, f16 KV cache close to f32, context overflow errors, sampling
// determinism, and quantized copies staying close to the f32 model.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <tuple>
#include <vector>

#include "rlx/formats/gguf.h"
#include "rlx/models/generate.h"
#include "rlx/models/language_model.h"
#include "rlx/models/quantize.h"
#include "rlx/models/synth.h"
#include "rlx/models/text_stream.h"
#include "rlx/models/tokenizer.h"

namespace rlx::models {
namespace {

namespace fs = std::filesystem;

std::string synth_model(const std::string& arch, const std::string& type) {
  const fs::path dir = fs::temp_directory_path() / "rlx_models_test";
  fs::create_directories(dir);
  const fs::path path = dir / (arch + "-tiny-" + type + ".gguf");
  if (!fs::exists(path)) {
    SynthOptions o;
    o.arch = arch;
    o.type = type;
    o.seed = 7;
    if (arch == "qwen35") o.preset = "qwen35-tiny";  // the hybrid: delta-net and gated attention layers
    Status s = write_synthetic_gguf(o, path.string());
    EXPECT_TRUE(s.ok()) << s.error().to_string();
  }
  return path.string();
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double m = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) m = std::max(m, double(std::fabs(a[i] - b[i])));
  return m;
}

const std::vector<int32_t> kTokens = {1, 40, 300, 77, 12, 499, 260, 8, 100, 33, 5};

class FamilyTest : public ::testing::TestWithParam<std::string> {};

TEST_P(FamilyTest, BatchAndIncrementalLogitsAgree) {
  LoadOptions lo;
  lo.ctx = 64;
  lo.threads = 2;
  auto m = LanguageModel::load(synth_model(GetParam(), "f32"), lo);
  ASSERT_TRUE(m) << m.error().to_string();
  auto batch = (*m)->forward(kTokens, true);
  ASSERT_TRUE(batch) << batch.error().to_string();
  (*m)->reset();
  std::vector<float> inc;
  for (int32_t t : kTokens) {
    auto r = (*m)->forward(std::span<const int32_t>(&t, 1), true);
    ASSERT_TRUE(r) << r.error().to_string();
    inc.insert(inc.end(), r->begin(), r->end());
  }
  EXPECT_LT(max_abs_diff(*batch, inc), 1e-4);
  // Last-row logits equal the last row of the full output.
  (*m)->reset();
  auto last = (*m)->forward(kTokens, false);
  ASSERT_TRUE(last);
  const std::vector<float> tail(batch->end() - static_cast<std::ptrdiff_t>(last->size()), batch->end());
  EXPECT_LT(max_abs_diff(*last, tail), 1e-5);
}

// A family's f32 synthetic model loaded twice: one sequence, and `batch` sequences
// (context 64, prefill buckets from 4).
std::pair<Expected<std::unique_ptr<LanguageModel>>, Expected<std::unique_ptr<LanguageModel>>> solo_and_batched(
    const std::string& family, int64_t batch) {
  LoadOptions one;
  one.ctx = 64;
  one.threads = 2;
  one.min_bucket = 4;
  LoadOptions many = one;
  many.batch = batch;
  return {LanguageModel::load(synth_model(family, "f32"), one), LanguageModel::load(synth_model(family, "f32"), many)};
}

// Three sequences of different lengths prefilled in one batched run, then decode steps
// where one sequence sits idle, equal each sequence run alone in an unbatched model.
TEST_P(FamilyTest, BatchedSequencesEqualSeparateRuns) {
  auto [solo, many] = solo_and_batched(GetParam(), 3);
  ASSERT_TRUE(solo && many) << (solo ? many.error().to_string() : solo.error().to_string());
  const std::vector<std::vector<int32_t>> prompts = {
      {1, 40, 300, 77, 12}, {9, 8}, {1, 40, 300, 77, 12, 499, 260, 8, 100, 33, 5}};
  // Steps after the prompt: sequence 1 is idle in step 1 (no token).
  const std::vector<std::vector<std::vector<int32_t>>> steps = {{{7}, {3}, {11}}, {{15}, {}, {2}}, {{4}, {6}, {9}}};
  std::vector<std::vector<std::vector<float>>> want(3);  // [seq][call] logits, all rows
  for (size_t b = 0; b < 3; ++b) {
    (*solo)->reset();
    auto r = (*solo)->forward(prompts[b], true);
    ASSERT_TRUE(r) << r.error().to_string();
    want[b].push_back(*r);
    for (const auto& step : steps) {
      if (step[b].empty()) {
        want[b].emplace_back();
        continue;
      }
      auto d = (*solo)->forward(step[b], true);
      ASSERT_TRUE(d) << d.error().to_string();
      want[b].push_back(*d);
    }
  }
  auto got = (*many)->forward_batch(prompts, true);
  ASSERT_TRUE(got) << got.error().to_string();
  for (size_t b = 0; b < 3; ++b) EXPECT_LT(max_abs_diff((*got)[b], want[b][0]), 1e-4) << "prefill, sequence " << b;
  for (size_t k = 0; k < steps.size(); ++k) {
    auto d = (*many)->forward_batch(steps[k], true);
    ASSERT_TRUE(d) << d.error().to_string();
    for (size_t b = 0; b < 3; ++b) EXPECT_LT(max_abs_diff((*d)[b], want[b][k + 1]), 1e-4) << "step " << k << " seq " << b;
  }
  EXPECT_EQ((*many)->n_past(0), 8);
  EXPECT_EQ((*many)->n_past(1), 4);
  EXPECT_EQ((*many)->n_past(2), 14);
  // Last-row logits of a batched run are each sequence's last row.
  (*many)->reset();
  auto last = (*many)->forward_batch(prompts, false);
  ASSERT_TRUE(last) << last.error().to_string();
  for (size_t b = 0; b < 3; ++b) {
    const auto& full = want[b][0];
    const std::vector<float> tail(full.end() - static_cast<std::ptrdiff_t>((*last)[b].size()), full.end());
    EXPECT_LT(max_abs_diff((*last)[b], tail), 1e-4) << "sequence " << b;
  }
}

// A run covers only the sequences up to the last one given tokens, in buckets of 1, 4,
// 16, ... capped at the batch, over the front of the stacked caches: runs over 1, 4 and
// all 6 sequences in a changing order equal each sequence run alone, and leave the
// others untouched.
TEST_P(FamilyTest, RunsOverTheFirstSequencesEqualSeparateRuns) {
  auto [solo, many] = solo_and_batched(GetParam(), 6);
  ASSERT_TRUE(solo && many) << (solo ? many.error().to_string() : solo.error().to_string());
  using Call = std::vector<std::vector<int32_t>>;
  const std::vector<Call> calls = {
      {{1, 40, 300, 77, 12}, {}, {}, {}, {}, {}},  // sequence 0 alone: 1
      {{7}, {9, 8}, {}, {}, {}, {}},               // 0 and 1: the first 4
      {{3}, {4}, {}, {}, {1, 40, 300}, {}},        // up to 4: all 6 (16, capped)
      {{11}, {}, {}, {}, {}, {}},                  // 0 alone again
      {{}, {}, {5, 6, 7}, {2, 2}, {}, {}},         // 2 and 3: the first 4
      {{}, {6}, {}, {}, {}, {8}},                  // 1 and 5: all 6
  };
  const std::vector<int64_t> covered = {1, 4, 6, 1, 4, 6};
  std::vector<std::vector<std::vector<float>>> want(6);  // [seq][call] logits, all rows
  for (size_t b = 0; b < 6; ++b) {
    (*solo)->reset();
    for (const Call& call : calls) {
      if (call[b].empty()) {
        want[b].emplace_back();
        continue;
      }
      auto r = (*solo)->forward(call[b], true);
      ASSERT_TRUE(r) << r.error().to_string();
      want[b].push_back(*r);
    }
  }
  for (size_t k = 0; k < calls.size(); ++k) {
    auto got = (*many)->forward_batch(calls[k], true);
    ASSERT_TRUE(got) << "call " << k << ": " << got.error().to_string();
    EXPECT_EQ((*many)->last_run_sequences(), covered[k]) << "call " << k;
    for (size_t b = 0; b < 6; ++b) {
      ASSERT_EQ((*got)[b].size(), want[b][k].size()) << "call " << k << " sequence " << b;
      if (!want[b][k].empty()) {
        EXPECT_LT(max_abs_diff((*got)[b], want[b][k]), 1e-4) << "call " << k << " sequence " << b;
      }
    }
  }
  EXPECT_EQ((*many)->n_past(0), 8);
  EXPECT_EQ((*many)->n_past(1), 4);
  EXPECT_EQ((*many)->n_past(2), 3);
  EXPECT_EQ((*many)->n_past(3), 2);
  EXPECT_EQ((*many)->n_past(4), 3);
  EXPECT_EQ((*many)->n_past(5), 1);
  // prepare_batch compiles what runs of up to 8 rows use: rows 1, 4 and 8 for 1, 4 and 6
  // sequences, each output kind; afterwards such runs compile nothing.
  ASSERT_TRUE((*many)->prepare_batch(8, false).ok());
  ASSERT_TRUE((*many)->prepare_batch(8, true).ok());
  const int64_t made = (*many)->compile_stats().executables;
  (*many)->reset();
  const Call wide = {{1, 2, 3, 4, 5, 6, 7}, {}, {}, {9}, {}, {}};
  ASSERT_TRUE((*many)->forward_batch(wide, false));
  const Call first_and_last = {{1}, {}, {}, {}, {}, {2, 3}};
  ASSERT_TRUE((*many)->forward_batch_greedy(first_and_last));
  EXPECT_EQ((*many)->compile_stats().executables, made);
}

TEST_P(FamilyTest, PaddedPrefillEqualsUnpadded) {
  const std::string path = synth_model(GetParam(), "f32");
  const std::vector<int32_t> eight(kTokens.begin(), kTokens.begin() + 8);
  LoadOptions exact;
  exact.ctx = 64;
  exact.min_bucket = 8;  // bucket == 8 rows: no padding
  LoadOptions padded = exact;
  padded.min_bucket = 32;  // 24 padded rows, masked by the active extent
  auto a = LanguageModel::load(path, exact);
  auto b = LanguageModel::load(path, padded);
  ASSERT_TRUE(a && b);
  auto la = (*a)->forward(eight, true);
  auto lb = (*b)->forward(eight, true);
  ASSERT_TRUE(la && lb);
  EXPECT_LT(max_abs_diff(*la, *lb), 1e-5);
}

TEST_P(FamilyTest, HalfPrecisionKvCacheStaysClose) {
  const std::string path = synth_model(GetParam(), "f32");
  LoadOptions f32;
  f32.ctx = 64;
  LoadOptions f16 = f32;
  f16.kv_dtype = ir::DType::F16;
  auto a = LanguageModel::load(path, f32);
  auto b = LanguageModel::load(path, f16);
  ASSERT_TRUE(a && b);
  auto la = (*a)->forward(kTokens, true);
  auto lb = (*b)->forward(kTokens, true);
  ASSERT_TRUE(la && lb) << (lb ? "" : lb.error().to_string());
  const double d = max_abs_diff(*la, *lb);
  EXPECT_LT(d, 1e-2);
  EXPECT_GT(d, 0.0);  // the cache really is rounded
}

TEST_P(FamilyTest, QuantizedCopyStaysClose) {
  const std::string f32 = synth_model(GetParam(), "f32");
  const std::string q8 = (fs::temp_directory_path() / "rlx_models_test" / (GetParam() + "-requant-q8_0.gguf")).string();
  QuantizeOptions qo;
  qo.mix = "q8_0";
  ASSERT_TRUE(quantize_gguf(f32, q8, qo).ok());
  auto file = formats::GgufFile::open(q8);
  ASSERT_TRUE(file);
  ASSERT_NE(file->find_tensor("blk.0.ffn_up.weight"), nullptr);  // every family's layer 0 has one
  EXPECT_EQ(file->find_tensor("blk.0.ffn_up.weight")->type, formats::GgmlType::Q8_0);
  EXPECT_EQ(file->find_tensor("blk.0.attn_norm.weight")->type, formats::GgmlType::F32);
  EXPECT_EQ(*file->get_string("tokenizer.ggml.model"), "llama");
  // Its own output re-quantizes (the keys quantize_gguf writes are not copied twice).
  QuantizeOptions again;
  again.mix = "f16";
  Status requant = quantize_gguf(q8, q8 + ".f16.gguf", again);
  EXPECT_TRUE(requant.ok()) << (requant.ok() ? "" : requant.error().to_string());
  LoadOptions lo;
  lo.ctx = 64;
  auto a = LanguageModel::load(f32, lo);
  auto b = LanguageModel::load(q8, lo);
  ASSERT_TRUE(a && b);
  auto la = (*a)->forward(kTokens, true);
  auto lb = (*b)->forward(kTokens, true);
  ASSERT_TRUE(la && lb);
  double sq = 0;
  for (float v : *la) sq += double(v) * v;
  const double rms = std::sqrt(sq / la->size());
  EXPECT_LT(max_abs_diff(*la, *lb), 0.1 * rms + 1e-3);
}

// Models in the i-quant and ternary mixes run through DequantMatMul's integer loops: their
// logits match those of the same weights decoded to f32 up to the Q8 rounding of the
// activations (the decoders are checked against the format and the integer loops against
// a llama.cpp-emulating reference in the kernel tests).
// The logits of GGUF `q` (a mix whose products round the activations: Q8 blocks, bf16)
// against its weights decoded to f32 (written next to it): within the bound of
// QuantizedCopyStaysClose.
void expect_mix_matches_decoded(const std::string& q, const std::vector<int32_t>& tokens) {
  const std::string back = q + ".f32.gguf";
  QuantizeOptions qo;
  qo.mix = "f32";
  ASSERT_TRUE(quantize_gguf(q, back, qo).ok());
  LoadOptions lo;
  lo.ctx = 64;
  auto a = LanguageModel::load(q, lo);
  auto b = LanguageModel::load(back, lo);
  ASSERT_TRUE(a && b);
  auto la = (*a)->forward(tokens, true);
  auto lb = (*b)->forward(tokens, true);
  ASSERT_TRUE(la && lb) << (la ? "" : la.error().to_string());
  double sq = 0;
  for (float v : *lb) sq += double(v) * v;
  const double rms = std::sqrt(sq / static_cast<double>(lb->size()));
  EXPECT_GT(rms, 0.0);
  EXPECT_LT(max_abs_diff(*la, *lb), 0.1 * rms + 1e-3);
}

TEST(LanguageModel, IQuantAndTernaryMixesMatchTheirDecodedWeights) {
  const fs::path dir = fs::temp_directory_path() / "rlx_models_test";
  fs::create_directories(dir);
  const std::string f32 = (dir / "tiny-256-f32.gguf").string();
  SynthOptions so;
  so.preset = "tiny-256";
  so.type = "f32";
  so.seed = 11;
  ASSERT_TRUE(write_synthetic_gguf(so, f32).ok());
  for (const char* mix : {"iq4_xs", "iq4_nl", "tq2_0", "tq1_0"}) {
    SCOPED_TRACE(mix);
    const std::string q = (dir / fmt::format("tiny-256-{}.gguf", mix)).string();
    QuantizeOptions qo;
    qo.mix = mix;
    ASSERT_TRUE(quantize_gguf(f32, q, qo).ok());
    auto file = formats::GgufFile::open(q);
    ASSERT_TRUE(file);
    const formats::GgmlType want = std::string(mix) == "iq4_xs"   ? formats::GgmlType::IQ4_XS
                                   : std::string(mix) == "iq4_nl" ? formats::GgmlType::IQ4_NL
                                   : std::string(mix) == "tq2_0"  ? formats::GgmlType::TQ2_0
                                                                  : formats::GgmlType::TQ1_0;
    EXPECT_EQ(file->find_tensor("blk.0.ffn_down.weight")->type, want);
    EXPECT_EQ(file->find_tensor("token_embd.weight")->type, formats::GgmlType::Q6_K);  // tied output
    expect_mix_matches_decoded(q, kTokens);
  }
}

// The bf16 mix: every matrix in BF16, read as such; a prompt of 16+ tokens puts its
// matmuls on the BF16 dot products where the CPU has them (x rounded to bf16 there, so
// the bound is the quantized mixes' one), else on the f32 loops.
TEST(LanguageModel, Bf16MixMatchesItsDecodedWeights) {
  const fs::path dir = fs::temp_directory_path() / "rlx_models_test";
  fs::create_directories(dir);
  const std::string f32 = (dir / "tiny-bf16-src.gguf").string(), q = (dir / "tiny-bf16.gguf").string();
  SynthOptions so;
  so.preset = "tiny";
  so.type = "f32";
  so.seed = 12;
  ASSERT_TRUE(write_synthetic_gguf(so, f32).ok());
  QuantizeOptions qo;
  qo.mix = "bf16";
  ASSERT_TRUE(quantize_gguf(f32, q, qo).ok());
  auto file = formats::GgufFile::open(q);
  ASSERT_TRUE(file);
  EXPECT_EQ(file->find_tensor("blk.0.ffn_down.weight")->type, formats::GgmlType::BF16);
  EXPECT_EQ(file->find_tensor("blk.0.attn_q.weight")->type, formats::GgmlType::BF16);
  std::vector<int32_t> tokens;
  for (int i = 0; i < 24; ++i) tokens.push_back((kTokens[static_cast<size_t>(i) % kTokens.size()] + i) % 256 + 1);
  expect_mix_matches_decoded(q, tokens);
}

// A server's mixed step (one token for each decoding stream, a chunk for a newcomer)
// run on compact rows (the products over the real rows only) gives the logits and picks
// of the same step padded, and the compact executable is the one that ran. Models with
// recurrent layers stay padded (no compact executable is made).
TEST_P(FamilyTest, CompactRowsEqualPaddedRuns) {
  LoadOptions lo;
  lo.ctx = 64;
  lo.threads = 2;
  lo.min_bucket = 4;
  lo.batch = 6;
  std::vector<std::string> made;
  LoadOptions compact = lo, padded = lo;
  padded.compact_rows = false;
  compact.on_compile = [&](const std::string& what) { made.push_back(what); };
  auto c = LanguageModel::load(synth_model(GetParam(), "f32"), compact);
  auto p = LanguageModel::load(synth_model(GetParam(), "f32"), padded);
  ASSERT_TRUE(c && p) << (c ? p.error().to_string() : c.error().to_string());
  using Call = std::vector<std::vector<int32_t>>;
  const std::vector<Call> calls = {
      {{1, 40, 300}, {9, 8}, {77}, {12, 499, 260, 8}, {5}, {100}},       // prompts of different lengths
      {{7}, {3}, {}, {11}, {4}, {1, 40, 300, 77, 12, 499, 260, 8, 100}},  // decode + a 9-token chunk
      {{2}, {6}, {5}, {}, {8}, {33}},                                     // decode only (one row)
      {{}, {}, {1, 2, 3, 4, 5, 6, 7}, {}, {9}, {}},                       // a chunk beside one stream
  };
  for (size_t k = 0; k < calls.size(); ++k) {
    auto want = (*p)->forward_batch(calls[k], true);
    auto got = (*c)->forward_batch(calls[k], true);
    ASSERT_TRUE(want && got) << (want ? got.error().to_string() : want.error().to_string());
    for (size_t b = 0; b < calls[k].size(); ++b) {
      ASSERT_EQ((*got)[b].size(), (*want)[b].size()) << "call " << k << " sequence " << b;
      EXPECT_LT(max_abs_diff((*got)[b], (*want)[b]), 1e-5) << "call " << k << " sequence " << b;
    }
  }
  // Greedy picks of a mixed step from the last rows.
  const Call mixed = {{4}, {4}, {4}, {4, 5, 6, 7, 8, 9}, {4}, {4}};
  auto want = (*p)->forward_batch_greedy(mixed);
  auto got = (*c)->forward_batch_greedy(mixed);
  ASSERT_TRUE(want && got) << (want ? got.error().to_string() : want.error().to_string());
  EXPECT_EQ(*got, *want);
  for (int64_t b = 0; b < 6; ++b) EXPECT_EQ((*c)->n_past(b), (*p)->n_past(b)) << b;
  const auto compact_made = std::count_if(made.begin(), made.end(), [](const std::string& w) {
    return w.find(" real)") != std::string::npos;
  });
  if (GetParam() == "qwen35") {
    EXPECT_EQ(compact_made, 0);
  } else {
    // calls 1 and 3 (all rows) and the greedy step; call 0 fills half its 24 padded rows
    EXPECT_GE(compact_made, 3);
  }
}

INSTANTIATE_TEST_SUITE_P(Families, FamilyTest, ::testing::Values("llama", "qwen3", "gemma2", "qwen35"),
                         [](const auto& info) { return info.param; });

TEST(LanguageModel, ContextOverflowIsAnError) {
  LoadOptions lo;
  lo.ctx = 8;
  auto m = LanguageModel::load(synth_model("llama", "f32"), lo);
  ASSERT_TRUE(m);
  auto r = (*m)->forward(kTokens, false);  // 11 tokens > 8
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message().find("context overflow"), std::string::npos);
  const int32_t bad = 100000;
  auto r2 = (*m)->forward(std::span<const int32_t>(&bad, 1), false);
  ASSERT_FALSE(r2);
  EXPECT_NE(r2.error().message().find("outside the vocabulary"), std::string::npos);
}

TEST(LanguageModel, MissingFileAndBadOptionsAreErrors) {
  auto m = LanguageModel::load("/nonexistent/model.gguf", LoadOptions{});
  ASSERT_FALSE(m);
  LoadOptions lo;
  lo.ctx = 0;
  EXPECT_FALSE(LanguageModel::load(synth_model("llama", "f32"), lo));
  LoadOptions chunk;
  chunk.max_chunk = -1;  // (0 is the device's default)
  auto bad_chunk = LanguageModel::load(synth_model("llama", "f32"), chunk);
  ASSERT_FALSE(bad_chunk);
  EXPECT_NE(bad_chunk.error().message().find("max_chunk"), std::string::npos);
}

// One sequence through both entry points: a 5-token forward leaves its executable's
// active extent at 5 of 16 rows; a 10-token forward_batch in the same bucket must compute
// all 10 (found in review: it once ran on the stale extent).
TEST(LanguageModel, ForwardBatchAfterForwardOnOneSequence) {
  LoadOptions lo;
  lo.ctx = 64;
  lo.threads = 2;
  const std::string path = synth_model("llama", "f32");
  auto mixed = LanguageModel::load(path, lo);
  auto plain = LanguageModel::load(path, lo);
  ASSERT_TRUE(mixed && plain);
  const std::vector<int32_t> first = {1, 40, 300, 77, 12}, second = {9, 8, 7, 6, 5, 4, 3, 2, 11, 10};
  ASSERT_TRUE((*mixed)->forward(first, true));
  ASSERT_TRUE((*plain)->forward(first, true));
  const std::vector<std::vector<int32_t>> batch = {second};
  auto got = (*mixed)->forward_batch(batch, true);
  auto want = (*plain)->forward(second, true);
  ASSERT_TRUE(got && want);
  EXPECT_LT(max_abs_diff((*got)[0], *want), 1e-4);
}

TEST(LanguageModel, BatchedCallsCheckTheirInputs) {
  LoadOptions lo;
  lo.ctx = 8;
  lo.batch = 2;
  lo.min_bucket = 4;
  auto m = LanguageModel::load(synth_model("llama", "f32"), lo);
  ASSERT_TRUE(m) << m.error().to_string();
  const std::vector<int32_t> one{1};
  EXPECT_NE((*m)->forward(one, false).error().message().find("forward_batch"), std::string::npos);
  const std::vector<std::vector<int32_t>> wrong_count{{1}};
  EXPECT_NE((*m)->forward_batch(wrong_count, false).error().message().find("1 token lists"), std::string::npos);
  const std::vector<std::vector<int32_t>> none{{}, {}};
  EXPECT_NE((*m)->forward_batch(none, false).error().message().find("no tokens"), std::string::npos);
  const std::vector<std::vector<int32_t>> too_long{{1, 2, 3, 4, 5, 6, 7, 8, 9}, {1}};
  EXPECT_NE((*m)->forward_batch(too_long, false).error().message().find("sequence 0"), std::string::npos);
  // Sequence 0 holds 7 tokens; a 3-row run for sequence 1 would write past the cache
  // of sequence 0 (which gets no tokens but still pads): a clear error, nothing run.
  const std::vector<std::vector<int32_t>> seven{{1, 2, 3, 4, 5, 6, 7}, {1}};
  ASSERT_TRUE((*m)->forward_batch(seven, false));
  const std::vector<std::vector<int32_t>> three{{}, {1, 2, 3}};
  auto r = (*m)->forward_batch(three, false);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message().find("sequence 0 has 7 cached tokens"), std::string::npos) << r.error().message();
  EXPECT_EQ((*m)->n_past(1), 1);
  // A full sequence that sits out a run of 4 rows has that run's padding written over
  // its cache rows 4..7: it may then keep 4 tokens, not more.
  (*m)->reset();
  const std::vector<std::vector<int32_t>> fill{{1, 2, 3, 4, 5, 6, 7, 8}, {}};
  ASSERT_TRUE((*m)->forward_batch(fill, false));
  ASSERT_TRUE((*m)->forward_batch(three, false));
  const Status keep6 = (*m)->truncate(0, 6);
  ASSERT_FALSE(keep6.ok());
  EXPECT_NE(keep6.error().message().find("can keep at most 4 tokens"), std::string::npos) << keep6.error().message();
  EXPECT_TRUE((*m)->truncate(0, 4).ok());
  // Rows written again after that truncate are the sequence's own: no limit.
  const std::vector<std::vector<int32_t>> refill{{9, 9, 9, 9}, {}};
  ASSERT_TRUE((*m)->forward_batch(refill, false));
  EXPECT_TRUE((*m)->truncate(0, 6).ok());
  LoadOptions bad = lo;
  bad.batch = 0;
  EXPECT_FALSE(LanguageModel::load(synth_model("llama", "f32"), bad));
}

// The device-side argmax of a batched run picks, per sequence, the host argmax of the
// same run's logits; a sequence given no tokens gets kNoBatchToken and its position
// does not move.
TEST(LanguageModel, BatchedGreedyPicksEachSequencesArgmax) {
  for (const char* family : {"llama", "qwen35"}) {
    SCOPED_TRACE(family);
    LoadOptions lo;
    lo.ctx = 32;
    lo.batch = 3;
    lo.min_bucket = 4;
    auto logits = LanguageModel::load(synth_model(family, "f32"), lo);
    auto greedy = LanguageModel::load(synth_model(family, "f32"), lo);
    ASSERT_TRUE(logits && greedy) << (logits ? greedy.error().to_string() : logits.error().to_string());
    std::vector<std::vector<int32_t>> in{{5, 9, 2}, {7}, {3, 3, 8, 1, 4}};
    for (int step = 0; step < 4; ++step) {
      auto l = (*logits)->forward_batch(in, false);
      auto g = (*greedy)->forward_batch_greedy(in);
      ASSERT_TRUE(l && g) << (l ? g.error().to_string() : l.error().to_string());
      ASSERT_EQ(g->size(), 3u);
      for (size_t b = 0; b < 3; ++b) {
        if (in[b].empty()) {
          EXPECT_EQ((*g)[b], kNoBatchToken);
          EXPECT_EQ((*greedy)->n_past(static_cast<int64_t>(b)), (*logits)->n_past(static_cast<int64_t>(b)));
          continue;
        }
        EXPECT_EQ((*g)[b], argmax((*l)[b])) << "step " << step << ", sequence " << b;
        in[b] = {(*g)[b]};
      }
      if (step == 1) in[1].clear();  // sequence 1 sits out a step
    }
  }
}

TEST(Generate, BatchedGenerationEqualsSeparateRuns) {
  const std::string path = synth_model("llama", "f32");
  auto tok = load_tokenizer_from_gguf(path);
  ASSERT_TRUE(tok) << tok.error().to_string();
  LoadOptions lo;
  lo.ctx = 96;
  auto solo = LanguageModel::load(path, lo);
  lo.batch = 2;
  auto pair = LanguageModel::load(path, lo);
  ASSERT_TRUE(solo && pair);
  GenerateOptions go;
  go.max_tokens = 10;
  go.stop_at_eos = false;
  go.sampling.temperature = 0.8f;
  go.sampling.seed = 42;
  const std::vector<std::vector<int32_t>> prompts = {(*tok)->encode("Once upon a time", true, false),
                                                     (*tok)->encode("The cat", true, false)};
  auto both = generate_batch(**pair, **tok, prompts, go);
  ASSERT_TRUE(both) << both.error().to_string();
  for (size_t b = 0; b < 2; ++b) {
    auto alone = generate(**solo, **tok, prompts[b], go, nullptr);
    ASSERT_TRUE(alone) << alone.error().to_string();
    EXPECT_EQ((*both)[b].tokens, alone->tokens) << "sequence " << b;
    EXPECT_EQ((*both)[b].text, alone->text) << "sequence " << b;
  }
}

// forward_greedy (the argmax taken by the executable, one token copied back) picks what
// the host's argmax of forward's logits picks, at every step of a prefill split into
// chunks and the decode steps after it; and it leaves the cache as forward does.
TEST_P(FamilyTest, GreedyTokenOnDeviceEqualsHostArgmax) {
  LoadOptions lo;
  lo.ctx = 64;
  lo.threads = 2;
  lo.max_chunk = 4;  // the 11-token prompt runs as 4 + 4 + 3
  auto a = LanguageModel::load(synth_model(GetParam(), "q8_0"), lo);
  auto b = LanguageModel::load(synth_model(GetParam(), "q8_0"), lo);
  ASSERT_TRUE(a && b);
  auto logits = (*a)->forward(kTokens, false);
  auto picked = (*b)->forward_greedy(kTokens);
  ASSERT_TRUE(logits && picked) << (logits ? picked.error().to_string() : logits.error().to_string());
  for (int step = 0; step < 6; ++step) {
    const int32_t host = argmax(*logits);
    ASSERT_EQ(*picked, host) << "step " << step;
    EXPECT_EQ((*a)->n_past(), (*b)->n_past());
    logits = (*a)->forward(std::span<const int32_t>(&host, 1), false);
    picked = (*b)->forward_greedy(std::span<const int32_t>(&host, 1));
    ASSERT_TRUE(logits && picked);
  }
  // The same checks as forward.
  (*b)->reset();
  EXPECT_FALSE((*b)->forward_greedy({}).has_value());
  const int32_t bad = 1 << 30;
  auto err = (*b)->forward_greedy(std::span<const int32_t>(&bad, 1));
  ASSERT_FALSE(err.has_value());
  EXPECT_NE(err.error().to_string().find("outside the vocabulary"), std::string::npos) << err.error().to_string();
}

// The synthetic f32 llama and its tokenizer, loaded with a KV cache of `ctx` tokens
// (null members, with the failure reported, when either does not load).
struct TinyLlama {
  std::unique_ptr<Tokenizer> tok;
  std::unique_ptr<LanguageModel> model;
};
TinyLlama tiny_llama(int64_t ctx) {
  const std::string path = synth_model("llama", "f32");
  auto tok = load_tokenizer_from_gguf(path);
  EXPECT_TRUE(tok) << tok.error().to_string();
  LoadOptions lo;
  lo.ctx = ctx;
  auto m = LanguageModel::load(path, lo);
  EXPECT_TRUE(m) << m.error().to_string();
  if (!tok || !m) return {};
  return TinyLlama{std::move(*tok), std::move(*m)};
}

// Greedy generation without penalties takes the token from the executable; with a
// repetition penalty of 1 it must give exactly what host sampling of the logits gives
// (a presence penalty of 0 also keeps the device path, a tiny one forces the host path).
TEST(Generate, GreedyOnDeviceEqualsHostSampling) {
  const TinyLlama t = tiny_llama(96);
  ASSERT_TRUE(t.tok && t.model);
  const auto prompt = t.tok->encode("Once upon a time", true, false);
  GenerateOptions go;
  go.max_tokens = 16;
  go.stop_at_eos = false;
  auto device = generate(*t.model, *t.tok, prompt, go, nullptr);
  go.sampling.presence_penalty = 1e-30f;  // host path, same picks unless a tie is broken by it
  auto host = generate(*t.model, *t.tok, prompt, go, nullptr);
  ASSERT_TRUE(device && host);
  EXPECT_EQ(device->tokens, host->tokens);
  EXPECT_EQ(device->tokens.size(), 16u);
}

// A model whose output turns NaN (here a NaN in output_norm.weight, as a broken file
// would have): generation stops with an error naming the position, on the path that
// picks the token inside the executable (which reports its row's logit sum) and on the
// host path, instead of printing tokens picked from NaN.
TEST(Generate, NonFiniteLogitsAreAnError) {
  const fs::path src = synth_model("llama", "f32");
  const fs::path path = fs::temp_directory_path() / "rlx_models_test" / "llama-tiny-f32-nan.gguf";
  fs::copy_file(src, path, fs::copy_options::overwrite_existing);
  uint64_t at = 0;
  {
    auto file = formats::GgufFile::open(path.string());
    ASSERT_TRUE(file) << file.error().to_string();
    const formats::GgufTensor* norm = file->find_tensor("output_norm.weight");
    ASSERT_NE(norm, nullptr);
    ASSERT_EQ(norm->type, formats::GgmlType::F32);
    at = file->data_offset() + norm->offset + 4 * 3;  // its fourth value
  }
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    const float nan = std::nanf("");
    f.seekp(static_cast<std::streamoff>(at));
    f.write(reinterpret_cast<const char*>(&nan), sizeof nan);
    ASSERT_TRUE(f.good());
  }
  auto tok = load_tokenizer_from_gguf(path.string());
  ASSERT_TRUE(tok) << tok.error().to_string();
  LoadOptions lo;
  lo.ctx = 64;
  lo.compile_cache = false;
  auto m = LanguageModel::load(path.string(), lo);
  ASSERT_TRUE(m) << m.error().to_string();
  const auto prompt = (*tok)->encode("Once upon a time", true, false);
  GenerateOptions go;
  go.max_tokens = 4;
  for (const bool host : {false, true}) {
    go.sampling.presence_penalty = host ? 1e-30f : 0.0f;  // a penalty moves the pick to the host
    auto r = generate(**m, **tok, prompt, go, nullptr);
    ASSERT_FALSE(r) << (host ? "host" : "device") << " path generated " << r->tokens.size() << " tokens";
    EXPECT_NE(r.error().message().find(fmt::format("logits at position {} are not finite", prompt.size() - 1)),
              std::string::npos)
        << r.error().to_string();
  }
  fs::remove(path);
}

// A model may have more output rows than its tokenizer has tokens (Hugging Face
// checkpoints pad the embedding): such an id adds no text to a stream instead of failing
// the generation; a negative id is still an error.
TEST(Generate, IdsPastTheTokenizerHaveNoText) {
  auto tok = load_tokenizer_from_gguf(synth_model("llama", "f32"));
  ASSERT_TRUE(tok) << tok.error().to_string();
  TextStream text(**tok, {});
  bool stopped = false;
  const int32_t past = (*tok)->n_tokens() + 5;
  auto piece = text.push(past, &stopped);
  ASSERT_TRUE(piece) << piece.error().to_string();
  EXPECT_EQ(*piece, "");
  EXPECT_FALSE(stopped);
  EXPECT_FALSE(text.push(-1, &stopped));
}

// GenerateResult::stop says why a generation ended: the token limit, a stop string (not
// emitted), or a full context.
TEST(Generate, StopReasons) {
  const TinyLlama t = tiny_llama(96);
  ASSERT_TRUE(t.tok && t.model);
  const auto prompt = t.tok->encode("Once upon a time", true, false);
  GenerateOptions go;
  go.max_tokens = 12;
  go.stop_at_eos = false;
  auto full = generate(*t.model, *t.tok, prompt, go, nullptr);
  ASSERT_TRUE(full) << full.error().to_string();
  EXPECT_EQ(full->stop, StopReason::kLength);
  EXPECT_EQ(full->tokens.size(), 12u);
  EXPECT_STREQ(stop_reason_name(full->stop), "length");
  ASSERT_GE(full->text.size(), 4u);
  go.stop = {full->text.substr(full->text.size() / 2, 2)};  // two characters from the middle
  auto stopped = generate(*t.model, *t.tok, prompt, go, nullptr);
  ASSERT_TRUE(stopped) << stopped.error().to_string();
  EXPECT_EQ(stopped->stop, StopReason::kStopString);
  EXPECT_EQ(stopped->text.find(go.stop[0]), std::string::npos) << stopped->text;
  go.stop.clear();
  const TinyLlama small = tiny_llama(static_cast<int64_t>(prompt.size()) + 3);
  ASSERT_TRUE(small.tok && small.model);
  auto filled = generate(*small.model, *small.tok, prompt, go, nullptr);
  ASSERT_TRUE(filled) << filled.error().to_string();
  EXPECT_EQ(filled->stop, StopReason::kContextFull);
  EXPECT_LT(filled->tokens.size(), 12u);
}

// Sampling without penalties and with top-k on takes the token from the executable's
// `sample` op, with the sampler's draws: the same tokens as host sampling of the logits
// (a presence penalty of 1e-30 forces the host path and changes no logit).
TEST(Generate, SampledOnDeviceEqualsHostSampling) {
  const TinyLlama t = tiny_llama(96);
  ASSERT_TRUE(t.tok && t.model);
  const auto prompt = t.tok->encode("Once upon a time", true, false);
  size_t executables = 0;
  for (const SamplingOptions& so : {SamplingOptions{1.0f, 40, 1.0f, 0.0f},
                                    SamplingOptions{0.7f, 20, 0.9f, 0.05f}}) {
    GenerateOptions go;
    go.max_tokens = 24;
    go.stop_at_eos = false;
    go.sampling = so;
    go.sampling.seed = 77;
    go.sampling.presence_penalty = 1e-30f;
    auto host = generate(*t.model, *t.tok, prompt, go, nullptr);
    const size_t after_host = t.model->compiled_executables();
    go.sampling.presence_penalty = 0.0f;
    auto device = generate(*t.model, *t.tok, prompt, go, nullptr);
    ASSERT_TRUE(device && host);
    if (executables == 0) {  // the device path ran: it compiled its own (sample op) executables
      EXPECT_GT(t.model->compiled_executables(), after_host);
      executables = t.model->compiled_executables();
    } else {  // the filter is run-time data: the same executables serve the second one
      EXPECT_EQ(t.model->compiled_executables(), executables);
    }
    EXPECT_EQ(device->tokens, host->tokens) << "temperature " << so.temperature;
    EXPECT_EQ(device->tokens.size(), 24u);
  }
}

TEST(LanguageModel, ForwardSampleChecksItsArguments) {
  const TinyLlama t = tiny_llama(32);
  ASSERT_TRUE(t.model);
  const int32_t tok = 1;
  auto err = [&](TokenFilter f, double draw) {
    auto r = t.model->forward_sample(std::span<const int32_t>(&tok, 1), f, draw);
    return r ? std::string("ok") : r.error().to_string();
  };
  EXPECT_NE(err(TokenFilter{1.0, 0, 1.0, 0.0}, 0.5).find("top_k must be in [1, 1024]"), std::string::npos);
  EXPECT_NE(err(TokenFilter{0.0, 4, 1.0, 0.0}, 0.5).find("temperature must be > 0"), std::string::npos);
  EXPECT_NE(err(TokenFilter{1.0, 4, 1.5, 0.0}, 0.5).find("top_p must be in (0, 1]"), std::string::npos);
  EXPECT_NE(err(TokenFilter{1.0, 4, 1.0, 0.0}, 1.0).find("draw must be in [0, 1)"), std::string::npos);
  EXPECT_EQ(t.model->n_past(), 0);  // nothing ran
  EXPECT_EQ(err(TokenFilter{1.0, 1, 1.0, 0.0}, 0.5), "ok");
}

TEST(Generate, SameSeedSameText) {
  const TinyLlama t = tiny_llama(128);
  ASSERT_TRUE(t.tok && t.model);
  auto& tok = t.tok;
  auto& m = t.model;
  GenerateOptions go;
  go.max_tokens = 12;
  go.stop_at_eos = false;
  go.sampling.temperature = 0.9f;
  go.sampling.top_k = 40;
  go.sampling.seed = 1234;
  const auto prompt = tok->encode("Once upon a time", true, false);
  auto a = generate(*m, *tok, prompt, go, nullptr);
  auto b = generate(*m, *tok, prompt, go, nullptr);
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->tokens, b->tokens);
  EXPECT_EQ(a->text, b->text);
  EXPECT_EQ(a->tokens.size(), 12u);
  go.sampling.seed = 99;
  auto c = generate(*m, *tok, prompt, go, nullptr);
  ASSERT_TRUE(c);
  EXPECT_NE(a->tokens, c->tokens);
}

TEST(Generate, InterruptCheckEndsGenerationWithItsError) {
  const TinyLlama t = tiny_llama(128);
  ASSERT_TRUE(t.tok && t.model);
  GenerateOptions go;
  go.max_tokens = 12;
  go.stop_at_eos = false;
  int checks = 0;
  go.interrupt_check = [&checks]() -> Status {
    if (++checks == 3) return Error::invalid_argument("interrupted by the caller");
    return {};
  };
  const auto prompt = t.tok->encode("Once upon a time", true, false);
  auto r = generate(*t.model, *t.tok, prompt, go, nullptr);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().message(), "interrupted by the caller");
  EXPECT_EQ(checks, 3);  // one check after each of the three sampled tokens
  EXPECT_EQ(t.model->n_past(), static_cast<int64_t>(prompt.size()) + 2);
  go.interrupt_check = [] { return Status{}; };
  auto full = generate(*t.model, *t.tok, prompt, go, nullptr);
  ASSERT_TRUE(full) << full.error().to_string();
  EXPECT_EQ(full->tokens.size(), 12u);
}

TEST(QuantMix, StandardRules) {
  using formats::GgmlType;
  EXPECT_EQ(*mix_weight_type("q4_k_m", "blk.5.attn_q.weight", 2048, 2048, 5, 16, true), GgmlType::Q4_K);
  EXPECT_EQ(*mix_weight_type("q4_k_m", "blk.0.attn_v.weight", 512, 2048, 0, 16, true), GgmlType::Q6_K);
  EXPECT_EQ(*mix_weight_type("q4_k_m", "blk.15.ffn_down.weight", 2048, 8192, 15, 16, true), GgmlType::Q6_K);
  EXPECT_EQ(*mix_weight_type("q4_k_m", "blk.3.ffn_down.weight", 2048, 8192, 3, 16, true), GgmlType::Q4_K);
  EXPECT_EQ(*mix_weight_type("q4_k_m", "token_embd.weight", 32000, 2048, -1, 16, true), GgmlType::Q6_K);
  EXPECT_EQ(*mix_weight_type("q4_k_m", "blk.0.ffn_down.weight", 64, 172, 0, 5, true), GgmlType::F16);
  EXPECT_EQ(*mix_weight_type("q8_0", "blk.0.attn_norm.weight", 1, 2048, 0, 16, true), GgmlType::F32);
  EXPECT_EQ(*mix_weight_type("q5_k_m", "blk.4.attn_k.weight", 512, 2048, 4, 16, true), GgmlType::Q5_K);
  // The mixes after llama-quantize's per-tensor rules (a dense model, n_head_kv = n_head).
  EXPECT_EQ(*mix_weight_type("q4_0", "blk.5.attn_q.weight", 2048, 2048, 5, 16, false), GgmlType::Q4_0);
  EXPECT_EQ(*mix_weight_type("q4_0", "output.weight", 32000, 2048, -1, 16, false), GgmlType::Q6_K);
  EXPECT_EQ(*mix_weight_type("q4_0", "token_embd.weight", 32000, 2048, -1, 16, false), GgmlType::Q4_0);
  EXPECT_EQ(*mix_weight_type("q5_1", "blk.0.ffn_up.weight", 8192, 2048, 0, 16, false), GgmlType::Q5_1);
  EXPECT_EQ(*mix_weight_type("q2_k", "blk.3.attn_v.weight", 512, 2048, 3, 16, false), GgmlType::Q3_K);
  EXPECT_EQ(*mix_weight_type("q2_k", "blk.3.attn_output.weight", 2048, 2048, 3, 16, false), GgmlType::Q3_K);
  EXPECT_EQ(*mix_weight_type("q2_k", "blk.3.ffn_gate.weight", 8192, 2048, 3, 16, false), GgmlType::Q2_K);
  EXPECT_EQ(*mix_weight_type("q3_k_s", "blk.3.attn_v.weight", 512, 2048, 3, 16, false), GgmlType::Q3_K);
  EXPECT_EQ(*mix_weight_type("q3_k_m", "blk.1.attn_v.weight", 512, 2048, 1, 32, false), GgmlType::Q5_K);
  EXPECT_EQ(*mix_weight_type("q3_k_m", "blk.2.attn_v.weight", 512, 2048, 2, 32, false), GgmlType::Q4_K);
  EXPECT_EQ(*mix_weight_type("q3_k_m", "blk.1.ffn_down.weight", 2048, 8192, 1, 32, false), GgmlType::Q5_K);
  EXPECT_EQ(*mix_weight_type("q3_k_m", "blk.2.ffn_down.weight", 2048, 8192, 2, 32, false), GgmlType::Q4_K);
  EXPECT_EQ(*mix_weight_type("q3_k_m", "blk.9.attn_output.weight", 2048, 2048, 9, 32, false), GgmlType::Q4_K);
  EXPECT_EQ(*mix_weight_type("q3_k_m", "blk.9.attn_q.weight", 2048, 2048, 9, 32, false), GgmlType::Q3_K);
  EXPECT_EQ(*mix_weight_type("q3_k_l", "blk.9.ffn_down.weight", 2048, 8192, 9, 32, false), GgmlType::Q5_K);
  EXPECT_EQ(*mix_weight_type("q4_k_s", "blk.3.attn_v.weight", 512, 2048, 3, 16, false), GgmlType::Q5_K);
  EXPECT_EQ(*mix_weight_type("q4_k_s", "blk.4.attn_v.weight", 512, 2048, 4, 16, false), GgmlType::Q4_K);
  EXPECT_EQ(*mix_weight_type("q4_k_s", "blk.1.ffn_down.weight", 2048, 8192, 1, 16, false), GgmlType::Q5_K);
  EXPECT_EQ(*mix_weight_type("q4_k_s", "blk.2.ffn_down.weight", 2048, 8192, 2, 16, false), GgmlType::Q4_K);
  EXPECT_EQ(*mix_weight_type("q5_k_s", "blk.0.attn_v.weight", 512, 2048, 0, 16, false), GgmlType::Q5_K);
  auto bad = mix_weight_type("q3_x", "w", 2, 256, 0, 1, false);
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message().find("q3_x"), std::string::npos);
}

TEST(QuantMix, FallbackIsNamed) {
  using formats::GgmlType;
  auto c = mix_weight_choice("q4_k_m", "blk.0.attn_q.weight", 64, 64, 0, 2, false);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->wanted, GgmlType::Q4_K);
  EXPECT_EQ(c->type, GgmlType::Q5_0);
  EXPECT_EQ(describe_fallback("blk.0.attn_q.weight", 64, 64, *c),
            "tensor 'blk.0.attn_q.weight' [64, 64]: wanted Q4_K, chose Q5_0 (rows of 64 values are no multiple of "
            "Q4_K's 256-value block)");
  // llama-quantize's table: each wanted type's fallback for rows of whole 32-value blocks.
  const std::vector<std::tuple<const char*, const char*, GgmlType>> table = {
      {"q5_k_s", "blk.0.attn_q.weight", GgmlType::Q5_1},   {"q6_k", "blk.0.attn_q.weight", GgmlType::Q8_0},
      {"q2_k", "blk.0.attn_q.weight", GgmlType::IQ4_NL},   {"q3_k_m", "blk.0.attn_q.weight", GgmlType::IQ4_NL},
      {"iq4_xs", "blk.0.attn_q.weight", GgmlType::IQ4_NL}, {"tq1_0", "blk.0.attn_q.weight", GgmlType::Q4_0},
      {"tq2_0", "blk.0.attn_q.weight", GgmlType::Q4_0},    {"q4_k_m", "output.weight", GgmlType::Q8_0}};
  for (const auto& [mix, name, type] : table) {
    auto f = mix_weight_choice(mix, name, 64, 96, 0, 2, false);
    ASSERT_TRUE(f) << mix;
    EXPECT_EQ(f->type, type) << mix << " " << name;
    EXPECT_TRUE(f->fell_back()) << mix;
  }
  // Rows of no whole 32-value block: F16 for every type.
  auto odd = mix_weight_choice("q4_k_m", "blk.0.attn_q.weight", 64, 100, 0, 2, false);
  ASSERT_TRUE(odd);
  EXPECT_EQ(odd->type, GgmlType::F16);
  auto q8 = mix_weight_choice("q8_0", "blk.0.ffn_down.weight", 64, 172, 0, 2, false);
  ASSERT_TRUE(q8);
  EXPECT_EQ(q8->type, GgmlType::F16);
  EXPECT_TRUE(q8->fell_back());
  auto fits = mix_weight_choice("q6_k", "blk.0.attn_q.weight", 256, 256, 0, 2, false);
  ASSERT_TRUE(fits);
  EXPECT_FALSE(fits->fell_back());
}

}  // namespace
}  // namespace rlx::models
