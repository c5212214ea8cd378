// The text form of every IR tier: print a Graph / HIR / MIR / LIR module to a
// readable line-based syntax and parse it back to an equal module. Golden tests,
// `rlx compile --dump` and hand-written test graphs use it.
//
// Syntax (one statement per line; `#` and `//` start comments):
//
//   mir {
//     %0 = input "x" : f32[SEQ, 64]
//     %1 = param "w" : f32[128, 64]
//     %2 = fused_matmul_bias_act %0, %1 {act=silu, has_bias=false, transpose_b=true} : f32[SEQ, 128] @"blk.0.ffn"
//     %3 = activation.silu %2 : f32[SEQ, 128]
//     %4 = constant {data=[1, 2.5]} : f32[2]
//     output %3 "y"
//   }
//
// - `%name = op operands {attrs} : type @"label"`. Ops whose attrs start with an enum
//   field `kind` print it as a suffix (`binary.mul`, `reduce.sum`); Input/Param/Handle
//   print their name as a string right after the op. Every attrs field is printed
//   (`fields(v)` order); when parsing, missing fields keep their defaults.
// - Value names are free-form (`%x`, `%blk0.q`): the parser maps them to ids in order
//   of definition. The printer writes `%<id>`.
// - Types are `dtype[dims]`; a dim is a number or a symbolic monomial (`SEQ`,
//   `2*SEQ`, `BATCH*SEQ`); parsing a symbol name interns it. The type suffix is
//   optional where inference decides it and required for input/param/handle/
//   constant/cast; when given it must equal the inferred type.
// - Constants print their data as numbers when each value round-trips bit-exactly
//   through its decimal form, else as little-endian hex bytes (`data=0x0000803f`).
// - Region steps: `steps=[activation.silu(i0) : f32, binary.mul(s0, i1) : f32]`
//   (`iN` = region input N, `sN` = earlier step N).
// - Headers: `graph { .. }`, `mir { .. }`, `hir policy=fusable { .. }`, and
//   `lir { .. }` which adds `plan`, `schedule`, `manifest` and `dynamic` sections.
//   graph/hir/mir bodies may also be given without the header.
//
// Every parse error is Error::parse naming the line and column
// ("line 3, col 14: expected ',' between operands"); parsing never aborts on input.
#pragma once

#include <string>
#include <string_view>

#include "rlx/base/status.h"
#include "rlx/ir/graph.h"
#include "rlx/ir/module.h"

namespace rlx::ir {

/// `graph { ... }`.
std::string print(const Graph& g);
/// `hir policy=direct|fusable { ... }`.
std::string print(const HirModule& m);
/// `mir { ... }`.
std::string print(const MirModule& m);
/// `lir { ... }` with the buffer plan, schedule, I/O manifest and dynamic symbols.
std::string print(const LirModule& m);

/// Text of one node's statement (no indentation, no newline), e.g.
/// `%2 = binary.add %0, %1 : f32[SEQ, 64]`; for error messages and reports.
std::string print_node(const Graph& g, ValueId v);
/// "arena", "view", "param", "handle", "constant".
std::string_view slot_kind_name(SlotKind k);
/// "direct", "fusable".
std::string_view fusion_policy_name(FusionPolicy p);

/// Parses a graph (header `graph`, or a bare body); HIR ops are allowed. The
/// result is verified.
Expected<Graph> parse_graph(std::string_view text);
/// Parses a HIR module (header `hir [policy=..]`, or a bare body with the Direct policy).
Expected<HirModule> parse_hir(std::string_view text);
/// Parses a MIR module (header `mir`, or a bare body); HIR ops are rejected.
Expected<MirModule> parse_mir(std::string_view text);
/// Parses a LIR module (header `lir` required); HIR ops are rejected.
Expected<LirModule> parse_lir(std::string_view text);

}  // namespace rlx::ir
