// A compact binary form of an LIR module (graph, buffer plan, I/O manifest, unbound
// symbols) for caches that must load fast: the AOT disk cache stores it instead of
// the text form, which takes several times longer to parse.
//
// Layout: "RLXLIR" + format version, then nodes, outputs, plan, manifest and unbound
// symbols as LEB128 varints (zigzag for signed values), raw little-endian f64 and
// length-prefixed strings. A symbolic dim carries its symbol names (ids are interned per
// process); symbol names must be identifiers.
// Attributes are written field by field through each attrs type's `fields()` list, so
// a new attrs field is encoded without touching this codec; the schema fingerprint
// (lir_schema_fingerprint) makes old blobs rejected, never misread.
//
// Decoding never trusts the bytes: every read is bounds-checked, every enum and id is
// range-checked, the graph is re-verified (types re-inferred) and counts are capped by
// the remaining input, so a hostile or truncated blob yields Error::invalid_file naming
// the byte offset, never a crash or a huge allocation.
#pragma once

#include <string>
#include <string_view>

#include "rlx/base/status.h"
#include "rlx/ir/module.h"

namespace rlx::ir {

/// Bumped whenever the byte layout changes. (4: the schema fingerprint after it.)
inline constexpr uint32_t kLirBinaryVersion = 4;

/// A hash of everything the encoding numbers or orders implicitly: the op table (names in
/// enum order and each op's attrs field names and sizes), the dtype table and every enum
/// name table. Written after the version; a blob from a build whose tables differ (an
/// op row moved, an attrs field added) is refused rather than misread, without anyone
/// having to remember a version bump.
uint64_t lir_schema_fingerprint();

/// The binary form of `m`.
std::string encode_lir_binary(const LirModule& m);

/// Parses and verifies a blob written by encode_lir_binary (the plan is not checked
/// against the graph here; compile::check_plan does that).
Expected<LirModule> decode_lir_binary(std::string_view bytes);

}  // namespace rlx::ir
