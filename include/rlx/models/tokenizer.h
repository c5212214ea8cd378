// Text <-> token ids for the vocabularies that ship inside model files:
// SentencePiece-style BPE by score ("llama"), byte-level BPE by merge rank ("gpt2")
// WordPiece ("bert") and Unigram ("t5"). A `VocabSpec` is plain data (filled from GGUF metadata or
// a Hugging Face tokenizer.json); `make_tokenizer` checks it and builds a `Tokenizer`.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "rlx/base/status.h"
#include "rlx/formats/gguf.h"
#include "rlx/formats/gguf_writer.h"

namespace rlx {

/// What a vocabulary entry is; numbering follows GGUF `tokenizer.ggml.token_type`.
enum class TokenType : int32_t {
  kUndefined = 0,
  kNormal = 1,       ///< ordinary text piece
  kUnknown = 2,      ///< the unknown-token marker (e.g. "<unk>")
  kControl = 3,      ///< control token (BOS, EOS, chat markers): matched only when asked
  kUserDefined = 4,  ///< added token: always matched as a whole in the input text
  kUnused = 5,       ///< reserved slot, never produced by encoding
  kByte = 6,         ///< SentencePiece byte-fallback token "<0xNN>"
};

/// The tokenization algorithm.
enum class TokenizerKind {
  kSentencePiece,  ///< "llama" (also gemma): merges by piece score, ▁ for spaces, byte fallback
  kByteLevelBpe,   ///< "gpt2": bytes mapped to printable code points, merges by rank
  kWordPiece,      ///< "bert": basic normalisation, greedy longest match
  kUnigram,        ///< "t5": SentencePiece unigram, Viterbi over piece scores, byte fallback
};

/// Ids of the special tokens; -1 where the vocabulary has none.
struct SpecialTokenIds {
  int32_t bos = -1;
  int32_t eos = -1;
  int32_t eot = -1;   ///< end of turn (chat models), also ends generation
  int32_t unk = -1;
  int32_t pad = -1;
  int32_t sep = -1;
  int32_t cls = -1;
  int32_t mask = -1;
};

/// Everything needed to build a tokenizer, independent of the file it came from.
struct VocabSpec {
  /// Algorithm name as in GGUF `tokenizer.ggml.model`: "llama" / "gemma" / "gemma3"
  /// (SentencePiece), "gpt2" (byte-level BPE), "bert" (WordPiece), "t5" (Unigram).
  std::string model;
  /// Pre-tokenizer name (`tokenizer.ggml.pre`) for byte-level BPE: "default", "gpt-2",
  /// "llama-bpe", "qwen2", "deepseek-llm", "deepseek-coder", "falcon", "starcoder", ...
  /// Empty means "default". Ignored by the other models.
  std::string pre;
  /// For byte-level BPE only: explicit pre-tokenizer regexes, applied in order (each
  /// splits the pieces left by the previous one, keeping matches and the text between
  /// them). When non-empty they replace the set chosen by `pre`.
  std::vector<std::string> pre_regexes;

  std::vector<std::string> tokens;       ///< token text, index = id
  std::vector<float> scores;             ///< empty, or one per token (SentencePiece merge priority;
                                         ///< Unigram: the piece's log probability, required)
  std::vector<TokenType> token_types;    ///< empty (all kNormal), or one per token
  std::vector<std::string> merges;       ///< byte-level BPE: "left right", best rank first

  SpecialTokenIds ids;
  std::optional<bool> add_bos;           ///< unset: the model's default (llama yes, gpt2 no, bert yes)
  std::optional<bool> add_eos;           ///< unset: the model's default (bert yes, others no)
  std::optional<bool> add_space_prefix;  ///< unset: llama yes, others no
  std::optional<bool> ignore_merges;     ///< BPE: a word that is a token is taken whole (llama-3)

  /// WordPiece spelling. Hugging Face vocabularies mark continuations ("##ing");
  /// GGUF files instead prefix word starts with "▁" and store continuations bare.
  std::string wordpiece_word_prefix;                  ///< prefix of a word-initial piece
  std::string wordpiece_continuing_prefix = "##";     ///< prefix of a continuation piece
  bool wordpiece_lowercase = true;                    ///< lower-case (and strip accents)
  std::optional<bool> wordpiece_strip_accents;        ///< unset: same as lowercase
  int32_t wordpiece_max_chars_per_word = 100;         ///< longer words become [UNK]

  /// Unigram normalisation: SentencePiece's precompiled charsmap (raw bytes; empty:
  /// the text is not rewritten), GGUF `tokenizer.ggml.precompiled_charsmap`.
  std::string precompiled_charsmap;
  /// Unigram: trim the text and collapse runs of spaces (unset: yes, as T5 does).
  std::optional<bool> remove_extra_whitespaces;
  /// Unigram: a character no piece covers becomes its <0xNN> tokens (unset: yes when
  /// the vocabulary has all 256 byte tokens), else the unknown token.
  std::optional<bool> byte_fallback;

  /// Where the vocabulary came from (a path), used in error messages.
  std::string source;
};

/// Encoder/decoder over one vocabulary. Immutable after construction: all methods
/// are const and may be called from several threads at once.
class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  /// Token ids for `text` (UTF-8; invalid bytes are handled like the reference
  /// tokenizers: replaced by U+FFFD or sent through byte fallback, never an error).
  /// `add_special`: add BOS/EOS (or [CLS]/[SEP]) as the vocabulary asks.
  /// `parse_special`: control tokens written in the text ("<|im_start|>") become their
  /// ids; otherwise they are tokenized as plain text. User-defined (added) tokens are
  /// always matched.
  virtual std::vector<int32_t> encode(std::string_view text, bool add_special = true,
                                      bool parse_special = false) const = 0;

  /// The text of `ids`. Control/unknown tokens appear as their text when
  /// `render_special`, else as nothing. The bytes are returned as they are (a partial
  /// UTF-8 character from byte tokens stays partial); see StreamDecoder for display.
  /// Errors (kInvalidArgument) name the first id outside [0, n_tokens()).
  virtual Expected<std::string> decode(std::span<const int32_t> ids,
                                       bool render_special = true) const = 0;

  /// The bytes one token stands for (▁ → space, "<0x41>" → "A", byte-level code
  /// points → bytes). An id outside [0, n_tokens()) gives an empty string.
  virtual std::string token_to_piece(int32_t id, bool render_special = true) const = 0;

  /// Number of entries in the vocabulary.
  virtual int32_t n_tokens() const = 0;
  /// Raw vocabulary text of `id` (empty for an out-of-range id).
  virtual std::string_view token_text(int32_t id) const = 0;
  /// Type of `id` (kUndefined for an out-of-range id).
  virtual TokenType token_type(int32_t id) const = 0;
  /// The id whose raw vocabulary text is exactly `text`.
  virtual std::optional<int32_t> token_id(std::string_view text) const = 0;

  virtual TokenizerKind kind() const = 0;
  virtual const SpecialTokenIds& special_ids() const = 0;
  /// Whether encode(add_special = true) prepends BOS ([CLS] for WordPiece).
  virtual bool add_bos() const = 0;
  /// Whether encode(add_special = true) appends EOS ([SEP] for WordPiece).
  virtual bool add_eos() const = 0;
  /// True for ids that end generation (EOS, EOT).
  virtual bool is_end_of_generation(int32_t id) const = 0;
  /// True for control, unknown and user-defined tokens.
  virtual bool is_special(int32_t id) const = 0;
};

/// Checks `spec` (sizes agree, ids in range, merges name existing tokens, ...) and
/// builds its tokenizer. Errors name the source, the field and the offending entry.
Expected<std::unique_ptr<Tokenizer>> make_tokenizer(const VocabSpec& spec);

/// Turns token ids into display text as they arrive (e.g. while generating): each
/// `push` returns only complete UTF-8 characters; bytes that can never form a valid
/// character are replaced by U+FFFD, so the concatenated output is always valid UTF-8.
class StreamDecoder {
 public:
  /// `tokenizer` must outlive this object.
  explicit StreamDecoder(const Tokenizer& tokenizer, bool render_special = false)
      : tokenizer_(&tokenizer), render_special_(render_special) {}

  /// Adds one token; returns the text that became complete. Errors name an id outside
  /// the vocabulary (the state is left unchanged).
  Expected<std::string> push(int32_t id);
  /// Ends the stream: returns what is pending, an incomplete tail as U+FFFD.
  std::string flush();

 private:
  const Tokenizer* tokenizer_;
  bool render_special_;
  bool at_start_ = true;
  std::string pending_;
};

/// Reads the `tokenizer.ggml.*` keys of a GGUF file (tokens, scores, token_type,
/// merges, special ids, add_bos/add_eos/add_space_prefix, pre). Errors name the path
/// and key. Only the header and metadata are read.
Expected<VocabSpec> vocab_from_gguf(const std::string& path);
/// Same, from an already parsed GGUF file (e.g. the model being loaded).
Expected<VocabSpec> vocab_from_gguf(const formats::GgufFile& file);

/// Reads a Hugging Face tokenizer.json (models BPE with or without byte_fallback,
/// and WordPiece; pre-tokenizers ByteLevel / Split / Sequence / BertPreTokenizer /
/// Metaspace; added tokens). Errors name the path and the JSON field.
Expected<VocabSpec> vocab_from_hf_tokenizer_json(const std::string& path);
/// Same, from the JSON text; `name` is used in error messages.
Expected<VocabSpec> vocab_from_hf_tokenizer_json_text(std::string_view json, const std::string& name);

/// The GGUF pre-tokenizer name (`tokenizer.ggml.pre`) whose regexes are exactly
/// `regexes`; kUnsupported when no named set matches.
Expected<std::string> pre_tokenizer_name(const std::vector<std::string>& regexes);

/// Writes `spec` as the `tokenizer.ggml.*` keys llama.cpp's converter writes (the inverse
/// of vocab_from_gguf): model, pre, tokens, scores, token_type, merges, special ids,
/// add_* flags, the Unigram charsmap; WordPiece vocabularies in GGUF's spelling (word
/// starts with ▁, continuations bare). Errors name the source: a byte-level BPE whose
/// pre-tokenizer regexes have no GGUF name, a key already present.
Status write_vocab_to_gguf(const VocabSpec& spec, formats::GgufWriter& w);

/// Convenience: vocab_from_gguf + make_tokenizer.
Expected<std::unique_ptr<Tokenizer>> load_tokenizer_from_gguf(const std::string& path);

}  // namespace rlx
