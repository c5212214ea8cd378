// Unigram ("t5" in GGUF, "Unigram" in tokenizer.json; T5, XLM-RoBERTa, BGE-M3): the
// text is normalised as the SentencePiece model specifies (precompiled charsmap,
// whitespace collapsing, ▁ for spaces, dummy prefix), then split by Viterbi into the
// pieces whose scores (log probabilities) sum highest. A character no piece covers
// becomes its <0xNN> byte tokens when the vocabulary has them all (byte fallback),
// else the unknown token, consecutive unknowns fused into one, scored min - 10.
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <unordered_map>

#include "charsmap.h"
#include "tokenizer_impl.h"
#include "unicode_util.h"

namespace rlx::tok {
namespace {

constexpr std::string_view kSpace = "\xE2\x96\x81";  // ▁ U+2581
constexpr double kUnknownPenalty = 10.0;             // SentencePiece's kUnkPenalty

// Byte trie over the piece texts: edges keyed by (node << 8 | byte).
class PieceTrie {
 public:
  void insert(std::string_view text, int32_t id) {
    uint32_t node = 0;
    for (char ch : text) {
      const uint64_t key = edge_key(node, ch);
      auto it = edges_.find(key);
      if (it == edges_.end()) {
        const auto child = static_cast<uint32_t>(ids_.size());
        ids_.push_back(-1);
        edges_.emplace(key, child);
        node = child;
      } else {
        node = it->second;
      }
    }
    if (ids_[node] < 0) ids_[node] = id;  // the first id of a duplicated text wins
  }
  /// Calls fn(length, id) for every piece that is a prefix of `text`, shortest first.
  template <typename Fn>
  void prefixes(std::string_view text, Fn&& fn) const {
    uint32_t node = 0;
    for (size_t i = 0; i < text.size(); ++i) {
      auto it = edges_.find(edge_key(node, text[i]));
      if (it == edges_.end()) return;
      node = it->second;
      if (ids_[node] >= 0) fn(i + 1, ids_[node]);
    }
  }

 private:
  static uint64_t edge_key(uint32_t node, char ch) { return (uint64_t{node} << 8) | static_cast<uint8_t>(ch); }
  std::unordered_map<uint64_t, uint32_t> edges_;
  std::vector<int32_t> ids_ = {-1};  // node 0 is the root
};

struct UnigramOptions {
  PrecompiledCharsMap charsmap;
  bool remove_extra_whitespaces = false;
  bool byte_fallback = false;
};

class UnigramTokenizer final : public TokenizerBase {
 public:
  UnigramTokenizer(Vocab vocab, UnigramOptions opts) : TokenizerBase(std::move(vocab)), opts_(std::move(opts)) {
    float min_score = std::numeric_limits<float>::max();
    for (size_t i = 0; i < vocab_.tokens.size(); ++i) {
      const TokenType t = vocab_.types[i];
      if (t != TokenType::kNormal && t != TokenType::kUndefined) continue;
      if (vocab_.tokens[i].empty()) continue;
      trie_.insert(vocab_.tokens[i], static_cast<int32_t>(i));
      min_score = std::min(min_score, vocab_.scores[i]);
    }
    unknown_score_ = (min_score == std::numeric_limits<float>::max() ? 0.0 : min_score) - kUnknownPenalty;
    byte_tokens_.fill(-1);
    bool all_bytes = true;
    for (int b = 0; b < 256; ++b) {
      const int32_t id = find(fmt::format("<0x{:02X}>", b));
      if (id >= 0 && vocab_.types[id] == TokenType::kByte)
        byte_tokens_[b] = id;
      else
        all_bytes = false;
    }
    opts_.byte_fallback = opts_.byte_fallback && all_bytes;
  }

  TokenizerKind kind() const override { return TokenizerKind::kUnigram; }

 protected:
  void encode_fragment(std::string_view text, bool after_special, std::vector<int32_t>& out) const override;

  void append_text_piece(int32_t id, std::string& out) const override {
    append_metaspace_piece(vocab_.tokens[id], out);
  }

 private:
  std::string normalize(std::string_view text, bool dummy_prefix) const;
  void emit_unknown(std::string_view chars, std::vector<int32_t>& out) const;

  UnigramOptions opts_;
  PieceTrie trie_;
  double unknown_score_ = -kUnknownPenalty;
  std::array<int32_t, 256> byte_tokens_;
};

// SentencePiece's normaliser: each input prefix is rewritten by the charsmap (longest
// match) or kept as one UTF-8 character (an invalid byte becomes U+FFFD); then spaces
// become ▁, runs of spaces collapse and the ends are trimmed when the model removes
// extra whitespace, and a ▁ goes in front when it adds a dummy prefix.
std::string UnigramTokenizer::normalize(std::string_view text, bool dummy_prefix) const {
  std::string chars;
  chars.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    std::string_view repl;
    const size_t n = opts_.charsmap.match(text.substr(i), &repl);
    if (n > 0) {
      chars.append(repl);
      i += n;
      continue;
    }
    i += append_sanitized_char(chars, text, i);
  }
  std::string out;
  out.reserve(chars.size() + 3 * (chars.size() / 4 + 2));
  bool pending_space = false, started = false;
  for (char c : chars) {
    if (c == ' ') {
      if (!opts_.remove_extra_whitespaces) {
        if (!started && dummy_prefix) out += kSpace;
        started = true;
        out += kSpace;
      } else {
        pending_space = started;
      }
      continue;
    }
    if (!started) {
      if (dummy_prefix) out += kSpace;
      started = true;
    } else if (pending_space) {
      out += kSpace;
    }
    pending_space = false;
    out.push_back(c);
  }
  return out;
}

void UnigramTokenizer::emit_unknown(std::string_view chars, std::vector<int32_t>& out) const {
  if (opts_.byte_fallback) {
    for (char c : chars) out.push_back(byte_tokens_[static_cast<uint8_t>(c)]);
    return;
  }
  if (vocab_.ids.unk < 0) return;                            // nothing to stand for the text
  if (!out.empty() && out.back() == vocab_.ids.unk) return;  // fused with the previous unknown
  out.push_back(vocab_.ids.unk);
}

void UnigramTokenizer::encode_fragment(std::string_view text, bool after_special, std::vector<int32_t>& out) const {
  const std::string s = normalize(text, vocab_.add_space_prefix && after_special);
  if (s.empty()) return;
  const size_t n = s.size();
  struct Best {
    double score = -std::numeric_limits<double>::infinity();
    uint32_t start = 0;
    int32_t id = -2;  // -2: not reached; -1: one unknown character
  };
  std::vector<Best> best(n + 1);
  best[0].score = 0.0;
  best[0].id = -1;
  const std::string_view sv(s);
  for (size_t i = 0; i < n;) {
    char32_t cp = 0;
    size_t char_len = utf8_decode_one(sv, i, &cp);
    if (char_len == 0) char_len = 1;
    if (best[i].id == -2) {  // not a character boundary any path reaches
      i += char_len;
      continue;
    }
    const double base = best[i].score;
    bool covers_char = false;
    trie_.prefixes(sv.substr(i), [&](size_t len, int32_t id) {
      const double score = base + vocab_.scores[id];
      if (score > best[i + len].score) best[i + len] = {score, static_cast<uint32_t>(i), id};
      if (len == char_len) covers_char = true;
    });
    if (!covers_char) {
      const double score = base + unknown_score_;
      if (score > best[i + char_len].score) best[i + char_len] = {score, static_cast<uint32_t>(i), -1};
    }
    i += char_len;
  }
  // Walk back from the end, then emit in order.
  std::vector<std::pair<uint32_t, uint32_t>> path;  // (start, end) per piece
  for (size_t end = n; end > 0;) {
    const Best& b = best[end];
    path.emplace_back(b.start, static_cast<uint32_t>(end));
    end = b.start;
  }
  std::reverse(path.begin(), path.end());
  for (const auto& [start, end] : path) {
    const int32_t id = best[end].id;
    if (id >= 0)
      out.push_back(id);
    else
      emit_unknown(sv.substr(start, end - start), out);
  }
}

}  // namespace

Expected<std::unique_ptr<Tokenizer>> make_unigram_tokenizer(const VocabSpec& spec) {
  // T5's defaults: no BOS, EOS appended, a dummy ▁ prefix.
  ASSIGN_OR_RETURN(Vocab v, build_vocab(spec, /*add_bos=*/false, /*add_eos=*/true, /*add_space_prefix=*/true));
  if (spec.scores.empty()) return Error::invalid_file("{}: a Unigram vocabulary needs a score per piece", v.source);
  for (size_t i = 0; i < v.scores.size(); ++i) {
    if (!std::isfinite(v.scores[i]))
      return Error::invalid_file("{}: piece {} ('{}') has score {}, not a finite log probability", v.source, i,
                                 v.tokens[i], v.scores[i]);
  }
  UnigramOptions opts;
  ASSIGN_OR_RETURN(opts.charsmap, PrecompiledCharsMap::parse(spec.precompiled_charsmap, v.source));
  opts.remove_extra_whitespaces = spec.remove_extra_whitespaces.value_or(true);
  opts.byte_fallback = spec.byte_fallback.value_or(true);
  return std::unique_ptr<Tokenizer>(new UnigramTokenizer(std::move(v), std::move(opts)));
}

}  // namespace rlx::tok
