// Byte-level BPE ("gpt2" and its descendants): pre-tokenizer regexes split the text
// into words, each byte is mapped to a printable code point, and adjacent symbols
// merge lowest-rank-first (priority queue over a linked list, O(n log n) per word).
#include <algorithm>

#include "tokenizer_impl.h"
#include "unicode_util.h"

namespace rlx::tok {
namespace {

struct Symbol {
  int32_t prev, next;
  int32_t id;  // -1: a byte whose code point is not in the vocabulary
  bool alive;
};

struct Bigram {
  int32_t rank;
  int32_t left, right;
  int32_t left_id, right_id, result;
};

struct BigramOrder {
  bool operator()(const Bigram& a, const Bigram& b) const {
    if (a.rank != b.rank) return a.rank > b.rank;  // lowest rank on top
    return a.left > b.left;                        // then leftmost
  }
};

// Buffers reused across the words of one encode call.
struct Work {
  std::vector<Symbol> sym;
  std::vector<Bigram> heap;
};

class ByteLevelBpeTokenizer final : public TokenizerBase {
 public:
  ByteLevelBpeTokenizer(Vocab vocab, MergeTable merges,
                        std::unique_ptr<RegexSplitter> splitter, bool ignore_merges)
      : TokenizerBase(std::move(vocab)),
        merges_(std::move(merges)),
        splitter_(std::move(splitter)),
        ignore_merges_(ignore_merges) {
    const ByteLevelMap& map = byte_level_map();
    for (int b = 0; b < 256; ++b) byte_ids_[b] = find(map.byte_to_utf8[b]);
  }

  TokenizerKind kind() const override { return TokenizerKind::kByteLevelBpe; }

 protected:
  void encode_fragment(std::string_view text, bool after_special, std::vector<int32_t>& out) const override;

  void append_text_piece(int32_t id, std::string& out) const override {
    const ByteLevelMap& map = byte_level_map();
    const std::string& t = vocab_.tokens[id];
    size_t i = 0;
    while (i < t.size()) {
      char32_t cp = 0;
      const size_t n = utf8_decode_one(t, i, &cp);
      if (n == 0) {  // not UTF-8: pass the byte through
        out.push_back(t[i++]);
        continue;
      }
      if (cp < map.cp_to_byte.size() && map.cp_to_byte[cp] >= 0) out.push_back(static_cast<char>(map.cp_to_byte[cp]));
      else out.append(t, i, n);
      i += n;
    }
  }

 private:
  void encode_word(const std::vector<int32_t>& byte_syms, Work& work, std::vector<int32_t>& out) const;

  MergeTable merges_;
  std::unique_ptr<RegexSplitter> splitter_;
  bool ignore_merges_;
  std::array<int32_t, 256> byte_ids_;
};

void ByteLevelBpeTokenizer::encode_fragment(std::string_view text, bool after_special,
                                            std::vector<int32_t>& out) const {
  std::vector<char32_t> cps;
  if (vocab_.add_space_prefix && after_special && (text.empty() || text[0] != ' ')) {
    cps = utf8_to_cps(std::string(" ") + std::string(text));
  } else {
    cps = utf8_to_cps(text);
  }
  std::vector<std::pair<uint32_t, uint32_t>> words;
  splitter_->split(cps, words);

  const ByteLevelMap& map = byte_level_map();
  std::string utf8;
  std::string mapped;
  std::vector<int32_t> byte_syms;
  Work work;
  for (const auto& [begin, end] : words) {
    utf8.clear();
    for (uint32_t i = begin; i < end; ++i) append_utf8(utf8, cps[i]);
    mapped.clear();
    byte_syms.clear();
    for (char c : utf8) {
      const auto b = static_cast<uint8_t>(c);
      mapped += map.byte_to_utf8[b];
      byte_syms.push_back(byte_ids_[b]);
    }
    if (ignore_merges_) {
      const int32_t whole = find(mapped);
      if (whole >= 0) {
        out.push_back(whole);
        continue;
      }
    }
    encode_word(byte_syms, work, out);
  }
}

void ByteLevelBpeTokenizer::encode_word(const std::vector<int32_t>& byte_syms, Work& work,
                                        std::vector<int32_t>& out) const {
  const auto n = static_cast<int32_t>(byte_syms.size());
  if (n == 0) return;
  std::vector<Symbol>& sym = work.sym;
  sym.resize(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) sym[i] = {i - 1, i + 1 < n ? i + 1 : -1, byte_syms[i], true};

  std::vector<Bigram>& heap = work.heap;
  heap.clear();
  const BigramOrder order;
  auto try_add = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const int32_t a = sym[left].id, b = sym[right].id;
    if (a < 0 || b < 0) return;
    auto it = merges_.find(pair_key(a, b));
    if (it == merges_.end()) return;
    heap.push_back({it->second.rank, left, right, a, b, it->second.result});
    std::push_heap(heap.begin(), heap.end(), order);
  };
  for (int32_t i = 1; i < n; ++i) try_add(i - 1, i);

  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), order);
    const Bigram g = heap.back();
    heap.pop_back();
    Symbol& l = sym[g.left];
    Symbol& r = sym[g.right];
    // Stale entries: a side was merged away or changed since the pair was queued.
    if (!l.alive || !r.alive || l.next != g.right || l.id != g.left_id || r.id != g.right_id) continue;
    l.id = g.result;
    r.alive = false;
    l.next = r.next;
    if (r.next >= 0) sym[r.next].prev = g.left;
    try_add(l.prev, g.left);
    try_add(g.left, l.next);
  }
  for (int32_t i = 0; i >= 0; i = sym[i].next) {
    if (sym[i].id >= 0) out.push_back(sym[i].id);
    else if (vocab_.ids.unk >= 0) out.push_back(vocab_.ids.unk);
  }
}

}  // namespace

Expected<std::unique_ptr<Tokenizer>> make_byte_level_bpe_tokenizer(const VocabSpec& spec) {
  ASSIGN_OR_RETURN(Vocab v, build_vocab(spec, /*add_bos=*/false, /*add_eos=*/false, /*add_space_prefix=*/false));
  MergeTable merges;
  TRY(build_merges(spec, v, merges));
  std::vector<std::string> regexes = spec.pre_regexes;
  if (regexes.empty()) {
    auto named = pre_tokenizer_regexes(spec.pre);
    if (!named) return named.error().with_context(v.source);
    regexes = std::move(*named);
  }
  ASSIGN_OR_RETURN(std::unique_ptr<RegexSplitter> splitter, RegexSplitter::create(regexes));
  const bool ignore = spec.ignore_merges.value_or(pre_tokenizer_ignores_merges(spec.pre));
  return std::unique_ptr<Tokenizer>(new ByteLevelBpeTokenizer(std::move(v), std::move(merges),
                                                              std::move(splitter), ignore));
}

}  // namespace rlx::tok
