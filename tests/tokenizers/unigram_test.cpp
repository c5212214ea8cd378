// Unigram (SentencePiece unigram, "t5") on hand-built vocabularies whose best
// segmentations were worked out by hand: Viterbi over piece scores, byte fallback,
// fused unknowns, whitespace options, a precompiled charsmap built here in the
// darts-clone layout, and the same vocabulary read from tokenizer.json and GGUF.
// Also the errors of bad vocabularies and hostile charsmaps.
#include <gtest/gtest.h>

#include <deque>
#include <map>
#include <random>
#include <set>

#include "models/tokenizer/charsmap.h"
#include "rlx/formats/gguf.h"
#include "rlx/formats/gguf_writer.h"
#include "rlx/models/tokenizer.h"
#include "tokenizers/tokenizer_test_util.h"

namespace rlx {
namespace {

using test::kSp;
using test::make;

// Vocabulary with byte fallback: <pad> </s> <unk>, <0x00>..<0xFF> (ids 3..258), pieces.
VocabSpec byte_fallback_spec() {
  VocabSpec s;
  s.model = "t5";
  s.source = "tiny-unigram";
  s.tokens = {"<pad>", "</s>", "<unk>"};
  s.token_types = {TokenType::kControl, TokenType::kControl, TokenType::kUnknown};
  s.scores = {0, 0, 0};
  for (int b = 0; b < 256; ++b) {
    s.tokens.push_back(fmt::format("<0x{:02X}>", b));
    s.token_types.push_back(TokenType::kByte);
    s.scores.push_back(0);
  }
  const std::pair<std::string, float> pieces[] = {
      {kSp, -2.0f},  {kSp + "h", -3.0f}, {kSp + "hello", -6.0f}, {"he", -2.5f}, {"llo", -2.5f},
      {"h", -3.0f},  {"e", -3.0f},       {"l", -3.0f},           {"o", -3.0f},  {kSp + "w", -4.0f},
      {"or", -3.0f}, {"ld", -3.0f},      {"w", -3.5f},           {"d", -3.5f},  {"r", -3.5f}};
  for (const auto& [text, score] : pieces) {
    s.tokens.push_back(text);
    s.token_types.push_back(TokenType::kNormal);
    s.scores.push_back(score);
  }
  s.ids = {.eos = 1, .unk = 2, .pad = 0};
  return s;
}
constexpr int32_t kSpaceId = 259, kSpH = 260, kSpHello = 261, kSpW = 268, kOr = 269, kLd = 270;
constexpr int32_t kByte0 = 3;

TEST(Unigram, ViterbiPicksTheBestScoringSegmentation) {
  auto t = make(byte_fallback_spec());
  ASSERT_TRUE(t);
  EXPECT_EQ(t->kind(), TokenizerKind::kUnigram);
  // "▁hello": whole piece (-6) beats ▁ he llo (-7) and ▁h e llo (-8.5).
  // "▁world": ▁w or ld (-10) beats ▁ w or ld (-11.5).
  EXPECT_EQ(t->encode("hello world"), (std::vector<int32_t>{kSpHello, kSpW, kOr, kLd, 1}));
  EXPECT_EQ(t->encode("hello world", /*add_special=*/false), (std::vector<int32_t>{kSpHello, kSpW, kOr, kLd}));
  EXPECT_FALSE(t->add_bos());
  EXPECT_TRUE(t->add_eos());
  auto text = t->decode(std::vector<int32_t>{kSpHello, kSpW, kOr, kLd, 1}, /*render_special=*/false);
  ASSERT_TRUE(text.has_value());
  EXPECT_EQ(*text, "hello world");
}

TEST(Unigram, ByteFallbackSpellsUncoveredCharacters) {
  auto t = make(byte_fallback_spec());
  ASSERT_TRUE(t);
  // "é" (C3 A9) has no piece: its two byte tokens.
  EXPECT_EQ(t->encode("h\xC3\xA9", false), (std::vector<int32_t>{kSpH, kByte0 + 0xC3, kByte0 + 0xA9}));
  auto text = t->decode(std::vector<int32_t>{kSpH, kByte0 + 0xC3, kByte0 + 0xA9});
  ASSERT_TRUE(text.has_value());
  EXPECT_EQ(*text, "h\xC3\xA9");
  // An invalid byte is normalised to U+FFFD (EF BF BD) first.
  EXPECT_EQ(t->encode("h\xFF", false), (std::vector<int32_t>{kSpH, kByte0 + 0xEF, kByte0 + 0xBF, kByte0 + 0xBD}));
  // Turned off: the unknown token instead.
  VocabSpec off = byte_fallback_spec();
  off.byte_fallback = false;
  auto u = make(off);
  ASSERT_TRUE(u);
  EXPECT_EQ(u->encode("h\xC3\xA9", false), (std::vector<int32_t>{kSpH, 2}));
}

TEST(Unigram, WhitespaceOptions) {
  auto t = make(byte_fallback_spec());
  ASSERT_TRUE(t);
  // Extra whitespace removed (the default): leading, trailing and repeated spaces go.
  EXPECT_EQ(t->encode("  hello   world  ", false), t->encode("hello world", false));
  VocabSpec keep = byte_fallback_spec();
  keep.remove_extra_whitespaces = false;
  auto k = make(keep);
  ASSERT_TRUE(k);
  // "▁" (dummy) + "▁▁hello▁▁▁world▁▁".
  EXPECT_EQ(
      k->encode("  hello   world  ", false),
      (std::vector<int32_t>{kSpaceId, kSpaceId, kSpHello, kSpaceId, kSpaceId, kSpW, kOr, kLd, kSpaceId, kSpaceId}));
  VocabSpec no_prefix = byte_fallback_spec();
  no_prefix.add_space_prefix = false;
  auto p = make(no_prefix);
  ASSERT_TRUE(p);
  // "hello▁world": he llo (-5) beats h e llo (-8.5).
  EXPECT_EQ(p->encode("hello world", false), (std::vector<int32_t>{262, 263, kSpW, kOr, kLd}));
  EXPECT_TRUE(t->encode("", false).empty());
  EXPECT_TRUE(t->encode("   ", false).empty());
}

// Builds a darts-clone double array (charsmap.cpp's layout) for `rules`, then the blob.
std::string build_charsmap(const std::map<std::string, std::string>& rules) {
  std::string repl;
  struct Node {
    std::map<uint8_t, int> children;
    int64_t value = -1;
  };
  std::vector<Node> nodes(1);
  for (const auto& [from, to] : rules) {
    int n = 0;
    for (char ch : from) {
      const auto c = static_cast<uint8_t>(ch);
      auto it = nodes[n].children.find(c);
      if (it == nodes[n].children.end()) {
        nodes.push_back({});
        const int child = static_cast<int>(nodes.size()) - 1;
        nodes[n].children[c] = child;
        n = child;
      } else {
        n = it->second;
      }
    }
    nodes[n].value = static_cast<int64_t>(repl.size());
    repl += to;
    repl.push_back('\0');
  }
  std::vector<uint32_t> units(1, 0);
  std::vector<bool> used(1, true);
  auto ensure = [&](size_t i) {
    if (i >= units.size()) {
      units.resize(i + 1, 0);
      used.resize(i + 1, false);
    }
  };
  std::deque<std::pair<int, uint32_t>> queue{{0, 0}};  // (node, unit index)
  std::set<uint32_t> bases;
  while (!queue.empty()) {
    const auto [n, at] = queue.front();
    queue.pop_front();
    const Node& node = nodes[n];
    if (node.children.empty() && node.value < 0) continue;
    uint32_t base = 1;
    for (;; ++base) {
      // Every node gets a base of its own, as darts-clone's builder ensures: a label
      // check then proves which parent a unit belongs to.
      bool ok = !bases.count(base);
      if (node.value >= 0) {
        ensure(base);
        ok = ok && !used[base];
      }
      for (const auto& [c, child] : node.children) {
        ensure(base ^ c);
        ok = ok && !used[base ^ c] && (base ^ c) != 0;
      }
      if (ok) break;
    }
    bases.insert(base);
    units[at] |= (at ^ base) << 10;  // stored relative: children of unit i sit at i ^ offset ^ label
    if (node.value >= 0) {
      units[at] |= 1u << 8;
      used[base] = true;
      units[base] = (1u << 31) | static_cast<uint32_t>(node.value);
    }
    for (const auto& [c, child] : node.children) {
      used[base ^ c] = true;
      units[base ^ c] = c;
      queue.push_back({child, base ^ c});
    }
  }
  std::string blob(4, '\0');
  const uint32_t bytes = static_cast<uint32_t>(units.size() * 4);
  for (int i = 0; i < 4; ++i) blob[i] = static_cast<char>((bytes >> (8 * i)) & 0xFF);
  for (uint32_t u : units)
    for (int i = 0; i < 4; ++i) blob.push_back(static_cast<char>((u >> (8 * i)) & 0xFF));
  return blob + repl;
}

const std::map<std::string, std::string> kRules = {
    {"\xEF\xAC\x81", "fi"},  // ﬁ ligature
    {"\xEF\xBC\xA1", "A"},   // fullwidth Ａ
    {"\t", " "},
    {"\xC2\xA0", " "},  // no-break space
};

// T5-style: no byte tokens (unknowns fuse into one <unk>), a charsmap.
VocabSpec t5_spec() {
  VocabSpec s;
  s.model = "t5";
  s.source = "tiny-t5";
  s.tokens = {"<pad>", "</s>", "<unk>", kSp, kSp + "fi", "sh", "f", "i", "s", "h", "A", kSp + "A"};
  s.token_types = {TokenType::kControl, TokenType::kControl, TokenType::kUnknown};
  s.token_types.resize(s.tokens.size(), TokenType::kNormal);
  s.scores = {0, 0, 0, -2, -3, -3, -4, -4, -4, -4, -4, -3.5f};
  s.ids = {.eos = 1, .unk = 2, .pad = 0};
  s.precompiled_charsmap = build_charsmap(kRules);
  return s;
}

TEST(Unigram, CharsmapLongestMatch) {
  auto map = tok::PrecompiledCharsMap::parse(build_charsmap({{"a", "1"}, {"ab", "2"}, {"abc", "3"}, {"b", ""}}), "m");
  ASSERT_TRUE(map.has_value()) << map.error().to_string();
  std::string_view r;
  EXPECT_EQ(map->match("abd", &r), 2u);
  EXPECT_EQ(r, "2");
  EXPECT_EQ(map->match("abc", &r), 3u);
  EXPECT_EQ(r, "3");
  EXPECT_EQ(map->match("a", &r), 1u);
  EXPECT_EQ(r, "1");
  EXPECT_EQ(map->match("b", &r), 1u);
  EXPECT_EQ(r, "");
  EXPECT_EQ(map->match("c", &r), 0u);
  EXPECT_EQ(map->match("", &r), 0u);
}

TEST(Unigram, T5StyleNormalisationAndFusedUnknowns) {
  auto t = make(t5_spec());
  ASSERT_TRUE(t);
  // "ﬁsh\tＡ€€x" -> "fish A€€x" -> "▁fish▁A€€x": ▁fi sh | ▁A | one <unk> for "€€x".
  EXPECT_EQ(t->encode("\xEF\xAC\x81sh\t\xEF\xBC\xA1\xE2\x82\xAC\xE2\x82\xAC"
                      "x"),
            (std::vector<int32_t>{4, 5, 11, 2, 1}));
  // A no-break space is a space too, and runs of them collapse.
  EXPECT_EQ(t->encode("fish\xC2\xA0\xC2\xA0"
                      "A",
                      false),
            (std::vector<int32_t>{4, 5, 11}));
  // Special tokens in the text only with parse_special.
  EXPECT_EQ(t->encode("A</s>A", false, /*parse_special=*/true), (std::vector<int32_t>{11, 1, 11}));
  auto text = t->decode(std::vector<int32_t>{4, 5, 11, 2, 1}, /*render_special=*/true);
  ASSERT_TRUE(text.has_value());
  EXPECT_EQ(*text, "fish A<unk></s>");
}

std::string base64(std::string_view bytes) {
  static const char* kAlpha = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  for (size_t i = 0; i < bytes.size(); i += 3) {
    uint32_t v = static_cast<uint8_t>(bytes[i]) << 16;
    if (i + 1 < bytes.size()) v |= static_cast<uint8_t>(bytes[i + 1]) << 8;
    if (i + 2 < bytes.size()) v |= static_cast<uint8_t>(bytes[i + 2]);
    out.push_back(kAlpha[(v >> 18) & 63]);
    out.push_back(kAlpha[(v >> 12) & 63]);
    out.push_back(i + 1 < bytes.size() ? kAlpha[(v >> 6) & 63] : '=');
    out.push_back(i + 2 < bytes.size() ? kAlpha[v & 63] : '=');
  }
  return out;
}

std::string t5_tokenizer_json(const std::string& normalizer) {
  const VocabSpec s = t5_spec();
  std::string vocab;
  for (size_t i = 0; i < s.tokens.size(); ++i)
    vocab += fmt::format("{}[\"{}\", {}]", i ? ", " : "", s.tokens[i], s.scores[i]);
  return fmt::format(R"({{
  "added_tokens": [{{"id": 0, "content": "<pad>", "special": true}}, {{"id": 1, "content": "</s>", "special": true}},
                   {{"id": 2, "content": "<unk>", "special": true}}],
  "normalizer": {},
  "pre_tokenizer": {{"type": "Sequence", "pretokenizers": [{{"type": "WhitespaceSplit"}},
                    {{"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": true}}]}},
  "post_processor": {{"type": "TemplateProcessing", "single": [{{"Sequence": {{"id": "A", "type_id": 0}}}},
                     {{"SpecialToken": {{"id": "</s>", "type_id": 0}}}}]}},
  "model": {{"type": "Unigram", "unk_id": 2, "vocab": [{}], "byte_fallback": false}}
}})",
                     normalizer, vocab);
}

TEST(Unigram, TokenizerJsonGivesTheSameTokenizer) {
  const std::string norm = fmt::format(
      R"({{"type": "Sequence", "normalizers": [{{"type": "Precompiled", "precompiled_charsmap": "{}"}},
          {{"type": "Replace", "pattern": {{"Regex": " {{2,}}"}}, "content": " "}}]}})",
      base64(build_charsmap(kRules)));
  auto spec = vocab_from_hf_tokenizer_json_text(t5_tokenizer_json(norm), "t5.json");
  ASSERT_TRUE(spec.has_value()) << spec.error().to_string();
  EXPECT_EQ(spec->model, "t5");
  EXPECT_EQ(spec->ids.unk, 2);
  EXPECT_EQ(spec->precompiled_charsmap, build_charsmap(kRules));
  auto t = make(*spec);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->encode("\xEF\xAC\x81sh\t\xEF\xBC\xA1\xE2\x82\xAC\xE2\x82\xAC"
                      "x"),
            (std::vector<int32_t>{4, 5, 11, 2, 1}));

  // Components a Unigram model cannot honour are named.
  auto nfd = vocab_from_hf_tokenizer_json_text(t5_tokenizer_json(R"({"type": "NFD"})"), "nfd.json");
  ASSERT_FALSE(nfd.has_value());
  EXPECT_NE(nfd.error().message().find("NFD"), std::string::npos) << nfd.error().to_string();
  auto bad64 = vocab_from_hf_tokenizer_json_text(
      t5_tokenizer_json(R"({"type": "Precompiled", "precompiled_charsmap": "**"})"), "b64.json");
  ASSERT_FALSE(bad64.has_value());
  EXPECT_NE(bad64.error().message().find("base64"), std::string::npos);
  std::string broken = t5_tokenizer_json("null");
  broken.replace(broken.find("[\"<pad>\", 0]"), 12, "[\"<pad>\"]");
  auto bad_entry = vocab_from_hf_tokenizer_json_text(broken, "entry.json");
  ASSERT_FALSE(bad_entry.has_value());
  EXPECT_NE(bad_entry.error().message().find("model.vocab[0]"), std::string::npos) << bad_entry.error().to_string();
}

TEST(Unigram, GgufVocabularyWithCharsmap) {
  const VocabSpec s = t5_spec();
  formats::GgufWriter w;
  ASSERT_TRUE(w.add_string("tokenizer.ggml.model", "t5").ok());
  ASSERT_TRUE(w.add_string_array("tokenizer.ggml.tokens", s.tokens).ok());
  ASSERT_TRUE(w.add_f32_array("tokenizer.ggml.scores", s.scores).ok());
  std::vector<int32_t> types;
  for (TokenType t : s.token_types) types.push_back(static_cast<int32_t>(t));
  ASSERT_TRUE(w.add_i32_array("tokenizer.ggml.token_type", types).ok());
  ASSERT_TRUE(w.add_u32("tokenizer.ggml.eos_token_id", 1).ok());
  ASSERT_TRUE(w.add_u32("tokenizer.ggml.unknown_token_id", 2).ok());
  ASSERT_TRUE(w.add_bool("tokenizer.ggml.remove_extra_whitespaces", true).ok());
  std::vector<formats::GgufMetaValue> bytes;
  for (char c : s.precompiled_charsmap) bytes.push_back(formats::GgufMetaValue::u8(static_cast<uint8_t>(c)));
  ASSERT_TRUE(
      w.add("tokenizer.ggml.precompiled_charsmap", formats::GgufMetaValue::array(formats::GgufValueType::kU8, bytes))
          .ok());
  auto image = w.to_bytes();
  ASSERT_TRUE(image.has_value());
  auto file = formats::GgufFile::parse(*image, "t5.gguf");
  ASSERT_TRUE(file.has_value()) << file.error().to_string();
  auto spec = vocab_from_gguf(*file);
  ASSERT_TRUE(spec.has_value()) << spec.error().to_string();
  EXPECT_EQ(spec->precompiled_charsmap, s.precompiled_charsmap);
  auto t = make(*spec);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->encode("\xEF\xAC\x81sh\t\xEF\xBC\xA1\xE2\x82\xAC\xE2\x82\xAC"
                      "x"),
            (std::vector<int32_t>{4, 5, 11, 2, 1}));
}

TEST(Unigram, WrittenToGgufAndReadBack) {
  formats::GgufWriter w;
  ASSERT_TRUE(write_vocab_to_gguf(t5_spec(), w).ok());
  auto image = w.to_bytes();
  ASSERT_TRUE(image.has_value());
  auto file = formats::GgufFile::parse(*image, "t5w.gguf");
  ASSERT_TRUE(file.has_value());
  auto spec = vocab_from_gguf(*file);
  ASSERT_TRUE(spec.has_value()) << spec.error().to_string();
  EXPECT_EQ(spec->precompiled_charsmap, t5_spec().precompiled_charsmap);
  auto t = make(*spec);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->encode("\xEF\xAC\x81sh\t\xEF\xBC\xA1\xE2\x82\xAC\xE2\x82\xAC" "x"),
            (std::vector<int32_t>{4, 5, 11, 2, 1}));
}

TEST(Unigram, BadVocabulariesAreRefused) {
  VocabSpec no_scores = t5_spec();
  no_scores.scores.clear();
  auto a = make_tokenizer(no_scores);
  ASSERT_FALSE(a.has_value());
  EXPECT_NE(a.error().message().find("score"), std::string::npos);
  VocabSpec nan = t5_spec();
  nan.scores[5] = std::numeric_limits<float>::quiet_NaN();
  auto b = make_tokenizer(nan);
  ASSERT_FALSE(b.has_value());
  EXPECT_NE(b.error().message().find("piece 5"), std::string::npos) << b.error().to_string();
  VocabSpec short_map = t5_spec();
  short_map.precompiled_charsmap = std::string("\x10\x00\x00\x00\x01\x02", 6);
  auto c = make_tokenizer(short_map);
  ASSERT_FALSE(c.has_value());
  EXPECT_NE(c.error().message().find("precompiled_charsmap"), std::string::npos);
}

// Random and mutated charsmaps: parse or refuse, and lookups stay inside the blob.
TEST(Unigram, HostileCharsmapsNeverReadOutOfBounds) {
  std::mt19937 rng(7);
  const std::string good = build_charsmap(kRules);
  const std::string texts[] = {"\xEF\xAC\x81sh\t", "\xEF\xBC\xA1\xC2\xA0xyz", std::string(64, '\xEF')};
  for (int trial = 0; trial < 2000; ++trial) {
    std::string blob = good;
    if (trial % 2) {
      blob.resize(4 + rng() % 200);
      for (size_t i = 4; i < blob.size(); ++i) blob[i] = static_cast<char>(rng());
      const uint32_t size = static_cast<uint32_t>((blob.size() - 4) & ~size_t{3});
      for (int i = 0; i < 4; ++i) blob[i] = static_cast<char>((size >> (8 * i)) & 0xFF);
    } else {
      for (int k = 0; k < 4; ++k) blob[4 + rng() % (blob.size() - 4)] = static_cast<char>(rng());
    }
    auto map = tok::PrecompiledCharsMap::parse(blob, "fuzz");
    if (!map) continue;
    for (const std::string& text : texts) {
      std::string_view r;
      for (size_t i = 0; i < text.size(); ++i) {
        const size_t n = map->match(std::string_view(text).substr(i), &r);
        ASSERT_LE(n, text.size() - i);
      }
    }
    VocabSpec s = t5_spec();
    s.precompiled_charsmap = blob;
    auto t = make_tokenizer(s);
    if (t) (void)(*t)->encode(texts[0] + texts[1]);
  }
}

}  // namespace
}  // namespace rlx
