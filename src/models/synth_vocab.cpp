// Synthetic vocabularies (see synth_vocab.h). Pieces are generated in a fixed order and
// deduplicated as they are added, so that no two ids share a piece.
#include "models/synth_vocab.h"

#include <cstdio>
#include <unordered_set>

namespace rlx::models::detail {
namespace {

constexpr const char* kWords[] = {"the", "and", "a", "to", "was", "he", "she", "it", "of", "in", "that", "her",
                                  "his", "they", "said", "with", "on", "for", "you", "had", "day", "one", "time",
                                  "upon", "once", "there", "little", "girl", "boy", "play", "happy", "big", "very",
                                  "mom", "dog", "cat", "friend", "tree", "ball", "park", "named", "lily", "tom"};

// Adds pieces while refusing duplicates.
class PieceSet {
 public:
  explicit PieceSet(SynthVocab* v) : v_(v) {}
  bool add(const std::string& piece, float score, int32_t type) {
    if (!seen_.insert(piece).second) return false;
    v_->tokens.push_back(piece);
    if (type != 0) v_->types.push_back(type);
    if (!v_->model.empty() && v_->model == "llama") v_->scores.push_back(score);
    return true;
  }
  bool has(const std::string& piece) const { return seen_.count(piece) != 0; }
  size_t size() const { return v_->tokens.size(); }

 private:
  SynthVocab* v_;
  std::unordered_set<std::string> seen_;
};

std::string utf8(char32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

// GPT-2's byte-level alphabet: printable Latin-1 bytes stand for themselves, the others
// (controls, space, 0x7F-0xA0, 0xAD) map to U+0100 onwards in byte order. Returned in
// the order GPT-2 vocabularies list them: the printable ones first.
std::vector<std::pair<int, std::string>> byte_symbols() {
  auto printable = [](int b) {
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
  };
  std::vector<std::pair<int, std::string>> out;
  for (int b = 0; b < 256; ++b)
    if (printable(b)) out.emplace_back(b, utf8(static_cast<char32_t>(b)));
  int next = 0;
  for (int b = 0; b < 256; ++b)
    if (!printable(b)) out.emplace_back(b, utf8(static_cast<char32_t>(0x100 + next++)));
  return out;
}

}  // namespace

SynthVocab make_spm_vocab(int64_t n_vocab) {
  SynthVocab v;
  v.model = "llama";
  v.bos = 1;
  v.eos = 2;
  v.unk = 0;
  PieceSet set(&v);
  set.add("<unk>", 0.0f, 2);
  set.add("<s>", 0.0f, 3);
  set.add("</s>", 0.0f, 3);
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    set.add(buf, 0.0f, 6);
  }
  const std::string sp = "\xE2\x96\x81";  // ▁
  std::vector<std::string> pieces;
  for (char c = 'a'; c <= 'z'; ++c) pieces.push_back(std::string(1, c));
  for (char c = 'A'; c <= 'Z'; ++c) pieces.push_back(std::string(1, c));
  for (char c : std::string("0123456789.,!?'\"-:;()")) pieces.push_back(std::string(1, c));
  pieces.push_back(sp);
  for (const char* w : kWords) pieces.push_back(sp + w);
  for (const char* w : kWords) pieces.push_back(w);
  for (char a = 'a'; a <= 'z'; ++a)
    for (char b = 'a'; b <= 'z'; ++b) pieces.push_back(std::string{a, b});
  for (char a = 'a'; a <= 'z'; ++a)
    for (char b = 'a'; b <= 'z'; ++b) pieces.push_back(sp + std::string{a, b});
  // Scores fall with each piece offered, so a later duplicate leaves a gap, not a tie.
  int64_t rank = 0;
  for (const std::string& p : pieces) {
    if (static_cast<int64_t>(set.size()) >= n_vocab) break;
    set.add(p, -static_cast<float>(rank++), 1);
  }
  for (int64_t i = 0; static_cast<int64_t>(set.size()) < n_vocab; ++i)  // unique filler pieces, least likely
    set.add(sp + "x" + std::to_string(i), -static_cast<float>(rank++), 1);
  return v;
}

SynthVocab make_wordpiece_vocab(int64_t n_vocab) {
  SynthVocab v;
  v.model = "bert";
  v.pad = 0;
  v.unk = 1;
  v.cls = 2;
  v.sep = 3;
  v.bos = v.cls;
  v.eos = v.sep;
  PieceSet set(&v);
  set.add("[PAD]", 0.0f, 3);
  set.add("[UNK]", 0.0f, 2);
  set.add("[CLS]", 0.0f, 3);
  set.add("[SEP]", 0.0f, 3);
  set.add("[MASK]", 0.0f, 3);
  const std::string sp = "\xE2\x96\x81";  // ▁ marks a word start
  std::vector<std::string> pieces;
  for (char c : std::string("abcdefghijklmnopqrstuvwxyz0123456789.,!?'\"-:;()")) {
    pieces.push_back(sp + std::string(1, c));
    pieces.push_back(std::string(1, c));
  }
  for (const char* w : kWords) pieces.push_back(sp + w);
  for (const char* w : kWords) pieces.push_back(w);
  for (char a = 'a'; a <= 'z'; ++a)
    for (char b = 'a'; b <= 'z'; ++b) pieces.push_back(std::string{a, b});
  for (const std::string& p : pieces) {
    if (static_cast<int64_t>(set.size()) >= n_vocab) break;
    set.add(p, 0.0f, 1);
  }
  for (int64_t i = 0; static_cast<int64_t>(set.size()) < n_vocab; ++i) set.add("[unused" + std::to_string(i) + "]", 0.0f, 5);
  v.scores.clear();
  return v;
}

SynthVocab make_llama3_vocab() {
  constexpr int64_t kPieces = 128000, kSpecial = 256;
  SynthVocab v;
  v.model = "gpt2";
  v.pre = "llama-bpe";
  PieceSet set(&v);
  std::string sym[256];
  for (const auto& [b, s] : byte_symbols()) {
    sym[b] = s;
    set.add(s, 0.0f, 1);
  }
  // A piece enters through the merge of everything but its last symbol with that symbol
  // (left to right, as BPE applies merges to a word), its prefixes first.
  auto add_word = [&](const std::vector<std::string>& symbols) {
    std::string prefix = symbols[0];
    for (size_t i = 1; i < symbols.size() && static_cast<int64_t>(set.size()) < kPieces; ++i) {
      const std::string piece = prefix + symbols[i];
      if (set.add(piece, 0.0f, 1)) v.merges.push_back(prefix + " " + symbols[i]);
      prefix = piece;
    }
  };
  auto letters = [&](const std::string& text, bool space_before) {
    std::vector<std::string> s;
    if (space_before) s.push_back(sym[' ']);
    for (unsigned char c : text) s.push_back(sym[c]);
    return s;
  };
  for (const char* w : kWords) add_word(letters(w, true));
  for (const char* w : kWords) add_word(letters(w, false));
  // Then every lowercase letter string, shortest first, with and without a leading
  // space, until the piece count is reached (there are enough at length 4).
  std::vector<std::string> level{""};
  for (int len = 1; static_cast<int64_t>(set.size()) < kPieces; ++len) {
    std::vector<std::string> next;
    for (const std::string& base : level)
      for (char c = 'a'; c <= 'z'; ++c) next.push_back(base + c);
    for (bool space : {false, true})
      for (const std::string& w : next) {
        if (static_cast<int64_t>(set.size()) >= kPieces) break;
        if (w.size() > 1 || space) add_word(letters(w, space));
      }
    level = std::move(next);
  }
  const char* named[] = {"<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
                         "<|reserved_special_token_1|>", "<|finetune_right_pad_id|>", "<|reserved_special_token_2|>",
                         "<|start_header_id|>", "<|end_header_id|>", "<|eom_id|>", "<|eot_id|>", "<|python_tag|>"};
  for (const char* t : named) set.add(t, 0.0f, 3);
  for (int i = 3; static_cast<int64_t>(set.size()) < kPieces + kSpecial; ++i)
    set.add("<|reserved_special_token_" + std::to_string(i) + "|>", 0.0f, 3);
  v.bos = kPieces;      // <|begin_of_text|>
  v.eos = kPieces + 9;  // <|eot_id|>, as the instruct models end a turn
  return v;
}

}  // namespace rlx::models::detail
