// UTF-8 helpers and Unicode character classes used by the tokenizers (internal).
// Decoding never fails: an invalid byte becomes U+FFFD and decoding resumes at the
// next byte, as the reference tokenizers do. Character classes come from ICU.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace rlx::tok {

inline constexpr char32_t kReplacementChar = 0xFFFD;

/// Length of the valid UTF-8 sequence starting at `s[i]` (1..4), or 0 when the bytes
/// there do not form a valid character (bad lead byte, truncated, overlong, surrogate,
/// beyond U+10FFFF). `*cp` receives the code point when valid.
size_t utf8_decode_one(std::string_view s, size_t i, char32_t* cp);

/// Code points of `s`; each invalid byte becomes one U+FFFD.
std::vector<char32_t> utf8_to_cps(std::string_view s);

/// Appends the UTF-8 encoding of `cp` (which must be a valid scalar value).
void append_utf8(std::string& out, char32_t cp);

/// How many leading bytes of `s` form complete, valid UTF-8 characters, and whether
/// the rest is a (so far valid) incomplete character. Used by the stream decoder.
struct Utf8Scan {
  size_t complete = 0;        ///< bytes [0, complete) are valid and complete
  bool invalid_at_complete = false;  ///< s[complete] starts bytes that can never be valid
};
Utf8Scan utf8_scan(std::string_view s);

/// Appends `s` to `out`, replacing every invalid byte with U+FFFD.
void append_sanitized_utf8(std::string& out, std::string_view s);
/// Appends the character of `s` at byte `i` (an invalid or cut byte as U+FFFD) and returns
/// the bytes it took (>= 1; i < s.size()).
size_t append_sanitized_char(std::string& out, std::string_view s, size_t i);

/// GPT-2's byte <-> printable code point mapping used by byte-level BPE.
struct ByteLevelMap {
  std::array<std::string, 256> byte_to_utf8;  ///< byte -> UTF-8 of its code point
  std::array<int16_t, 324> cp_to_byte;        ///< code point (< 324) -> byte, or -1
};
const ByteLevelMap& byte_level_map();

// Character classes (ICU general categories / binary properties).
bool is_white_space(char32_t cp);       ///< Unicode White_Space property
bool is_punctuation(char32_t cp);       ///< general category P*
bool is_bert_punctuation(char32_t cp);  ///< P* or ASCII !"#$%&'()*+,-./:;<=>?@[\]^_`{|}~
bool is_bert_control(char32_t cp);      ///< Cc/Cf/Co/Cs/Cn except \t \n \r
bool is_nonspacing_mark(char32_t cp);   ///< general category Mn
bool is_cjk_ideograph(char32_t cp);     ///< the CJK blocks BERT isolates as single words

/// Full (possibly multi-code-point) lower-case mapping of one character, like Rust's
/// char::to_lowercase, appended to `out`.
void append_lowercase(std::vector<char32_t>& out, char32_t cp);

/// NFD decomposition of `cps`.
std::vector<char32_t> nfd(const std::vector<char32_t>& cps);

}  // namespace rlx::tok
