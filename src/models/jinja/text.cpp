// Python string semantics over UTF-8 (see text.h): decoding with surrogateescape,
// whitespace and case tables, split / strip / splitlines / replace, float repr and the
// escaping of repr() and json.dumps.
#include "models/jinja/text.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace rlx::jinja::text {

namespace {

// Length of the valid UTF-8 sequence at s[i] (decoded into *cp), or 0 when invalid.
size_t decode_one(std::string_view s, size_t i, char32_t* cp) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) {
    *cp = b0;
    return 1;
  }
  size_t n = 0;
  char32_t c = 0, min = 0;
  if ((b0 & 0xE0) == 0xC0) {
    n = 2, c = b0 & 0x1F, min = 0x80;
  } else if ((b0 & 0xF0) == 0xE0) {
    n = 3, c = b0 & 0x0F, min = 0x800;
  } else if ((b0 & 0xF8) == 0xF0) {
    n = 4, c = b0 & 0x07, min = 0x10000;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    const auto b = static_cast<unsigned char>(s[i + k]);
    if ((b & 0xC0) != 0x80) return 0;
    c = (c << 6) | (b & 0x3F);
  }
  if (c < min || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) return 0;
  *cp = c;
  return n;
}

// Upper/lower pairs laid out as alternating code points (upper even or odd).
bool in_alternating(char32_t c, char32_t lo, char32_t hi) { return c >= lo && c <= hi; }

// The code point at s[i], moving i past it; an invalid byte becomes U+DC80..U+DCFF
// (surrogateescape).
char32_t next_code_point(std::string_view s, size_t& i) {
  char32_t cp = 0;
  const size_t n = decode_one(s, i, &cp);
  if (n == 0) return 0xDC00 + static_cast<unsigned char>(s[i++]);
  i += n;
  return cp;
}

}  // namespace

std::u32string decode(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) out.push_back(next_code_point(s, i));
  return out;
}

void append_utf8(std::string& out, char32_t c) {
  if (c >= 0xDC80 && c <= 0xDCFF) {  // an escaped invalid byte
    out.push_back(static_cast<char>(c - 0xDC00));
  } else if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (c >> 6)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (c >> 12)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (c >> 18)));
    out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

std::string encode(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) append_utf8(out, c);
  return out;
}

bool is_ascii(std::string_view s) {
  for (char c : s)
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  return true;
}

size_t length(std::string_view s) {
  if (is_ascii(s)) return s.size();
  size_t n = 0, i = 0;
  while (i < s.size()) {
    char32_t cp = 0;
    const size_t k = decode_one(s, i, &cp);
    i += k == 0 ? 1 : k;
    ++n;
  }
  return n;
}

bool is_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

char32_t to_upper(char32_t c) {
  if (c < 0x80) return (c >= 'a' && c <= 'z') ? c - 32 : c;
  if ((c >= 0xE0 && c <= 0xFE && c != 0xF7)) return c - 32;
  if (c == 0xFF) return 0x178;
  if (c == 0xB5) return 0x39C;
  if (c == 0x130) return c;
  if (c == 0x131) return 'I';
  if (in_alternating(c, 0x100, 0x137) || in_alternating(c, 0x14A, 0x177)) return (c & 1) ? c - 1 : c;
  if (in_alternating(c, 0x139, 0x148) || in_alternating(c, 0x179, 0x17E)) return (c & 1) ? c : c - 1;
  if (c == 0x17F) return 'S';
  if (c >= 0x3B1 && c <= 0x3C9) return c == 0x3C2 ? 0x3A3 : c - 32;
  if (c == 0x3AC) return 0x386;
  if (c >= 0x3AD && c <= 0x3AF) return c - 37;
  if (c == 0x3CC) return 0x38C;
  if (c == 0x3CD || c == 0x3CE) return c - 63;
  if (c >= 0x430 && c <= 0x44F) return c - 32;
  if (c >= 0x450 && c <= 0x45F) return c - 80;
  if (in_alternating(c, 0x460, 0x481) || in_alternating(c, 0x48A, 0x4BF) || in_alternating(c, 0x4D0, 0x52F))
    return (c & 1) ? c - 1 : c;
  if (in_alternating(c, 0x4C1, 0x4CE)) return (c & 1) ? c : c - 1;
  if (c >= 0x561 && c <= 0x586) return c - 48;
  if (in_alternating(c, 0x1E00, 0x1E95) || in_alternating(c, 0x1EA0, 0x1EFF)) return (c & 1) ? c - 1 : c;
  if (c >= 0xFF41 && c <= 0xFF5A) return c - 32;
  return c;
}

char32_t to_lower(char32_t c) {
  if (c < 0x80) return (c >= 'A' && c <= 'Z') ? c + 32 : c;
  if ((c >= 0xC0 && c <= 0xDE && c != 0xD7)) return c + 32;
  if (c == 0x178) return 0xFF;
  if (c == 0x130 || c == 0x131) return c == 0x130 ? 'i' : c;
  if (in_alternating(c, 0x100, 0x137) || in_alternating(c, 0x14A, 0x177)) return (c & 1) ? c : c + 1;
  if (in_alternating(c, 0x139, 0x148) || in_alternating(c, 0x179, 0x17E)) return (c & 1) ? c + 1 : c;
  if (c >= 0x391 && c <= 0x3A9 && c != 0x3A2) return c + 32;
  if (c == 0x386) return 0x3AC;
  if (c >= 0x388 && c <= 0x38A) return c + 37;
  if (c == 0x38C) return 0x3CC;
  if (c == 0x38E || c == 0x38F) return c + 63;
  if (c >= 0x410 && c <= 0x42F) return c + 32;
  if (c >= 0x400 && c <= 0x40F) return c + 80;
  if (in_alternating(c, 0x460, 0x481) || in_alternating(c, 0x48A, 0x4BF) || in_alternating(c, 0x4D0, 0x52F))
    return (c & 1) ? c : c + 1;
  if (in_alternating(c, 0x4C1, 0x4CE)) return (c & 1) ? c + 1 : c;
  if (c >= 0x531 && c <= 0x556) return c + 48;
  if (in_alternating(c, 0x1E00, 0x1E95) || in_alternating(c, 0x1EA0, 0x1EFF)) return (c & 1) ? c : c + 1;
  if (c >= 0xFF21 && c <= 0xFF3A) return c + 32;
  return c;
}

bool is_upper(char32_t c) { return to_lower(c) != c; }
bool is_lower(char32_t c) { return to_upper(c) != c || c == 0xDF; }

bool is_alpha(char32_t c) {
  if (c < 0x80) return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
  if (c == 0xAA || c == 0xB5 || c == 0xBA) return true;
  if (c >= 0xC0 && c <= 0x24F) return c != 0xD7 && c != 0xF7;
  if (is_upper(c) || is_lower(c)) return true;
  return (c >= 0x3040 && c <= 0x30FF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x4E00 && c <= 0x9FFF) ||
         (c >= 0xAC00 && c <= 0xD7A3) || (c >= 0x5D0 && c <= 0x5EA) || (c >= 0x620 && c <= 0x64A);
}

bool is_digit(char32_t c) { return c >= '0' && c <= '9'; }

std::string upper(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  if (is_ascii(s)) {
    for (char c : s) out.push_back((c >= 'a' && c <= 'z') ? static_cast<char>(c - 32) : c);
    return out;
  }
  for (char32_t c : decode(s)) {
    if (c == 0xDF) {  // ß
      out += "SS";
    } else {
      append_utf8(out, to_upper(c));
    }
  }
  return out;
}

std::string lower(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  if (is_ascii(s)) {
    for (char c : s) out.push_back((c >= 'A' && c <= 'Z') ? static_cast<char>(c + 32) : c);
    return out;
  }
  for (char32_t c : decode(s)) {
    append_utf8(out, to_lower(c));
    if (c == 0x130) append_utf8(out, 0x307);  // İ -> i + combining dot above, as Python
  }
  return out;
}

std::string strip(std::string_view s, const std::string* chars, bool left, bool right) {
  const std::u32string cs = decode(s);
  std::u32string set;
  if (chars != nullptr) set = decode(*chars);
  auto drop = [&](char32_t c) { return chars == nullptr ? is_space(c) : set.find(c) != std::u32string::npos; };
  size_t b = 0, e = cs.size();
  if (left)
    while (b < e && drop(cs[b])) ++b;
  if (right)
    while (e > b && drop(cs[e - 1])) --e;
  return encode(std::u32string_view(cs).substr(b, e - b));
}

std::vector<std::string> splitlines(std::string_view s) {
  std::vector<std::string> out;
  const std::u32string cs = decode(s);
  size_t start = 0, i = 0;
  while (i < cs.size()) {
    const char32_t c = cs[i];
    const bool brk = c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || (c >= 0x1C && c <= 0x1E) || c == 0x85 ||
                     c == 0x2028 || c == 0x2029;
    if (!brk) {
      ++i;
      continue;
    }
    out.push_back(encode(std::u32string_view(cs).substr(start, i - start)));
    i += (c == '\r' && i + 1 < cs.size() && cs[i + 1] == '\n') ? 2 : 1;
    start = i;
  }
  if (start < cs.size()) out.push_back(encode(std::u32string_view(cs).substr(start)));
  return out;
}

std::vector<std::string> split(std::string_view s, const std::string* sep, int64_t maxsplit) {
  std::vector<std::string> out;
  if (sep != nullptr) {
    size_t pos = 0;
    while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
      const size_t f = s.find(*sep, pos);
      if (f == std::string_view::npos) break;
      out.emplace_back(s.substr(pos, f - pos));
      pos = f + sep->size();
    }
    out.emplace_back(s.substr(pos));
    return out;
  }
  const std::u32string cs = decode(s);
  size_t i = 0;
  while (true) {
    while (i < cs.size() && is_space(cs[i])) ++i;
    if (i >= cs.size()) break;
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) >= maxsplit) {
      size_t e = cs.size();
      while (e > i && is_space(cs[e - 1])) --e;
      out.push_back(encode(std::u32string_view(cs).substr(i, e - i)));
      break;
    }
    size_t j = i;
    while (j < cs.size() && !is_space(cs[j])) ++j;
    out.push_back(encode(std::u32string_view(cs).substr(i, j - i)));
    i = j;
  }
  return out;
}

std::vector<std::string> rsplit(std::string_view s, const std::string* sep, int64_t maxsplit) {
  std::vector<std::string> out;
  if (sep != nullptr) {
    size_t end = s.size();
    while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
      if (end < sep->size()) break;
      const size_t f = s.rfind(*sep, end - sep->size());
      if (f == std::string_view::npos) break;
      out.emplace_back(s.substr(f + sep->size(), end - f - sep->size()));
      end = f;
    }
    out.emplace_back(s.substr(0, end));
    return {out.rbegin(), out.rend()};
  }
  const std::u32string cs = decode(s);
  size_t e = cs.size();
  while (true) {
    while (e > 0 && is_space(cs[e - 1])) --e;
    if (e == 0) break;
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) >= maxsplit) {
      size_t b = 0;
      while (b < e && is_space(cs[b])) ++b;
      out.push_back(encode(std::u32string_view(cs).substr(b, e - b)));
      break;
    }
    size_t b = e;
    while (b > 0 && !is_space(cs[b - 1])) --b;
    out.push_back(encode(std::u32string_view(cs).substr(b, e - b)));
    e = b;
  }
  return {out.rbegin(), out.rend()};
}

std::string replace(std::string_view s, std::string_view from, std::string_view to, int64_t count) {
  std::string out;
  if (from.empty()) {  // Python inserts `to` around every code point
    const std::u32string cs = decode(s);
    int64_t done = 0;
    for (size_t i = 0; i <= cs.size(); ++i) {
      if (count < 0 || done < count) {
        out += to;
        ++done;
      }
      if (i < cs.size()) append_utf8(out, cs[i]);
    }
    return out;
  }
  size_t pos = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    const size_t f = s.find(from, pos);
    if (f == std::string_view::npos) break;
    out.append(s.substr(pos, f - pos));
    out.append(to);
    pos = f + from.size();
    ++done;
  }
  out.append(s.substr(pos));
  return out;
}

std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string sci(buf, r.ptr);  // "-1.2345e+100": shortest digits that read back
  std::string out;
  size_t i = 0;
  if (sci[0] == '-') {
    out.push_back('-');
    i = 1;
  }
  const size_t e = sci.find('e');
  std::string digits;
  for (size_t k = i; k < e; ++k)
    if (sci[k] != '.') digits.push_back(sci[k]);
  const int exp10 = std::atoi(sci.c_str() + e + 1);
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  const int decpt = exp10 + 1;  // value = 0.DIGITS * 10^decpt
  if (decpt > -4 && decpt <= 16) {
    if (decpt <= 0) {
      out.append("0.");
      out.append(static_cast<size_t>(-decpt), '0');
      out.append(digits);
    } else if (static_cast<size_t>(decpt) >= digits.size()) {
      out.append(digits);
      out.append(static_cast<size_t>(decpt) - digits.size(), '0');
      out.append(".0");
    } else {
      out.append(digits, 0, static_cast<size_t>(decpt));
      out.push_back('.');
      out.append(digits, static_cast<size_t>(decpt), std::string::npos);
    }
    return out;
  }
  out.push_back(digits[0]);
  if (digits.size() > 1) {
    out.push_back('.');
    out.append(digits, 1, std::string::npos);
  }
  char exp_buf[16];
  std::snprintf(exp_buf, sizeof exp_buf, "e%c%02d", exp10 < 0 ? '-' : '+', std::abs(exp10));
  return out + exp_buf;
}

namespace {

// Python's str.isprintable for the code points a repr() escapes.
bool printable(char32_t c) {
  if (c < 0x20 || c == 0x7F) return false;
  if (c >= 0x80 && c <= 0xA0) return false;
  if (c == 0xAD || c == 0x1680 || (c >= 0x2000 && c <= 0x200F) || (c >= 0x2028 && c <= 0x202F) ||
      (c >= 0x205F && c <= 0x2064) || c == 0x3000 || c == 0xFEFF)
    return false;
  if (c >= 0xD800 && c <= 0xDFFF) return false;
  if (c >= 0xE000 && c <= 0xF8FF) return false;
  return true;
}

void append_hex(std::string& out, const char* prefix, unsigned v, int width) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%s%0*x", prefix, width, v);
  out += buf;
}

}  // namespace

void append_repr(std::string& out, std::string_view s) {
  const bool has_single = s.find('\'') != std::string_view::npos;
  const bool has_double = s.find('"') != std::string_view::npos;
  const char quote = (has_single && !has_double) ? '"' : '\'';
  out.push_back(quote);
  size_t i = 0;
  while (i < s.size()) {
    // Runs of printable ASCII other than the quote and backslash are copied as they are.
    const size_t run_start = i;
    while (i < s.size()) {
      const auto b = static_cast<unsigned char>(s[i]);
      if (b < 0x20 || b >= 0x7F || b == static_cast<unsigned char>(quote) || b == '\\') break;
      ++i;
    }
    out.append(s.data() + run_start, i - run_start);
    if (i == s.size()) break;
    const char32_t c = next_code_point(s, i);
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (printable(c)) {
      append_utf8(out, c);
    } else if (c <= 0xFF) {
      append_hex(out, "\\x", static_cast<unsigned>(c), 2);
    } else if (c <= 0xFFFF) {
      append_hex(out, "\\u", static_cast<unsigned>(c), 4);
    } else {
      append_hex(out, "\\U", static_cast<unsigned>(c), 8);
    }
  }
  out.push_back(quote);
}

void append_json_string(std::string& out, std::string_view s, bool ensure_ascii) {
  out.push_back('"');
  auto escape_byte = [&](char32_t c) -> bool {
    switch (c) {
      case '"': out += "\\\""; return true;
      case '\\': out += "\\\\"; return true;
      case '\n': out += "\\n"; return true;
      case '\r': out += "\\r"; return true;
      case '\t': out += "\\t"; return true;
      case '\b': out += "\\b"; return true;
      case '\f': out += "\\f"; return true;
      default: break;
    }
    if (c < 0x20) {
      append_hex(out, "\\u", static_cast<unsigned>(c), 4);
      return true;
    }
    return false;
  };
  if (!ensure_ascii) {
    for (char ch : s) {
      const auto c = static_cast<unsigned char>(ch);
      if (!escape_byte(c)) out.push_back(ch);
    }
  } else {
    for (char32_t c : decode(s)) {
      if (escape_byte(c)) continue;
      if (c >= 0x20 && c < 0x7F) {
        out.push_back(static_cast<char>(c));
      } else if (c <= 0xFFFF) {
        append_hex(out, "\\u", static_cast<unsigned>(c), 4);
      } else {
        const char32_t v = c - 0x10000;
        append_hex(out, "\\u", static_cast<unsigned>(0xD800 + (v >> 10)), 4);
        append_hex(out, "\\u", static_cast<unsigned>(0xDC00 + (v & 0x3FF)), 4);
      }
    }
  }
  out.push_back('"');
}

}  // namespace rlx::jinja::text
