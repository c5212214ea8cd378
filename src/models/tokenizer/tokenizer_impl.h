// Shared machinery of the tokenizer models (internal): vocabulary tables, the
// special-token partition of the input, BOS/EOS handling and decoding. Each model
// (SentencePiece, byte-level BPE, WordPiece, Unigram) derives from TokenizerBase.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "rlx/models/tokenizer.h"

namespace rlx::tok {

/// Vocabulary data common to all models, checked by `build_vocab`.
struct Vocab {
  std::vector<std::string> tokens;
  std::vector<float> scores;          ///< one per token (0 where the spec had none)
  std::vector<TokenType> types;       ///< one per token
  std::unordered_map<std::string_view, int32_t> to_id;  ///< views into `tokens`; first id wins
  SpecialTokenIds ids;
  bool add_bos = false;
  bool add_eos = false;
  bool add_space_prefix = false;
  size_t max_token_bytes = 0;
  std::string source;
};

/// Checks the fields of `spec` every model needs and fills a Vocab (defaults for the
/// add_* flags come from the caller).
Expected<Vocab> build_vocab(const VocabSpec& spec, bool default_add_bos, bool default_add_eos,
                            bool default_add_space_prefix);

/// One BPE merge: its rank (position in the merge list) and the token it makes.
struct Merge {
  int32_t rank;
  int32_t result;
};
/// (left id, right id) -> merge.
using MergeTable = std::unordered_map<uint64_t, Merge>;
inline uint64_t pair_key(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}
/// Parses spec.merges ("left right", best first) against the vocabulary into `out`;
/// errors name the merge and the missing token.
Status build_merges(const VocabSpec& spec, const Vocab& vocab, MergeTable& out);

/// Implements the Tokenizer interface on top of two model hooks.
class TokenizerBase : public Tokenizer {
 public:
  std::vector<int32_t> encode(std::string_view text, bool add_special, bool parse_special) const override;
  Expected<std::string> decode(std::span<const int32_t> ids, bool render_special) const override;
  std::string token_to_piece(int32_t id, bool render_special) const override;

  int32_t n_tokens() const override { return static_cast<int32_t>(vocab_.tokens.size()); }
  std::string_view token_text(int32_t id) const override;
  TokenType token_type(int32_t id) const override;
  std::optional<int32_t> token_id(std::string_view text) const override;
  const SpecialTokenIds& special_ids() const override { return vocab_.ids; }
  bool add_bos() const override { return vocab_.add_bos; }
  bool add_eos() const override { return vocab_.add_eos; }
  bool is_end_of_generation(int32_t id) const override;
  bool is_special(int32_t id) const override;

 protected:
  explicit TokenizerBase(Vocab vocab);

  /// Appends the ids of `text`, a piece of input holding no special token.
  /// `after_special`: it starts the input or directly follows a special token.
  virtual void encode_fragment(std::string_view text, bool after_special, std::vector<int32_t>& out) const = 0;
  /// Appends the bytes of a kNormal/kUnused/kUndefined token (model-specific spelling).
  virtual void append_text_piece(int32_t id, std::string& out) const = 0;
  /// Whether decoding drops one leading space of the first piece (the space that
  /// encoding added in front of the text).
  virtual bool strips_leading_space() const { return vocab_.add_space_prefix; }

  bool valid_id(int32_t id) const { return id >= 0 && id < n_tokens(); }
  /// Id of the token with exactly this text, or -1.
  int32_t find(std::string_view text) const {
    auto it = vocab_.to_id.find(text);
    return it == vocab_.to_id.end() ? -1 : it->second;
  }

  Vocab vocab_;

 private:
  struct Fragment {
    size_t begin, end;
    int32_t special;  ///< token id, or -1 for plain text
  };
  void partition(std::string_view text, bool parse_special, std::vector<Fragment>& out) const;

  /// The special (control/unknown/user-defined) tokens as a byte trie: node 0 is the
  /// root; a node's tokens are the specials spelled by the path to it (-1: none). Finding
  /// the longest special at a text position walks the text once along the trie, so the
  /// cost per position is the length of the longest match attempt, not the number of
  /// specials (3,000 specials sharing a first byte once made a long prompt quadratic).
  struct SpecialTrieNode {
    int32_t token = -1;       ///< the lowest id spelled so, of any special type
    int32_t user_token = -1;  ///< the lowest user-defined id spelled so (matched without parse_special)
  };
  std::vector<SpecialTrieNode> special_nodes_{1};
  /// Child of node n along byte b, keyed (n << 8 | b).
  std::unordered_map<uint64_t, int32_t> special_edges_;
};

/// Appends piece text spelled with SentencePiece's ▁ for spaces (▁ -> ' ').
void append_metaspace_piece(std::string_view piece, std::string& out);

/// Applies byte-level pre-tokenizer regexes (ICU) to text.
class RegexSplitter {
 public:
  /// Compiles `patterns`; errors name the pattern and ICU's reason.
  static Expected<std::unique_ptr<RegexSplitter>> create(const std::vector<std::string>& patterns);
  ~RegexSplitter();

  /// Splits `cps` into words [begin, end) (code point indices): each pattern in turn
  /// splits every current piece into its matches and the text between them. A find that
  /// runs past ICU's time limit (catastrophic backtracking) leaves the rest of its piece
  /// whole and logs a warning once, instead of hanging.
  void split(const std::vector<char32_t>& cps, std::vector<std::pair<uint32_t, uint32_t>>& words) const;

 private:
  struct Impl;
  explicit RegexSplitter(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

/// The regexes of a named pre-tokenizer (`tokenizer.ggml.pre`); kNotFound if unknown.
Expected<std::vector<std::string>> pre_tokenizer_regexes(std::string_view name);
/// Whether the named pre-tokenizer's models take whole-word tokens before merging.
bool pre_tokenizer_ignores_merges(std::string_view name);

Expected<std::unique_ptr<Tokenizer>> make_sentencepiece_tokenizer(const VocabSpec& spec);
Expected<std::unique_ptr<Tokenizer>> make_byte_level_bpe_tokenizer(const VocabSpec& spec);
Expected<std::unique_ptr<Tokenizer>> make_wordpiece_tokenizer(const VocabSpec& spec);
Expected<std::unique_ptr<Tokenizer>> make_unigram_tokenizer(const VocabSpec& spec);

}  // namespace rlx::tok
