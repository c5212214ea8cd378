// The one CUDA step rewrite left over the built step list: rope(q), rope(k) and the
// KV-cache writes that no product took (the neox rope of Qwen and Gemma, rows of a
// prefill, the stacked caches of a batched step) as one rope_kv launch. The decode
// GEMVs' fusions are the IR's fused_linear (compile/fuse_linear.cpp,
// cuda_steps_linear.cpp).
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "backends/cuda/cuda_steps_shared.h"
#include "backends/cuda/cuda_util.h"

namespace rlx::cuda_backend {

using ir::DType;
using ir::OpKind;

namespace {

/// rope(q), rope(k) and the cache writes (fuse_rope_kv_steps): in = [q_x, q_pos, k_x,
/// k_pos, k_cache, k_start, v, v_cache, v_start, k_out], out = q_out.
struct RopeKvStepParams {
  RopeKvParams k;
  std::shared_ptr<DeviceBuffer> q_table, k_table;
  int64_t k_src_len = 0, v_src_len = 0;
  bool k_bucket = false, v_bucket = false;
  bool k_out = true;  // rope(k) has readers besides the cache write
};

Status rope_kv_fn(const Step& s, const RunCtx& ctx) {
  const RopeKvStepParams& p = s.p<RopeKvStepParams>();
  RopeKvParams k = p.k;
  k.q.x = s.in_ptr[0];
  k.q.pos = s.in_ptr[1];
  k.q.out = s.out_ptr;
  k.q.inv_freq = reinterpret_cast<const double*>(p.q_table->data());
  k.k.x = s.in_ptr[2];
  k.k.pos = s.in_ptr[3];
  k.k.out = p.k_out ? const_cast<uint8_t*>(s.in_ptr[9]) : nullptr;
  k.k.inv_freq = reinterpret_cast<const double*>(p.k_table->data());
  k.k_cache = const_cast<uint8_t*>(s.in_ptr[4]);  // handles are written in place by design
  k.k_start = s.in_ptr[5];
  k.v = s.in_ptr[6];
  k.v_cache = const_cast<uint8_t*>(s.in_ptr[7]);
  k.v_start = s.in_ptr[8];
  k.k_rows = p.k_bucket && ctx.extent_on ? p.k_src_len / ctx.upper * ctx.actual : p.k_src_len;
  k.v_rows = p.v_bucket && ctx.extent_on ? p.v_src_len / ctx.upper * ctx.actual : p.v_src_len;
  k.err = ctx.err;
  k.err_code = s.index + 1;
  launch_rope_kv(k, ctx.stream);
  return {};
}

/// True for a step that does nothing: a reshape onto its own input's storage (a view).
bool view_step(const Step& s, const ir::Graph& g) {
  return s.node != ir::kNoValue && g.node(s.node).op == OpKind::Reshape && !s.in.empty() && same_ref(s.in[0], s.out);
}

/// True when step `s` (a slice, reshape, cast or gather), found between the ropes and
/// the k cache write, may run before both ropes: it reads nothing they write and writes
/// nothing they read or write.
bool independent_of_ropes(const Step& s, const Step& rq, const Step& rk, const ir::Graph& g) {
  // (pure slices and copies only: a step that writes through its inputs, as a grouped
  // product does, is not one)
  if (s.fn == &rope_fn || s.fn == &update_fn || s.in.empty() || s.node == ir::kNoValue) return false;
  const OpKind op = g.node(s.node).op;
  if (op != OpKind::Narrow && op != OpKind::Reshape && op != OpKind::Cast && op != OpKind::Gather) return false;
  for (const Step* r : {&rq, &rk}) {
    for (const ValueRef& in : s.in)
      if (!disjoint_refs(in, r->out)) return false;
    for (const ValueRef& in : r->in)
      if (!disjoint_refs(s.out, in)) return false;
    if (!disjoint_refs(s.out, r->out)) return false;
  }
  return true;
}

/// Steps at[0..parts): rope(q), rope(k), update_slice(k cache, rope k), update_slice(v
/// cache, v) -> one rope_kv launch (at: the steps' indices; what lies between them may
/// run before them, fuse_rope_kv_steps checks); without `with_v`, three parts without
/// the v write (a v product that wrote its cache rows itself: fused_linear). Caches must be handles in
/// the dtype of what is written into them (several sequences: stacks [B, len, width]
/// written from a start per sequence), their outputs the handles themselves.
std::optional<Step> match_rope_kv(const std::vector<Step>& steps, const size_t* at, const ir::Graph& g,
                                  const std::vector<int32_t>& uses, bool with_v) {
  const Step &rq = steps[at[0]], &rk = steps[at[1]], &uk = steps[at[2]];
  const Step& uv = with_v ? steps[at[3]] : uk;  // (without v: stands in, nothing of it is read)
  if (rq.fn != &rope_fn || rk.fn != &rope_fn || uk.fn != &update_fn || uv.fn != &update_fn) return std::nullopt;
  const UpdateParams &pk = uk.p<UpdateParams>(), &pv = uv.p<UpdateParams>();
  const RopeStepParams &qp = rq.p<RopeStepParams>(), &kp = rk.p<RopeStepParams>();
  if (!same_ref(uk.in[1], rk.out) || !same_ref(uk.out, uk.in[0]) || !same_ref(uv.out, uv.in[0])) return std::nullopt;
  // One cache, or a stack of one slice per sequence written from each one's start.
  const int64_t outer = pk.k.outer;
  if (pv.k.outer != outer || (outer > 1 && (!pk.k.start_per_outer || !pv.k.start_per_outer || pk.src_bucket ||
                                            pv.src_bucket)))
    return std::nullopt;
  const ir::Node &kc = g.node(g.node(uk.node).inputs[0]), &vc = g.node(g.node(uv.node).inputs[0]);
  const ir::Node& vsrc = g.node(g.node(uv.node).inputs[1]);
  if (to_dt(kc.dtype) != kp.k.out_dt || !float_dt(vc.dtype) || vsrc.dtype != vc.dtype) return std::nullopt;
  const int64_t v_width = pv.k.inner_bytes / dt_size(to_dt(vc.dtype));
  if (pk.k.inner_bytes != kp.k.width * dt_size(kp.k.out_dt) || pk.k.src_len * outer != kp.k.rows) return std::nullopt;
  // A thread reads its own elements before writing them, so a rope may run in place
  // (out == x); across parts, nothing one part writes may alias what another reads or
  // writes.
  const ValueRef &qx = rq.in[0], &qo = rq.out, &kx = rk.in[0], &ko = rk.out, &v = uv.in[1];
  // rope(k)'s own output is written only when something besides the cache write reads it.
  const ValueRef &kc_ref = uk.in[0], &vc_ref = uv.in[0];
  const bool k_out = uses[static_cast<size_t>(rk.node)] > 1;
  for (const auto& [w, r] : {std::pair{&qo, &kx}, {&kc_ref, &qx}, {&kc_ref, &kx}, {&kc_ref, &qo}})
    if (!disjoint_refs(*w, *r)) return std::nullopt;
  if (with_v)
    for (const auto& [w, r] : {std::pair{&qo, &v}, {&kc_ref, &v}, {&vc_ref, &qx}, {&vc_ref, &kx}, {&vc_ref, &v},
                               {&vc_ref, &qo}, {&vc_ref, &kc_ref}})
      if (!disjoint_refs(*w, *r)) return std::nullopt;
  if (k_out)
    for (const auto& [w, r] : {std::pair{&qo, &ko}, {&ko, &qx}, {&kc_ref, &ko}})
      if (!disjoint_refs(*w, *r)) return std::nullopt;
  if (k_out && with_v)
    for (const auto& [w, r] : {std::pair{&ko, &v}, {&vc_ref, &ko}})
      if (!disjoint_refs(*w, *r)) return std::nullopt;
  auto p = std::make_shared<RopeKvStepParams>();
  p->k.q = qp.k;
  p->k.k = kp.k;
  p->q_table = qp.table;
  p->k_table = kp.table;
  p->k.k_start_dt = pk.k.start_dt;
  p->k.k_len = pk.k.dst_len;
  p->k.v_dt = to_dt(vc.dtype);
  p->k.v_start_dt = pv.k.start_dt;
  p->k.v_len = pv.k.dst_len;
  p->k.v_width = with_v ? v_width : 0;
  p->k_src_len = pk.k.src_len;
  p->v_src_len = with_v ? pv.k.src_len : 0;
  p->k_bucket = pk.src_bucket;
  p->v_bucket = with_v && pv.src_bucket;
  p->k_out = k_out;
  p->k.outer = outer;
  Step f = rq;
  f.fn = &rope_kv_fn;
  // Without v, the v slots read k's cache, source and start (the kernel copies no v row).
  f.in = {rq.in[0], rq.in[1], rk.in[0], rk.in[1], uk.in[0], uk.in[2], uv.in[1], uv.in[0], uv.in[2], rk.out};
  f.params = p;
  f.split_inputs = 0;
  f.extent_ok = rq.extent_ok && rk.extent_ok && uk.extent_ok && uv.extent_ok;
  std::string what = *rq.what + " + " + *rk.what + " + " + *uk.what;
  if (with_v) what += " + " + *uv.what;
  f.what = std::make_shared<const std::string>(what);
  return f;
}

}  // namespace

void fuse_rope_kv_steps(std::vector<Step>& steps, const ir::Graph& g, const std::vector<ir::ValueId>& outputs) {
  std::vector<int32_t> uses = g.use_counts();
  for (ir::ValueId v : outputs) ++uses[static_cast<size_t>(v)];
  std::vector<Step> out;
  out.reserve(steps.size());
  for (size_t i = 0; i < steps.size();) {
    // From a rope at i: the next rope and then the next two cache writes, past steps that
    // may run before them all (views, which do nothing, and between rope(k) and the k
    // write, slices that share no byte with the ropes: the cache starts of a batched
    // step, sliced from the positions once). Those stay ahead of the fused step.
    size_t at[4] = {i, 0, 0, 0};
    size_t found = 1;
    std::vector<size_t> between;
    if (steps[i].fn == &rope_fn)
      for (size_t j = i + 1; j < steps.size() && found < 4 && j - i <= 12; ++j) {
        const Step& s = steps[j];
        if (view_step(s, g)) {
          between.push_back(j);
        } else if (s.fn == (found == 1 ? &rope_fn : &update_fn)) {
          at[found++] = j;
        } else if (found == 2 && independent_of_ropes(s, steps[at[0]], steps[at[1]], g)) {
          // (only ahead of the k write: what lies between the two writes would move ahead
          // of the k write too, unchecked against it)
          between.push_back(j);
        } else {
          break;
        }
      }
    std::optional<Step> f;
    size_t parts = 0;
    if (found == 4 && (f = match_rope_kv(steps, at, g, uses, true))) parts = 4;
    else if (found >= 3 && (f = match_rope_kv(steps, at, g, uses, false))) parts = 3;
    if (!f) {
      out.push_back(std::move(steps[i]));
      ++i;
      continue;
    }
    for (size_t k : between)
      if (k < at[parts - 1]) out.push_back(std::move(steps[k]));
    out.push_back(std::move(*f));
    // (steps after the last part that the scan passed over come next, in order)
    i = at[parts - 1] + 1;
  }
  for (size_t k = 0; k < out.size(); ++k) out[k].index = static_cast<int>(k);
  steps = std::move(out);
}

}  // namespace rlx::cuda_backend
