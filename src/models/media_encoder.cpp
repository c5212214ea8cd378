// The DINOv2 and Wav2Vec2 templates (see rlx/models/media_encoder.h): Flow blocks for the
// transformer, conv / group_norm / interpolate for the image and audio front ends. The
// math follows transformers' Dinov2Model and Wav2Vec2Model in eval mode.
#include <cmath>
#include <optional>

#include <fmt/ranges.h>

#include "rlx/models/media_encoder.h"

namespace rlx::models {
namespace {

using ir::Dim;
using ir::Shape;
using ir::ValueId;

ir::AttentionBlockAttrs media_attention(const MediaConfig& c, bool qkv_bias) {
  ir::AttentionBlockAttrs a;
  a.attn.n_heads = c.n_head;
  a.attn.n_kv_heads = c.n_head;
  a.attn.head_dim = c.head_dim;
  a.attn.mask = ir::MaskKind::None;
  a.use_rope = false;
  a.qkv_bias = qkv_bias;
  a.key_lengths = true;
  return a;
}

// ---- DINOv2 -----------------------------------------------------------------------------

// The learned positions [1, 1 + P0, D] at a grid of gh x gw patches: as stored when the
// grid is the trained square one, else the patch part resampled bicubically (align_corners
// false, no antialias) from its sqrt(P0) x sqrt(P0) grid, as Dinov2Embeddings does.
Expected<ValueId> dinov2_positions(Flow& f, const MediaConfig& c, int64_t gh, int64_t gw, bool always) {
  ir::GraphBuilder& b = f.builder();
  const int64_t side0 = c.image_size / c.patch_size, p0 = side0 * side0, d = c.n_embd;
  ASSIGN_OR_RETURN(ValueId pos, f.param("embeddings.position_embeddings", {1, 1 + p0, d}));
  if (gh * gw == p0 && gh == gw && !always) return pos;
  const ValueId cls = b.narrow(pos, 1, 0, Dim(1));
  ValueId grid = b.reshape(b.narrow(pos, 1, 1, Dim(p0)), Shape{1, side0, side0, d});
  grid = b.transpose(grid, {0, 3, 1, 2});  // [1, D, s, s]
  ir::InterpolateAttrs ia;
  ia.mode = ir::InterpMode::Bicubic;
  ia.size = {gh, gw};
  ia.align_corners = false;
  grid = b.label("embeddings.position_interpolate").interpolate(grid, ia);  // [1, D, gh, gw]
  grid = b.reshape(b.transpose(grid, {0, 2, 3, 1}), Shape{1, gh * gw, d});
  return b.concat({cls, grid}, 1);
}

Expected<ValueId> dinov2_ffn(Flow& f, const MediaConfig& c, const std::string& blk, ValueId x) {
  ir::GraphBuilder& b = f.builder();
  if (!c.swiglu_ffn) {
    ASSIGN_OR_RETURN(ValueId h, f.dense(x, blk + ".mlp.fc1.weight", blk + ".mlp.fc1.bias", c.n_ff, c.n_embd, c.act,
                                        blk + ".mlp.fc1"));
    return f.dense(h, blk + ".mlp.fc2.weight", blk + ".mlp.fc2.bias", c.n_embd, c.n_ff, ir::ActKind::Identity,
                   blk + ".mlp.fc2");
  }
  // Dinov2SwiGLUFFN: weights_in gives [x1 | x2]; silu(x1) * x2, then weights_out.
  ASSIGN_OR_RETURN(ValueId h, f.dense(x, blk + ".mlp.weights_in.weight", blk + ".mlp.weights_in.bias", 2 * c.n_ff,
                                      c.n_embd, ir::ActKind::Identity, blk + ".mlp.weights_in"));
  const ValueId gate = b.narrow(h, 1, 0, Dim(c.n_ff)), up = b.narrow(h, 1, c.n_ff, Dim(c.n_ff));
  const ValueId act = b.mul(b.activation(ir::ActKind::Silu, gate), up);
  return f.dense(act, blk + ".mlp.weights_out.weight", blk + ".mlp.weights_out.bias", c.n_embd, c.n_ff,
                 ir::ActKind::Identity, blk + ".mlp.weights_out");
}

Expected<BuiltModel> build_dinov2(const MediaConfig& c, const WeightSource& weights, const MediaBuildOptions& o) {
  if (o.height < c.patch_size || o.width < c.patch_size)
    return Error::invalid_argument("dinov2: a {}x{} image is smaller than one {}x{} patch", o.height, o.width,
                                   c.patch_size, c.patch_size);
  const int64_t gh = o.height / c.patch_size, gw = o.width / c.patch_size, n_patch = gh * gw, seq = 1 + n_patch;
  const int64_t d = c.n_embd, batch = o.batch;
  Flow f(weights);
  ir::GraphBuilder& b = f.builder();
  const ValueId pixels = b.input("pixel_values", ir::DType::F32, Shape{batch, c.n_channels, o.height, o.width});
  const ValueId pos = f.input_ids("pos", Dim(seq));
  const ValueId kv_len = f.input_ids("kv_len", Dim(batch));

  // Patch embedding: a conv with stride = kernel = patch, then [B, D, gh, gw] -> [B, P, D].
  ASSIGN_OR_RETURN(ValueId pw, f.param("embeddings.patch_embeddings.projection.weight",
                                       {d, c.n_channels, c.patch_size, c.patch_size}));
  ASSIGN_OR_RETURN(ValueId pb, f.param("embeddings.patch_embeddings.projection.bias", {d}));
  ir::ConvAttrs patch;
  patch.stride = {c.patch_size, c.patch_size};
  ValueId x = b.label("embeddings.patch_embeddings").conv(pixels, pw, pb, patch);
  x = b.transpose(b.reshape(x, Shape{batch, d, n_patch}), {0, 2, 1});  // [B, P, D]
  ASSIGN_OR_RETURN(ValueId cls, f.param("embeddings.cls_token", {1, 1, d}));
  x = b.concat({b.expand(cls, Shape{batch, 1, d}), x}, 1);  // [B, S, D]
  ASSIGN_OR_RETURN(ValueId positions, dinov2_positions(f, c, gh, gw, o.interpolate_positions));
  x = b.reshape(b.add(x, positions), Shape{batch * seq, d});

  for (int64_t il = 0; il < c.n_layer; ++il) {
    const std::string blk = fmt::format("encoder.layer.{}", il);
    AttentionSpec as;
    as.prefix = blk;
    as.layer = il;
    as.attrs = media_attention(c, c.qkv_bias);
    as.kv_len = kv_len;
    as.o_bias = true;
    as.names.q = "attention.attention.query.weight";
    as.names.k = "attention.attention.key.weight";
    as.names.v = "attention.attention.value.weight";
    as.names.o = "attention.output.dense.weight";
    as.names.q_bias = "attention.attention.query.bias";
    as.names.k_bias = "attention.attention.key.bias";
    as.names.v_bias = "attention.attention.value.bias";
    as.names.o_bias = "attention.output.dense.bias";
    ASSIGN_OR_RETURN(ValueId h, f.layer_norm(x, blk + ".norm1.weight", blk + ".norm1.bias", c.norm_eps));
    ASSIGN_OR_RETURN(h, f.attention(h, pos, as));
    ASSIGN_OR_RETURN(ValueId ls1, f.param(blk + ".layer_scale1.lambda1", {d}));
    x = f.residual(x, b.mul(h, ls1));
    ASSIGN_OR_RETURN(h, f.layer_norm(x, blk + ".norm2.weight", blk + ".norm2.bias", c.norm_eps));
    ASSIGN_OR_RETURN(h, dinov2_ffn(f, c, blk, h));
    ASSIGN_OR_RETURN(ValueId ls2, f.param(blk + ".layer_scale2.lambda1", {d}));
    x = f.residual(x, b.mul(h, ls2));
  }
  ASSIGN_OR_RETURN(x, f.layer_norm(x, "layernorm.weight", "layernorm.bias", c.norm_eps));
  // pooler_output: each image's normed CLS state (row 0 of its S rows).
  const ValueId pooled = b.reshape(b.narrow(b.reshape(x, Shape{batch, seq, d}), 1, 0, Dim(1)), Shape{batch, d});
  return f.finish({{x, "last_hidden_state"}, {pooled, "pooler_output"}}, o.policy);
}

// ---- Wav2Vec2 ---------------------------------------------------------------------------

// The feature extractor: [B, samples] -> [B, C, frames].
Expected<ValueId> wav2vec2_features(Flow& f, const MediaConfig& c, ValueId audio, int64_t batch, int64_t samples) {
  ir::GraphBuilder& b = f.builder();
  ValueId x = b.reshape(audio, Shape{batch, 1, samples});
  int64_t in_ch = 1, len = samples;
  for (size_t i = 0; i < c.conv_dim.size(); ++i) {
    const std::string layer = fmt::format("feature_extractor.conv_layers.{}", i);
    const int64_t out_ch = c.conv_dim[i];
    ASSIGN_OR_RETURN(ValueId w, f.param(layer + ".conv.weight", {out_ch, in_ch, c.conv_kernel[i]}));
    std::optional<ValueId> bias;
    if (c.conv_bias) {
      ASSIGN_OR_RETURN(ValueId bv, f.param(layer + ".conv.bias", {out_ch}));
      bias = bv;
    }
    ir::ConvAttrs ca;
    ca.stride = {c.conv_stride[i]};
    x = b.label(layer + ".conv").conv(x, w, bias, ca);
    len = (len - c.conv_kernel[i]) / c.conv_stride[i] + 1;
    if (c.feat_group_norm && i == 0) {  // GroupNorm with one group per channel
      ASSIGN_OR_RETURN(ValueId g, f.param(layer + ".layer_norm.weight", {out_ch}));
      ASSIGN_OR_RETURN(ValueId be, f.param(layer + ".layer_norm.bias", {out_ch}));
      x = b.label(layer + ".layer_norm").group_norm(x, g, be, out_ch, 1e-5);
    } else if (!c.feat_group_norm) {  // LayerNorm over the channels of each frame
      const ValueId t = b.transpose(x, {0, 2, 1});
      ASSIGN_OR_RETURN(ValueId n, f.layer_norm(t, layer + ".layer_norm.weight", layer + ".layer_norm.bias", 1e-5));
      x = b.transpose(n, {0, 2, 1});
    }
    x = b.activation(c.feat_act, x);
    in_ch = out_ch;
  }
  return x;
}

Expected<BuiltModel> build_wav2vec2(const MediaConfig& c, const WeightSource& weights, const MediaBuildOptions& o) {
  const int64_t frames = c.frames(o.samples);
  if (frames < 1)
    return Error::invalid_argument("wav2vec2: {} samples are too few for the feature extractor (kernels {})", o.samples,
                                   fmt::join(c.conv_kernel, ", "));
  const int64_t d = c.n_embd, batch = o.batch, rows = batch * frames, ch = c.conv_dim.back();
  Flow f(weights);
  ir::GraphBuilder& b = f.builder();
  const ValueId audio = b.input("input_values", ir::DType::F32, Shape{batch, o.samples});
  const ValueId pos = f.input_ids("pos", Dim(frames));
  const ValueId kv_len = f.input_ids("kv_len", Dim(batch));

  ASSIGN_OR_RETURN(ValueId feats, wav2vec2_features(f, c, audio, batch, o.samples));
  ValueId x = b.reshape(b.transpose(feats, {0, 2, 1}), Shape{rows, ch});  // [B*F, C]
  ASSIGN_OR_RETURN(x, f.layer_norm(x, "feature_projection.layer_norm.weight", "feature_projection.layer_norm.bias",
                                   c.norm_eps));
  ASSIGN_OR_RETURN(x, f.dense(x, "feature_projection.projection.weight", "feature_projection.projection.bias", d, ch,
                              ir::ActKind::Identity, "feature_projection.projection"));

  // Convolutional positions: a grouped conv over frames padded K/2 each side; an even
  // kernel makes one frame too many, and the last is dropped (Wav2Vec2SamePadLayer).
  ASSIGN_OR_RETURN(ValueId pw, f.param("encoder.pos_conv_embed.conv.weight", {d, d / c.pos_conv_groups, c.pos_conv_kernel}));
  ASSIGN_OR_RETURN(ValueId pb, f.param("encoder.pos_conv_embed.conv.bias", {d}));
  ir::ConvAttrs pc;
  pc.padding = {c.pos_conv_kernel / 2};
  pc.groups = c.pos_conv_groups;
  ValueId p = b.transpose(b.reshape(x, Shape{batch, frames, d}), {0, 2, 1});  // [B, D, F]
  p = b.label("encoder.pos_conv_embed.conv").conv(p, pw, pb, pc);
  if (c.pos_conv_kernel % 2 == 0) p = b.narrow(p, 2, 0, Dim(frames));
  p = b.activation(c.feat_act, p);
  x = f.residual(x, b.reshape(b.transpose(p, {0, 2, 1}), Shape{rows, d}));
  if (!c.stable_layer_norm) {
    ASSIGN_OR_RETURN(x, f.layer_norm(x, "encoder.layer_norm.weight", "encoder.layer_norm.bias", c.norm_eps));
  }

  for (int64_t il = 0; il < c.n_layer; ++il) {
    const std::string blk = fmt::format("encoder.layers.{}", il);
    AttentionSpec as;
    as.prefix = blk;
    as.layer = il;
    as.attrs = media_attention(c, true);
    as.kv_len = kv_len;
    as.o_bias = true;
    as.names.q = "attention.q_proj.weight";
    as.names.k = "attention.k_proj.weight";
    as.names.v = "attention.v_proj.weight";
    as.names.o = "attention.out_proj.weight";
    as.names.q_bias = "attention.q_proj.bias";
    as.names.k_bias = "attention.k_proj.bias";
    as.names.v_bias = "attention.v_proj.bias";
    as.names.o_bias = "attention.out_proj.bias";
    auto ffn = [&](ValueId h) -> Expected<ValueId> {
      ASSIGN_OR_RETURN(ValueId u, f.dense(h, blk + ".feed_forward.intermediate_dense.weight",
                                          blk + ".feed_forward.intermediate_dense.bias", c.n_ff, d, c.act,
                                          blk + ".feed_forward.intermediate_dense"));
      return f.dense(u, blk + ".feed_forward.output_dense.weight", blk + ".feed_forward.output_dense.bias", d, c.n_ff,
                     ir::ActKind::Identity, blk + ".feed_forward.output_dense");
    };
    if (c.stable_layer_norm) {  // pre-LN
      ASSIGN_OR_RETURN(ValueId h, f.layer_norm(x, blk + ".layer_norm.weight", blk + ".layer_norm.bias", c.norm_eps));
      ASSIGN_OR_RETURN(h, f.attention(h, pos, as));
      x = f.residual(x, h);
      ASSIGN_OR_RETURN(h, f.layer_norm(x, blk + ".final_layer_norm.weight", blk + ".final_layer_norm.bias", c.norm_eps));
      ASSIGN_OR_RETURN(h, ffn(h));
      x = f.residual(x, h);
    } else {  // post-LN
      ASSIGN_OR_RETURN(ValueId a, f.attention(x, pos, as));
      ASSIGN_OR_RETURN(x, f.layer_norm(f.residual(x, a), blk + ".layer_norm.weight", blk + ".layer_norm.bias", c.norm_eps));
      ASSIGN_OR_RETURN(ValueId h, ffn(x));
      ASSIGN_OR_RETURN(x, f.layer_norm(f.residual(x, h), blk + ".final_layer_norm.weight",
                                       blk + ".final_layer_norm.bias", c.norm_eps));
    }
  }
  if (c.stable_layer_norm) {
    ASSIGN_OR_RETURN(x, f.layer_norm(x, "encoder.layer_norm.weight", "encoder.layer_norm.bias", c.norm_eps));
  }
  return f.finish({{x, "last_hidden_state"}}, o.policy);
}

}  // namespace

Expected<BuiltModel> build_media_encoder(const MediaConfig& c, const WeightSource& weights, const MediaBuildOptions& o) {
  TRY(c.validate());
  if (o.batch < 1 || o.batch > 4096) return Error::invalid_argument("{}: a batch has 1..4096 items, got {}",
                                                                    media_arch_name(c.arch), o.batch);
  return c.arch == MediaArch::Dinov2 ? build_dinov2(c, weights, o) : build_wav2vec2(c, weights, o);
}

}  // namespace rlx::models
