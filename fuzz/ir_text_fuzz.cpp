// libFuzzer target for the IR text parser (text_parse.cpp): arbitrary bytes are parsed
// as a graph, a HIR, a MIR and a LIR module. Whatever parses must print and parse back
// to the same text (text.h promises an equal module), and a parsed graph must verify.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "rlx/ir/graph.h"
#include "rlx/ir/text.h"

namespace {

// Parses `in` with `parse`; on success the printed form must reparse and print the same.
template <class Parse>
void round_trip(std::string_view in, Parse parse) {
  auto m = parse(in);
  if (!m.has_value()) return;
  const std::string printed = rlx::ir::print(*m);
  auto again = parse(printed);
  if (!again.has_value() || rlx::ir::print(*again) != printed) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  // The graph is parsed once: it must verify, then round-trip like the modules.
  round_trip(in, [](std::string_view s) {
    rlx::Expected<rlx::ir::Graph> g = rlx::ir::parse_graph(s);
    if (g.has_value() && !rlx::ir::verify(*g, /*allow_hir=*/true).ok()) __builtin_trap();
    return g;
  });
  round_trip(in, [](std::string_view s) { return rlx::ir::parse_hir(s); });
  round_trip(in, [](std::string_view s) { return rlx::ir::parse_mir(s); });
  round_trip(in, [](std::string_view s) { return rlx::ir::parse_lir(s); });
  return 0;
}
