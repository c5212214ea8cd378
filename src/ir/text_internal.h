// Helpers shared by the IR printer (text_print.cpp), lexer (text_lex.cpp) and parser
// (text_parse.cpp): the decimal form of one constant element, string quoting and the
// lexer's tokens. Private to src/ir.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <vector>

#include "rlx/base/status.h"
#include "rlx/ir/dtype.h"

namespace rlx::ir::text_detail {

/// True for scalar dtypes whose constant elements may be written as decimals
/// (floats, integers, bool); packed types are always written as hex bytes.
bool has_decimal_form(DType t);
/// Decimal text of the element at `p` (dtype_info(t).bytes_per_block bytes).
std::string format_element(DType t, const uint8_t* p);
/// Parses the decimal text of one element into `out`; false when malformed or out
/// of range for `t`.
bool parse_element(DType t, std::string_view text, uint8_t* out);
/// `"..."` with `\"`, `\\`, `\n`, `\t`, `\r` and `\xHH` escapes for other
/// non-printable bytes; any byte string round-trips.
std::string quote(std::string_view s);

/// The kinds of lexer token.
enum class Tok : uint8_t { kEnd, kIdent, kValue, kNumber, kString, kPunct };

struct Token {
  Tok kind = Tok::kEnd;
  std::string text;  ///< ident/number text, value name without '%', decoded string, punctuation
  int line = 1;
  int col = 1;
  int end_col = 1;  ///< column just past the token
};

/// A token for an error message: "end of input", '%name', string "...", 'text'.
std::string describe(const Token& t);
/// A parse error at `line`, `col` (1-based).
Error error_at(int line, int col, const std::string& msg);
/// A parse error at token `t`.
Error error_at(const Token& t, const std::string& msg);
/// The value of hex digit `c`, or -1.
int hex_digit(char c);
/// The tokens of `src`, ending with one kEnd token; a parse error for a malformed
/// string, number or stray character.
Expected<std::vector<Token>> lex(std::string_view src);

}  // namespace rlx::ir::text_detail
