// Decoder-only transformer (Llama, Mixtral, Qwen2/3, Qwen3-MoE, Gemma 1/2/3, Qwen3.5 and
// Qwen3-Next — whose weights the source serves in Qwen3.5's layout —, MiniCPM3 with its
// latent attention and scaled embeddings, branches and logits) as a composition of
// Flow blocks: embedding, N x (pre-norm attention — or a gated delta-net with a recurrent
// state on the hybrids' linear layers — + pre-norm FFN or mixture of experts, with Gemma's
// post-norms), final norm, LM head.
#include "rlx/models/decoder.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "rlx/models/flow.h"

namespace rlx::models {
namespace {

using ir::ValueId;

ir::AttentionBlockAttrs attention_attrs(const ModelConfig& c, int64_t il, int64_t ctx) {
  ir::AttentionBlockAttrs a;
  a.attn.n_heads = c.n_head;
  a.attn.n_kv_heads = c.n_head_kv;
  a.attn.head_dim = c.head_dim;
  a.attn.scale = c.attn_scale;
  a.attn.softcap = c.attn_softcap;
  a.attn.mask = ir::MaskKind::Causal;
  if (c.layer_is_sliding(il)) {
    a.attn.mask = ir::MaskKind::SlidingWindow;
    a.attn.window = c.sliding_window;
  }
  a.rope = c.rope_for_context(ctx);
  a.rope.head_dim = c.head_dim;
  if (c.rope_theta_local > 0 && c.layer_is_sliding(il)) {  // Gemma 3 local layers: plain rope
    a.rope.theta = c.rope_theta_local;
    a.rope.scaling = ir::RopeScaling::None;
    a.rope.freq_factors.clear();
    a.rope.attn_factor = 1.0;
  }
  a.qkv_bias = c.qkv_bias;
  a.qk_norm = c.qk_norm;
  a.qk_norm_eps = c.norm_eps;
  a.prescale_q = c.prescale_q;
  a.q_gate = c.attn_output_gate;
  if (c.latent_attention()) {  // heads [nope | rope], padded to the wider of q/k and v
    a.latent_q_rank = c.latent_q_rank;
    a.latent_kv_rank = c.latent_kv_rank;
    a.latent_rope_dim = c.rope.n_rot;
    a.latent_nope_dim = c.head_dim - c.rope.n_rot;
    a.latent_v_dim = c.v_head_dim;
    a.attn.head_dim = std::max(c.head_dim, c.v_head_dim);
    if (a.attn.scale == 0) a.attn.scale = 1.0 / std::sqrt(static_cast<double>(c.head_dim));
    a.qk_norm = false;
    a.qk_norm_eps = c.latent_norm_eps;  // the latent norms'
  }
  return a;
}

/// x + branch, the branch scaled first when the model says (MiniCPM's residual scale).
ValueId add_branch(Flow& f, const ModelConfig& c, ValueId x, ValueId branch) {
  if (c.residual_scale != 1.0)
    branch = f.builder().mul(branch, f.builder().scalar(static_cast<float>(c.residual_scale)));
  return f.residual(x, branch);
}

/// A run's row inputs besides the tokens: positions, recurrent layers' per-sequence
/// counts, and compact rows' two maps (kNoValue where absent).
struct RowInputs {
  ValueId pos = ir::kNoValue, seq = ir::kNoValue, slot_rows = ir::kNoValue, row_slots = ir::kNoValue;
};

Expected<ValueId> layer(Flow& f, const ModelConfig& c, const DecoderOptions& o, int64_t il, ValueId x,
                        const RowInputs& ri) {
  const std::string blk = fmt::format("blk.{}", il);
  ASSIGN_OR_RETURN(ValueId h, f.rms_norm(x, blk + ".attn_norm.weight", c.norm_eps));
  ValueId attn = ir::kNoValue;
  if (c.layer_is_recurrent(il)) {
    DeltaNetSpec ds;
    ds.prefix = blk;
    ds.layer = il;
    ds.dim = c.n_embd;
    ds.n_k_heads = c.ssm_n_k_heads;
    ds.n_v_heads = c.ssm_n_v_heads;
    ds.head_k_dim = c.ssm_head_k_dim;
    ds.head_v_dim = c.ssm_head_v_dim;
    ds.conv_kernel = c.ssm_conv_kernel;
    ds.norm_eps = c.norm_eps;
    ds.batch = o.batch;
    ds.chunk = o.delta_chunk;
    ASSIGN_OR_RETURN(attn, f.delta_net(h, ri.seq, ds));
  } else {
    AttentionSpec as;
    as.prefix = blk;
    as.layer = il;
    as.attrs = attention_attrs(c, il, o.ctx);
    as.ctx = o.ctx;
    as.kv_dtype = o.kv_dtype;
    as.batch = o.batch;
    as.slot_rows = ri.slot_rows;
    as.row_slots = ri.row_slots;
    ASSIGN_OR_RETURN(attn, f.attention(h, ri.pos, as));
  }
  if (c.post_norms) {
    ASSIGN_OR_RETURN(attn, f.rms_norm(attn, blk + ".post_attention_norm.weight", c.norm_eps));
  }
  x = add_branch(f, c, x, attn);

  // The Qwen3.5 family names its pre-FFN norm as llama.cpp does: post_attention_norm.
  const char* ffn_norm = c.arch == Arch::Qwen35 ? ".post_attention_norm.weight" : ".ffn_norm.weight";
  ASSIGN_OR_RETURN(h, f.rms_norm(x, blk + ffn_norm, c.norm_eps));
  ValueId ff = ir::kNoValue;
  if (c.layer_is_moe(il)) {
    MoeSpec ms;
    ms.prefix = blk;
    ms.dim = c.n_embd;
    ms.hidden = c.n_ff_expert;
    ms.n_expert = c.n_expert;
    ms.n_used = c.n_expert_used;
    ms.normalize = c.expert_weights_norm;
    ms.act = c.ffn == FfnKind::SwiGLU ? ir::ActKind::Silu : ir::ActKind::GeluTanh;
    ms.shared_hidden = c.n_ff_shared;
    ms.shared_gate = c.shared_expert_gate;
    ASSIGN_OR_RETURN(ff, f.moe_ffn(h, ms));
  } else {
    FfnSpec fs;
    fs.prefix = blk;
    fs.kind = c.ffn == FfnKind::SwiGLU ? FfnBlock::SwiGLU : FfnBlock::GeGLU;
    fs.dim = c.n_embd;
    fs.hidden = c.n_ff;
    fs.gelu_f16_rounding = c.gelu_f16_rounding;
    ASSIGN_OR_RETURN(ff, f.ffn(h, fs));
  }
  if (c.post_norms) {
    ASSIGN_OR_RETURN(ff, f.rms_norm(ff, blk + ".post_ffw_norm.weight", c.norm_eps));
  }
  return add_branch(f, c, x, ff);
}

}  // namespace

Expected<BuiltModel> build_decoder(const ModelConfig& c, const WeightSource& weights, const DecoderOptions& o) {
  TRY(c.validate());
  if (o.greedy_token && !o.last_row_logits)
    return Error::invalid_argument("decoder: greedy_token picks from the last rows; it needs last_row_logits");
  if (o.sample_token && (!o.last_row_logits || o.greedy_token))
    return Error::invalid_argument("decoder: sample_token picks from the last rows; it needs last_row_logits and no greedy_token");
  if (c.has_recurrent_layers() && o.ctx <= 0)
    return Error::invalid_argument("decoder: a model with recurrent (delta-net) layers needs a KV cache (ctx > 0)");
  if (o.batch < 1 || (o.batch > 1 && o.ctx <= 0))
    return Error::invalid_argument("decoder: batch {} needs >= 1 sequences (and a KV cache when > 1)", o.batch);
  const std::optional<ir::Dim> rows = ir::Dim::mul(ir::Dim(o.batch), o.seq);
  if (!rows) return Error::invalid_argument("decoder: batch {} x rows {} is not a dim", o.batch, o.seq.to_string());
  if (o.compact_rows && (o.batch < 2 || o.ctx <= 0 || c.has_recurrent_layers()))
    return Error::invalid_argument("decoder: compact rows need several sequences, a KV cache and no recurrent layers");
  Flow f(weights);
  const ir::Dim x_rows = o.compact_rows ? *o.compact_rows : *rows;
  const ValueId tokens = f.input_ids("tokens", x_rows);
  RowInputs ri;
  ri.pos = f.input_ids("pos", *rows);
  // Recurrent layers: i32[batch, 2] = (tokens seen, real rows) per sequence.
  if (c.has_recurrent_layers()) ri.seq = f.builder().input("seq", ir::DType::I32, ir::Shape::of({o.batch, 2}));
  if (o.compact_rows) {
    ri.slot_rows = f.input_ids("slot_rows", *rows);
    ri.row_slots = f.input_ids("row_slots", x_rows);
  }
  const float scale = c.embed_scale ? std::sqrt(static_cast<float>(c.n_embd)) : static_cast<float>(c.embedding_scale);
  ASSIGN_OR_RETURN(ValueId x, f.embedding(tokens, "token_embd.weight", c.n_vocab, c.n_embd, scale));
  for (int64_t il = 0; il < c.n_layer; ++il) {
    ASSIGN_OR_RETURN(x, layer(f, c, o, il, x, ri));
  }
  ASSIGN_OR_RETURN(x, f.rms_norm(x, "output_norm.weight", c.norm_eps));
  if (c.logit_scale != 1.0) x = f.builder().mul(x, f.builder().scalar(static_cast<float>(1.0 / c.logit_scale)));
  if (o.last_row_logits) x = f.builder().gather(x, f.input_ids("last", ir::Dim(o.batch)), 0);
  const std::string head = c.tied_embeddings ? "token_embd.weight" : "output.weight";
  ASSIGN_OR_RETURN(ValueId logits, f.lm_head(x, head, c.n_vocab, c.n_embd, c.final_softcap));
  // A token picked on the device is -1 (kNonFiniteToken) when its row's logits are not
  // all finite, so that a generation that reads one token per step still stops on a
  // model gone non-finite: the argmax checks as it scans (topk finite_check); a sampled
  // token through the row's sum (one reduction), with no further copy to the host.
  auto checked = [&](ValueId token) {
    ir::GraphBuilder& b = f.builder();
    const ValueId sum = b.reduce(ir::ReduceKind::Sum, logits, {1}, /*keep_dims=*/true);
    const ValueId finite = b.compare(ir::CompareKind::Lt, b.activation(ir::ActKind::Abs, sum),
                                     b.scalar(std::numeric_limits<float>::infinity()));
    const int32_t none = kNonFiniteToken;
    std::vector<uint8_t> bytes(sizeof none);
    std::memcpy(bytes.data(), &none, sizeof none);
    return b.where(finite, token, b.constant(ir::DType::I32, ir::Shape::of({1, 1}), std::move(bytes)));
  };
  if (o.greedy_token) {  // the argmax on the device: one token per sequence leaves it
    const ValueId next = f.builder().topk(logits, 1, /*values=*/false, /*finite_check=*/true);
    ASSIGN_OR_RETURN(BuiltModel m, f.finish({{next, "next"}}, o.policy));
    m.config = c;
    return m;
  }
  if (o.sample_token) {  // the draw on the device: one token per sequence leaves it
    ir::GraphBuilder& b = f.builder();
    const ValueId params = b.input("sampling", ir::DType::F32, ir::Shape::of({o.batch, ir::kSampleParams}));
    ASSIGN_OR_RETURN(BuiltModel m, f.finish({{checked(b.sample(logits, params)), "next"}}, o.policy));
    m.config = c;
    return m;
  }
  ASSIGN_OR_RETURN(BuiltModel m, f.finish({{logits, "logits"}}, o.policy));
  m.config = c;
  return m;
}

}  // namespace rlx::models
