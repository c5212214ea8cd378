// SentencePiece's precompiled normalization map ("precompiled_charsmap"): a
// darts-clone double-array trie over UTF-8 input prefixes whose values are offsets
// into a table of NUL-terminated replacement strings. Unigram vocabularies (T5,
// XLM-RoBERTa) ship it in GGUF (`tokenizer.ggml.precompiled_charsmap`) and in
// tokenizer.json (normalizer "Precompiled", base64). Every read is bounds-checked, so
// a hostile blob can at worst normalise nothing.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "rlx/base/status.h"

namespace rlx::tok {

class PrecompiledCharsMap {
 public:
  /// An empty map (normalises nothing).
  PrecompiledCharsMap() = default;

  /// Parses the blob: a little-endian uint32 byte count of the trie, the trie's
  /// 32-bit units, then the replacement strings. Errors (kInvalidFile) name `source`
  /// and what is malformed. An empty blob gives an empty map.
  static Expected<PrecompiledCharsMap> parse(std::string_view blob, const std::string& source);

  bool empty() const { return units_.empty(); }

  /// Longest prefix of `text` (at least one byte) that the map rewrites: sets
  /// `*replacement` and returns the prefix length in bytes, or 0 when no prefix of
  /// `text` is in the map.
  size_t match(std::string_view text, std::string_view* replacement) const;

 private:
  std::vector<uint32_t> units_;
  std::string replacements_;
};

}  // namespace rlx::tok
