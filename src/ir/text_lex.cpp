// The IR text lexer: splits the text form into identifiers, %values, numbers, quoted
// strings and punctuation, each with its line and columns, for the parser
// (text_parse.cpp). Errors are Error::parse values naming line and column.
#include <cctype>
#include <string>

#include "text_internal.h"

namespace rlx::ir::text_detail {

std::string describe(const Token& t) {
  switch (t.kind) {
    case Tok::kEnd: return "end of input";
    case Tok::kValue: return "'%" + t.text + "'";
    case Tok::kString: return "string " + (t.text.size() > 40 ? quote(t.text.substr(0, 40)) + "..." : quote(t.text));
    default: return "'" + (t.text.size() > 40 ? t.text.substr(0, 40) + "..." : t.text) + "'";
  }
}

Error error_at(int line, int col, const std::string& msg) {
  return Error::parse("line {}, col {}: {}", line, col, msg);
}
Error error_at(const Token& t, const std::string& msg) { return error_at(t.line, t.col, msg); }

namespace {
bool is_name_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.'; }
}  // namespace

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

Expected<std::vector<Token>> lex(std::string_view src) {
  std::vector<Token> out;
  const size_t n = src.size();
  size_t i = 0, line_start = 0;
  int line = 1;
  auto col = [&](size_t pos) { return static_cast<int>(pos - line_start + 1); };
  while (i < n) {
    const char c = src[i];
    if (c == '\n') {
      ++line;
      line_start = ++i;
      continue;
    }
    if (c == ' ' || c == '\t' || c == '\r') {
      ++i;
      continue;
    }
    if (c == '#' || (c == '/' && i + 1 < n && src[i + 1] == '/')) {
      while (i < n && src[i] != '\n') ++i;
      continue;
    }
    Token t;
    t.line = line;
    t.col = col(i);
    const auto uc = static_cast<unsigned char>(c);
    if (c == '%') {
      size_t j = i + 1;
      while (j < n && is_name_char(src[j])) ++j;
      if (j == i + 1) return error_at(t, "expected a value name after '%'");
      t.kind = Tok::kValue;
      t.text = std::string(src.substr(i + 1, j - i - 1));
      i = j;
    } else if (c == '"') {
      size_t j = i + 1;
      for (;;) {
        if (j >= n || src[j] == '\n') return error_at(t, "unterminated string");
        const char d = src[j];
        if (d == '"') {
          ++j;
          break;
        }
        if (d != '\\') {
          t.text += d;
          ++j;
          continue;
        }
        if (j + 1 >= n) return error_at(t, "unterminated string");
        const char e = src[j + 1];
        if (e == '"' || e == '\\') t.text += e;
        else if (e == 'n') t.text += '\n';
        else if (e == 't') t.text += '\t';
        else if (e == 'r') t.text += '\r';
        else if (e == 'x' && j + 3 < n && hex_digit(src[j + 2]) >= 0 && hex_digit(src[j + 3]) >= 0) {
          t.text += static_cast<char>(hex_digit(src[j + 2]) * 16 + hex_digit(src[j + 3]));
          j += 2;
        } else {
          return error_at(line, col(j), "bad escape in string (use \\\", \\\\, \\n, \\t, \\r or \\xHH)");
        }
        j += 2;
      }
      t.kind = Tok::kString;
      i = j;
    } else if (std::isdigit(uc) || (c == '-' && i + 1 < n && std::isalnum(static_cast<unsigned char>(src[i + 1])))) {
      const size_t body = c == '-' ? i + 1 : i;
      const bool hex = body + 1 < n && src[body] == '0' && (src[body + 1] == 'x' || src[body + 1] == 'X');
      size_t j = i + 1;
      while (j < n) {
        const char d = src[j];
        if (is_name_char(d) || ((d == '+' || d == '-') && !hex && (src[j - 1] == 'e' || src[j - 1] == 'E'))) ++j;
        else break;
      }
      t.kind = Tok::kNumber;
      t.text = std::string(src.substr(i, j - i));
      i = j;
    } else if (std::isalpha(uc) || c == '_') {
      size_t j = i + 1;
      while (j < n && is_name_char(src[j])) ++j;
      t.kind = Tok::kIdent;
      t.text = std::string(src.substr(i, j - i));
      i = j;
    } else if (std::strchr("=,:{}[]()*@", c) != nullptr && c != '\0') {
      t.kind = Tok::kPunct;
      t.text = std::string(1, c);
      ++i;
    } else {
      const std::string shown = uc >= 0x20 && uc < 0x7f ? std::string(1, c) : fmt::format("\\x{:02x}", uc);
      return error_at(t, fmt::format("unexpected character '{}'", shown));
    }
    t.end_col = col(i);
    out.push_back(std::move(t));
  }
  Token end;
  end.line = line;
  end.col = end.end_col = col(i);
  out.push_back(std::move(end));
  return out;
}

}  // namespace rlx::ir::text_detail
