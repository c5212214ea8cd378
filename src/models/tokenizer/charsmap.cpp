// Lookup in SentencePiece's precompiled normalization map (see charsmap.h).
//
// Unit layout of the darts-clone double array, as the blob stores it:
//   bits 0..7   label of the edge into this unit (checked together with bit 31)
//   bit  8      the node has a value, held by the unit at (i ^ offset), i = its index
//   bit  9      the offset below is shifted left by 8 more bits
//   bits 10..30 offset of the node's children: the child for byte c is at i ^ offset ^ c
//   bit  31     set on value units, whose low 31 bits are the value
#include "charsmap.h"

#include <cstring>

namespace rlx::tok {
namespace {

uint32_t base_of(uint32_t unit) { return (unit >> 10) << ((unit & (1u << 9)) >> 6); }
uint32_t label_of(uint32_t unit) { return unit & ((1u << 31) | 0xFFu); }
bool has_value(uint32_t unit) { return ((unit >> 8) & 1u) != 0; }
uint32_t value_of(uint32_t unit) { return unit & ((1u << 31) - 1); }

}  // namespace

Expected<PrecompiledCharsMap> PrecompiledCharsMap::parse(std::string_view blob, const std::string& source) {
  PrecompiledCharsMap map;
  if (blob.empty()) return map;
  if (blob.size() < 4)
    return Error::invalid_file("{}: precompiled_charsmap has {} bytes, too short for its trie size", source,
                               blob.size());
  uint32_t trie_bytes = 0;
  for (int i = 3; i >= 0; --i) trie_bytes = (trie_bytes << 8) | static_cast<uint8_t>(blob[i]);
  if (trie_bytes == 0 || trie_bytes % 4 != 0 || trie_bytes > blob.size() - 4)
    return Error::invalid_file(
        "{}: precompiled_charsmap trie size {} does not fit its {} bytes (or is not a "
        "positive multiple of 4)",
        source, trie_bytes, blob.size());
  map.units_.resize(trie_bytes / 4);
  for (size_t i = 0; i < map.units_.size(); ++i) {
    const auto* p = reinterpret_cast<const uint8_t*>(blob.data() + 4 + 4 * i);
    map.units_[i] = uint32_t{p[0]} | (uint32_t{p[1]} << 8) | (uint32_t{p[2]} << 16) | (uint32_t{p[3]} << 24);
  }
  map.replacements_.assign(blob.substr(4 + trie_bytes));
  return map;
}

size_t PrecompiledCharsMap::match(std::string_view text, std::string_view* replacement) const {
  if (units_.empty()) return 0;
  const size_t n_units = units_.size();
  size_t best_len = 0;
  uint32_t best_value = 0;
  uint32_t node = base_of(units_[0]);
  for (size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<uint8_t>(text[i]);
    if (c == 0) break;
    node ^= c;
    if (node >= n_units || label_of(units_[node]) != c) break;
    const bool value_here = has_value(units_[node]);
    node ^= base_of(units_[node]);
    if (value_here) {
      if (node >= n_units) break;
      best_len = i + 1;
      best_value = value_of(units_[node]);
    }
  }
  if (best_len == 0 || best_value >= replacements_.size()) return 0;
  const char* s = replacements_.data() + best_value;
  const size_t room = replacements_.size() - best_value;
  const void* nul = std::memchr(s, '\0', room);
  *replacement = std::string_view(s, nul ? static_cast<size_t>(static_cast<const char*>(nul) - s) : room);
  return best_len;
}

}  // namespace rlx::tok
