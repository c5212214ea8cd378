// The MIR passes: each is a function MirModule -> MirModule in its own file under
// src/compile/, testable alone. Every pass requires a verified MIR module and returns a
// verified one computing the same outputs (documented per pass in its .cpp file).
#pragma once

#include <string>
#include <vector>

#include "rlx/base/status.h"
#include "rlx/compile/fusion_report.h"
#include "rlx/compile/options.h"
#include "rlx/ir/module.h"

namespace rlx::compile {

/// What shard_tensor_parallel did: per block split or kept whole (and why).
struct ShardReport {
  int world = 1;
  int64_t attention_split = 0, ffn_split = 0, lm_head_split = 0;  ///< blocks split across the ranks
  int64_t all_reduces = 0, all_gathers = 0;                     ///< collectives inserted
  std::vector<std::string> kept_whole;  ///< "blk.3.ffn: hidden 5632 / 3 is not whole"
  /// Multi-line summary for `rlx compile --report` (empty when world == 1).
  std::string to_string() const;
};

/// Tensor parallelism over `world` ranks (Megatron-style), on the HIR before lowering:
/// every rank runs the returned graph on its part of the weights.
///  - attention blocks: the q/k/v projections split by heads (rows), the output
///    projection by its input columns, the KV cache (handles) by KV heads; an
///    all_reduce sums the ranks' partial outputs after the block;
///  - feed-forwards (SwiGLU / GELU): gate and up split by rows, down by columns, then
///    an all_reduce; a mixture of experts (moe_ffn) the same within every expert, with
///    the router whole on every rank;
///  - the LM head (a final linear no other compute follows): split by vocabulary rows,
///    its logits all_gathered and put back in vocabulary order.
/// A block whose heads or hidden size do not divide by `world`, whose packed weight
/// blocks would be cut, or whose weights are shared with other ops stays whole (every
/// rank computes it; report->kept_whole says why). Param nodes of split weights carry
/// shard_axis / shard_parts and their part's shape. world == 1 returns `m` unchanged.
Expected<ir::HirModule> shard_tensor_parallel(const ir::HirModule& m, int world, ShardReport* report = nullptr);

/// Removes nodes no output depends on. Boundary nodes (inputs, params, handles) and
/// UpdateSlice writes into handles are always kept (they are the interface / side effects).
ir::MirModule eliminate_dead_code(const ir::MirModule& m);

/// Evaluates ops whose inputs are all constants (Activation, Binary, Compare, Where, Cast,
/// Reshape, Expand, Narrow, Transpose) at compile time, per dtype (f16/bf16/f32/f64
/// read as what they are; integers in integer arithmetic; exact erf GELU). Params are
/// never folded. Results above kMaxFoldElements elements are left alone.
ir::MirModule fold_constants(const ir::MirModule& m);
inline constexpr int64_t kMaxFoldElements = int64_t{1} << 16;

/// Merges nodes with equal op, attrs, type and inputs (not boundary nodes, not UpdateSlice,
/// not Custom).
ir::MirModule eliminate_common_subexpressions(const ir::MirModule& m);

/// MatMul(x, W, transpose_b) -> [Binary add bias[N]] -> [Activation] into
/// FusedMatMulBiasAct, when every intermediate has one user. Records "matmul_bias_act".
ir::MirModule fuse_matmul_bias_act(const ir::MirModule& m, FusionReport* report = nullptr);

/// silu(x.Wg^T) * (x.Wu^T), both matmuls sharing x and used once, into FusedSwiGLU.
/// Records "swiglu".
ir::MirModule fuse_swiglu(const ir::MirModule& m, FusionReport* report = nullptr);

/// add(x, res) -> RmsNorm/LayerNorm into FusedResidualRmsNorm/LayerNorm ([2, ...]:
/// index 0 = sum, 1 = normed); users read Narrow(axis 0) + Reshape views.
/// Records "residual_norm".
ir::MirModule fuse_residual_norm(const ir::MirModule& m, FusionReport* report = nullptr);

/// rope(narrow(x, last axis, start, len)) into rope(x) {offset=start, width=len}: the
/// q/k slice of a fused qkv projection is read in place. Records "narrow_rope".
ir::MirModule fuse_narrow_rope(const ir::MirModule& m, FusionReport* report = nullptr);

/// The primitive attention form (as lowered by Fusable policy or by legalization:
/// matmul -> scale -> [softcap] -> mask -> softmax -> matmul) into Attention.
/// Records "attention".
ir::MirModule fuse_attention(const ir::MirModule& m, FusionReport* report = nullptr);

/// For a target with a fused linear kernel (Target::fused_linear): products of f32 x
/// take in the RMS norm they read, a SwiGLU, a residual add, rope and a KV-cache write,
/// as far as the backend's check allows, as FusedLinear; sibling products the backend
/// runs as one launch share a group id. Records "linear_*" (see fuse_linear.cpp).
ir::MirModule fuse_linear(const ir::MirModule& m, const Target& target, FusionReport* report = nullptr);
/// The query a target's fused_linear check answers for fused_linear node `v` of `g` (a
/// norm prologue counted as read by this product alone).
FusedLinearQuery fused_linear_query(const ir::Graph& g, ir::ValueId v);

/// Maximal single-user chains of elementwise ops into ElementwiseRegions, bounded by
/// `limits`. Records "elementwise_region".
ir::MirModule fuse_elementwise(const ir::MirModule& m, const FusionLimits& limits, FusionReport* report = nullptr);

/// Expands every ElementwiseRegion back into its ops.
ir::MirModule unfuse_elementwise(const ir::MirModule& m);

/// Removes Cast pairs that cancel exactly (a -> wider b -> a, and same-dtype casts).
ir::MirModule remove_cast_pairs(const ir::MirModule& m);

/// Computes in `precision` (Mixed None) or matmuls/attention in `precision` and
/// norms/softmax/reductions in f32 (Mixed Auto), inserting Casts; f32 params and handles
/// used only at low precision are retyped, inputs/outputs keep their dtypes.
Expected<ir::MirModule> apply_precision(const ir::MirModule& m, Precision precision, MixedPrecision mixed);

}  // namespace rlx::compile
