// WordPiece ("bert"): BERT's basic tokenizer (drop control characters, isolate CJK
// ideographs and punctuation, strip accents via NFD, lower-case) followed by greedy
// longest-match-first over the vocabulary, whole word -> [UNK] when a piece is missing.
#include "tokenizer_impl.h"
#include "unicode_util.h"

namespace rlx::tok {
namespace {

class WordPieceTokenizer final : public TokenizerBase {
 public:
  WordPieceTokenizer(Vocab vocab, const VocabSpec& spec)
      : TokenizerBase(std::move(vocab)),
        word_prefix_(spec.wordpiece_word_prefix),
        continuing_prefix_(spec.wordpiece_continuing_prefix),
        lowercase_(spec.wordpiece_lowercase),
        strip_accents_(spec.wordpiece_strip_accents.value_or(spec.wordpiece_lowercase)),
        max_chars_(spec.wordpiece_max_chars_per_word) {}

  TokenizerKind kind() const override { return TokenizerKind::kWordPiece; }

 protected:
  void encode_fragment(std::string_view text, bool after_special, std::vector<int32_t>& out) const override;

  void append_text_piece(int32_t id, std::string& out) const override {
    const std::string_view t = vocab_.tokens[id];
    if (!word_prefix_.empty()) {
      if (t.starts_with(word_prefix_)) {
        out.push_back(' ');
        out.append(t.substr(word_prefix_.size()));
      } else {
        out.append(t);
      }
    } else if (!continuing_prefix_.empty() && t.starts_with(continuing_prefix_)) {
      out.append(t.substr(continuing_prefix_.size()));
    } else {
      out.push_back(' ');
      out.append(t);
    }
  }
  bool strips_leading_space() const override { return true; }

 private:
  void encode_word(const std::vector<char32_t>& word, std::vector<int32_t>& out) const;

  std::string word_prefix_;
  std::string continuing_prefix_;
  bool lowercase_;
  bool strip_accents_;
  int32_t max_chars_;
};

void WordPieceTokenizer::encode_fragment(std::string_view text, bool /*after_special*/,
                                         std::vector<int32_t>& out) const {
  // Normaliser: clean text, pad CJK ideographs with spaces, strip accents, lower-case.
  std::vector<char32_t> cps;
  {
    const std::vector<char32_t> raw = utf8_to_cps(text);
    cps.reserve(raw.size());
    for (char32_t c : raw) {
      if (c == 0 || c == kReplacementChar || is_bert_control(c)) continue;
      if (is_white_space(c)) {
        cps.push_back(' ');
      } else if (is_cjk_ideograph(c)) {
        cps.push_back(' ');
        cps.push_back(c);
        cps.push_back(' ');
      } else {
        cps.push_back(c);
      }
    }
  }
  if (strip_accents_) {
    std::vector<char32_t> d = nfd(cps);
    cps.clear();
    for (char32_t c : d)
      if (!is_nonspacing_mark(c)) cps.push_back(c);
  }
  if (lowercase_) {
    std::vector<char32_t> lower;
    lower.reserve(cps.size());
    for (char32_t c : cps) append_lowercase(lower, c);
    cps.swap(lower);
  }
  // Pre-tokenizer: split on white space, punctuation stands alone.
  std::vector<char32_t> word;
  for (char32_t c : cps) {
    if (is_white_space(c)) {
      encode_word(word, out);
      word.clear();
    } else if (is_bert_punctuation(c)) {
      encode_word(word, out);
      word.assign(1, c);
      encode_word(word, out);
      word.clear();
    } else {
      word.push_back(c);
    }
  }
  encode_word(word, out);
}

void WordPieceTokenizer::encode_word(const std::vector<char32_t>& word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (static_cast<int64_t>(word.size()) > max_chars_) {
    out.push_back(vocab_.ids.unk);
    return;
  }
  std::string w;
  std::vector<size_t> at;  // byte offset of each character, plus the end
  at.reserve(word.size() + 1);
  for (char32_t c : word) {
    at.push_back(w.size());
    append_utf8(w, c);
  }
  at.push_back(w.size());

  const size_t n = word.size();
  const size_t mark = out.size();
  std::string key;
  size_t start = 0;
  while (start < n) {
    const std::string& prefix = start == 0 ? word_prefix_ : continuing_prefix_;
    int32_t found = -1;
    size_t end = n;
    while (end > start && at[end] - at[start] + prefix.size() > vocab_.max_token_bytes) --end;
    for (; end > start; --end) {
      key.assign(prefix);
      key.append(w, at[start], at[end] - at[start]);
      found = find(key);
      if (found >= 0) break;
    }
    if (found < 0) {
      out.resize(mark);
      out.push_back(vocab_.ids.unk);
      return;
    }
    out.push_back(found);
    start = end;
  }
}

}  // namespace

Expected<std::unique_ptr<Tokenizer>> make_wordpiece_tokenizer(const VocabSpec& in) {
  VocabSpec spec = in;
  auto lookup = [&](int32_t id, const char* text) {
    if (id >= 0) return id;
    for (size_t i = 0; i < spec.tokens.size(); ++i)
      if (spec.tokens[i] == text) return static_cast<int32_t>(i);
    return -1;
  };
  spec.ids.unk = lookup(spec.ids.unk, "[UNK]");
  spec.ids.cls = lookup(spec.ids.cls, "[CLS]");
  spec.ids.sep = lookup(spec.ids.sep, "[SEP]");
  if (spec.ids.bos < 0) spec.ids.bos = spec.ids.cls;
  if (spec.ids.eos < 0) spec.ids.eos = spec.ids.sep;
  const bool has_ends = spec.ids.bos >= 0 && spec.ids.eos >= 0;
  ASSIGN_OR_RETURN(Vocab v, build_vocab(spec, has_ends, has_ends, /*add_space_prefix=*/false));
  if (v.ids.unk < 0)
    return Error::invalid_file("{}: WordPiece needs an unknown token, but there is no unk id and no '[UNK]'",
                               v.source);
  if (spec.wordpiece_max_chars_per_word <= 0)
    return Error::invalid_file("{}: wordpiece max_input_chars_per_word is {}, expected > 0", v.source,
                               spec.wordpiece_max_chars_per_word);
  return std::unique_ptr<Tokenizer>(new WordPieceTokenizer(std::move(v), spec));
}

}  // namespace rlx::tok
