// Python string semantics over UTF-8 for the Jinja renderer: code points (len, slicing),
// str.isspace / upper / lower, splitlines, float repr, and string escaping for repr()
// and json.dumps. Invalid UTF-8 bytes count as one code point each and round-trip.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace rlx::jinja::text {

/// Code points of `s`; an invalid byte b becomes U+DC00+b (Python's surrogateescape).
std::u32string decode(std::string_view s);
/// Back to UTF-8; U+DC80..U+DCFF become the raw bytes they stand for.
std::string encode(std::u32string_view s);
void append_utf8(std::string& out, char32_t c);
/// Number of code points (len(s) in Python).
size_t length(std::string_view s);
bool is_ascii(std::string_view s);

/// str.isspace for one code point (Unicode White_Space plus the separators Python counts).
bool is_space(char32_t c);
/// Case mapping for ASCII, Latin-1, Latin Extended-A, Greek and Cyrillic; other code
/// points map to themselves.
char32_t to_upper(char32_t c);
char32_t to_lower(char32_t c);
bool is_upper(char32_t c);
bool is_lower(char32_t c);
bool is_alpha(char32_t c);  ///< letters of the ranges above, plus CJK and other scripts' letters
bool is_digit(char32_t c);  ///< ASCII digits (str.isdigit for the common case)
std::string upper(std::string_view s);
std::string lower(std::string_view s);

/// str.strip / lstrip / rstrip: whitespace when `chars` is null, else any of `chars`.
std::string strip(std::string_view s, const std::string* chars, bool left, bool right);
/// str.splitlines() (without keepends).
std::vector<std::string> splitlines(std::string_view s);
/// str.split(sep, maxsplit): whitespace runs when `sep` is null.
std::vector<std::string> split(std::string_view s, const std::string* sep, int64_t maxsplit);
/// str.rsplit(sep, maxsplit).
std::vector<std::string> rsplit(std::string_view s, const std::string* sep, int64_t maxsplit);
/// str.replace(old, new, count); count < 0: all.
std::string replace(std::string_view s, std::string_view from, std::string_view to, int64_t count);

/// repr(float) as Python writes it: "1.0", "0.1", "1e+16", "1e-05", "inf", "nan".
std::string float_repr(double d);
/// repr(str): quotes chosen as Python does, escapes for control characters.
void append_repr(std::string& out, std::string_view s);
/// A JSON string literal as json.dumps writes it.
void append_json_string(std::string& out, std::string_view s, bool ensure_ascii);

}  // namespace rlx::jinja::text
