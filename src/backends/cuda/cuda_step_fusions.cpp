// CUDA decode-step rewrites over the built step list: gate/up GEMVs with their
// silu * up (fuse_decode_steps), rope of q/k with the KV-cache writes (one rope_kv
// launch, then handed to the q/k/v GEMVs as an epilogue by fuse_gemv_rope_kv), and an
// RMS norm handed to the GEMVs after it as a prologue (fuse_norm_gemv).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <optional>

#include "backends/cuda/cuda_steps_shared.h"
#include "backends/cuda/cuda_util.h"
#include "rlx/base/log.h"

namespace rlx::cuda_backend {

using ir::DType;
using ir::OpKind;

namespace {

/// rope(q), rope(k) and the two cache writes (fuse_decode_steps): in = [q_x, q_pos, k_x,
/// k_pos, k_cache, k_start, v, v_cache, v_start, k_out], out = q_out.
struct RopeKvStepParams {
  RopeKvParams k;
  std::shared_ptr<DeviceBuffer> q_table, k_table;
  int64_t k_src_len = 0, v_src_len = 0;
  bool k_bucket = false, v_bucket = false;
  bool k_out = true;  // rope(k) has readers besides the cache write
  ir::ValueId q_x = ir::kNoValue, k_x = ir::kNoValue, v = ir::kNoValue;  // what it reads
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

/// A decode GEMV step that group_sibling_gemvs could also take (no epilogue).
const LinearParams* plain_gemv_params(const Step& s) {
  if (s.fn != &gemv_fn) return nullptr;
  const LinearParams& p = s.p<LinearParams>();
  if (!p.gemv || p.swiglu || p.has_bias || p.gv.act != 0 || p.gv.n_parts > 1) return nullptr;
  return &p;
}

/// Steps [i, i + 3): gemv(x, Wa), gemv(x, Wb), region silu(a) * b (either order of the
/// product's operands, either GEMV the gate) -> one SwiGLU GEMV writing the region's
/// output. Both products must be used only by the region.
std::optional<Step> match_gemv_swiglu(const std::vector<Step>& steps, size_t i, const ir::Graph& g,
                                      const std::vector<int32_t>& uses) {
  if (i + 2 >= steps.size()) return std::nullopt;
  const Step &a = steps[i], &b = steps[i + 1], &r = steps[i + 2];
  const LinearParams* pa = plain_gemv_params(a);
  const LinearParams* pb = plain_gemv_params(b);
  if (pa == nullptr || pb == nullptr || r.node == ir::kNoValue) return std::nullopt;
  const ir::Node& rn = g.node(r.node);
  if (rn.op != OpKind::ElementwiseRegion || rn.inputs.size() != 2 || rn.dtype != DType::F32) return std::nullopt;
  const GemvParams &va = pa->gv, &vb = pb->gv;
  if (!same_ref(a.in[0], b.in[0]) || va.w_dt != vb.w_dt || va.x_dt != vb.x_dt || va.M != vb.M || va.N != vb.N ||
      va.K != vb.K || va.y_dt != DT::F32 || vb.y_dt != DT::F32 || a.split != b.split ||
      (packed_split(va.w_dt) && !a.split) || a.in[1].offset % 16 != 0 || b.in[1].offset % 16 != 0)
    return std::nullopt;
  if (uses[static_cast<size_t>(a.node)] != 1 || uses[static_cast<size_t>(b.node)] != 1) return std::nullopt;
  // The region's output is born after x's last reader, so the plan may have put it over
  // x; the fused kernel writes it while other blocks still read x.
  if (!disjoint_refs(r.out, a.in[0])) return std::nullopt;
  if (g.node(a.node).shape != rn.shape || g.node(b.node).shape != rn.shape) return std::nullopt;
  // silu(i_g) * i_u with {i_g, i_u} = {input 0, input 1}
  const auto& st = rn.attr<ir::RegionAttrs>().steps;
  if (st.size() != 2 || st[0].op != OpKind::Activation ||
      st[0].kind != static_cast<uint8_t>(ir::ActKind::Silu) || st[0].args.size() != 1 || st[0].args[0] >= 0 ||
      st[1].op != OpKind::Binary || st[1].kind != static_cast<uint8_t>(ir::BinaryKind::Mul) || st[1].args.size() != 2 ||
      st[0].dtype != DType::F32 || st[1].dtype != DType::F32)
    return std::nullopt;
  const int gate_in = -1 - st[0].args[0];
  const int up_arg = st[1].args[0] == 0 ? st[1].args[1] : st[1].args[1] == 0 ? st[1].args[0] : 0;
  const int up_in = -1 - up_arg;
  if (up_arg >= 0 || gate_in > 1 || up_in > 1 || up_in == gate_in) return std::nullopt;
  const ir::ValueId gate_v = rn.inputs[static_cast<size_t>(gate_in)], up_v = rn.inputs[static_cast<size_t>(up_in)];
  const Step* gate = gate_v == a.node && up_v == b.node ? &a : gate_v == b.node && up_v == a.node ? &b : nullptr;
  if (gate == nullptr) return std::nullopt;
  const Step& up = gate == &a ? b : a;
  auto p = std::make_shared<LinearParams>(gate->p<LinearParams>());
  p->swiglu = true;
  p->gv.swiglu = true;
  p->gv.y_dt = DT::F32;
  p->gv.w_const = va.w_const && vb.w_const;
  Step f = *gate;
  f.node = r.node;
  f.in = {gate->in[0], gate->in[1], up.in[1]};
  f.out = r.out;
  f.params = p;
  f.split_inputs = gate->split_inputs != 0 ? 6 : 0;
  f.extent_ok = a.extent_ok && b.extent_ok && r.extent_ok;
  f.what = std::make_shared<const std::string>(*gate->what + " + " + *up.what + " + " + *r.what);
  return f;
}

/// Steps [i, i + 4): rope(q), rope(k), update_slice(k cache, rope k), update_slice(v
/// cache, v) -> one rope_kv launch. Caches must be plain 2-D handles in the dtype of
/// what is written into them, their outputs the handles themselves.
std::optional<Step> match_rope_kv(const std::vector<Step>& steps, size_t i, const ir::Graph& g,
                                  const std::vector<int32_t>& uses) {
  if (i + 3 >= steps.size()) return std::nullopt;
  const Step &rq = steps[i], &rk = steps[i + 1], &uk = steps[i + 2], &uv = steps[i + 3];
  if (rq.fn != &rope_fn || rk.fn != &rope_fn || uk.fn != &update_fn || uv.fn != &update_fn) return std::nullopt;
  const UpdateParams &pk = uk.p<UpdateParams>(), &pv = uv.p<UpdateParams>();
  const RopeStepParams &qp = rq.p<RopeStepParams>(), &kp = rk.p<RopeStepParams>();
  if (!same_ref(uk.in[1], rk.out) || !same_ref(uk.out, uk.in[0]) || !same_ref(uv.out, uv.in[0])) return std::nullopt;
  if (pk.k.outer != 1 || pv.k.outer != 1) return std::nullopt;
  const ir::Node &kc = g.node(g.node(uk.node).inputs[0]), &vc = g.node(g.node(uv.node).inputs[0]);
  const ir::Node& vsrc = g.node(g.node(uv.node).inputs[1]);
  if (to_dt(kc.dtype) != kp.k.out_dt || !float_dt(vc.dtype) || vsrc.dtype != vc.dtype) return std::nullopt;
  const int64_t v_width = pv.k.inner_bytes / dt_size(to_dt(vc.dtype));
  if (pk.k.inner_bytes != kp.k.width * dt_size(kp.k.out_dt) || pk.k.src_len != kp.k.rows) return std::nullopt;
  // A thread reads its own elements before writing them, so a rope may run in place
  // (out == x); across parts, nothing one part writes may alias what another reads or
  // writes.
  const ValueRef &qx = rq.in[0], &qo = rq.out, &kx = rk.in[0], &ko = rk.out, &v = uv.in[1];
  // rope(k)'s own output is written only when something besides the cache write reads it.
  const ValueRef &kc_ref = uk.in[0], &vc_ref = uv.in[0];
  const bool k_out = uses[static_cast<size_t>(rk.node)] > 1;
  for (const auto& [w, r] : {std::pair{&qo, &kx}, {&qo, &v}, {&kc_ref, &qx}, {&kc_ref, &kx}, {&kc_ref, &v},
                             {&kc_ref, &qo}, {&vc_ref, &qx}, {&vc_ref, &kx}, {&vc_ref, &v}, {&vc_ref, &qo},
                             {&vc_ref, &kc_ref}})
    if (!disjoint_refs(*w, *r)) return std::nullopt;
  if (k_out)
    for (const auto& [w, r] : {std::pair{&qo, &ko}, {&ko, &qx}, {&ko, &v}, {&kc_ref, &ko}, {&vc_ref, &ko}})
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
  p->k.v_width = v_width;
  p->k_src_len = pk.k.src_len;
  p->v_src_len = pv.k.src_len;
  p->k_bucket = pk.src_bucket;
  p->v_bucket = pv.src_bucket;
  p->k_out = k_out;
  p->q_x = g.node(rq.node).inputs[0];
  p->k_x = g.node(rk.node).inputs[0];
  p->v = g.node(uv.node).inputs[1];
  Step f = rq;
  f.fn = &rope_kv_fn;
  f.in = {rq.in[0], rq.in[1], rk.in[0], rk.in[1], uk.in[0], uk.in[2], uv.in[1], uv.in[0], uv.in[2], rk.out};
  f.params = p;
  f.split_inputs = 0;
  f.extent_ok = rq.extent_ok && rk.extent_ok && uk.extent_ok && uv.extent_ok;
  f.what = std::make_shared<const std::string>(*rq.what + " + " + *rk.what + " + " + *uk.what + " + " + *uv.what);
  return f;
}

}  // namespace

void fuse_decode_steps(std::vector<Step>& steps, const ir::Graph& g, const std::vector<ir::ValueId>& outputs,
                       bool swiglu, bool rope_kv) {
  std::vector<int32_t> uses = g.use_counts();
  for (ir::ValueId v : outputs) ++uses[static_cast<size_t>(v)];
  std::vector<Step> out;
  out.reserve(steps.size());
  for (size_t i = 0; i < steps.size();) {
    if (std::optional<Step> f = swiglu ? match_gemv_swiglu(steps, i, g, uses) : std::nullopt) {
      out.push_back(std::move(*f));
      i += 3;
    } else if (std::optional<Step> f2 = rope_kv ? match_rope_kv(steps, i, g, uses) : std::nullopt) {
      out.push_back(std::move(*f2));
      i += 4;
    } else {
      out.push_back(std::move(steps[i]));
      ++i;
    }
  }
  for (size_t k = 0; k < out.size(); ++k) out[k].index = static_cast<int>(k);
  steps = std::move(out);
}

namespace {

/// Offers every step run by `fn` to `hand_over(i)`, which rewrites other steps to do its
/// work and returns null, or says why not (logged); first every hand-over (they rewrite
/// steps in place), then the list without the steps handed over, renumbered.
template <class HandOver>
void hand_over_steps(std::vector<Step>& steps, StepFn fn, HandOver&& hand_over) {
  std::vector<bool> gone(steps.size(), false);
  for (size_t i = 0; i < steps.size(); ++i) {
    if (steps[i].fn != fn) continue;
    const char* why_not = hand_over(i);
    if (why_not == nullptr) gone[i] = true;
    else RLX_LOG_DEBUG("cuda: {} stays a launch of its own: {}", *steps[i].what, why_not);
  }
  std::vector<Step> out;
  out.reserve(steps.size());
  for (size_t i = 0; i < steps.size(); ++i)
    if (!gone[i]) out.push_back(std::move(steps[i]));
  for (size_t k = 0; k < out.size(); ++k) out[k].index = static_cast<int>(k);
  steps = std::move(out);
}

/// Everything step s writes: its output, and for GEMVs the other parts' outputs of a
/// grouped launch, the rope / KV-cache writes taken over (fuse_gemv_rope_kv) and the
/// residual sum of a norm prologue (fuse_norm_gemv).
std::vector<const ValueRef*> written_by(const Step& s) {
  std::vector<const ValueRef*> w = {&s.out};
  if (s.fn != &gemv_fn && s.fn != &gemv_group_fn) return w;
  const LinearParams& lp = s.p<LinearParams>();
  if (s.fn == &gemv_group_fn)
    for (int p = 1; p < lp.gv.n_parts; ++p) w.push_back(&s.in[static_cast<size_t>(lp.gv.n_parts + p)]);
  if (lp.rkv_in != 0) {
    for (size_t a : {2, 4, 6}) w.push_back(&s.in[lp.rkv_in + a]);
    if (lp.rkv_k_out) w.push_back(&s.in[lp.rkv_in + 7]);
  }
  if (lp.norm_sum) w.push_back(&s.in.back());
  return w;
}

/// Moves rope_kv step r into the decode GEMVs that produce its q, k and v (one grouped
/// launch or several, among the four steps before it); else says why not.
const char* fuse_rope_kv_into_gemvs(std::vector<Step>& steps, size_t r, const std::vector<int32_t>& uses) {
  const Step& rk = steps[r];
  const RopeKvStepParams& rp = rk.p<RopeKvStepParams>();
  const RopeKvParams& k = rp.k;
  // (A bucketed source of one row has an extent of one: it always writes that row.)
  if (rp.k_src_len != 1 || rp.v_src_len != 1) return "not one row";
  for (const RopeParams* q : {&k.q, &k.k})
    if (q->neox || q->rows != 1 || q->x_dt != DT::F32 || q->in_width != q->width || q->in_offset != 0 ||
        q->head_dim % 2 != 0 || q->n_rot % 2 != 0)
      return "rope form (neox, rows, dtype or a narrowed input)";
  if (k.v_dt != DT::F32) return "v cache dtype";
  for (ir::ValueId v : {rp.q_x, rp.k_x, rp.v})
    if (v == ir::kNoValue || uses[static_cast<size_t>(v)] != 1) return "q, k or v has other readers";
  // The producing part of each of q, k, v: (step, part).
  const ValueRef* want[3] = {&rk.in[0], &rk.in[2], &rk.in[6]};
  const int64_t width[3] = {k.q.width, k.k.width, k.v_width};
  size_t at_step[3] = {0, 0, 0};
  int at_part[3] = {-1, -1, -1};
  for (int role = 0; role < 3; ++role)
    for (size_t j = r; j-- > 0 && r - j <= 4 && at_part[role] < 0;) {
      const Step& s = steps[j];
      if (s.fn != &gemv_fn && s.fn != &gemv_group_fn) continue;
      const LinearParams& lp = s.p<LinearParams>();
      const GemvParams& gv = lp.gv;
      if (!lp.gemv || lp.swiglu || lp.has_bias || gv.act != 0 || gv.M != 1 || gv.y_dt != DT::F32 || lp.rkv_in != 0)
        continue;
      if (s.fn == &gemv_fn && lp.packed && packed_split(lp.q.w_dt) && !s.split) continue;  // the generic packed GEMV
      const int parts = s.fn == &gemv_group_fn ? gv.n_parts : 1;
      for (int i = 0; i < parts; ++i) {
        const ValueRef& out = i == 0 ? s.out : s.in[static_cast<size_t>(parts + i)];
        const int64_t n = parts > 1 ? gv.part_N[i] : gv.N;
        if (same_ref(out, *want[role]) && n == width[role]) {
          at_step[role] = j;
          at_part[role] = i;
        }
      }
    }
  if (at_part[0] < 0 || at_part[1] < 0 || at_part[2] < 0) return "q, k or v is not made by a one-row GEMV just before";
  const size_t first = std::min({at_step[0], at_step[1], at_step[2]});
  // The GEMVs now write q_out, k_out and the cache rows from step `first` on: nothing
  // the steps up to r read or write may overlap them (bar q, k, v themselves, which
  // nothing writes any more).
  // The reads move earlier too (positions and cache starts): no step in between may
  // write them. And no step after a producer may write over q, k or v (an in-place
  // bias add, say): then the GEMV's value is not what rope_kv read.
  std::vector<const ValueRef*> writes = {&rk.out, &rk.in[4], &rk.in[7]};
  if (rp.k_out) writes.push_back(&rk.in[9]);
  const ValueRef* reads[4] = {&rk.in[1], &rk.in[3], &rk.in[5], &rk.in[8]};
  for (size_t j = first; j < r; ++j) {
    const Step& s = steps[j];
    const std::vector<const ValueRef*> sw = written_by(s);
    for (const ValueRef* w : sw) {
      for (const ValueRef* rd : reads)
        if (!disjoint_refs(*w, *rd)) return "a step in between writes a position or cache start";
      for (int role = 0; role < 3; ++role)
        if (j > at_step[role] && !disjoint_refs(*w, *want[role])) return "a step in between writes q, k or v";
    }
    std::vector<const ValueRef*> refs = {&s.out};
    for (const ValueRef& x : s.in) refs.push_back(&x);
    for (const ValueRef* x : refs) {
      if (same_ref(*x, *want[0]) || same_ref(*x, *want[1]) || same_ref(*x, *want[2])) continue;
      for (const ValueRef* w : writes)
        if (!disjoint_refs(*w, *x)) return "what it writes overlaps what the GEMVs read";
    }
  }
  const uint8_t roles[3] = {GemvParams::kRoleQ, GemvParams::kRoleK, GemvParams::kRoleV};
  for (size_t j = first; j < r; ++j) {
    if (j != at_step[0] && j != at_step[1] && j != at_step[2]) continue;
    Step& s = steps[j];
    auto lp = std::make_shared<LinearParams>(s.p<LinearParams>());
    for (int role = 0; role < 3; ++role)
      if (at_step[role] == j) lp->gv.part_role[at_part[role]] = roles[role];
    lp->gv.rkv = k;
    lp->gv.rkv.k_rows = lp->gv.rkv.v_rows = 1;
    lp->gv.rkv.q.inv_freq = reinterpret_cast<const double*>(rp.q_table->data());  // kept by rkv_keep
    lp->gv.rkv.k.inv_freq = reinterpret_cast<const double*>(rp.k_table->data());
    lp->rkv_in = s.in.size();
    lp->rkv_k_out = rp.k_out;
    lp->rkv_keep = rk.params;
    for (size_t i : {1, 3, 4, 5, 7, 8}) s.in.push_back(rk.in[i]);
    s.in.push_back(rk.out);
    s.in.push_back(rk.in[9]);
    s.params = lp;
    s.extent_ok = s.extent_ok && rk.extent_ok;
    if (j == first) s.what = std::make_shared<const std::string>(*s.what + " + " + *rk.what);
  }
  return nullptr;
}

}  // namespace

void fuse_gemv_rope_kv(std::vector<Step>& steps, const ir::Graph& g, const std::vector<ir::ValueId>& outputs) {
  std::vector<int32_t> uses = g.use_counts();
  for (ir::ValueId v : outputs) ++uses[static_cast<size_t>(v)];
  hand_over_steps(steps, &rope_kv_fn, [&](size_t i) { return fuse_rope_kv_into_gemvs(steps, i, uses); });
}

namespace {

/// The GEMV form fuse_norm_gemv takes: one row of f32 x, 16-byte aligned, room for the
/// prologue's rows in shared memory, no prologue yet.
bool gemv_takes_norm(const Step& s, int64_t K) {
  if (s.fn != &gemv_fn && s.fn != &gemv_group_fn) return false;
  const LinearParams& lp = s.p<LinearParams>();
  const GemvParams& gv = lp.gv;
  if (!lp.gemv || gv.M != 1 || !gv.x_vec4 || gv.x_dt != DT::F32 || gv.K != K || gv.norm) return false;
  if (s.fn == &gemv_fn && lp.packed && packed_split(lp.q.w_dt) && !s.split) return false;  // the generic packed GEMV
  return gemv_norm_fits(gv);
}

// Every block of a GEMV with the prologue reads the norm's inputs and gamma (3 x 4K bytes
// from L2) and sums squares: worth a launch for the q/k/v and gate/up products (<= 2048
// blocks of 8 or 16 rows), not for an LM head of 32000 rows and more.
constexpr int64_t kNormPrologueMaxRows = 16384;

/// Why one-row RMS norm step i cannot become the prologue of the GEMV steps right after
/// it, or null after rewriting them to compute it (the caller drops step i). Those steps
/// (q/k and v over different weight types, say) must be all that reads the normed row;
/// the first writes the residual sum.
const char* fuse_norm_into_gemv(std::vector<Step>& steps, size_t i, const ir::Graph& g, const ir::BufferPlan& plan,
                                const std::vector<ir::ValueId>& outputs) {
  const Step& ns = steps[i];
  const NormStepParams& np = ns.p<NormStepParams>();
  const NormParams& k = np.k;
  if (!k.rms || np.beta || k.rows != 1 || k.x_dt != DT::F32 || k.out_dt != DT::F32 || k.d % 4 != 0)
    return "not a one-row f32 RMS norm";
  const int64_t row_bytes = k.d * 4;
  ValueRef normed = ns.out, sum = ns.out;
  normed.offset += np.residual ? row_bytes : 0;
  normed.bytes = row_bytes;
  sum.bytes = row_bytes;
  // The GEMVs that read the normed row, right after the norm, and their products.
  size_t end = i + 1;
  int parts = 0;
  int64_t rows = 0;
  for (; end < steps.size() && same_ref(steps[end].in[0], normed) && steps[end].in[0].bytes == row_bytes; ++end) {
    if (!gemv_takes_norm(steps[end], k.d)) return "a step that is not a GEMV of the prologue's form reads the normed row";
    const LinearParams& lp = steps[end].p<LinearParams>();
    parts += steps[end].fn == &gemv_group_fn ? lp.gv.n_parts : lp.swiglu ? 2 : 1;
    rows += steps[end].fn == &gemv_group_fn ? std::accumulate(lp.gv.part_N, lp.gv.part_N + lp.gv.n_parts, int64_t{0})
                                            : lp.gv.N;
  }
  if (end == i + 1) return "the next step is not a GEMV over the normed row";
  if (rows > kNormPrologueMaxRows) return "the GEMVs have too many rows for every block to recompute the norm";
  const ValueRef& x = ns.in[0];
  const ValueRef* res = np.residual ? &ns.in[1] : nullptr;
  const ValueRef& gamma = ns.in[np.residual ? 2 : 1];
  if (x.offset % 16 != 0 || (res != nullptr && res->offset % 16 != 0) || sum.offset % 16 != 0 ||
      (k.g_dt == DT::F32 && gamma.offset % 16 != 0))
    return "alignment";
  // Nothing but those products may read the normed row (it is no longer written), and
  // the executable must not copy it out.
  const ir::ValueId nv = ns.node;
  auto reads_normed = [&](ir::ValueId v) {
    const ir::BufferSlot& sl = plan.slots[static_cast<size_t>(v)];
    const bool view = sl.kind == ir::SlotKind::kView;
    if ((view ? sl.root : v) != nv) return false;
    const int64_t lo = view ? sl.offset : 0, hi = lo + sl.size;
    const int64_t nlo = normed.offset - ns.out.offset;
    return lo < nlo + row_bytes && nlo < hi;
  };
  for (ir::ValueId o : outputs)
    if (reads_normed(o)) return "the normed row is an output";
  int readers = 0;
  for (ir::ValueId v = 0; v < g.size(); ++v) {
    const ir::Node& n = g.node(v);
    if (plan.slots[static_cast<size_t>(v)].kind == ir::SlotKind::kView && n.op != OpKind::UpdateSlice) continue;
    for (ir::ValueId in : n.inputs)
      if (reads_normed(in)) {
        // (the GEMVs' products: a FusedSwiGLU node is two of them)
        if (n.op == OpKind::FusedSwiGLU) readers += 2;
        else if (n.op == OpKind::MatMul || n.op == OpKind::DequantMatMul || n.op == OpKind::FusedMatMulBiasAct) ++readers;
        else return "the normed row has other readers";
        break;
      }
  }
  if (readers != parts) return "the normed row has other readers";
  // Every block reads x, res and gamma while others write the GEMVs' outputs and block 0
  // of the first the sum: what the GEMVs write must not overlap those, nor the sum
  // anything they read.
  for (size_t j = i + 1; j < end; ++j) {
    const Step& gs = steps[j];
    for (const ValueRef* w : written_by(gs))
      for (const ValueRef* r : {&x, res, &gamma, static_cast<const ValueRef*>(np.residual ? &sum : nullptr)})
        if (r != nullptr && !disjoint_refs(*w, *r)) return "the GEMV's outputs overlap the norm's inputs";
    if (np.residual)
      for (size_t a = 1; a < gs.in.size(); ++a)
        if (!disjoint_refs(sum, gs.in[a])) return "the sum overlaps what the GEMV reads";
  }
  if (np.residual && (!disjoint_refs(sum, x) || !disjoint_refs(sum, *res))) return "the sum overlaps the norm's inputs";
  for (size_t j = i + 1; j < end; ++j) {
    Step& gs = steps[j];
    auto p = std::make_shared<LinearParams>(gs.p<LinearParams>());
    p->gv.norm = true;
    p->gv.norm_g_dt = k.g_dt;
    p->gv.norm_eps = k.eps;
    p->gv.norm_gamma_const = k.affine_const;
    p->norm_residual = np.residual;
    p->norm_sum = np.residual && j == i + 1;
    p->norm_in = gs.in.size();
    gs.in[0] = x;
    if (res != nullptr) gs.in.push_back(*res);
    gs.in.push_back(gamma);
    if (p->norm_sum) gs.in.push_back(sum);
    gs.params = p;
    gs.extent_ok = gs.extent_ok && ns.extent_ok;
    gs.what = std::make_shared<const std::string>(*ns.what + " + " + *gs.what);
  }
  return nullptr;
}

}  // namespace

void fuse_norm_gemv(std::vector<Step>& steps, const ir::Graph& g, const ir::BufferPlan& plan,
                    const std::vector<ir::ValueId>& outputs) {
  hand_over_steps(steps, &norm_fn, [&](size_t i) { return fuse_norm_into_gemv(steps, i, g, plan, outputs); });
}

}  // namespace rlx::cuda_backend
