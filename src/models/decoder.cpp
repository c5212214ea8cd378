// Decoder-only transformer in HIR: embedding, N x (attention block + FFN block)
// with pre-norms (and Gemma's post-norms), final norm, LM head.
#include "rlx/models/decoder.h"

#include <cmath>
#include <map>

#include "rlx/ir/builder.h"

namespace rlx::models {
namespace {

using ir::DType;
using ir::ValueId;

class DecoderBuilder {
 public:
  DecoderBuilder(const ModelConfig& c, const WeightSource& w, const DecoderOptions& o) : c_(c), w_(w), o_(o) {}

  Expected<BuiltModel> build() {
    TRY(c_.validate());
    if (o_.batch < 1 || (o_.batch > 1 && o_.ctx <= 0))
      return Error::invalid_argument("decoder: batch {} needs >= 1 sequences (and a KV cache when > 1)", o_.batch);
    const std::optional<ir::Dim> rows = ir::Dim::mul(ir::Dim(o_.batch), o_.seq);
    if (!rows) return Error::invalid_argument("decoder: batch {} x rows {} is not a dim", o_.batch, o_.seq.to_string());
    const ir::Dim seq = *rows;
    ValueId tokens = b_.input("tokens", DType::I32, {seq});
    ValueId pos = b_.input("pos", DType::I32, {seq});
    ASSIGN_OR_RETURN(ValueId embd, param("token_embd.weight", {c_.n_vocab, c_.n_embd}));
    ValueId x = b_.label("token_embd").op(ir::OpKind::HirEmbedding, {embd, tokens}, ir::NoAttrs{});
    if (b_.ok() && b_.type(x).dtype != DType::F32) x = b_.cast(x, DType::F32);
    if (c_.embed_scale) x = b_.mul(x, b_.scalar(std::sqrt(static_cast<float>(c_.n_embd))));
    for (int64_t il = 0; il < c_.n_layer; ++il) {
      ASSIGN_OR_RETURN(x, layer(il, x, pos));
    }
    ASSIGN_OR_RETURN(ValueId out_norm, param("output_norm.weight", {c_.n_embd}));
    x = b_.label("output_norm").op(ir::OpKind::HirRmsNorm, {x, out_norm}, ir::NormAttrs{c_.norm_eps});
    if (o_.last_row_logits) {
      ValueId last = b_.input("last", DType::I32, {o_.batch});
      x = b_.gather(x, last, 0);
    }
    const std::string head = c_.tied_embeddings ? "token_embd.weight" : "output.weight";
    ValueId w_out = embd;
    if (!c_.tied_embeddings) {
      ASSIGN_OR_RETURN(w_out, param(head, {c_.n_vocab, c_.n_embd}));
    }
    ValueId logits = b_.label("output").op(ir::OpKind::HirLinear, {x, w_out}, ir::FusedMatMulAttrs{});
    if (c_.final_softcap > 0) {
      const auto cap = static_cast<float>(c_.final_softcap);
      logits = b_.mul(b_.activation(ir::ActKind::Tanh, b_.mul(logits, b_.scalar(1.0f / cap))), b_.scalar(cap));
    }
    b_.output(logits, "logits");
    ASSIGN_OR_RETURN(ir::Graph g, b_.build());
    BuiltModel m;
    m.hir.graph = std::move(g);
    m.hir.policy = o_.policy;
    m.config = c_;
    m.param_names = std::move(params_);
    m.handle_names = std::move(handles_);
    return m;
  }

 private:
  Expected<ValueId> param(const std::string& name, std::vector<int64_t> expect) {
    auto it = param_ids_.find(name);
    if (it != param_ids_.end()) return it->second;
    ASSIGN_OR_RETURN(WeightView view, w_.take(name));
    if (view.shape != expect) {
      return Error::invalid_file("{}: tensor '{}' has shape {} but the config needs {}", w_.describe(), name,
                                 ir::Shape::of(view.shape).to_string(), ir::Shape::of(expect).to_string());
    }
    ValueId v = b_.param(name, view.dtype, ir::Shape::of(view.shape));
    params_.push_back(name);
    param_ids_[name] = v;
    return v;
  }

  Expected<ValueId> layer(int64_t il, ValueId x, ValueId pos) {
    auto name = [il](const char* t) { return fmt::format("blk.{}.{}", il, t); };
    const int64_t q_width = c_.n_head * c_.head_dim, kv_width = c_.n_head_kv * c_.head_dim;

    ASSIGN_OR_RETURN(ValueId attn_norm, param(name("attn_norm.weight"), {c_.n_embd}));
    ValueId h = b_.label(name("attn_norm")).op(ir::OpKind::HirRmsNorm, {x, attn_norm}, ir::NormAttrs{c_.norm_eps});

    ir::AttentionBlockAttrs a;
    a.attn.n_heads = c_.n_head;
    a.attn.n_kv_heads = c_.n_head_kv;
    a.attn.head_dim = c_.head_dim;
    a.attn.scale = c_.attn_scale;
    a.attn.softcap = c_.attn_softcap;
    a.attn.mask = ir::MaskKind::Causal;
    if (c_.layer_is_sliding(il)) {
      a.attn.mask = ir::MaskKind::SlidingWindow;
      a.attn.window = c_.sliding_window;
    }
    a.rope = c_.rope;
    a.rope.head_dim = c_.head_dim;
    if (c_.rope_theta_local > 0 && c_.layer_is_sliding(il)) {
      a.rope.theta = c_.rope_theta_local;
      a.rope.scaling = ir::RopeScaling::None;
    }
    a.qkv_bias = c_.qkv_bias;
    a.qk_norm = c_.qk_norm;
    a.qk_norm_eps = c_.norm_eps;
    a.prescale_q = c_.prescale_q;
    a.kv_cache = o_.ctx > 0;
    a.batch = o_.batch;

    std::vector<ValueId> in{h};
    for (auto [t, rows] : {std::pair{"attn_q.weight", q_width}, {"attn_k.weight", kv_width},
                           {"attn_v.weight", kv_width}}) {
      ASSIGN_OR_RETURN(ValueId w, param(name(t), {rows, c_.n_embd}));
      in.push_back(w);
    }
    ASSIGN_OR_RETURN(ValueId wo, param(name("attn_output.weight"), {c_.n_embd, q_width}));
    in.push_back(wo);
    in.push_back(pos);
    if (c_.qkv_bias) {
      for (auto [t, rows] : {std::pair{"attn_q.bias", q_width}, {"attn_k.bias", kv_width}, {"attn_v.bias", kv_width}}) {
        ASSIGN_OR_RETURN(ValueId bias, param(name(t), {rows}));
        in.push_back(bias);
      }
    }
    if (c_.qk_norm) {
      for (const char* t : {"attn_q_norm.weight", "attn_k_norm.weight"}) {
        ASSIGN_OR_RETURN(ValueId nw, param(name(t), {c_.head_dim}));
        in.push_back(nw);
      }
    }
    if (o_.ctx > 0) {
      for (int64_t s = 0; s < o_.batch; ++s)
        for (char kv : {'k', 'v'}) {
          const std::string hn = kv_handle_name(kv, il, o_.batch > 1 ? s : -1);
          in.push_back(b_.handle(hn, o_.kv_dtype, {o_.ctx, kv_width}));
          handles_.push_back(hn);
        }
    }
    ValueId attn = b_.label(name("attn")).op(ir::OpKind::HirAttentionBlock, in, a);
    if (c_.post_norms) {
      ASSIGN_OR_RETURN(ValueId pn, param(name("post_attention_norm.weight"), {c_.n_embd}));
      attn = b_.label(name("post_attention_norm")).op(ir::OpKind::HirRmsNorm, {attn, pn}, ir::NormAttrs{c_.norm_eps});
    }
    x = b_.add(x, attn);

    ASSIGN_OR_RETURN(ValueId ffn_norm, param(name("ffn_norm.weight"), {c_.n_embd}));
    h = b_.label(name("ffn_norm")).op(ir::OpKind::HirRmsNorm, {x, ffn_norm}, ir::NormAttrs{c_.norm_eps});
    ASSIGN_OR_RETURN(ValueId gate, param(name("ffn_gate.weight"), {c_.n_ff, c_.n_embd}));
    ASSIGN_OR_RETURN(ValueId up, param(name("ffn_up.weight"), {c_.n_ff, c_.n_embd}));
    ASSIGN_OR_RETURN(ValueId down, param(name("ffn_down.weight"), {c_.n_embd, c_.n_ff}));
    ValueId f;
    if (c_.ffn == FfnKind::SwiGLU) {
      f = b_.label(name("ffn")).op(ir::OpKind::HirSwiGLUFfn, {h, gate, up, down}, ir::NoAttrs{});
    } else if (c_.gelu_f16_rounding) {
      // gelu(x) evaluated on f16-rounded x and rounded to f16 again (see ModelConfig).
      auto round_f16 = [this](ValueId v) { return b_.cast(b_.cast(v, DType::F16), DType::F32); };
      ValueId g = b_.label(name("ffn_gate")).op(ir::OpKind::HirLinear, {h, gate}, ir::FusedMatMulAttrs{});
      ValueId u = b_.label(name("ffn_up")).op(ir::OpKind::HirLinear, {h, up}, ir::FusedMatMulAttrs{});
      ValueId act = round_f16(b_.activation(ir::ActKind::GeluTanh, round_f16(g)));
      f = b_.label(name("ffn_down")).op(ir::OpKind::HirLinear, {b_.mul(act, u), down}, ir::FusedMatMulAttrs{});
    } else {
      f = b_.label(name("ffn")).op(ir::OpKind::HirGeluFfn, {h, gate, up, down}, ir::GeluFfnAttrs{true, true});
    }
    if (c_.post_norms) {
      ASSIGN_OR_RETURN(ValueId pn, param(name("post_ffw_norm.weight"), {c_.n_embd}));
      f = b_.label(name("post_ffw_norm")).op(ir::OpKind::HirRmsNorm, {f, pn}, ir::NormAttrs{c_.norm_eps});
    }
    return b_.add(x, f);
  }

  const ModelConfig& c_;
  const WeightSource& w_;
  const DecoderOptions& o_;
  ir::GraphBuilder b_;
  std::map<std::string, ValueId> param_ids_;
  std::vector<std::string> params_;
  std::vector<std::string> handles_;
};

}  // namespace

std::string kv_handle_name(char kv, int64_t il, int64_t seq) {
  return seq < 0 ? fmt::format("cache.{}.{}", kv, il) : fmt::format("cache.{}.{}.{}", kv, il, seq);
}

Expected<BuiltModel> build_decoder(const ModelConfig& config, const WeightSource& weights,
                                   const DecoderOptions& options) {
  return DecoderBuilder(config, weights, options).build();
}

}  // namespace rlx::models
