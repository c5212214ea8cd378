// Jinja lexer: template source -> tokens, applying the whitespace rules of Hugging Face's
// environment (trim_blocks, lstrip_blocks, `{%-` / `-%}` / `{%+` / `+%}`, comments, raw
// blocks, one trailing newline dropped). The parser (parser.cpp) reads its tokens.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "rlx/base/status.h"

namespace rlx::jinja {

enum class TokenKind : uint8_t {
  kText,        ///< literal output text (whitespace rules applied)
  kVarBegin,    ///< {{
  kVarEnd,      ///< }}
  kBlockBegin,  ///< {%
  kBlockEnd,    ///< %}
  kName,        ///< identifier (keywords too)
  kString,      ///< string literal, escapes decoded
  kInt,
  kFloat,
  kOp,          ///< operator or punctuation: text holds it ("==", "(", "|", ...)
  kEof,
};

struct Token {
  TokenKind kind = TokenKind::kEof;
  std::string text;  ///< text, name, decoded string or operator
  int64_t i = 0;     ///< kInt
  double f = 0;      ///< kFloat
  int line = 1, column = 1;
};

/// Splits `source` into tokens; the last is kEof. Errors (ErrorCode::kParse) name the
/// line and column: an unclosed comment or raw block, an unexpected character, a bad
/// escape in a string, unbalanced brackets inside a tag, an integer out of range.
Expected<std::vector<Token>> lex(std::string_view source, int max_nesting);

/// A printable name of a token for error messages ("'endfor'", "end of template").
std::string describe(const Token& t);

}  // namespace rlx::jinja
