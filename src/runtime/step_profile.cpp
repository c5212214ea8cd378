// Grouping and formatting of per-step time profiles (step_profile.h).
#include "runtime/step_profile.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <utility>
#include <vector>

namespace rlx::runtime {

std::string profile_group(std::string_view what, std::string_view extra) {
  const size_t open = what.find('(');
  std::string op(open == std::string_view::npos ? what : what.substr(open + 1));
  if (!op.empty() && op.back() == ')') op.pop_back();
  for (size_t at = op.find("blk."); at != std::string::npos; at = op.find("blk.", at)) {
    size_t end = at + 4;
    while (end < op.size() && std::isdigit(static_cast<unsigned char>(op[end]))) ++end;
    op.erase(at, end < op.size() && op[end] == '.' ? end + 1 - at : end - at);
  }
  std::erase(op, '\'');
  if (!extra.empty()) {
    op += ' ';
    op += extra;
  }
  return op;
}

std::string format_profile(std::string_view header, std::span<const std::string> groups,
                           std::span<const double> step_ms, int64_t runs) {
  struct Group {
    std::string name;
    double ms = 0;
    int steps = 0;
  };
  std::vector<Group> by_group;
  for (size_t i = 0; i < groups.size() && i < step_ms.size(); ++i) {
    auto it = std::find_if(by_group.begin(), by_group.end(), [&](const Group& g) { return g.name == groups[i]; });
    if (it == by_group.end()) it = by_group.insert(by_group.end(), Group{groups[i]});
    it->ms += step_ms[i];
    it->steps += 1;
  }
  std::sort(by_group.begin(), by_group.end(), [](const Group& a, const Group& b) { return a.ms > b.ms; });
  const double r = static_cast<double>(std::max<int64_t>(runs, 1));
  std::string out(header);
  out += '\n';
  for (const Group& g : by_group)
    out += fmt::format("  {:<48} {:4} steps {:9.3f} ms/run {:9.2f} us/step\n", g.name, g.steps, g.ms / r,
                       1000.0 * g.ms / r / g.steps);
  return out;
}

}  // namespace rlx::runtime
