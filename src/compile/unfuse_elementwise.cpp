// Unfusing: every ElementwiseRegion back into its step ops (for backends that run
// elementwise ops one by one). Uses legalization's region rewrite, so the expansion is
// the one documented in legalize.cpp.
#include "rlx/compile/legalize.h"
#include "rlx/compile/passes.h"

namespace rlx::compile {

ir::MirModule unfuse_elementwise(const ir::MirModule& m) {
  OpSet all = OpSet::all_mir();
  all.remove(ir::OpKind::ElementwiseRegion);
  auto r = legalize(m, all, "unfuse_elementwise");
  if (!r) abort_with_error(r.error().with_context("internal: unfuse_elementwise"));
  return std::move(r).value();
}

}  // namespace rlx::compile
