// A small, self-contained transformer block in HIR (RMSNorm → GQA attention with
// RoPE → residual → RMSNorm → SwiGLU FFN → residual) used by `rlx run` when no
// model is given and by `rlx compile --demo`.
#pragma once

#include "rlx/ir/module.h"

namespace rlx::cli {

struct DemoShape {
  int64_t dim = 64, n_heads = 4, n_kv_heads = 2, ffn = 128;
};

/// HIR with inputs x f32[SEQ, dim] and pos i32[SEQ]; params named blk.0.*.
Expected<ir::HirModule> demo_block(const DemoShape& shape, ir::FusionPolicy policy);

}  // namespace rlx::cli
