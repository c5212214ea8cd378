// Unit tests on tiny hand-built vocabularies of each kind: byte fallback, merges by
// score vs by rank, pre-tokenizer splits, WordPiece normalisation, special tokens,
// streaming UTF-8 decode, hostile input and the errors bad vocabularies give.
#include <gtest/gtest.h>

#include <chrono>

#include "models/tokenizer/tokenizer_impl.h"
#include "models/tokenizer/unicode_util.h"
#include "rlx/models/tokenizer.h"
#include "tokenizers/tokenizer_test_util.h"

namespace rlx {
namespace {

using test::kSp;
using test::make;

int32_t id_of(const Tokenizer& t, const std::string& text) {
  auto id = t.token_id(text);
  EXPECT_TRUE(id.has_value()) << "no token '" << text << "'";
  return id.value_or(-1);
}

// SentencePiece vocabulary: <unk> <s> </s>, 256 byte tokens, then scored pieces.
VocabSpec spm_spec(const std::vector<std::pair<std::string, float>>& pieces) {
  VocabSpec s;
  s.model = "llama";
  s.source = "tiny-spm";
  s.tokens = {"<unk>", "<s>", "</s>"};
  s.token_types = {TokenType::kUnknown, TokenType::kControl, TokenType::kControl};
  for (int b = 0; b < 256; ++b) {
    s.tokens.push_back(fmt::format("<0x{:02X}>", b));
    s.token_types.push_back(TokenType::kByte);
  }
  s.scores.assign(s.tokens.size(), 0.0f);
  for (const auto& [text, score] : pieces) {
    s.tokens.push_back(text);
    s.scores.push_back(score);
    s.token_types.push_back(TokenType::kNormal);
  }
  s.ids = {.bos = 1, .eos = 2, .unk = 0};
  return s;
}

VocabSpec default_spm() {
  return spm_spec({{kSp, -1}, {"a", -2}, {"b", -2}, {"c", -2}, {"ab", -3}, {"bc", -1.5f}, {kSp + "a", -1.2f},
                   {kSp + "bc", -1.1f}, {"h", -2}, {"i", -2}, {"hi", -1}});
}

// Byte-level vocabulary: the 256 byte symbols plus merged tokens, merges in order.
VocabSpec bpe_spec(const std::vector<std::string>& merges, const std::string& pre = "gpt-2") {
  VocabSpec s;
  s.model = "gpt2";
  s.pre = pre;
  s.source = "tiny-bpe";
  const auto& map = tok::byte_level_map();
  for (int b = 0; b < 256; ++b) s.tokens.push_back(map.byte_to_utf8[b]);
  for (const std::string& m : merges) {
    const size_t sp = m.find(' ', 1);
    const std::string joined = m.substr(0, sp) + m.substr(sp + 1);
    if (std::find(s.tokens.begin(), s.tokens.end(), joined) == s.tokens.end()) s.tokens.push_back(joined);
  }
  s.merges = merges;
  s.tokens.push_back("<|endoftext|>");
  s.token_types.assign(s.tokens.size(), TokenType::kNormal);
  s.token_types.back() = TokenType::kControl;
  s.ids.bos = s.ids.eos = static_cast<int32_t>(s.tokens.size()) - 1;
  return s;
}

std::vector<std::string> pieces(const Tokenizer& t, const std::vector<int32_t>& ids) {
  std::vector<std::string> out;
  for (int32_t id : ids) out.emplace_back(t.token_text(id));
  return out;
}

using Strings = std::vector<std::string>;

// ---------------------------------------------------------------- SentencePiece

TEST(SentencePiece, MergesByScoreWithDummyPrefix) {
  auto t = make(default_spm());
  ASSERT_TRUE(t);
  // "▁abc": ▁a (-1.2) vs bc (-1.5) vs ab (-3): ▁a first, then bc; ▁bc never forms.
  EXPECT_EQ(pieces(*t, t->encode("abc", false)), (Strings{kSp + "a", "bc"}));
  // No dummy prefix in front of a space-less start when add_space_prefix is off.
  VocabSpec s = default_spm();
  s.add_space_prefix = false;
  auto u = make(s);
  EXPECT_EQ(pieces(*u, u->encode("abc", false)), (Strings{"a", "bc"}));
  EXPECT_EQ(pieces(*u, u->encode(" bc", false)), (Strings{kSp + "bc"}));
}

TEST(SentencePiece, ByteFallbackAndRoundTrip) {
  auto t = make(default_spm());
  ASSERT_TRUE(t);
  const std::string text = "hi \xC3\xA9!";  // "hi é!"
  const std::vector<int32_t> ids = t->encode(text, false);
  EXPECT_EQ(pieces(*t, ids), (Strings{kSp, "hi", kSp, "<0xC3>", "<0xA9>", "<0x21>"}));
  EXPECT_EQ(*t->decode(ids), text);
  // Invalid UTF-8 goes through byte fallback byte by byte and comes back exactly.
  const std::string bad = "a\xFF\xC3";
  const std::vector<int32_t> bad_ids = t->encode(bad, false);
  EXPECT_EQ(pieces(*t, bad_ids), (Strings{kSp + "a", "<0xFF>", "<0xC3>"}));
  EXPECT_EQ(*t->decode(bad_ids), bad);
}

TEST(SentencePiece, AddsBosAndHandlesEmptyInput) {
  auto t = make(default_spm());
  ASSERT_TRUE(t);
  EXPECT_TRUE(t->add_bos());
  EXPECT_FALSE(t->add_eos());
  EXPECT_EQ(t->encode("", true), (std::vector<int32_t>{1}));
  EXPECT_TRUE(t->encode("", false).empty());
  const std::vector<int32_t> ids = t->encode("hi", true);
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids.front(), 1);
  EXPECT_EQ(*t->decode(ids, /*render_special=*/false), "hi");
  EXPECT_EQ(*t->decode(ids, /*render_special=*/true), "<s> hi");
}

TEST(SentencePiece, RankedMergesWhenTheVocabularyListsThem) {
  VocabSpec s = default_spm();
  s.merges = {"a b", "b c"};  // rank beats score: ab (rank 0) before bc
  s.add_space_prefix = false;
  auto t = make(s);
  ASSERT_TRUE(t);
  EXPECT_EQ(pieces(*t, t->encode("abc", false)), (Strings{"ab", "c"}));
}

TEST(SentencePiece, PiecesSpanningWordsStillMerge) {
  // A piece with ▁ after another character turns off the per-word fast path.
  VocabSpec s = default_spm();
  s.tokens.push_back("c" + kSp);
  s.scores.push_back(0.0f);
  s.token_types.push_back(TokenType::kNormal);
  s.add_space_prefix = false;
  auto t = make(s);
  ASSERT_TRUE(t);
  EXPECT_EQ(pieces(*t, t->encode("abc abc", false)), (Strings{"ab", "c" + kSp, "a", "bc"}));
}

TEST(SentencePiece, LongInputEncodesAndRoundTrips) {
  auto t = make(default_spm());
  ASSERT_TRUE(t);
  std::string text;
  for (int i = 0; i < 100000; ++i) text += "abc ";
  const std::vector<int32_t> ids = t->encode(text, false);
  EXPECT_EQ(ids.size(), 200001u);  // ▁a bc per word, then the trailing ▁
  EXPECT_EQ(*t->decode(ids), text);
}

// ---------------------------------------------------------------- byte-level BPE

TEST(ByteLevelBpe, MergesByRank) {
  auto first_bc = make(bpe_spec({"b c", "a b", "a bc"}));
  auto first_ab = make(bpe_spec({"a b", "b c", "ab c"}));
  ASSERT_TRUE(first_bc && first_ab);
  EXPECT_EQ(pieces(*first_bc, first_bc->encode("abc", false)), (Strings{"abc"}));
  EXPECT_EQ(pieces(*first_ab, first_ab->encode("abc", false)), (Strings{"abc"}));
  // Without the final merge the order of the first two decides the split.
  auto bc_only = make(bpe_spec({"b c", "a b"}));
  auto ab_only = make(bpe_spec({"a b", "b c"}));
  EXPECT_EQ(pieces(*bc_only, bc_only->encode("abc", false)), (Strings{"a", "bc"}));
  EXPECT_EQ(pieces(*ab_only, ab_only->encode("abc", false)), (Strings{"ab", "c"}));
}

TEST(ByteLevelBpe, MapsBytesAndRoundTripsAnyInput) {
  auto t = make(bpe_spec({"\xC4\xA0 a"}));  // "Ġ a": space + a
  ASSERT_TRUE(t);
  EXPECT_EQ(pieces(*t, t->encode("a a", false)), (Strings{"a", "\xC4\xA0" "a"}));
  const std::string text = "Grüße, 世界! \t\n";
  EXPECT_EQ(*t->decode(t->encode(text, false)), text);
  // Invalid UTF-8 becomes U+FFFD, as in the reference implementations.
  EXPECT_EQ(*t->decode(t->encode("x\xFFy", false)), "x\xEF\xBF\xBDy");
  EXPECT_TRUE(t->encode("", true).empty());  // gpt2 adds no BOS by default
}

TEST(ByteLevelBpe, VeryLongWordIsNearLinear) {
  // One 200k-letter word: the priority-queue merge must not go quadratic.
  std::vector<std::string> merges = {"a a", "aa aa", "aaaa aaaa"};
  auto t = make(bpe_spec(merges));
  ASSERT_TRUE(t);
  const std::string text(200000, 'a');
  const std::vector<int32_t> ids = t->encode(text, false);
  EXPECT_EQ(ids.size(), 200000u / 8);
  EXPECT_EQ(*t->decode(ids), text);
}

TEST(ByteLevelBpe, IgnoreMergesTakesWholeWords) {
  VocabSpec s = bpe_spec({"a b", "b c"});
  s.tokens.push_back("abc");
  s.token_types.push_back(TokenType::kNormal);
  s.ignore_merges = true;
  auto t = make(s);
  ASSERT_TRUE(t);
  EXPECT_EQ(pieces(*t, t->encode("abc", false)), (Strings{"abc"}));
}

// Words of the pre-tokenizer `pre` for `text`.
Strings split(const std::string& pre, const std::string& text) {
  auto regexes = tok::pre_tokenizer_regexes(pre);
  EXPECT_TRUE(regexes.has_value());
  auto splitter = tok::RegexSplitter::create(*regexes);
  EXPECT_TRUE(splitter.has_value());
  const std::vector<char32_t> cps = tok::utf8_to_cps(text);
  std::vector<std::pair<uint32_t, uint32_t>> words;
  (*splitter)->split(cps, words);
  Strings out;
  for (const auto& [b, e] : words) {
    std::string w;
    for (uint32_t i = b; i < e; ++i) tok::append_utf8(w, cps[i]);
    out.push_back(w);
  }
  return out;
}

TEST(PreTokenizer, Gpt2Splits) {
  EXPECT_EQ(split("gpt-2", "Hello world123 ,!! 你好\n\n  x"),
            (Strings{"Hello", " world", "123", " ,!!", " 你好", "\n\n ", " x"}));
  EXPECT_EQ(split("gpt-2", "I'm can't привет мир"), (Strings{"I", "'m", " can", "'t", " привет", " мир"}));
  EXPECT_EQ(split("gpt-2", "a\xC2\xA0" "b"), (Strings{"a", "\xC2\xA0", "b"}));  // NBSP is white space
}

TEST(PreTokenizer, Llama3Splits) {
  EXPECT_EQ(split("llama-bpe", "Hello world12345 ,!! 你好\n\n  x"),
            (Strings{"Hello", " world", "123", "45", " ,!!", " 你好", "\n\n", " ", " x"}));
  EXPECT_EQ(split("llama-bpe", "I'M ok"), (Strings{"I", "'M", " ok"}));
}

TEST(PreTokenizer, FamilySpecificDigitAndPunctuationRules) {
  EXPECT_EQ(split("qwen2", "ab123"), (Strings{"ab", "1", "2", "3"}));
  EXPECT_EQ(split("starcoder", " 42x"), (Strings{" ", "4", "2", "x"}));
  EXPECT_EQ(split("falcon", "x 1234567"), (Strings{"x", " ", "123", "456", "7"}));
  EXPECT_EQ(split("deepseek-coder", "ab 12;"), (Strings{"ab", " ", "1", "2", ";"}));
  EXPECT_FALSE(tok::pre_tokenizer_regexes("no-such-pre").has_value());
}

// ---------------------------------------------------------------- WordPiece

VocabSpec wordpiece_spec() {
  VocabSpec s;
  s.model = "bert";
  s.source = "tiny-bert";
  s.tokens = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "hello", "##lo", "hel", "world", ",", "!",
              "un",    "##aff", "##able", "中",  "cafe", "a"};
  s.token_types.assign(s.tokens.size(), TokenType::kNormal);
  for (int i = 0; i < 4; ++i) s.token_types[i] = TokenType::kControl;
  s.wordpiece_max_chars_per_word = 10;
  return s;
}

TEST(WordPiece, BasicTokenizationAndGreedyLongestMatch) {
  auto t = make(wordpiece_spec());
  ASSERT_TRUE(t);
  EXPECT_EQ(pieces(*t, t->encode("Hello, UNAFFABLE world!", false)),
            (Strings{"hello", ",", "un", "##aff", "##able", "world", "!"}));
  EXPECT_EQ(pieces(*t, t->encode("Café\t中国", false)), (Strings{"cafe", "中", "[UNK]"}));
  EXPECT_EQ(pieces(*t, t->encode("helx aaaaaaaaaaa", false)), (Strings{"[UNK]", "[UNK]"}));
  EXPECT_EQ(pieces(*t, t->encode("hello", true)), (Strings{"[CLS]", "hello", "[SEP]"}));
  EXPECT_EQ(*t->decode(t->encode("Hello, unaffable world", false)), "hello , unaffable world");
  EXPECT_TRUE(t->encode("\xFF\x01 \t", false).empty());  // invalid byte and control chars vanish
}

TEST(WordPiece, GgufSpellingWithWordStartMarker) {
  VocabSpec s = wordpiece_spec();
  for (size_t i = 4; i < s.tokens.size(); ++i) {
    std::string& tkn = s.tokens[i];
    tkn = tkn.starts_with("##") ? tkn.substr(2) : kSp + tkn;
  }
  s.wordpiece_word_prefix = kSp;
  s.wordpiece_continuing_prefix = "";
  auto t = make(s);
  ASSERT_TRUE(t);
  EXPECT_EQ(pieces(*t, t->encode("unaffable hello", false)),
            (Strings{kSp + "un", "aff", "able", kSp + "hello"}));
}

// ---------------------------------------------------------------- special tokens

TEST(SpecialTokens, ControlOnlyWhenParsedUserDefinedAlways) {
  VocabSpec s = default_spm();
  s.tokens.push_back("<|user|>");
  s.scores.push_back(0);
  s.token_types.push_back(TokenType::kUserDefined);
  auto t = make(s);
  ASSERT_TRUE(t);
  const int32_t user = id_of(*t, "<|user|>");
  const std::vector<int32_t> parsed = t->encode("<s>hi", false, /*parse_special=*/true);
  ASSERT_FALSE(parsed.empty());
  EXPECT_EQ(parsed.front(), 1);
  EXPECT_EQ(pieces(*t, parsed), (Strings{"<s>", kSp, "hi"}));  // text after a special gets the prefix
  const std::vector<int32_t> plain = t->encode("<s>hi", false, /*parse_special=*/false);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 1), 0);
  EXPECT_EQ(*t->decode(plain), "<s>hi");
  const std::vector<int32_t> u = t->encode("hi<|user|>hi", false, false);
  EXPECT_EQ(std::count(u.begin(), u.end(), user), 1);
  EXPECT_TRUE(t->is_special(user));
  EXPECT_TRUE(t->is_end_of_generation(2));
  EXPECT_EQ(t->token_to_piece(2, false), "");
  EXPECT_EQ(t->token_to_piece(2, true), "</s>");
}

TEST(SpecialTokens, LongestMatchWins) {
  VocabSpec s = bpe_spec({});
  for (const char* sp : {"<|a|>", "<|a|>x"}) {
    s.tokens.push_back(sp);
    s.token_types.push_back(TokenType::kControl);
  }
  auto t = make(s);
  ASSERT_TRUE(t);
  const std::vector<int32_t> ids = t->encode("<|a|>x<|a|>", false, true);
  EXPECT_EQ(pieces(*t, ids), (Strings{"<|a|>x", "<|a|>"}));
}

// A control token is not matched without parse_special, but a user-defined one of the
// same spelling is (the lower id of each kind wins).
TEST(SpecialTokens, SameSpellingTwoKinds) {
  VocabSpec s = bpe_spec({});
  for (TokenType type : {TokenType::kControl, TokenType::kUserDefined}) {
    s.tokens.push_back("<|x|>");
    s.token_types.push_back(type);
  }
  auto t = make(s);
  ASSERT_TRUE(t);
  const auto control = static_cast<int32_t>(s.tokens.size() - 2), user = control + 1;
  EXPECT_EQ(t->encode("<|x|>", false, true), std::vector<int32_t>{control});
  EXPECT_EQ(t->encode("<|x|>", false, false), std::vector<int32_t>{user});
}

// 3,000 specials that share their first bytes over a 200 KB prompt: finding them walks
// a trie, once per position, instead of trying every special (prompt x specials, which
// took over 20 s). Not a speed test: the bound only catches that hang.
TEST(SpecialTokens, ManySharedPrefixesOverALongPrompt) {
  VocabSpec s = bpe_spec({});
  const auto first = static_cast<int32_t>(s.tokens.size());
  for (int i = 0; i < 3000; ++i) {
    s.tokens.push_back(fmt::format("<|special_{}|>", i));
    s.token_types.push_back(TokenType::kControl);
  }
  auto t = make(s);
  ASSERT_TRUE(t);
  std::string text;
  while (text.size() < 200000) text += "<|special_1"  // a prefix of 111 specials, never one
                                       "<|special_2999|>";
  const auto start = std::chrono::steady_clock::now();
  const std::vector<int32_t> ids = t->encode(text, false, true);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(std::count(ids.begin(), ids.end(), first + 2999), static_cast<long>(text.size() / 27));
  EXPECT_EQ(*t->decode(ids, true), text);
  EXPECT_LT(seconds, 60.0);
}

// ---------------------------------------------------------------- streaming decode

TEST(StreamDecoder, EmitsOnlyCompleteUtf8) {
  auto t = make(default_spm());
  ASSERT_TRUE(t);
  const std::string text = "hi \xE2\x82\xAC\xC3\xA9";  // "hi €é", all multi-byte chars via bytes
  const std::vector<int32_t> ids = t->encode(text, true);
  StreamDecoder dec(*t);
  std::string all;
  std::vector<std::string> chunks;
  for (int32_t id : ids) {
    auto out = dec.push(id);
    ASSERT_TRUE(out.has_value());
    chunks.push_back(*out);
    all += *out;
  }
  all += dec.flush();
  EXPECT_EQ(all, "hi \xE2\x82\xAC\xC3\xA9");
  // The three byte tokens of € produce nothing, nothing, then the whole character.
  const size_t n = chunks.size();
  ASSERT_GE(n, 5u);
  EXPECT_EQ(chunks[n - 5], "");
  EXPECT_EQ(chunks[n - 4], "");
  EXPECT_EQ(chunks[n - 3], "\xE2\x82\xAC");
  EXPECT_EQ(chunks[n - 2], "");
  EXPECT_EQ(chunks[n - 1], "\xC3\xA9");
}

TEST(StreamDecoder, ReplacesBytesThatCannotFormCharacters) {
  auto t = make(default_spm());
  ASSERT_TRUE(t);
  const int32_t ff = id_of(*t, "<0xFF>"), e2 = id_of(*t, "<0xE2>"), a = id_of(*t, "a");
  StreamDecoder dec(*t);
  EXPECT_EQ(*dec.push(ff), "\xEF\xBF\xBD");
  EXPECT_EQ(*dec.push(e2), "");
  EXPECT_EQ(*dec.push(a), "\xEF\xBF\xBD" "a");  // E2 followed by 'a' can never complete
  EXPECT_EQ(*dec.push(e2), "");
  EXPECT_EQ(dec.flush(), "\xEF\xBF\xBD");
  EXPECT_FALSE(dec.push(1 << 20).has_value());
}

// ---------------------------------------------------------------- errors

void expect_error(const VocabSpec& s, const std::string& needle) {
  auto t = make_tokenizer(s);
  ASSERT_FALSE(t.has_value()) << "expected an error mentioning '" << needle << "'";
  EXPECT_NE(t.error().message().find(needle), std::string::npos) << t.error().message();
}

TEST(VocabErrors, InconsistentFieldsAreRejected) {
  VocabSpec s = default_spm();
  s.scores.pop_back();
  expect_error(s, "scores has");
  s = default_spm();
  s.token_types[5] = static_cast<TokenType>(9);
  expect_error(s, "token type 9");
  s = default_spm();
  s.ids.eos = 100000;
  expect_error(s, "eos token id 100000");
  s = default_spm();
  s.model = "rwkv";
  expect_error(s, "'rwkv' is not supported");
  s = default_spm();
  s.tokens.clear();
  s.scores.clear();
  s.token_types.clear();
  expect_error(s, "no tokens");
  s = default_spm();
  s.ids.bos = -1;
  expect_error(s, "no bos token id");
  s = bpe_spec({"a b"});
  s.merges.push_back("a zz");
  expect_error(s, "merge 1 ('a zz') names 'zz'");
  s = bpe_spec({"a b"});
  s.merges.push_back("ab");
  expect_error(s, "not of the form");
  s = bpe_spec({}, "no-such-pre");
  expect_error(s, "unknown pre-tokenizer 'no-such-pre'");
  s = bpe_spec({});
  s.pre_regexes = {"(unclosed"};
  expect_error(s, "does not compile");
  s = wordpiece_spec();
  s.tokens[1] = "[NOPE]";
  expect_error(s, "unknown token");
}

TEST(VocabErrors, DecodeRejectsOutOfRangeIds) {
  auto t = make(default_spm());
  ASSERT_TRUE(t);
  const std::vector<int32_t> ids = {5, -3};
  auto text = t->decode(ids);
  ASSERT_FALSE(text.has_value());
  EXPECT_NE(text.error().message().find("token id -3 (position 1)"), std::string::npos);
  EXPECT_EQ(t->token_to_piece(-1), "");
}

TEST(VocabErrors, MissingGgufFile) {
  auto v = vocab_from_gguf(std::string("/nonexistent/vocab.gguf"));
  ASSERT_FALSE(v.has_value());
  EXPECT_NE(v.error().message().find("/nonexistent/vocab.gguf"), std::string::npos);
}

// ---------------------------------------------------------------- tokenizer.json

TEST(HfTokenizerJson, ByteLevelBpe) {
  const std::string json = R"({
    "added_tokens": [{"id": 5, "content": "<|endoftext|>", "special": true}],
    "normalizer": null,
    "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
    "post_processor": {"type": "ByteLevel"},
    "decoder": {"type": "ByteLevel"},
    "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2, "Ġ": 3, "Ġab": 4},
              "merges": ["a b", ["Ġ", "ab"]]}
  })";
  auto spec = vocab_from_hf_tokenizer_json_text(json, "tiny.json");
  ASSERT_TRUE(spec.has_value()) << spec.error().to_string();
  EXPECT_EQ(spec->model, "gpt2");
  EXPECT_EQ(spec->token_types[5], TokenType::kControl);
  auto t = make(*spec);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->encode("ab ab<|endoftext|>", true, true), (std::vector<int32_t>{2, 4, 5}));
}

TEST(HfTokenizerJson, WordPieceWithBertProcessing) {
  const std::string json = R"({
    "normalizer": {"type": "BertNormalizer", "lowercase": true, "strip_accents": null},
    "pre_tokenizer": {"type": "BertPreTokenizer"},
    "post_processor": {"type": "BertProcessing", "sep": ["[SEP]", 3], "cls": ["[CLS]", 2]},
    "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
              "max_input_chars_per_word": 100,
              "vocab": {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "hel": 4, "##lo": 5}}
  })";
  auto spec = vocab_from_hf_tokenizer_json_text(json, "bert.json");
  ASSERT_TRUE(spec.has_value()) << spec.error().to_string();
  auto t = make(*spec);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->encode("HÉLLO x", true), (std::vector<int32_t>{2, 4, 5, 1, 3}));
}

TEST(HfTokenizerJson, ErrorsNameTheProblem) {
  auto bad = vocab_from_hf_tokenizer_json_text("{not json", "x.json");
  ASSERT_FALSE(bad.has_value());
  EXPECT_NE(bad.error().message().find("x.json: not valid JSON"), std::string::npos);
  auto wl = vocab_from_hf_tokenizer_json_text(R"({"model": {"type": "WordLevel", "vocab": {}}})", "w.json");
  ASSERT_FALSE(wl.has_value());
  EXPECT_NE(wl.error().message().find("'WordLevel' is not supported"), std::string::npos);
  auto gap = vocab_from_hf_tokenizer_json_text(R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 2}}})", "g.json");
  ASSERT_FALSE(gap.has_value());
  EXPECT_NE(gap.error().message().find("outside"), std::string::npos);
}

// Sequence components nested 30,000 levels: refused by the depth budget before any reader
// recurses (each level used to recurse and copy its subtree).
TEST(HfTokenizerJson, RejectsDeepNesting) {
  for (const char* key : {"normalizer", "pre_tokenizer", "post_processor"}) {
    const char* list = std::string_view(key) == "normalizer"      ? "normalizers"
                       : std::string_view(key) == "pre_tokenizer" ? "pretokenizers"
                                                                  : "processors";
    std::string nested;
    const int levels = 30000;
    for (int i = 0; i < levels; ++i) nested += std::string(R"({"type": "Sequence", ")") + list + R"(": [)";
    nested += "null";
    for (int i = 0; i < levels; ++i) nested += "]}";
    const std::string json = std::string(R"({")") + key + R"(": )" + nested +
                             R"(, "model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}})";
    auto spec = vocab_from_hf_tokenizer_json_text(json, "deep.json");
    ASSERT_FALSE(spec.has_value()) << key;
    EXPECT_NE(spec.error().message().find("deep.json: JSON nests deeper than 128 levels"), std::string::npos)
        << spec.error().message();
  }
  // Brackets inside strings do not count.
  const std::string in_string = R"({"normalizer": {"type": "Replace", "content": ")" + std::string(500, '[') +
                                R"("}, "model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}})";
  auto ok = vocab_from_hf_tokenizer_json_text(in_string, "brackets.json");
  EXPECT_TRUE(ok.has_value()) << ok.error().to_string();
}

TEST(HfTokenizerJson, RejectsPostProcessorIdsOutOfRange) {
  const std::string json = R"({"post_processor": {"type": "BertProcessing", "sep": ["[SEP]", 3],
    "cls": ["[CLS]", 4294967300]}, "model": {"type": "WordPiece", "unk_token": "[UNK]",
    "vocab": {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "[X]": 4}}})";
  auto spec = vocab_from_hf_tokenizer_json_text(json, "bert.json");
  ASSERT_FALSE(spec.has_value());
  EXPECT_NE(spec.error().message().find("post_processor 'cls' id 4294967300 is not a token id"), std::string::npos)
      << spec.error().message();
}

// A pattern with exponential backtracking on a 40-character input: ICU's time limit
// stops it (the rest of the piece stays whole) instead of hanging for hours.
TEST(RegexSplitter, CatastrophicBacktrackingIsCut) {
  auto splitter = tok::RegexSplitter::create({"(a|aa)+$"});
  ASSERT_TRUE(splitter.has_value()) << splitter.error().to_string();
  std::vector<char32_t> cps(40, U'a');
  cps.push_back(U'b');
  std::vector<std::pair<uint32_t, uint32_t>> words;
  const auto start = std::chrono::steady_clock::now();
  testing::internal::CaptureStderr();
  (*splitter)->split(cps, words);
  const std::string err = testing::internal::GetCapturedStderr();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 20.0);
  EXPECT_NE(err.find("ran past its time limit"), std::string::npos) << err;
  ASSERT_FALSE(words.empty());
  EXPECT_EQ(words.back().second, cps.size());  // every code point still covered
}

}  // namespace
}  // namespace rlx

namespace rlx {
namespace {

// write_vocab_to_gguf then vocab_from_gguf: every kind of vocabulary tokenizes as before.
TEST(GgufVocabWriter, RoundTripsEveryKind) {
  VocabSpec bpe = bpe_spec({"h e", "l l", "he ll", "o w"});
  bpe.pre.clear();
  ASSERT_TRUE(tok::pre_tokenizer_regexes("gpt-2").has_value());
  bpe.pre_regexes = *tok::pre_tokenizer_regexes("gpt-2");  // as tokenizer.json gives them
  VocabSpec bert = wordpiece_spec();
  bert.ids = {.unk = 1, .sep = 3, .cls = 2};
  const VocabSpec specs[] = {default_spm(), bpe, bert};
  const std::string text = "hello world, unaffable caf\xC3\xA9 hi abc!";
  for (const VocabSpec& spec : specs) {
    SCOPED_TRACE(spec.model);
    formats::GgufWriter w;
    ASSERT_TRUE(write_vocab_to_gguf(spec, w).ok());
    auto image = w.to_bytes();
    ASSERT_TRUE(image.has_value());
    auto file = formats::GgufFile::parse(*image, "vocab.gguf");
    ASSERT_TRUE(file.has_value()) << file.error().to_string();
    auto back = vocab_from_gguf(*file);
    ASSERT_TRUE(back.has_value()) << back.error().to_string();
    auto a = make(spec), b = make(*back);
    ASSERT_TRUE(a && b);
    EXPECT_EQ(a->encode(text, true), b->encode(text, true));
    EXPECT_EQ(a->n_tokens(), b->n_tokens());
  }
  // A byte-level BPE whose regexes have no GGUF name cannot be written.
  VocabSpec odd = bpe;
  odd.pre_regexes = {"[a-z]+"};
  formats::GgufWriter w;
  const Status s = write_vocab_to_gguf(odd, w);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message().find("no named GGUF pre-tokenizer"), std::string::npos) << s.error().to_string();
}

}  // namespace
}  // namespace rlx
