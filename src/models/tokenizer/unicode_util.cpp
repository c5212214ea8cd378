// UTF-8 decoding/encoding, GPT-2's byte-level mapping and ICU-backed character classes
// shared by the tokenizer models.
#include "unicode_util.h"

#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>
#include <unicode/ustring.h>

namespace rlx::tok {
namespace {

bool is_cont(uint8_t b) { return (b & 0xC0) == 0x80; }

// For a lead byte: the sequence length and the allowed range of the second byte
// (the rest must be plain continuation bytes). len 0: not a valid lead byte.
struct LeadInfo {
  int len;
  uint8_t lo, hi;
};

LeadInfo lead_info(uint8_t b) {
  if (b < 0x80) return {1, 0, 0};
  if (b < 0xC2) return {0, 0, 0};
  if (b < 0xE0) return {2, 0x80, 0xBF};
  if (b == 0xE0) return {3, 0xA0, 0xBF};
  if (b == 0xED) return {3, 0x80, 0x9F};
  if (b < 0xF0) return {3, 0x80, 0xBF};
  if (b == 0xF0) return {4, 0x90, 0xBF};
  if (b < 0xF4) return {4, 0x80, 0xBF};
  if (b == 0xF4) return {4, 0x80, 0x8F};
  return {0, 0, 0};
}

}  // namespace

size_t utf8_decode_one(std::string_view s, size_t i, char32_t* cp) {
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  const uint8_t b0 = p[i];
  const LeadInfo li = lead_info(b0);
  if (li.len == 0) return 0;
  if (li.len == 1) {
    *cp = b0;
    return 1;
  }
  if (i + static_cast<size_t>(li.len) > s.size()) return 0;
  const uint8_t b1 = p[i + 1];
  if (b1 < li.lo || b1 > li.hi) return 0;
  for (int k = 2; k < li.len; ++k)
    if (!is_cont(p[i + k])) return 0;
  char32_t c = b0 & (0x7F >> li.len);
  for (int k = 1; k < li.len; ++k) c = (c << 6) | (p[i + k] & 0x3F);
  *cp = c;
  return static_cast<size_t>(li.len);
}

std::vector<char32_t> utf8_to_cps(std::string_view s) {
  std::vector<char32_t> out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    char32_t cp = 0;
    const size_t n = utf8_decode_one(s, i, &cp);
    if (n == 0) {
      out.push_back(kReplacementChar);
      ++i;
    } else {
      out.push_back(cp);
      i += n;
    }
  }
  return out;
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

Utf8Scan utf8_scan(std::string_view s) {
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  size_t i = 0;
  while (i < s.size()) {
    char32_t cp = 0;
    const size_t n = utf8_decode_one(s, i, &cp);
    if (n > 0) {
      i += n;
      continue;
    }
    // Not a complete character: is it the valid beginning of one, cut by the end?
    const LeadInfo li = lead_info(p[i]);
    bool prefix_ok = li.len > 1 && i + static_cast<size_t>(li.len) > s.size();
    if (prefix_ok && i + 1 < s.size()) prefix_ok = p[i + 1] >= li.lo && p[i + 1] <= li.hi;
    for (size_t k = i + 2; prefix_ok && k < s.size(); ++k) prefix_ok = is_cont(p[k]);
    return {i, !prefix_ok};
  }
  return {i, false};
}

size_t append_sanitized_char(std::string& out, std::string_view s, size_t i) {
  char32_t cp = 0;
  const size_t n = utf8_decode_one(s, i, &cp);
  if (n == 0) {
    append_utf8(out, kReplacementChar);
    return 1;
  }
  out.append(s.substr(i, n));
  return n;
}

void append_sanitized_utf8(std::string& out, std::string_view s) {
  for (size_t i = 0; i < s.size();) i += append_sanitized_char(out, s, i);
}

const ByteLevelMap& byte_level_map() {
  static const ByteLevelMap map = [] {
    ByteLevelMap m;
    m.cp_to_byte.fill(-1);
    int extra = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      const char32_t cp = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + extra++);
      append_utf8(m.byte_to_utf8[b], cp);
      m.cp_to_byte[cp] = static_cast<int16_t>(b);
    }
    return m;
  }();
  return map;
}

bool is_white_space(char32_t cp) {
  if (cp < 0x80) return cp == ' ' || (cp >= 0x09 && cp <= 0x0D);
  return u_hasBinaryProperty(static_cast<UChar32>(cp), UCHAR_WHITE_SPACE);
}

bool is_punctuation(char32_t cp) { return (U_GET_GC_MASK(static_cast<UChar32>(cp)) & U_GC_P_MASK) != 0; }

bool is_bert_punctuation(char32_t cp) {
  if ((cp >= 33 && cp <= 47) || (cp >= 58 && cp <= 64) || (cp >= 91 && cp <= 96) || (cp >= 123 && cp <= 126))
    return true;
  return is_punctuation(cp);
}

bool is_bert_control(char32_t cp) {
  if (cp == '\t' || cp == '\n' || cp == '\r') return false;
  constexpr uint32_t kMask = U_GC_CC_MASK | U_GC_CF_MASK | U_GC_CO_MASK | U_GC_CS_MASK | U_GC_CN_MASK;
  return (U_GET_GC_MASK(static_cast<UChar32>(cp)) & kMask) != 0;
}

bool is_nonspacing_mark(char32_t cp) {
  return u_charType(static_cast<UChar32>(cp)) == U_NON_SPACING_MARK;
}

bool is_cjk_ideograph(char32_t cp) {
  return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) ||
         (cp >= 0x20000 && cp <= 0x2A6DF) || (cp >= 0x2A700 && cp <= 0x2B73F) ||
         (cp >= 0x2B740 && cp <= 0x2B81F) || (cp >= 0x2B820 && cp <= 0x2CEAF) ||
         (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}

void append_lowercase(std::vector<char32_t>& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(cp >= 'A' && cp <= 'Z' ? cp + 32 : cp);
    return;
  }
  UChar src[2];
  int32_t src_len = 0;
  U16_APPEND_UNSAFE(src, src_len, static_cast<UChar32>(cp));
  UChar dst[8];
  UErrorCode err = U_ZERO_ERROR;
  const int32_t n = u_strToLower(dst, 8, src, src_len, "", &err);
  if (U_FAILURE(err) || n > 8) {
    out.push_back(static_cast<char32_t>(u_tolower(static_cast<UChar32>(cp))));
    return;
  }
  for (int32_t i = 0; i < n;) {
    UChar32 c;
    U16_NEXT(dst, i, n, c);
    out.push_back(static_cast<char32_t>(c));
  }
}

std::vector<char32_t> nfd(const std::vector<char32_t>& cps) {
  UErrorCode err = U_ZERO_ERROR;
  const icu::Normalizer2* norm = icu::Normalizer2::getNFDInstance(err);
  if (U_FAILURE(err) || norm == nullptr) return cps;
  const icu::UnicodeString src =
      icu::UnicodeString::fromUTF32(reinterpret_cast<const UChar32*>(cps.data()), static_cast<int32_t>(cps.size()));
  if (norm->isNormalized(src, err) && U_SUCCESS(err)) return cps;
  err = U_ZERO_ERROR;
  const icu::UnicodeString dst = norm->normalize(src, err);
  if (U_FAILURE(err)) return cps;
  std::vector<char32_t> out;
  out.reserve(static_cast<size_t>(dst.length()));
  for (int32_t i = 0; i < dst.length();) {
    const UChar32 c = dst.char32At(i);
    out.push_back(static_cast<char32_t>(c));
    i += U16_LENGTH(c);
  }
  return out;
}

}  // namespace rlx::tok
