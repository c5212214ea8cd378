// Jinja lexer (see lexer.h). Follows Jinja2's lexer rules with trim_blocks and
// lstrip_blocks on: text up to the next `{{` / `{%` / `{#`, then the tokens of the tag;
// `}}` and `%}` close a tag only outside brackets.
#include "models/jinja/lexer.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>

#include "models/jinja/text.h"

namespace rlx::jinja {

namespace {

class Lexer {
 public:
  Lexer(std::string source, int max_nesting) : src_(std::move(source)), max_nesting_(max_nesting) {
    for (size_t i = 0; i < src_.size(); ++i)
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
  }

  Expected<std::vector<Token>> run() {
    bool line_starting = true;
    while (pos_ < src_.size()) {
      const size_t open = find_tag(pos_);
      if (open == std::string::npos) {
        push_text(src_.substr(pos_), pos_);
        pos_ = src_.size();
        break;
      }
      const char kind = src_[open + 1];
      const char sign = open + 2 < src_.size() && (src_[open + 2] == '-' || src_[open + 2] == '+') ? src_[open + 2] : 0;
      std::string text = src_.substr(pos_, open - pos_);
      const size_t text_pos = pos_;
      size_t raw_end = 0;
      const bool raw = kind == '%' && match_raw_begin(open, &raw_end);
      text = strip_before(std::move(text), sign, kind != '{', line_starting);
      push_text(std::move(text), text_pos);
      if (raw) {
        TRY(lex_raw(open, raw_end, &line_starting));
      } else if (kind == '#') {
        TRY(lex_comment(open, sign, &line_starting));
      } else {
        TRY(lex_tag(open, kind, sign, &line_starting));
      }
    }
    Token eof;
    eof.kind = TokenKind::kEof;
    set_pos(eof, src_.size());
    tokens_.push_back(eof);
    return std::move(tokens_);
  }

 private:
  template <typename... Args>
  Error fail(size_t at, fmt::format_string<Args...> f, Args&&... args) {
    int line = 0, column = 0;
    locate(at, &line, &column);
    return Error::parse("line {} column {}: {}", line, column, fmt::format(f, std::forward<Args>(args)...));
  }

  void locate(size_t at, int* line, int* column) const {
    const auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), at);
    *line = static_cast<int>(it - line_starts_.begin());
    *column = static_cast<int>(at - *(it - 1)) + 1;
  }

  void set_pos(Token& t, size_t at) const { locate(at, &t.line, &t.column); }

  size_t find_tag(size_t from) const {
    size_t p = from;
    while ((p = src_.find('{', p)) != std::string::npos) {
      if (p + 1 < src_.size() && (src_[p + 1] == '{' || src_[p + 1] == '%' || src_[p + 1] == '#')) return p;
      ++p;
    }
    return std::string::npos;
  }

  // Length of the whitespace run (Python's \s*) at `at`.
  size_t space_run(size_t at) const {
    size_t p = at;
    while (p < src_.size()) {
      const auto b = static_cast<unsigned char>(src_[p]);
      if (b < 0x80) {
        if (!text::is_space(b)) break;
        ++p;
        continue;
      }
      size_t n = (b & 0xE0) == 0xC0 ? 2 : (b & 0xF0) == 0xE0 ? 3 : (b & 0xF8) == 0xF0 ? 4 : 1;
      if (p + n > src_.size()) break;
      const std::u32string cp = text::decode(std::string_view(src_).substr(p, n));
      if (cp.size() != 1 || !text::is_space(cp[0])) break;
      p += n;
    }
    return p - at;
  }

  bool at_word(size_t at, std::string_view word) const {
    if (src_.compare(at, word.size(), word) != 0) return false;
    const size_t e = at + word.size();
    return e >= src_.size() || !(std::isalnum(static_cast<unsigned char>(src_[e])) || src_[e] == '_');
  }

  // `{%[-+]? raw [-]?%}` at `open`; *end: the position after it.
  bool match_raw_begin(size_t open, size_t* end) const {
    size_t p = open + 2;
    if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) ++p;
    p += space_run(p);
    if (!at_word(p, "raw")) return false;
    p += 3;
    p += space_run(p);
    if (src_.compare(p, 3, "-%}") == 0) {
      p += 3;
      p += space_run(p);
    } else if (src_.compare(p, 2, "%}") == 0) {
      p += 2;
    } else {
      return false;
    }
    *end = p;
    return true;
  }

  // The text before a tag: `-` strips all trailing whitespace; lstrip_blocks strips the
  // spaces between the line start and a block or comment tag.
  std::string strip_before(std::string text, char sign, bool is_block, bool line_starting) const {
    if (sign == '-') return text::strip(text, nullptr, false, true);
    if (sign == '+' || !is_block) return text;
    const size_t nl = text.rfind('\n');
    const size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
    if (l_pos == 0 && !line_starting) return text;
    const std::u32string tail = text::decode(std::string_view(text).substr(l_pos));
    if (tail.empty()) return text;
    for (char32_t c : tail)
      if (!text::is_space(c)) return text;
    text.resize(l_pos);
    return text;
  }

  void push_text(std::string text, size_t at) {
    if (text.empty()) return;
    Token t;
    t.kind = TokenKind::kText;
    t.text = std::move(text);
    set_pos(t, at);
    tokens_.push_back(std::move(t));
  }

  void push(TokenKind kind, size_t at, std::string text = {}) {
    Token t;
    t.kind = kind;
    t.text = std::move(text);
    set_pos(t, at);
    tokens_.push_back(std::move(t));
  }

  // The end of a block tag at `p` ("+%}", "-%}" + spaces, "%}" + one newline); 0 if none.
  size_t block_end(size_t p) const {
    if (src_.compare(p, 3, "+%}") == 0) return 3;
    if (src_.compare(p, 3, "-%}") == 0) return 3 + space_run(p + 3);
    if (src_.compare(p, 2, "%}") == 0) return (p + 2 < src_.size() && src_[p + 2] == '\n') ? 3 : 2;
    return 0;
  }

  Status lex_raw(size_t open, size_t body, bool* line_starting) {
    *line_starting = src_[body - 1] == '\n';
    size_t p = body;
    while ((p = src_.find("{%", p)) != std::string::npos) {
      size_t q = p + 2;
      const char sign = q < src_.size() && (src_[q] == '-' || src_[q] == '+') ? src_[q] : 0;
      if (sign) ++q;
      q += space_run(q);
      if (!at_word(q, "endraw")) {
        p += 2;
        continue;
      }
      q += 6;
      q += space_run(q);
      const size_t end = block_end(q);
      if (end == 0) {
        p += 2;
        continue;
      }
      push_text(strip_before(src_.substr(body, p - body), sign, true, *line_starting), body);
      pos_ = q + end;
      *line_starting = src_[pos_ - 1] == '\n';
      return Status::ok_status();
    }
    return fail(open, "missing end of raw directive ('{{% endraw %}}')");
  }

  Status lex_comment(size_t open, char sign, bool* line_starting) {
    const size_t start = open + 2 + (sign ? 1 : 0);
    const size_t close = src_.find("#}", start);
    if (close == std::string::npos) return fail(open, "missing end of comment tag ('#}}')");
    size_t end = close + 2;
    if (close > start && src_[close - 1] == '-') {
      end += space_run(end);
    } else if (close > start && src_[close - 1] == '+') {
      // +#}: keep the newline
    } else if (end < src_.size() && src_[end] == '\n') {
      ++end;
    }
    pos_ = end;
    *line_starting = src_[pos_ - 1] == '\n';
    return Status::ok_status();
  }

  Status lex_tag(size_t open, char kind, char sign, bool* line_starting) {
    const bool block = kind == '%';
    push(block ? TokenKind::kBlockBegin : TokenKind::kVarBegin, open);
    size_t p = open + 2 + (sign ? 1 : 0);
    std::vector<std::pair<char, size_t>> brackets;
    while (true) {
      p += space_run(p);
      if (p >= src_.size())
        return fail(open, "tag opened here is never closed ('{}' expected)", block ? "%}" : "}}");
      if (brackets.empty()) {
        size_t end = 0;
        if (block) {
          end = block_end(p);
        } else if (src_.compare(p, 3, "-}}") == 0) {
          end = 3 + space_run(p + 3);
        } else if (src_.compare(p, 2, "}}") == 0) {
          end = 2;
        }
        if (end != 0) {
          push(block ? TokenKind::kBlockEnd : TokenKind::kVarEnd, p);
          pos_ = p + end;
          *line_starting = src_[pos_ - 1] == '\n';
          return Status::ok_status();
        }
      }
      const char c = src_[p];
      if (std::isdigit(static_cast<unsigned char>(c))) {
        TRY(lex_number(&p));
      } else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t e = p;
        while (e < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[e])) || src_[e] == '_')) ++e;
        push(TokenKind::kName, p, src_.substr(p, e - p));
        p = e;
      } else if (c == '\'' || c == '"') {
        TRY(lex_string(&p));
      } else {
        TRY(lex_operator(&p, &brackets));
      }
    }
  }

  Status lex_operator(size_t* p, std::vector<std::pair<char, size_t>>* brackets) {
    static constexpr std::string_view kTwo[] = {"//", "**", "==", "!=", "<=", ">="};
    for (std::string_view op : kTwo) {
      if (src_.compare(*p, 2, op) == 0) {
        push(TokenKind::kOp, *p, std::string(op));
        *p += 2;
        return Status::ok_status();
      }
    }
    const char c = src_[*p];
    if (std::string_view("+-/*%~[](){}<>=.:|,;").find(c) == std::string_view::npos) {
      const std::u32string cp = text::decode(std::string_view(src_).substr(*p, 4));
      std::string shown;
      text::append_utf8(shown, cp.empty() ? U'?' : cp[0]);
      return fail(*p, "unexpected character '{}'", shown);
    }
    if (c == '(' || c == '[' || c == '{') {
      if (static_cast<int>(brackets->size()) >= max_nesting_)
        return fail(*p, "brackets nested deeper than {} levels", max_nesting_);
      brackets->emplace_back(c, *p);
    } else if (c == ')' || c == ']' || c == '}') {
      const char want = c == ')' ? '(' : c == ']' ? '[' : '{';
      if (brackets->empty()) return fail(*p, "unexpected '{}'", c);
      if (brackets->back().first != want) {
        const char expected = brackets->back().first == '(' ? ')' : brackets->back().first == '[' ? ']' : '}';
        return fail(*p, "unexpected '{}', expected '{}'", c, expected);
      }
      brackets->pop_back();
    }
    push(TokenKind::kOp, *p, std::string(1, c));
    ++*p;
    return Status::ok_status();
  }

  Status lex_number(size_t* p) {
    const size_t start = *p;
    auto digits = [&](size_t q, auto pred) {
      // digits with single underscores between them (1_000)
      size_t e = q;
      while (e < src_.size() && (pred(src_[e]) || (src_[e] == '_' && e + 1 < src_.size() && pred(src_[e + 1]) &&
                                                  e > q)))
        ++e;
      return e;
    };
    auto is_dec = [](char ch) { return ch >= '0' && ch <= '9'; };
    // 0x / 0o / 0b integers
    if (src_[start] == '0' && start + 2 < src_.size() && std::string_view("xXoObB").find(src_[start + 1]) !=
                                                              std::string_view::npos) {
      const char base_char = static_cast<char>(std::tolower(static_cast<unsigned char>(src_[start + 1])));
      const int base = base_char == 'x' ? 16 : base_char == 'o' ? 8 : 2;
      auto pred = [base](char ch) {
        const int d = std::isdigit(static_cast<unsigned char>(ch)) ? ch - '0'
                      : std::isalpha(static_cast<unsigned char>(ch))
                          ? std::tolower(static_cast<unsigned char>(ch)) - 'a' + 10
                          : 99;
        return d < base;
      };
      size_t q = start + 2;
      if (q < src_.size() && src_[q] == '_') ++q;
      const size_t e = digits(q, pred);
      if (e > q) return push_int(start, e, src_.substr(q, e - q), base, p);
    }
    size_t e = digits(start, is_dec);
    bool is_float = false;
    if (e + 1 < src_.size() && src_[e] == '.' && is_dec(src_[e + 1]) && !(start > 0 && src_[start - 1] == '.')) {
      e = digits(e + 1, is_dec);
      is_float = true;
    }
    if (e < src_.size() && (src_[e] == 'e' || src_[e] == 'E') && !(start > 0 && src_[start - 1] == '.')) {
      size_t q = e + 1;
      if (q < src_.size() && (src_[q] == '+' || src_[q] == '-')) ++q;
      if (q < src_.size() && is_dec(src_[q])) {
        e = digits(q, is_dec);
        is_float = true;
      }
    }
    if (!is_float) return push_int(start, e, src_.substr(start, e - start), 10, p);
    std::string clean;
    for (size_t i = start; i < e; ++i)
      if (src_[i] != '_') clean.push_back(src_[i]);
    Token t;
    t.kind = TokenKind::kFloat;
    t.f = std::strtod(clean.c_str(), nullptr);
    t.text = clean;
    set_pos(t, start);
    tokens_.push_back(std::move(t));
    *p = e;
    return Status::ok_status();
  }

  Status push_int(size_t start, size_t end, const std::string& digits, int base, size_t* p) {
    std::string clean;
    for (char c : digits)
      if (c != '_') clean.push_back(c);
    errno = 0;
    char* stop = nullptr;
    const unsigned long long v = std::strtoull(clean.c_str(), &stop, base);
    if (errno == ERANGE || v > static_cast<unsigned long long>(INT64_MAX))
      return fail(start, "integer literal {} does not fit 64 bits", src_.substr(start, end - start));
    Token t;
    t.kind = TokenKind::kInt;
    t.i = static_cast<int64_t>(v);
    t.text = src_.substr(start, end - start);
    set_pos(t, start);
    tokens_.push_back(std::move(t));
    *p = end;
    return Status::ok_status();
  }

  // A quoted string with Python's escapes (\n \t \\ \' \" \xhh \uhhhh \Uhhhhhhhh \ooo).
  Status lex_string(size_t* p) {
    const size_t start = *p;
    const char quote = src_[start];
    std::string out;
    size_t i = start + 1;
    auto hex = [&](size_t at, int n, char32_t* v) {
      if (at + static_cast<size_t>(n) > src_.size()) return false;
      *v = 0;
      for (int k = 0; k < n; ++k) {
        const char ch = src_[at + static_cast<size_t>(k)];
        if (!std::isxdigit(static_cast<unsigned char>(ch))) return false;
        *v = *v * 16 + static_cast<char32_t>(std::isdigit(static_cast<unsigned char>(ch))
                                                 ? ch - '0'
                                                 : std::tolower(static_cast<unsigned char>(ch)) - 'a' + 10);
      }
      return true;
    };
    while (true) {
      if (i >= src_.size()) return fail(start, "unexpected character '{}' (string never closed)", quote);
      const char c = src_[i];
      if (c == quote) break;
      if (c != '\\') {
        out.push_back(c);
        ++i;
        continue;
      }
      if (i + 1 >= src_.size()) return fail(start, "unexpected character '{}' (string never closed)", quote);
      const char e = src_[i + 1];
      i += 2;
      switch (e) {
        case '\n': break;
        case '\\': out.push_back('\\'); break;
        case '\'': out.push_back('\''); break;
        case '"': out.push_back('"'); break;
        case 'a': out.push_back('\a'); break;
        case 'b': out.push_back('\b'); break;
        case 'f': out.push_back('\f'); break;
        case 'n': out.push_back('\n'); break;
        case 'r': out.push_back('\r'); break;
        case 't': out.push_back('\t'); break;
        case 'v': out.push_back('\v'); break;
        case 'x':
        case 'u':
        case 'U': {
          const int n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          char32_t v = 0;
          if (!hex(i, n, &v)) return fail(i - 2, "truncated \\{} escape in a string", e);
          if (v > 0x10FFFF) return fail(i - 2, "illegal Unicode character in a string escape");
          text::append_utf8(out, v);
          i += static_cast<size_t>(n);
          break;
        }
        case 'N': return fail(i - 2, "named Unicode escapes (\\N{{...}}) are not supported");
        default:
          if (e >= '0' && e <= '7') {
            char32_t v = static_cast<char32_t>(e - '0');
            for (int k = 0; k < 2 && i < src_.size() && src_[i] >= '0' && src_[i] <= '7'; ++k, ++i)
              v = v * 8 + static_cast<char32_t>(src_[i] - '0');
            text::append_utf8(out, v);
          } else {  // unknown escapes stay as they are
            out.push_back('\\');
            out.push_back(e);
          }
      }
    }
    Token t;
    t.kind = TokenKind::kString;
    t.text = std::move(out);
    set_pos(t, start);
    tokens_.push_back(std::move(t));
    *p = i + 1;
    return Status::ok_status();
  }

  std::string src_;
  int max_nesting_;
  std::vector<size_t> line_starts_{0};
  std::vector<Token> tokens_;
  size_t pos_ = 0;
};

// Newlines normalized to \n and one trailing newline dropped, as Jinja does.
std::string normalize(std::string_view source) {
  std::string s;
  s.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      s.push_back('\n');
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      s.push_back(source[i]);
    }
  }
  if (!s.empty() && s.back() == '\n') s.pop_back();
  return s;
}

}  // namespace

Expected<std::vector<Token>> lex(std::string_view source, int max_nesting) {
  return Lexer(normalize(source), max_nesting).run();
}

std::string describe(const Token& t) {
  switch (t.kind) {
    case TokenKind::kEof: return "end of template";
    case TokenKind::kText: return "text";
    case TokenKind::kVarBegin: return "'{{'";
    case TokenKind::kVarEnd: return "'}}'";
    case TokenKind::kBlockBegin: return "'{%'";
    case TokenKind::kBlockEnd: return "end of statement block";
    case TokenKind::kString: return "string";
    case TokenKind::kInt:
    case TokenKind::kFloat: return "number " + t.text;
    default: return "'" + t.text + "'";
  }
}

}  // namespace rlx::jinja
