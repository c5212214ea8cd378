// FusionReport: what the fusion passes did (counts per pattern, node counts before and
// after) and what they could not do (MissedFusion entries naming pattern, nodes and
// reason). With CompileOptions::assert_fusion_clean a miss fails the compile.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace rlx::compile {

struct MissedFusion {
  std::string pattern;             ///< e.g. "matmul_bias_act"
  std::vector<std::string> nodes;  ///< Graph::describe of the nodes involved
  std::string reason;              ///< e.g. "matmul %3 has 2 users"
  friend bool operator==(const MissedFusion&, const MissedFusion&) = default;
};

struct FusionReport {
  int64_t nodes_before = 0;
  int64_t nodes_after = 0;
  std::map<std::string, int64_t> fused;  ///< pattern -> times applied
  std::vector<MissedFusion> missed;

  void record(const std::string& pattern, int64_t n = 1) { fused[pattern] += n; }
  void miss(MissedFusion m) { missed.push_back(std::move(m)); }
  int64_t count(const std::string& pattern) const {
    auto it = fused.find(pattern);
    return it == fused.end() ? 0 : it->second;
  }
  bool clean() const { return missed.empty(); }
  /// Multi-line summary: node counts, one line per pattern, one line per miss.
  std::string to_string() const;
};

}  // namespace rlx::compile
