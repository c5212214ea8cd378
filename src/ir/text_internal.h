// Helpers shared by the IR printer (text_print.cpp) and parser (text_parse.cpp):
// the decimal form of one constant element and string quoting. Private to src/ir.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

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

}  // namespace rlx::ir::text_detail
