// Precision (after fusion, before legalization): computes in f16/bf16 where chosen and
// inserts Casts. Mixed None: every float op in the low dtype. Mixed Auto: matmuls and
// attention in the low dtype, norms/softmax/reductions/rope in f32, other ops in the
// widest dtype of their float inputs. f32 params/handles whose users all compute low are
// retyped (the manifest shows it; the runtime converts at set_param); graph inputs and
// outputs keep their dtypes. Ends with remove_cast_pairs and constant folding of Casts.
#include <map>

#include "rewriter.h"
#include "rlx/compile/passes.h"

namespace rlx::compile {
using namespace ir;

namespace {

enum class Class { Low, F32, Follow, Opaque };

Class class_of(OpKind k, MixedPrecision mixed) {
  switch (k) {
    case OpKind::Custom: return Class::Opaque;
    // Recurrent states accumulate over a whole sequence: the state ops and their
    // handles stay f32 at every precision.
    case OpKind::CausalConv1d: case OpKind::GatedDeltaRule: return Class::Opaque;
    case OpKind::Sample: return Class::F32;  // the draw and the logits it is compared with stay f32
    case OpKind::MoeRoute: case OpKind::MoeFfn: return Class::F32;  // routing and the expert sums in f32
    // Spatial ops: their kernels compute in f32 (convolution sums, group statistics, resampling weights).
    case OpKind::Conv: case OpKind::ConvTranspose: case OpKind::GroupNorm: case OpKind::Interpolate:
    case OpKind::WindowPartition: case OpKind::WindowUnpartition: case OpKind::RelPosAttention: return Class::F32;
    case OpKind::MatMul: case OpKind::DequantMatMul: case OpKind::FusedMatMulBiasAct: case OpKind::FusedSwiGLU:
    case OpKind::Attention: return Class::Low;
    case OpKind::Reduce: case OpKind::Softmax: case OpKind::Cumsum: case OpKind::RmsNorm: case OpKind::LayerNorm:
    case OpKind::FusedResidualRmsNorm: case OpKind::FusedResidualLayerNorm: case OpKind::Rope:
      return mixed == MixedPrecision::Auto ? Class::F32 : Class::Low;
    default: return mixed == MixedPrecision::Auto ? Class::Follow : Class::Low;
  }
}

}  // namespace

Expected<MirModule> apply_precision(const MirModule& m, Precision precision, MixedPrecision mixed) {
  const DType low = precision_dtype(precision);
  if (low == DType::F32) return m;
  const Graph& g = m.graph;
  const auto users = detail::users_of(g);
  detail::Rewriter rw(g);
  GraphBuilder& b = rw.b();
  std::map<std::pair<ValueId, DType>, ValueId> casts;  // (rebuilt value, dtype) -> cast
  auto cast_to = [&](ValueId nv, DType dt) {
    if (b.type(nv).dtype == dt || !is_float(b.type(nv).dtype)) return nv;
    auto [it, fresh] = casts.try_emplace({nv, dt}, kNoValue);
    if (fresh) it->second = b.cast(nv, dt);
    return it->second;
  };
  for (ValueId v = 0; v < g.size(); ++v) {
    const Node& n = g.node(v);
    if (n.op == OpKind::Param || n.op == OpKind::Handle) {
      bool all_low = n.dtype == DType::F32 && !users[static_cast<size_t>(v)].empty();
      for (ValueId u : users[static_cast<size_t>(v)]) {
        const OpKind uk = g.node(u).op;
        all_low = all_low && (class_of(uk, mixed) == Class::Low || uk == OpKind::UpdateSlice ||
                              (mixed == MixedPrecision::None && class_of(uk, mixed) != Class::Opaque));
      }
      if (!all_low) {
        rw.copy(v);
        continue;
      }
      Node copy = n;
      copy.dtype = low;
      rw.set(v, rw.dst().add_unchecked(std::move(copy)));
      continue;
    }
    if (op_info(n.op).category == OpCategory::Boundary) {
      rw.copy(v);
      continue;
    }
    std::vector<ValueId> in;
    for (ValueId i : n.inputs) in.push_back(rw.map(i));
    const Class c = class_of(n.op, mixed);
    if (c == Class::Opaque) {  // custom and state ops see their original types
      for (size_t i = 0; i < in.size(); ++i) in[i] = cast_to(in[i], g.node(n.inputs[i]).dtype);
      Node copy = n;
      copy.inputs = in;
      rw.set(v, rw.dst().add_unchecked(std::move(copy)));
      continue;
    }
    DType want = low;
    if (c == Class::F32) want = DType::F32;
    if (c == Class::Follow) {
      bool any_float = false, any_wide = false;
      for (ValueId i : in) {
        const DType t = b.type(i).dtype;
        any_float = any_float || is_float(t);
        any_wide = any_wide || t == DType::F32 || t == DType::F64;
      }
      want = any_wide || !any_float ? DType::F32 : low;
    }
    if (n.op == OpKind::UpdateSlice) want = b.type(in[0]).dtype;
    for (size_t i = 0; i < in.size(); ++i) {
      if (n.op == OpKind::DequantMatMul && i == 1) continue;  // the stored weight
      if (n.op == OpKind::Gather && i == 0) continue;         // a table gathers as stored
      if (n.op == OpKind::MoeFfn && i >= 2) continue;         // expert weights are read as stored
      in[i] = cast_to(in[i], want);
    }
    if (n.op == OpKind::Cast) {
      DType target = n.dtype;
      if (mixed == MixedPrecision::None && is_float(target)) target = low;
      rw.set(v, b.type(in[0]).dtype == target ? in[0] : cast_to(in[0], target));
      continue;
    }
    b.label(n.label);
    rw.set(v, b.op(n.op, std::move(in), n.attrs, n.type()));
  }
  std::vector<GraphOutput> outs = g.outputs();
  for (GraphOutput& o : outs) {
    const ValueId nv = rw.map(o.value);
    const DType want = g.node(o.value).dtype;
    const ValueId fixed = b.type(nv).dtype == want ? nv : b.cast(nv, want);
    rw.set(o.value, fixed);
  }
  ASSIGN_OR_RETURN(Graph out, rw.finish());
  TRY(verify(out));
  return fold_constants(remove_cast_pairs(MirModule{std::move(out)}));
}

}  // namespace rlx::compile
