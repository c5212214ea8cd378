// OpSet presets and printing (see include/rlx/compile/op_set.h).
#include "rlx/compile/op_set.h"

namespace rlx::compile {

OpSet OpSet::all_mir() {
  OpSet s;
  for (int i = 0; i < ir::kNumOpKinds; ++i) {
    const auto k = static_cast<ir::OpKind>(i);
    if (!ir::is_hir_op(k)) s.add(k);
  }
  return s;
}

OpSet OpSet::primitives() {
  OpSet s;
  for (int i = 0; i < ir::kNumOpKinds; ++i) {
    const auto k = static_cast<ir::OpKind>(i);
    switch (ir::op_info(k).category) {
      case ir::OpCategory::Boundary:
      case ir::OpCategory::Elementwise:
      case ir::OpCategory::Compute:
      case ir::OpCategory::Reduction:
      case ir::OpCategory::Norm:
      case ir::OpCategory::Movement:
      case ir::OpCategory::Collective: s.add(k); break;
      case ir::OpCategory::Fused:
      case ir::OpCategory::Extension:
      case ir::OpCategory::Hir: break;
    }
  }
  s.remove(ir::OpKind::Attention).remove(ir::OpKind::DequantMatMul);
  return s;
}

std::vector<ir::OpKind> OpSet::kinds() const {
  std::vector<ir::OpKind> out;
  for (int i = 0; i < ir::kNumOpKinds; ++i)
    if (bits_.test(static_cast<size_t>(i))) out.push_back(static_cast<ir::OpKind>(i));
  return out;
}

std::string OpSet::to_string() const {
  std::string s = "{";
  for (ir::OpKind k : kinds()) {
    if (s.size() > 1) s += ", ";
    s += ir::op_name(k);
  }
  return s + "}";
}

}  // namespace rlx::compile
