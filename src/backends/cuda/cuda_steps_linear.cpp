// CUDA steps of fused_linear (made by compile/fuse_linear.cpp for this backend's decode
// GEMVs): the node's RMS-norm prologue, SwiGLU, residual, rope and KV-cache write run
// inside one GEMV launch (launch_gemv: GemvParams' norm, swiglu, bias and the q / k / v
// roles of its rope epilogue), and the members of one launch group become the parts of
// one grouped launch. Also the checks the compile target hands to fuse_linear: what
// this kernel takes, so the IR only holds fused forms the backend runs.
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "backends/cuda/cuda_steps_shared.h"
#include "backends/cuda/mmq_kernels.h"
#include "rlx/base/log.h"
#include "rlx/compile/passes.h"

namespace rlx::cuda_backend {

using ir::DType;
using ir::OpKind;

namespace {

// Rows an rms-norm prologue may feed in all (each block of each reader recomputes the
// norm from x and gamma in L2): the q/k/v and gate/up products, not an LM head.
constexpr int64_t kNormPrologueMaxRows = 16384;

// The rope / cache role of a product in the kernel's epilogue.
uint8_t role_of(const ir::FusedLinearAttrs& a) {
  if (a.rope) return a.cache_write ? GemvParams::kRoleK : GemvParams::kRoleQ;
  return a.cache_write ? GemvParams::kRoleV : 0;
}

constexpr size_t kNone = 0;  // input 0 is x: 0 marks an input index as absent

// One part of the launch: where its inputs and output are among the step's inputs.
struct LinearPart {
  uint8_t role = 0;
  int64_t n = 0;
  size_t w = 1, up = kNone, pos = kNone, cache = kNone, start = kNone;
  size_t y = kNone;  // kNone: the step's output
};

struct FusedLinearParams {
  LinearParams lin;  // the GEMV (or kqmma) as build_linear made it, plus the prologue / epilogue flags
  bool kqmma = false;  // plain products of a few rows over K-quants, Q8_0, f16 or bf16 (fused_kqmma_fn), not the GEMV
  int sms = 0;         // (kqmma) the device's multiprocessors, for the staged form's split of a group
  int n_parts = 1;
  LinearPart parts[kMaxGemvParts];
  size_t gamma = kNone, residual = kNone;
  RopeKvParams rkv;  // the roles' sizes and dtypes (pointers bound per run)
  std::vector<std::shared_ptr<DeviceBuffer>> tables;  // rope inv_freq of the q and k roles
};

Status fused_linear_fn(const Step& s, const RunCtx& ctx) {
  const FusedLinearParams& f = s.p<FusedLinearParams>();
  GemvParams v = f.lin.gv;
  v.x = s.in_ptr[0];
  if (f.gamma != kNone) v.norm_gamma = s.in_ptr[f.gamma];
  if (f.residual != kNone) v.bias = s.in_ptr[f.residual];
  v.rkv = f.rkv;
  v.rkv.err = ctx.err;
  v.rkv.err_code = s.index + 1;
  if (s.split) v.row_bytes = f.lin.split_row;
  for (int i = 0; i < f.n_parts; ++i) {
    const LinearPart& part = f.parts[i];
    const uint8_t* w = s.in_ptr[part.w];
    void* y = part.y == kNone ? s.out_ptr : const_cast<uint8_t*>(s.in_ptr[part.y]);  // outputs of the group
    // The cache rows of a k / v role are written in place (the node's output is the handle).
    if (part.role == GemvParams::kRoleQ) {
      v.rkv.q.pos = s.in_ptr[part.pos];
      v.rkv.q.out = y;
    } else if (part.role == GemvParams::kRoleK) {
      v.rkv.k.pos = s.in_ptr[part.pos];
      v.rkv.k.out = nullptr;
      v.rkv.k_cache = const_cast<uint8_t*>(s.in_ptr[part.cache]);
      v.rkv.k_start = s.in_ptr[part.start];
    } else if (part.role == GemvParams::kRoleV) {
      v.rkv.v_cache = const_cast<uint8_t*>(s.in_ptr[part.cache]);
      v.rkv.v_start = s.in_ptr[part.start];
    }
    if (f.n_parts == 1) {
      v.w = w;
      v.y = y;
      if (part.up != kNone) v.w2 = s.in_ptr[part.up];
      if (s.split) v.d_offset = part.n * f.lin.split_row;
    } else {
      v.part_w[i] = w;
      v.part_y[i] = y;
      v.part_N[i] = part.n;
      v.part_d_offset[i] = s.split ? part.n * f.lin.split_row : 0;
    }
  }
  if (f.n_parts > 1) {
    v.w = v.part_w[0];
    v.y = v.part_y[0];
    v.N = v.part_N[0];
  }
  launch_gemv(v, ctx.stream);
  return {};
}

// Plain products of a few rows (several streams) over K-quant weights that share x:
// x quantized to Q8_K blocks once, every part's product in one launch_kqmma; the same over
// Q8_0 (x as Q8_0 blocks) and f16 / bf16 weights (x rounded to their type) through
// launch_rows_mma.
Status fused_kqmma_fn(const Step& s, const RunCtx& ctx) {
  const FusedLinearParams& f = s.p<FusedLinearParams>();
  const LinearParams& p = f.lin;
  KqMmaParams k;
  TRY(prepare_kqmma_x(s, p, ctx, k));
  k.n_parts = f.n_parts;
  for (int i = 0; i < f.n_parts; ++i) {
    const LinearPart& part = f.parts[i];
    k.part_w[i] = s.in_ptr[part.w];
    k.part_y[i] = reinterpret_cast<float*>(part.y == kNone ? s.out_ptr : const_cast<uint8_t*>(s.in_ptr[part.y]));
    k.part_n[i] = part.n;
    k.part_d_offset[i] = s.split ? part.n * p.split_row : 0;
  }
  if (f.n_parts == 1) {
    k.w = k.part_w[0];
    k.y = k.part_y[0];
    k.N = k.part_n[0];
    k.d_offset = k.part_d_offset[0];
  }
  if (!launch_few_rows(k, ctx.stream))
    return Error::internal("cuda backend: {}: no few-row tensor-core product for {} rows of {} over {}", *s.what, k.M,
                           k.K, ir::dtype_name(static_cast<DType>(k.w_dt)));
  return {};
}

// The q or k rope of a role, as build_rope sets up a one-row rope.
Expected<RopeParams> rope_params(BuildCtx& ctx, const ir::RopeAttrs& r, int64_t width, DT out_dt, DT pos_dt,
                                 std::vector<std::shared_ptr<DeviceBuffer>>& tables) {
  RopeParams k;
  k.width = k.in_width = width;
  k.rows = k.seq = 1;
  k.head_dim = r.head_dim;
  k.n_rot = r.n_rot;
  k.neox = false;
  k.mscale = static_cast<float>(r.attn_factor);
  k.x_dt = DT::F32;
  k.out_dt = out_dt;
  k.pos_dt = pos_dt;
  ASSIGN_OR_RETURN(std::shared_ptr<DeviceBuffer> table, upload_rope_table(ctx, r));
  tables.push_back(std::move(table));
  k.inv_freq = static_cast<const double*>(static_cast<const void*>(tables.back()->data()));
  return k;
}

}  // namespace

Status build_fused_linear(BuildCtx& ctx, Step& step) {
  const ir::Node& n = ctx.node();
  const auto& a = n.attr<ir::FusedLinearAttrs>();
  if (const char* why = fused_linear_kernel_check(compile::fused_linear_query(*ctx.graph, ctx.id), ctx.gemv_int8_x,
                                                  ctx.int8_prefill, ctx.half_rows))
    return step_error(ctx, "fused_linear form the GEMV does not take: {}", why);
  TRY(build_linear(ctx, step, true, a.swiglu, false, DType::F32));
  if (step.fn == &kqmma_fn) {  // a plain product of a few rows: a part of a grouped launch_kqmma
    auto f = std::make_shared<FusedLinearParams>();
    f->lin = step.p<LinearParams>();
    f->kqmma = true;
    f->sms = ctx.sms;
    f->parts[0].n = f->lin.g.N;
    step.fn = &fused_kqmma_fn;
    step.params = f;
    return {};
  }
  if (step.fn != &gemv_fn) return step_error(ctx, "fused_linear needs the one-row GEMV (16-byte aligned weights)");
  auto f = std::make_shared<FusedLinearParams>();
  f->lin = step.p<LinearParams>();
  GemvParams& v = f->lin.gv;
  LinearPart& part = f->parts[0];
  part.n = v.N;
  part.role = role_of(a);
  if (a.swiglu) part.up = static_cast<size_t>(a.w_up_input());
  if (a.norm) {
    const ir::Node& gamma = ctx.input(static_cast<size_t>(a.gamma_input()));
    if (!v.x_vec4) return step_error(ctx, "a norm prologue needs x 16-byte aligned in the arena");
    v.norm = true;
    v.norm_eps = static_cast<float>(a.eps);
    v.norm_g_dt = to_dt(gamma.dtype);
    const ValueRef& g = step.in[static_cast<size_t>(a.gamma_input())];
    v.norm_gamma_const = g.kind == StorageKind::kParam || g.kind == StorageKind::kConstant;
    if ((v.norm_g_dt == DT::F32 && g.offset % 16 != 0) || !gemv_norm_fits(v))
      return step_error(ctx, "the norm prologue does not fit (gamma alignment or shared memory)");
    f->gamma = static_cast<size_t>(a.gamma_input());
  }
  if (a.residual) {
    v.bias_dt = DT::F32;
    f->residual = static_cast<size_t>(a.residual_input());
  }
  if (a.rope || a.cache_write) {
    const DT pos_dt = a.rope ? to_dt(ctx.input(static_cast<size_t>(a.pos_input())).dtype) : DT::I32;
    if (a.rope) part.pos = static_cast<size_t>(a.pos_input());
    if (a.cache_write) {
      part.cache = static_cast<size_t>(a.cache_input());
      part.start = part.cache + 1;
    }
    RopeKvParams& k = f->rkv;
    if (part.role == GemvParams::kRoleQ) {
      ASSIGN_OR_RETURN(k.q, rope_params(ctx, a.rope_attrs, v.N, DT::F32, pos_dt, f->tables));
    } else {
      const ir::Node& cache = ctx.input(part.cache);
      const DT start_dt = to_dt(ctx.input(part.start).dtype);
      const int64_t len = cache.shape.static_dims()[0];
      if (part.role == GemvParams::kRoleK) {
        ASSIGN_OR_RETURN(k.k, rope_params(ctx, a.rope_attrs, v.N, to_dt(cache.dtype), pos_dt, f->tables));
        k.k_start_dt = start_dt;
        k.k_len = len;
        k.k_rows = 1;
      } else {
        k.v_dt = to_dt(cache.dtype);
        k.v_start_dt = start_dt;
        k.v_len = len;
        k.v_rows = 1;
        k.v_width = v.N;
      }
    }
    v.part_role[0] = part.role;
  }
  step.fn = &fused_linear_fn;
  step.params = f;
  return {};
}

Status merge_linear_groups(std::vector<Step>& steps, const ir::Graph& g) {
  auto group_of = [&](const Step& s) -> int64_t {
    if ((s.fn != &fused_linear_fn && s.fn != &fused_kqmma_fn) || s.node == ir::kNoValue) return -1;
    return g.node(s.node).attr<ir::FusedLinearAttrs>().group;
  };
  // Split-layout weights the executable could not store split (another reader needs them
  // whole) have no fused GEMV: say so rather than read them wrongly.
  for (const Step& s : steps)
    if (s.fn == &fused_linear_fn) {
      const LinearParams& lin = s.p<FusedLinearParams>().lin;
      if (lin.packed && packed_split(lin.q.w_dt) && !s.split)
        return Error::unsupported("cuda backend: {}: its {} weights are also read whole elsewhere, which the fused "
                                  "GEMV does not take",
                                  *s.what, ir::dtype_name(static_cast<DType>(lin.q.w_dt)));
    }
  std::vector<Step> out;
  out.reserve(steps.size());
  for (size_t i = 0; i < steps.size();) {
    const int64_t id = group_of(steps[i]);
    size_t j = i + 1;
    while (id >= 0 && j < steps.size() && group_of(steps[j]) == id) ++j;
    if (j - i < 2) {
      if (id >= 0) RLX_LOG_DEBUG("cuda backend: {} of launch group {} has no sibling next to it", *steps[i].what, id);
      out.push_back(std::move(steps[i++]));
      continue;
    }
    const Step& first = steps[i];
    const FusedLinearParams& f0 = first.p<FusedLinearParams>();
    // Members that cannot share one launch run alone.
    bool ok = j - i <= static_cast<size_t>(f0.kqmma ? kKqMmaMaxParts : kMaxGemvParts);
    int per_role[4] = {0, 0, 0, 0};
    for (size_t k = i; ok && k < j; ++k) {
      const Step& s = steps[k];
      const FusedLinearParams& fk = s.p<FusedLinearParams>();
      const bool same_kernel =
          fk.kqmma == f0.kqmma &&
          (f0.kqmma ? fk.lin.q.w_dt == f0.lin.q.w_dt && fk.lin.g.K == f0.lin.g.K && fk.lin.g.M == f0.lin.g.M &&
                          fk.lin.w_const == f0.lin.w_const
                    : fk.lin.gv.w_dt == f0.lin.gv.w_dt && fk.lin.gv.K == f0.lin.gv.K &&
                          fk.lin.gv.norm == f0.lin.gv.norm && fk.lin.gv.x_vec4 == f0.lin.gv.x_vec4 &&
                          fk.lin.gv.x_int8 == f0.lin.gv.x_int8 && fk.lin.gv.w_const == f0.lin.gv.w_const);
      ok = same_kernel && s.split == first.split && same_ref(s.in[0], first.in[0]) && !fk.lin.swiglu &&
           fk.residual == kNone && s.extent_ok == first.extent_ok &&
           (f0.gamma == kNone || same_ref(s.in[fk.gamma], first.in[f0.gamma]));
      if (ok && fk.parts[0].role != 0) ok = ++per_role[fk.parts[0].role] == 1;
      // One launch writes every part's output while any part may still read its
      // inputs: the plan may have put a part's output over what only an earlier part
      // reads.
      for (size_t m = i; ok && m < j; ++m)
        for (const ValueRef& r : steps[m].in)
          ok = ok && (same_ref(r, s.out) ? m == k : disjoint_refs(s.out, r));
    }
    if (!ok) {
      RLX_LOG_DEBUG("cuda backend: launch group {} ({} products from {}) runs as separate launches", id, j - i,
                    *first.what);
      for (; i < j; ++i) out.push_back(std::move(steps[i]));
      continue;
    }
    // Steps [i, j): one launch over x (and gamma), each part's inputs appended.
    auto f = std::make_shared<FusedLinearParams>(f0);
    f->n_parts = static_cast<int>(j - i);
    Step merged = first;
    merged.in = {first.in[0]};
    if (f0.gamma != kNone) {
      merged.in.push_back(first.in[f0.gamma]);
      f->gamma = 1;
    }
    std::string what = *first.what;
    for (size_t k = i; k < j; ++k) {
      const Step& s = steps[k];
      const FusedLinearParams& fk = s.p<FusedLinearParams>();
      LinearPart part = fk.parts[0];
      auto take = [&](size_t& at) {
        if (at == kNone) return;
        merged.in.push_back(s.in[at]);
        at = merged.in.size() - 1;
      };
      take(part.w);
      take(part.pos);
      take(part.cache);
      take(part.start);
      if (k > i) {
        merged.in.push_back(s.out);
        part.y = merged.in.size() - 1;
      }
      f->parts[k - i] = part;
      f->lin.gv.part_role[k - i] = part.role;
      // The role's rope / cache sizes (at most one part per role: the group check).
      if (part.role == GemvParams::kRoleQ) f->rkv.q = fk.rkv.q;
      if (part.role == GemvParams::kRoleK) {
        f->rkv.k = fk.rkv.k;
        f->rkv.k_start_dt = fk.rkv.k_start_dt;
        f->rkv.k_len = fk.rkv.k_len;
        f->rkv.k_rows = fk.rkv.k_rows;
      }
      if (part.role == GemvParams::kRoleV) {
        f->rkv.v_dt = fk.rkv.v_dt;
        f->rkv.v_start_dt = fk.rkv.v_start_dt;
        f->rkv.v_len = fk.rkv.v_len;
        f->rkv.v_rows = fk.rkv.v_rows;
        f->rkv.v_width = fk.rkv.v_width;
      }
      if (k > i) {
        f->tables.insert(f->tables.end(), fk.tables.begin(), fk.tables.end());
        what += " + " + *s.what;
      }
    }
    f->lin.gv.n_parts = f->n_parts;
    if (f->kqmma && f->lin.kq_k_groups > 0) {  // the staged form's split of K, for all the parts' rows
      int64_t rows = 0;
      for (int k = 0; k < f->n_parts; ++k) rows += f->parts[k].n;
      f->lin.kq_k_groups = few_rows_k_groups(f->lin.q.w_dt, rows, f->lin.g.K, f->sms);
    }
    merged.params = f;
    merged.split_inputs = 0;
    merged.what = std::make_shared<const std::string>(what);
    out.push_back(std::move(merged));
    i = j;
  }
  for (size_t k = 0; k < out.size(); ++k) out[k].index = static_cast<int>(k);
  steps = std::move(out);
  return {};
}

const char* fused_linear_kernel_check(const compile::FusedLinearQuery& q, bool int8_x, bool int8_prefill,
                                      bool half_rows) {
  const ir::FusedLinearAttrs& a = q.attrs;
  const bool plain = !a.norm && !a.swiglu && !a.residual && !a.rope && !a.cache_write;
  // A few rows over f16 / bf16 weights (launch_rows_mma), from two rows: there the fused
  // GEMV forms give way, so that a SwiGLU's gate and up become one grouped launch.
  if (ir::is_float(q.w_dtype) && few_rows_take(to_dt(q.w_dtype), q.rows, q.k, false, half_rows)) {
    if (plain) return nullptr;
    return "more rows than the GEMV takes over f16 / bf16 weights (their few-row products take plain products only)";
  }
  // A few rows over K-quants and Q8_0 (several streams): plain products of one x share a
  // grouped int8 tensor-core launch (fused_kqmma_fn); build_linear routes them there.
  if (ir::is_packed(q.w_dtype) && q.rows >= packed_prefill_from(to_dt(q.w_dtype), int8_x, int8_prefill, a.swiglu)) {
    if (plain && few_rows_take(to_dt(q.w_dtype), q.rows, q.k, int8_prefill, false)) return nullptr;
    return "more rows than the GEMV takes (a fused form of the few-row products takes plain products only)";
  }
  if (q.rows < 1 || q.rows > kMaxGemvM) return "more rows than the GEMV takes";
  if (q.rows > 1 && (a.norm || a.residual || a.rope || a.cache_write))
    return "the norm prologue and the residual, rope and cache epilogues take one row";
  if (!ir::is_float(q.w_dtype) && !ir::is_packed(q.w_dtype)) return "weights of this dtype";
  const DT w = to_dt(q.w_dtype);
  if ((ir::is_packed(q.w_dtype) && !packed_supported(w)) || !gemv_supported(w, q.rows, q.k))
    return "no GEMV kernel for these weights";
  if (a.residual && (a.swiglu || a.rope || a.cache_write))
    return "the residual add goes with a plain product only (the SwiGLU and rope epilogues take none)";
  if (a.rope) {
    const ir::RopeAttrs& r = a.rope_attrs;
    if (r.layout != ir::RopeLayout::Normal) return "neox rope (the GEMV rotates neighbouring rows)";
    if (r.head_dim % 2 != 0 || r.n_rot % 2 != 0 || q.n % r.head_dim != 0) return "rope head layout";
  }
  if (a.cache_write && !ir::is_float(q.cache_dtype)) return "cache dtype";
  if (a.norm) {
    if (q.norm_readers_n > kNormPrologueMaxRows) return "too many rows would recompute the norm";
    GemvParams g;
    g.x_dt = DT::F32;
    g.w_dt = w;
    g.M = 1;
    g.K = q.k;
    g.x_vec4 = true;
    g.x_int8 = int8_x;
    g.swiglu = a.swiglu;
    g.norm = true;
    if (!gemv_norm_fits(g)) return "the norm prologue's rows do not fit in shared memory";
  }
  return nullptr;
}

const char* fused_linear_group_kernel_check(const std::vector<compile::FusedLinearQuery>& qs) {
  if (qs.size() > static_cast<size_t>(std::min<int>(kMaxGemvParts, kKqMmaMaxParts)))
    return "more parts than one launch takes";
  int per_role[4] = {0, 0, 0, 0};
  for (const compile::FusedLinearQuery& q : qs) {
    if (q.attrs.swiglu || q.attrs.residual) return "a SwiGLU or residual product has a launch of its own";
    if (q.w_dtype != qs[0].w_dtype || q.k != qs[0].k || q.attrs.norm != qs[0].attrs.norm || q.rows != qs[0].rows)
      return "parts of one launch share weight dtype, K, rows and prologue";
    const uint8_t role = role_of(q.attrs);
    if (role != 0 && ++per_role[role] > 1) return "one q, one k and one v role a launch";
  }
  return nullptr;
}

}  // namespace rlx::cuda_backend
