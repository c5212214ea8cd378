// SentencePiece-style BPE ("llama", gemma): spaces become ▁, an optional dummy ▁ is
// prefixed, adjacent pieces merge best-score-first (priority queue over a linked list
// of symbols, O(n log n)) -- or by pair rank when the vocabulary lists merges -- and
// characters without a piece fall back to <0xNN> tokens.
#include <algorithm>

#include "tokenizer_impl.h"
#include "unicode_util.h"

namespace rlx::tok {
namespace {

constexpr std::string_view kSpace = "\xE2\x96\x81";  // ▁ U+2581

struct Symbol {
  uint32_t begin;  // byte offset into the escaped text
  uint32_t len;    // 0 once merged into its left neighbour
  int32_t prev, next;
  int32_t id;      // piece id, or -1 for a character without a piece
};

struct Bigram {
  float score;
  int32_t left, right;
  uint32_t size;
  int32_t id;
};

struct BigramOrder {
  // A max-heap under this order has the best score, then the leftmost pair, on top.
  bool operator()(const Bigram& a, const Bigram& b) const {
    if (a.score != b.score) return a.score < b.score;
    return a.left > b.left;
  }
};

// Reused buffers of one encode call.
struct Work {
  std::vector<Symbol> sym;
  std::vector<Bigram> heap;
};

class SentencePieceTokenizer final : public TokenizerBase {
 public:
  SentencePieceTokenizer(Vocab vocab, MergeTable merges) : TokenizerBase(std::move(vocab)), merges_(std::move(merges)) {
    byte_tokens_.fill(-1);
    for (int b = 0; b < 256; ++b) {
      const std::string name = fmt::format("<0x{:02X}>", b);
      const int32_t id = find(name);
      if (id >= 0 && vocab_.types[id] == TokenType::kByte) {
        byte_tokens_[b] = id;
        continue;
      }
      // No byte token: a piece spelled as that single byte, if there is one.
      const int32_t plain = find(std::string(1, static_cast<char>(b)));
      byte_tokens_[b] = plain >= 0 ? plain : vocab_.ids.unk;
    }
    // Merging never crosses a point where ▁ follows another character unless some
    // piece contains such a pair; when none does (SentencePiece's split_by_whitespace),
    // words are merged independently, which keeps the queues small.
    split_words_ = true;
    for (size_t i = 0; i < vocab_.tokens.size() && split_words_; ++i) {
      const std::string_view t = vocab_.tokens[i];
      for (size_t at = t.find(kSpace, 1); at != std::string_view::npos; at = t.find(kSpace, at + 1)) {
        if (at < kSpace.size() || t.substr(at - kSpace.size(), kSpace.size()) != kSpace) {
          split_words_ = false;
          break;
        }
      }
    }
  }

  TokenizerKind kind() const override { return TokenizerKind::kSentencePiece; }

 protected:
  void encode_fragment(std::string_view text, bool after_special, std::vector<int32_t>& out) const override;

  void append_text_piece(int32_t id, std::string& out) const override {
    append_metaspace_piece(vocab_.tokens[id], out);
  }

 private:
  // A piece may come out of merging only if it is ordinary text.
  int32_t mergeable(std::string_view text) const {
    const int32_t id = find(text);
    if (id < 0) return -1;
    const TokenType t = vocab_.types[id];
    return (t == TokenType::kNormal || t == TokenType::kUndefined) ? id : -1;
  }

  // Non-empty (vocabularies converted from Hugging Face BPE with byte fallback):
  // merge by pair rank instead of by the score of the merged piece.
  MergeTable merges_;
  void encode_chunk(const std::string& s, size_t begin, size_t end, Work& work,
                    std::vector<int32_t>& out) const;

  std::array<int32_t, 256> byte_tokens_;
  bool split_words_ = false;
};

void SentencePieceTokenizer::encode_fragment(std::string_view text, bool after_special,
                                             std::vector<int32_t>& out) const {
  std::string s;
  s.reserve(text.size() + 8);
  if (vocab_.add_space_prefix && after_special) s += kSpace;
  for (char c : text) {
    if (c == ' ') s += kSpace;
    else s.push_back(c);
  }
  if (s.empty()) return;

  Work work;
  if (!split_words_) {
    encode_chunk(s, 0, s.size(), work, out);
    return;
  }
  size_t begin = 0;
  for (size_t at = s.find(kSpace, 1); at != std::string::npos; at = s.find(kSpace, at + kSpace.size())) {
    if (at >= kSpace.size() && s.compare(at - kSpace.size(), kSpace.size(), kSpace) == 0) continue;
    encode_chunk(s, begin, at, work, out);
    begin = at;
  }
  encode_chunk(s, begin, s.size(), work, out);
}

void SentencePieceTokenizer::encode_chunk(const std::string& s, size_t begin, size_t end, Work& work,
                                          std::vector<int32_t>& out) const {
  if (begin >= end) return;
  // One symbol per UTF-8 character; an invalid byte is a symbol of its own.
  std::vector<Symbol>& sym = work.sym;
  sym.clear();
  for (size_t i = begin; i < end;) {
    char32_t cp = 0;
    size_t n = utf8_decode_one(std::string_view(s).substr(0, end), i, &cp);
    if (n == 0) n = 1;
    const int32_t idx = static_cast<int32_t>(sym.size());
    sym.push_back({static_cast<uint32_t>(i), static_cast<uint32_t>(n), idx - 1, idx + 1,
                   mergeable(std::string_view(s).substr(i, n))});
    i += n;
  }
  sym.back().next = -1;

  std::vector<Bigram>& heap = work.heap;
  heap.clear();
  const BigramOrder order;
  auto push = [&](const Bigram& g) {
    heap.push_back(g);
    std::push_heap(heap.begin(), heap.end(), order);
  };
  auto try_add = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const uint32_t size = sym[left].len + sym[right].len;
    if (!merges_.empty()) {
      if (sym[left].id < 0 || sym[right].id < 0) return;
      auto it = merges_.find(pair_key(sym[left].id, sym[right].id));
      if (it == merges_.end()) return;
      push({-static_cast<float>(it->second.rank), left, right, size, it->second.result});
      return;
    }
    if (size > vocab_.max_token_bytes) return;
    const int32_t id = mergeable(std::string_view(s).substr(sym[left].begin, size));
    if (id < 0) return;
    push({vocab_.scores[id], left, right, size, id});
  };
  for (size_t i = 1; i < sym.size(); ++i) try_add(static_cast<int32_t>(i - 1), static_cast<int32_t>(i));

  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), order);
    const Bigram b = heap.back();
    heap.pop_back();
    Symbol& l = sym[b.left];
    Symbol& r = sym[b.right];
    if (l.len == 0 || r.len == 0 || l.len + r.len != b.size) continue;  // stale
    l.len += r.len;
    l.id = b.id;
    r.len = 0;
    l.next = r.next;
    if (r.next >= 0) sym[r.next].prev = b.left;
    try_add(l.prev, b.left);
    try_add(b.left, l.next);
  }

  for (int32_t i = 0; i >= 0; i = sym[i].next) {
    const Symbol& x = sym[i];
    if (x.id >= 0) {
      out.push_back(x.id);
      continue;
    }
    for (uint32_t k = 0; k < x.len; ++k) {
      const int32_t id = byte_tokens_[static_cast<uint8_t>(s[x.begin + k])];
      if (id >= 0) out.push_back(id);
    }
  }
}

}  // namespace

Expected<std::unique_ptr<Tokenizer>> make_sentencepiece_tokenizer(const VocabSpec& spec) {
  ASSIGN_OR_RETURN(Vocab v, build_vocab(spec, /*add_bos=*/true, /*add_eos=*/false, /*add_space_prefix=*/true));
  MergeTable merges;
  TRY(build_merges(spec, v, merges));
  return std::unique_ptr<Tokenizer>(new SentencePieceTokenizer(std::move(v), std::move(merges)));
}

}  // namespace rlx::tok
