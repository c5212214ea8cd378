// Flow blocks (see rlx/models/flow.h): each declares its parameters from the weight
// source (checking shapes) and appends the HIR ops of one transformer component.
#include "rlx/models/flow.h"

namespace rlx::models {

using ir::DType;
using ir::ValueId;

std::string kv_handle_name(char kv, int64_t il) { return fmt::format("cache.{}.{}", kv, il); }

std::string state_handle_name(const char* kind, int64_t il) { return fmt::format("cache.{}.{}", kind, il); }

namespace {

// "blk.3.attn_norm.weight" -> "blk.3.attn_norm": the label of the op a weight belongs to.
std::string label_of(const std::string& weight) {
  const std::string suffix = ".weight";
  if (weight.size() > suffix.size() && weight.compare(weight.size() - suffix.size(), suffix.size(), suffix) == 0)
    return weight.substr(0, weight.size() - suffix.size());
  return weight;
}

}  // namespace

Expected<int64_t> Flow::feature_dim(ValueId x, const std::string& block) {
  if (!b_.ok()) return b_.error()->with_context("flow");
  const ir::TensorType t = b_.type(x);
  if (t.shape.rank() == 0 || !t.shape.back().is_static())
    return Error::invalid_argument("flow: {} needs a static feature (last) dim, got {}", block, t.to_string());
  return t.shape.back().value();
}

ValueId Flow::input_ids(const std::string& name, ir::Dim rows) { return b_.input(name, DType::I32, {rows}); }

Expected<ValueId> Flow::param(const std::string& name, std::vector<int64_t> shape) {
  auto it = param_ids_.find(name);
  if (it != param_ids_.end()) return it->second;
  ASSIGN_OR_RETURN(WeightView view, weights_.take(name));
  if (view.shape != shape) {
    return Error::invalid_file("{}: tensor '{}' has shape {} but the model needs {}", weights_.describe(), name,
                               ir::Shape::of(view.shape).to_string(), ir::Shape::of(shape).to_string());
  }
  const ValueId v = b_.param(name, view.dtype, ir::Shape::of(view.shape));
  params_.push_back(name);
  param_ids_[name] = v;
  return v;
}

Expected<ValueId> Flow::embedding(ValueId ids, const std::string& table, int64_t vocab, int64_t dim, float scale) {
  ASSIGN_OR_RETURN(ValueId t, param(table, {vocab, dim}));
  ValueId x = b_.label(label_of(table)).op(ir::OpKind::HirEmbedding, {t, ids}, ir::NoAttrs{});
  if (b_.ok() && b_.type(x).dtype != DType::F32) x = b_.cast(x, DType::F32);
  if (scale != 1.0f) x = b_.mul(x, b_.scalar(scale));
  return x;
}

Expected<ValueId> Flow::rms_norm(ValueId x, const std::string& weight, double eps) {
  ASSIGN_OR_RETURN(const int64_t dim, feature_dim(x, "rms_norm " + weight));
  ASSIGN_OR_RETURN(ValueId w, param(weight, {dim}));
  return b_.label(label_of(weight)).op(ir::OpKind::HirRmsNorm, {x, w}, ir::NormAttrs{eps});
}

Expected<ValueId> Flow::layer_norm(ValueId x, const std::string& weight, const std::string& bias, double eps) {
  ASSIGN_OR_RETURN(const int64_t dim, feature_dim(x, "layer_norm " + weight));
  ASSIGN_OR_RETURN(ValueId w, param(weight, {dim}));
  std::vector<ValueId> in{x, w};
  if (!bias.empty()) {
    ASSIGN_OR_RETURN(ValueId bv, param(bias, {dim}));
    in.push_back(bv);
  }
  return b_.label(label_of(weight)).op(ir::OpKind::HirLayerNorm, in, ir::NormAttrs{eps});
}

Expected<ValueId> Flow::attention(ValueId x, ValueId pos, const AttentionSpec& spec) {
  ASSIGN_OR_RETURN(const int64_t dim, feature_dim(x, "attention " + spec.prefix));
  const ir::AttentionBlockAttrs& a = spec.attrs;
  const int64_t q_width = a.attn.n_heads * a.attn.head_dim, kv_width = a.attn.n_kv_heads * a.attn.head_dim;
  auto name = [&](const std::string& t) { return spec.prefix + "." + t; };
  ir::AttentionBlockAttrs attrs = a;
  attrs.kv_cache = spec.ctx > 0;
  attrs.batch = spec.batch;
  attrs.rope.head_dim = a.attn.head_dim;

  std::vector<ValueId> in{x};
  if (a.latent()) {
    // W_q (q_b after the q latent), W_kv_a, W_kv_b, W_o; after pos the latent norms and W_q_a.
    const int64_t H = a.attn.n_heads, qk = a.latent_nope_dim + a.latent_rope_dim, q_rank = a.latent_q_rank;
    attrs.rope.head_dim = attrs.rope.n_rot = a.latent_rope_dim;
    const std::pair<const std::string*, std::vector<int64_t>> weights[] = {
        {q_rank > 0 ? &spec.names.q_b : &spec.names.q, {H * qk, q_rank > 0 ? q_rank : dim}},
        {&spec.names.kv_a, {a.latent_kv_rank + a.latent_rope_dim, dim}},
        {&spec.names.kv_b, {H * (a.latent_nope_dim + a.latent_v_dim), a.latent_kv_rank}},
        {&spec.names.o, {dim, H * a.latent_v_dim}}};
    for (const auto& [t, shape] : weights) {
      ASSIGN_OR_RETURN(ValueId w, param(name(*t), shape));
      in.push_back(w);
    }
    in.push_back(pos);
    ASSIGN_OR_RETURN(ValueId kv_norm, param(name(spec.names.kv_a_norm), {a.latent_kv_rank}));
    in.push_back(kv_norm);
    if (q_rank > 0) {
      ASSIGN_OR_RETURN(ValueId wqa, param(name(spec.names.q_a), {q_rank, dim}));
      ASSIGN_OR_RETURN(ValueId q_norm, param(name(spec.names.q_a_norm), {q_rank}));
      in.push_back(wqa);
      in.push_back(q_norm);
    }
  } else {
    const int64_t q_rows = a.q_gate ? 2 * q_width : q_width;  // gated: [q_h | gate_h] per head
    for (auto [t, rows] : {std::pair{&spec.names.q, q_rows}, {&spec.names.k, kv_width}, {&spec.names.v, kv_width}}) {
      ASSIGN_OR_RETURN(ValueId w, param(name(*t), {rows, dim}));
      in.push_back(w);
    }
    ASSIGN_OR_RETURN(ValueId wo, param(name(spec.names.o), {dim, q_width}));
    in.push_back(wo);
    in.push_back(pos);
  }
  if (a.qkv_bias) {
    for (auto [t, rows] : {std::pair{&spec.names.q_bias, q_width}, {&spec.names.k_bias, kv_width},
                           {&spec.names.v_bias, kv_width}}) {
      ASSIGN_OR_RETURN(ValueId bias, param(name(*t), {rows}));
      in.push_back(bias);
    }
  }
  if (a.qk_norm) {
    for (const std::string* t : {&spec.names.q_norm, &spec.names.k_norm}) {
      ASSIGN_OR_RETURN(ValueId nw, param(name(*t), {a.attn.head_dim}));
      in.push_back(nw);
    }
  }
  if (a.key_lengths) {
    if (spec.kv_len == ir::kNoValue) return Error::invalid_argument("attention {}: key_lengths needs kv_len", spec.prefix);
    in.push_back(spec.kv_len);
  }
  if (spec.ctx > 0) {  // [ctx, W]; several sequences: one stack [batch, ctx, W]
    for (char kv : {'k', 'v'}) {
      const std::string hn = kv_handle_name(kv, spec.layer);
      std::vector<int64_t> shape{spec.ctx, kv_width};
      if (spec.batch > 1) shape.insert(shape.begin(), spec.batch);
      in.push_back(b_.handle(hn, spec.kv_dtype, ir::Shape::of(shape)));
      handles_.push_back(hn);
    }
  }
  if (spec.slot_rows != ir::kNoValue || spec.row_slots != ir::kNoValue) {
    if (spec.slot_rows == ir::kNoValue || spec.row_slots == ir::kNoValue || spec.ctx <= 0 || spec.batch < 2)
      return Error::invalid_argument("attention {}: compact rows need slot_rows, row_slots, a cache and several sequences",
                                     spec.prefix);
    attrs.compact_rows = true;
    in.push_back(spec.slot_rows);
    in.push_back(spec.row_slots);
  }
  const ValueId out = b_.label(spec.prefix + ".attn").op(ir::OpKind::HirAttentionBlock, in, attrs);
  if (!spec.o_bias) return out;
  ASSIGN_OR_RETURN(ValueId bias, param(name(spec.names.o_bias), {dim}));
  return b_.add(out, bias);
}

Expected<ValueId> Flow::delta_net(ValueId x, ValueId seq, const DeltaNetSpec& spec) {
  ASSIGN_OR_RETURN(const int64_t dim, feature_dim(x, "delta_net " + spec.prefix));
  if (dim != spec.dim) return Error::invalid_argument("delta_net {}: x has {} features, not {}", spec.prefix, dim, spec.dim);
  auto name = [&](const char* t) { return spec.prefix + "." + t; };
  const int64_t hk = spec.n_k_heads, hv = spec.n_v_heads, dk = spec.head_k_dim, dv = spec.head_v_dim;
  const int64_t key_w = hk * dk, val_w = hv * dv, conv_w = 2 * key_w + val_w;
  const std::string l = spec.prefix + ".ssm";
  ASSIGN_OR_RETURN(ValueId qkv, dense(x, name("attn_qkv.weight"), "", conv_w, dim, ir::ActKind::Identity, l + ".qkv"));
  ASSIGN_OR_RETURN(ValueId z, dense(x, name("attn_gate.weight"), "", val_w, dim, ir::ActKind::Silu, l + ".z"));
  ASSIGN_OR_RETURN(ValueId beta, dense(x, name("ssm_beta.weight"), "", hv, dim, ir::ActKind::Sigmoid, l + ".beta"));
  ASSIGN_OR_RETURN(ValueId alpha, dense(x, name("ssm_alpha.weight"), "", hv, dim, ir::ActKind::Identity, l + ".alpha"));
  ASSIGN_OR_RETURN(ValueId dt_bias, param(name("ssm_dt.bias"), {hv}));
  ASSIGN_OR_RETURN(ValueId a, param(name("ssm_a"), {hv}));
  ASSIGN_OR_RETURN(ValueId conv_k, param(name("ssm_conv1d.weight"), {conv_w, spec.conv_kernel}));
  ASSIGN_OR_RETURN(ValueId norm_w, param(name("ssm_norm.weight"), {dv}));
  auto f32 = [&](ValueId v) { return b_.type(v).dtype == ir::DType::F32 ? v : b_.cast(v, ir::DType::F32); };
  dt_bias = f32(dt_bias);
  a = f32(a);
  conv_k = f32(conv_k);
  norm_w = f32(norm_w);
  const ValueId g = b_.mul(b_.activation(ir::ActKind::Softplus, b_.add(alpha, dt_bias)), a);
  const std::string conv_h = state_handle_name("conv", spec.layer), ssm_h = state_handle_name("ssm", spec.layer);
  const ValueId conv_state = b_.handle(conv_h, ir::DType::F32, {spec.batch, spec.conv_kernel - 1, conv_w});
  const ValueId ssm_state = b_.handle(ssm_h, ir::DType::F32, {spec.batch, hv, dk, dv});
  handles_.push_back(conv_h);
  handles_.push_back(ssm_h);
  const ValueId mixed = b_.label(l + ".conv").causal_conv1d(conv_state, qkv, conv_k, seq, ir::ActKind::Silu);
  const ValueId q = b_.narrow(mixed, 1, 0, ir::Dim(key_w));
  const ValueId k = b_.narrow(mixed, 1, key_w, ir::Dim(key_w));
  const ValueId v = b_.narrow(mixed, 1, 2 * key_w, ir::Dim(val_w));
  ir::DeltaRuleAttrs dr;
  dr.head_k_dim = dk;
  dr.head_v_dim = dv;
  dr.chunk = spec.chunk;
  const ValueId o = b_.label(l + ".delta").gated_delta_rule(ssm_state, q, k, v, g, beta, seq, dr);
  // The gated RMSNorm: each value head normalized over its Dv, then times silu(z).
  const ir::Dim rows = b_.type(x).shape[0];
  const ValueId normed = b_.reshape(
      b_.rms_norm(b_.reshape(o, ir::Shape{rows, ir::Dim(hv), ir::Dim(dv)}), norm_w, spec.norm_eps), ir::Shape{rows, ir::Dim(val_w)});
  return dense(b_.mul(normed, z), name("ssm_out.weight"), "", dim, val_w, ir::ActKind::Identity, l + ".out");
}

Expected<ValueId> Flow::dense(ValueId x, const std::string& weight, const std::string& bias, int64_t out, int64_t in,
                              ir::ActKind act, const std::string& label) {
  ASSIGN_OR_RETURN(ValueId w, param(weight, {out, in}));
  if (bias.empty()) return b_.label(label).op(ir::OpKind::HirLinear, {x, w}, ir::FusedMatMulAttrs{act, false, true});
  ASSIGN_OR_RETURN(ValueId bv, param(bias, {out}));
  return b_.label(label).op(ir::OpKind::HirLinear, {x, w, bv}, ir::FusedMatMulAttrs{act, true, true});
}

Expected<ValueId> Flow::linear(ValueId x, const std::string& weight, int64_t out, int64_t in,
                               const std::string& label) {
  ASSIGN_OR_RETURN(ValueId w, param(weight, {out, in}));
  return b_.label(label).op(ir::OpKind::HirLinear, {x, w}, ir::FusedMatMulAttrs{});
}

Expected<ValueId> Flow::ffn(ValueId x, const FfnSpec& spec) {
  auto name = [&](const char* t) { return spec.prefix + "." + t; };
  ValueId gate = ir::kNoValue;
  if (spec.kind != FfnBlock::Gelu) {
    ASSIGN_OR_RETURN(gate, param(name("ffn_gate.weight"), {spec.hidden, spec.dim}));
  }
  ASSIGN_OR_RETURN(ValueId up, param(name("ffn_up.weight"), {spec.hidden, spec.dim}));
  ASSIGN_OR_RETURN(ValueId down, param(name("ffn_down.weight"), {spec.dim, spec.hidden}));
  if (spec.kind == FfnBlock::Gelu)
    return b_.label(name("ffn")).op(ir::OpKind::HirGeluFfn, {x, up, down}, ir::GeluFfnAttrs{false, spec.tanh_approx});
  if (spec.kind == FfnBlock::SwiGLU)
    return b_.label(name("ffn")).op(ir::OpKind::HirSwiGLUFfn, {x, gate, up, down}, ir::NoAttrs{});
  if (!spec.gelu_f16_rounding)
    return b_.label(name("ffn")).op(ir::OpKind::HirGeluFfn, {x, gate, up, down}, ir::GeluFfnAttrs{true, spec.tanh_approx});
  // gelu(x) evaluated on f16-rounded x and rounded to f16 again (see FfnSpec).
  auto round_f16 = [this](ValueId v) { return b_.cast(b_.cast(v, DType::F16), DType::F32); };
  ASSIGN_OR_RETURN(ValueId g, linear(x, name("ffn_gate.weight"), spec.hidden, spec.dim, name("ffn_gate")));
  ASSIGN_OR_RETURN(ValueId u, linear(x, name("ffn_up.weight"), spec.hidden, spec.dim, name("ffn_up")));
  const ir::ActKind gelu = spec.tanh_approx ? ir::ActKind::GeluTanh : ir::ActKind::Gelu;
  const ValueId act = round_f16(b_.activation(gelu, round_f16(g)));
  return linear(b_.mul(act, u), name("ffn_down.weight"), spec.dim, spec.hidden, name("ffn_down"));
}

Expected<ValueId> Flow::moe_ffn(ValueId x, const MoeSpec& spec) {
  auto name = [&](const char* t) { return spec.prefix + "." + t; };
  ASSIGN_OR_RETURN(ValueId logits,
                   linear(x, name("ffn_gate_inp.weight"), spec.n_expert, spec.dim, name("ffn_gate_inp")));
  ASSIGN_OR_RETURN(ValueId gate, param(name("ffn_gate_exps.weight"), {spec.n_expert, spec.hidden, spec.dim}));
  ASSIGN_OR_RETURN(ValueId up, param(name("ffn_up_exps.weight"), {spec.n_expert, spec.hidden, spec.dim}));
  ASSIGN_OR_RETURN(ValueId down, param(name("ffn_down_exps.weight"), {spec.n_expert, spec.dim, spec.hidden}));
  const ValueId route =
      b_.label(name("ffn_route")).moe_route(logits, {spec.n_used, ir::MoeGating::Softmax, spec.normalize});
  const ValueId routed = b_.label(name("ffn_moe")).moe_ffn(x, route, gate, up, down, spec.act);
  if (spec.shared_hidden <= 0) return routed;
  ASSIGN_OR_RETURN(ValueId sg, param(name("ffn_gate_shexp.weight"), {spec.shared_hidden, spec.dim}));
  ASSIGN_OR_RETURN(ValueId su, param(name("ffn_up_shexp.weight"), {spec.shared_hidden, spec.dim}));
  ASSIGN_OR_RETURN(ValueId sd, param(name("ffn_down_shexp.weight"), {spec.dim, spec.shared_hidden}));
  ValueId shared = b_.label(name("ffn_shexp")).op(ir::OpKind::HirSwiGLUFfn, {x, sg, su, sd}, ir::NoAttrs{});
  if (spec.shared_gate) {
    ASSIGN_OR_RETURN(ValueId gw, param(name("ffn_gate_inp_shexp.weight"), {spec.dim}));
    const ValueId row = b_.reshape(gw, ir::Shape{ir::Dim(1), ir::Dim(spec.dim)});
    const ValueId g = b_.label(name("ffn_gate_inp_shexp")).op(ir::OpKind::HirLinear, {x, row}, ir::FusedMatMulAttrs{});
    shared = b_.mul(shared, b_.activation(ir::ActKind::Sigmoid, g));
  }
  return b_.add(routed, shared);
}

Expected<ValueId> Flow::lm_head(ValueId x, const std::string& weight, int64_t vocab, int64_t dim, double final_softcap) {
  ASSIGN_OR_RETURN(ValueId w, param(weight, {vocab, dim}));
  ValueId logits = b_.label("output").op(ir::OpKind::HirLinear, {x, w}, ir::FusedMatMulAttrs{});
  if (final_softcap > 0) {
    const auto cap = static_cast<float>(final_softcap);
    logits = b_.mul(b_.activation(ir::ActKind::Tanh, b_.mul(logits, b_.scalar(1.0f / cap))), b_.scalar(cap));
  }
  return logits;
}

Expected<BuiltModel> Flow::finish(const std::vector<std::pair<ValueId, std::string>>& outputs,
                                  ir::FusionPolicy policy) {
  for (const auto& [v, name] : outputs) b_.output(v, name);
  ASSIGN_OR_RETURN(ir::Graph g, b_.build());
  BuiltModel m;
  m.hir.graph = std::move(g);
  m.hir.policy = policy;
  m.param_names = std::move(params_);
  m.handle_names = std::move(handles_);
  return m;
}

}  // namespace rlx::models
