// Lowering HIR -> MIR: every HIR op becomes MIR ops. Direct policy emits fused MIR ops
// (FusedMatMulBiasAct, FusedSwiGLU, Attention, ...); Fusable policy emits primitives and
// leaves fusion to the passes (passes.h), which recover the same fused form.
#pragma once

#include "rlx/base/status.h"
#include "rlx/ir/module.h"

namespace rlx::compile {

/// Lowers with `hir.policy`. Errors name the HIR node that cannot be lowered.
Expected<ir::MirModule> lower(const ir::HirModule& hir);

}  // namespace rlx::compile
