// Cast cleanup (after precision): cast(cast(x: A -> B) -> A) is x when B holds every
// value of A exactly (f16/bf16 -> f32/f64, f32 -> f64, narrower ints -> wider ints), and
// a cast to the value's own dtype is x. Lossy round trips (f32 -> f16 -> f32) are kept.
#include "rewriter.h"
#include "rlx/compile/passes.h"

namespace rlx::compile {
using namespace ir;

namespace {

int int_bits(DType t) {
  switch (t) {
    case DType::I8: return 8;
    case DType::I32: return 32;
    case DType::I64: return 64;
    default: return 0;
  }
}

// True when every value of `a` converts to `b` and back unchanged.
bool exact_widening(DType a, DType b) {
  if (a == b) return true;
  if (a == DType::F16 || a == DType::BF16) return b == DType::F32 || b == DType::F64;
  if (a == DType::F32) return b == DType::F64;
  if (a == DType::U8) return int_bits(b) > 8 || b == DType::F16 || b == DType::BF16 || b == DType::F32 || b == DType::F64;
  if (int_bits(a) && int_bits(b)) return int_bits(b) >= int_bits(a);
  if (a == DType::I8) return b == DType::F16 || b == DType::BF16 || b == DType::F32 || b == DType::F64;
  if (a == DType::I32) return b == DType::F64;
  return false;
}

}  // namespace

MirModule remove_cast_pairs(const MirModule& m) {
  const Graph& g = m.graph;
  detail::Rewriter rw(g);
  bool any = false;
  for (ValueId v = 0; v < g.size(); ++v) {
    const Node& n = g.node(v);
    if (n.op == OpKind::Cast) {
      const ValueId src = n.inputs[0];
      const Node& sn = g.node(src);
      if (sn.dtype == n.dtype) {
        rw.set(v, rw.map(src));
        any = true;
        continue;
      }
      if (sn.op == OpKind::Cast && g.node(sn.inputs[0]).dtype == n.dtype && exact_widening(n.dtype, sn.dtype)) {
        rw.set(v, rw.map(sn.inputs[0]));
        any = true;
        continue;
      }
    }
    rw.copy(v);
  }
  if (!any) return m;
  return eliminate_dead_code(MirModule{rw.finish_ok()});
}

}  // namespace rlx::compile
