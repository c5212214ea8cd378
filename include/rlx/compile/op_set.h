// OpSet: a bitset over ir::OpKind. A backend declares the op kinds it runs natively;
// legalization (compile/legalize.h) rewrites every other kind into ones it claims, and
// fusion passes run only when the backend claims the fused kind they emit.
#pragma once

#include <bitset>
#include <initializer_list>
#include <string>
#include <vector>

#include "rlx/ir/op.h"

namespace rlx::compile {

class OpSet {
 public:
  OpSet() = default;
  OpSet(std::initializer_list<ir::OpKind> kinds) {
    for (ir::OpKind k : kinds) add(k);
  }

  /// Every MIR kind (no HIR kinds).
  static OpSet all_mir();
  /// The common-IR primitives: boundary, elementwise, MatMul, reductions, norms, Rope and
  /// movement ops. No fused kinds, no Attention, no DequantMatMul, no Custom.
  static OpSet primitives();

  OpSet& add(ir::OpKind k) {
    bits_.set(index(k));
    return *this;
  }
  OpSet& remove(ir::OpKind k) {
    bits_.reset(index(k));
    return *this;
  }
  bool contains(ir::OpKind k) const { return bits_.test(index(k)); }
  size_t size() const { return bits_.count(); }
  bool empty() const { return bits_.none(); }
  /// Kinds in the set, in ops.def order.
  std::vector<ir::OpKind> kinds() const;
  /// "{matmul, rms_norm, ...}" in ops.def order.
  std::string to_string() const;

  friend OpSet operator|(OpSet a, const OpSet& b) {
    a.bits_ |= b.bits_;
    return a;
  }
  friend OpSet operator&(OpSet a, const OpSet& b) {
    a.bits_ &= b.bits_;
    return a;
  }
  friend bool operator==(const OpSet& a, const OpSet& b) { return a.bits_ == b.bits_; }

 private:
  static size_t index(ir::OpKind k) { return static_cast<size_t>(k); }
  std::bitset<ir::kNumOpKinds> bits_;
};

}  // namespace rlx::compile
