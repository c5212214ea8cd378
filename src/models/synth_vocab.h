// Vocabularies for synthetic models (rlx synth): a small SentencePiece vocabulary, and
// a byte-level BPE vocabulary with merges laid out like Llama 3's (128,000 pieces, then
// 256 control tokens). Every piece is unique and every token type valid, so any GGUF
// reader (llama.cpp's included) accepts the file.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace rlx::models::detail {

struct SynthVocab {
  std::string model;                ///< tokenizer.ggml.model: "llama" (SentencePiece), "gpt2" (byte-level BPE), "bert"
  std::string pre;                  ///< tokenizer.ggml.pre ("" = not written)
  std::vector<std::string> tokens;  ///< pieces, by id
  std::vector<float> scores;        ///< SentencePiece only (empty for BPE)
  std::vector<int32_t> types;       ///< 1 normal, 2 unknown, 3 control, 6 byte
  std::vector<std::string> merges;  ///< BPE only: "left right", by rank
  int64_t bos = -1, eos = -1, unk = -1;
  int64_t cls = -1, sep = -1, pad = -1;  ///< WordPiece only
};

/// <unk> <s> </s>, the 256 byte tokens, then English-like pieces by score.
SynthVocab make_spm_vocab(int64_t n_vocab);

/// A WordPiece vocabulary as llama.cpp's converter stores BERT's ("bert" model): [PAD]
/// [UNK] [CLS] [SEP] [MASK], then word-initial pieces marked with ▁ and bare
/// continuation pieces, filled up to n_vocab with unique unused pieces.
SynthVocab make_wordpiece_vocab(int64_t n_vocab);

/// Llama 3's layout: 128,000 byte-level BPE pieces (the 256 byte symbols, then pieces
/// built by merges, frequent English words first), then <|begin_of_text|> (128000) ...
/// <|eot_id|> (128009) and reserved control tokens up to 128255.
SynthVocab make_llama3_vocab();

}  // namespace rlx::models::detail
