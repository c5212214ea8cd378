// FusionReport printing.
#include "rlx/compile/fusion_report.h"

#include <fmt/format.h>

namespace rlx::compile {

std::string FusionReport::to_string() const {
  std::string s = fmt::format("fusion: {} nodes -> {} nodes\n", nodes_before, nodes_after);
  for (const auto& [pattern, n] : fused) s += fmt::format("  fused {:<20} x{}\n", pattern, n);
  for (const MissedFusion& m : missed) {
    s += fmt::format("  missed {}: {} [", m.pattern, m.reason);
    for (size_t i = 0; i < m.nodes.size(); ++i) s += (i ? ", " : "") + m.nodes[i];
    s += "]\n";
  }
  return s;
}

}  // namespace rlx::compile
