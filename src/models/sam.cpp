// The SAM templates (see rlx/models/sam.h): the ViT image encoder with windowed and
// global attention and its conv neck, and the prompt encoder with the two-way-transformer
// mask decoder. The math follows transformers' SamModel in eval mode.
#include "rlx/models/sam.h"

#include <fmt/format.h>

#include <cmath>
#include <numbers>

namespace rlx::models {
namespace {

using ir::Dim;
using ir::Shape;
using ir::ValueId;

constexpr double kFinalNormEps = 1e-5;    // the two-way transformer's last LayerNorm keeps torch's default
constexpr double kChannelNormEps = 1e-6;  // SamLayerNorm's own default: the neck and the upscaling use it

// SamLayerNorm over the channels of x[N, C, H, W] (data_format "channels_first").
Expected<ValueId> layer_norm_2d(Flow& f, ValueId x, const std::string& name, double eps) {
  ir::GraphBuilder& b = f.builder();
  ASSIGN_OR_RETURN(ValueId n, f.layer_norm(b.transpose(x, {0, 2, 3, 1}), name + ".weight", name + ".bias", eps));
  return b.transpose(n, {0, 3, 1, 2});
}

// ---- image encoder --------------------------------------------------------------------

Expected<ValueId> vision_layer(Flow& f, const SamConfig& c, int64_t il, int64_t batch, ValueId x) {
  ir::GraphBuilder& b = f.builder();
  const std::string blk = fmt::format("vision_encoder.layers.{}", il);
  const int64_t g = c.grid(), d = c.n_embd, hd = d / c.n_head;
  bool global = c.window == 0;
  for (int64_t l : c.global_layers) global = global || l == il;
  const int64_t win = global ? g : c.window;
  ASSIGN_OR_RETURN(ValueId h, f.layer_norm(x, blk + ".layer_norm1.weight", blk + ".layer_norm1.bias", c.vision_eps));
  int64_t items = batch;
  if (!global) {
    h = b.window_partition(h, win);  // zero padded after the norm, as SamVisionLayer pads
    items = batch * ((g + win - 1) / win) * ((g + win - 1) / win);
  }
  h = b.reshape(h, Shape{items, win * win, d});
  ASSIGN_OR_RETURN(ValueId qkv, f.dense(h, blk + ".attn.qkv.weight", c.qkv_bias ? blk + ".attn.qkv.bias" : "", 3 * d, d,
                                        ir::ActKind::Identity, blk + ".attn.qkv"));
  const ValueId q = b.narrow(qkv, 2, 0, Dim(d)), k = b.narrow(qkv, 2, d, Dim(d)), v = b.narrow(qkv, 2, 2 * d, Dim(d));
  ValueId o;
  if (c.rel_pos) {
    ASSIGN_OR_RETURN(ValueId rh, f.param(blk + ".attn.rel_pos_h", {2 * win - 1, hd}));
    ASSIGN_OR_RETURN(ValueId rw, f.param(blk + ".attn.rel_pos_w", {2 * win - 1, hd}));
    o = b.label(blk + ".attn")
            .rel_pos_attention(q, k, v, rh, rw, ir::RelPosAttentionAttrs{c.n_head, hd, win, win, 0.0});
  } else {
    ir::AttentionAttrs a;
    a.n_heads = a.n_kv_heads = c.n_head;
    a.head_dim = hd;
    a.mask = ir::MaskKind::None;
    o = b.label(blk + ".attn").attention(q, k, v, a);
  }
  ASSIGN_OR_RETURN(o, f.dense(o, blk + ".attn.proj.weight", blk + ".attn.proj.bias", d, d, ir::ActKind::Identity,
                              blk + ".attn.proj"));
  o = b.reshape(o, Shape{items, win, win, d});
  if (!global) o = b.window_unpartition(o, win, g, g);
  x = f.residual(x, o);
  ASSIGN_OR_RETURN(h, f.layer_norm(x, blk + ".layer_norm2.weight", blk + ".layer_norm2.bias", c.vision_eps));
  ASSIGN_OR_RETURN(
      h, f.dense(h, blk + ".mlp.lin1.weight", blk + ".mlp.lin1.bias", c.n_ff, d, c.vision_act, blk + ".mlp.lin1"));
  ASSIGN_OR_RETURN(h, f.dense(h, blk + ".mlp.lin2.weight", blk + ".mlp.lin2.bias", d, c.n_ff, ir::ActKind::Identity,
                              blk + ".mlp.lin2"));
  return f.residual(x, h);
}

// ---- prompt encoder and mask decoder ---------------------------------------------------

// SamPositionalEmbedding of points [R, 2] already scaled to [0, 1]: sin | cos of
// 2π (2p - 1) · G.
Expected<ValueId> fourier_features(Flow& f, ValueId unit, int64_t feats) {
  ir::GraphBuilder& b = f.builder();
  ASSIGN_OR_RETURN(ValueId gauss, f.param("shared_image_embedding.positional_embedding", {2, feats}));
  const ValueId centered = b.sub(b.mul(unit, b.scalar(2.0f)), b.scalar(1.0f));
  const ValueId proj = b.mul(b.matmul(centered, gauss), b.scalar(static_cast<float>(2.0 * std::numbers::pi)));
  return b.concat({b.activation(ir::ActKind::Sin, proj), b.activation(ir::ActKind::Cos, proj)}, -1);
}

struct Decoder {
  Flow& f;
  const SamConfig& c;
  int64_t items;

  // SamTwoWayAttention (or SamAttention): projections to `internal` channels, heads, out_proj.
  Expected<ValueId> attention(const std::string& p, ValueId q, ValueId k, ValueId v, int64_t internal) {
    const int64_t h = c.prompt_dim;
    ASSIGN_OR_RETURN(
        q, f.dense(q, p + ".q_proj.weight", p + ".q_proj.bias", internal, h, ir::ActKind::Identity, p + ".q_proj"));
    ASSIGN_OR_RETURN(
        k, f.dense(k, p + ".k_proj.weight", p + ".k_proj.bias", internal, h, ir::ActKind::Identity, p + ".k_proj"));
    ASSIGN_OR_RETURN(
        v, f.dense(v, p + ".v_proj.weight", p + ".v_proj.bias", internal, h, ir::ActKind::Identity, p + ".v_proj"));
    ir::AttentionAttrs a;
    a.n_heads = a.n_kv_heads = c.dec_heads;
    a.head_dim = internal / c.dec_heads;
    a.mask = ir::MaskKind::None;
    const ValueId o = f.builder().label(p).attention(q, k, v, a);
    return f.dense(o, p + ".out_proj.weight", p + ".out_proj.bias", h, internal, ir::ActKind::Identity,
                   p + ".out_proj");
  }
  Expected<ValueId> norm(ValueId x, const std::string& name, double eps) {
    return f.layer_norm(x, name + ".weight", name + ".bias", eps);
  }
  // SamFeedForward: proj_in, depth - 2 hidden layers (ReLU between), proj_out.
  Expected<ValueId> feed_forward(const std::string& p, ValueId x, int64_t in, int64_t hidden, int64_t out,
                                 int64_t depth) {
    ASSIGN_OR_RETURN(
        x, f.dense(x, p + ".proj_in.weight", p + ".proj_in.bias", hidden, in, ir::ActKind::Relu, p + ".proj_in"));
    for (int64_t i = 0; i + 2 < depth; ++i) {
      const std::string l = fmt::format("{}.layers.{}", p, i);
      ASSIGN_OR_RETURN(x, f.dense(x, l + ".weight", l + ".bias", hidden, hidden, ir::ActKind::Relu, l));
    }
    return f.dense(x, p + ".proj_out.weight", p + ".proj_out.bias", out, hidden, ir::ActKind::Identity,
                   p + ".proj_out");
  }
};

}  // namespace

Expected<BuiltModel> build_sam_image_encoder(const SamConfig& c, const WeightSource& weights, int64_t batch,
                                             ir::FusionPolicy policy) {
  TRY(c.validate());
  if (batch < 1 || batch > 4096) return Error::invalid_argument("sam: a batch has 1..4096 images, got {}", batch);
  const int64_t g = c.grid(), d = c.n_embd, p = c.patch_size;
  Flow f(weights);
  ir::GraphBuilder& b = f.builder();
  const ValueId pixels =
      b.input("pixel_values", ir::DType::F32, Shape{batch, c.n_channels, c.image_size, c.image_size});
  ASSIGN_OR_RETURN(ValueId pw, f.param("vision_encoder.patch_embed.projection.weight", {d, c.n_channels, p, p}));
  ASSIGN_OR_RETURN(ValueId pb, f.param("vision_encoder.patch_embed.projection.bias", {d}));
  ir::ConvAttrs patch;
  patch.stride = {p, p};
  ValueId x =
      b.transpose(b.label("vision_encoder.patch_embed").conv(pixels, pw, pb, patch), {0, 2, 3, 1});  // [B, g, g, D]
  if (c.abs_pos) {
    ASSIGN_OR_RETURN(ValueId pos, f.param("vision_encoder.pos_embed", {1, g, g, d}));
    x = b.add(x, pos);
  }
  for (int64_t il = 0; il < c.n_layer; ++il) {
    ASSIGN_OR_RETURN(x, vision_layer(f, c, il, batch, x));
  }
  // The neck: 1x1 conv, channel norm, 3x3 conv, channel norm.
  x = b.transpose(x, {0, 3, 1, 2});
  ASSIGN_OR_RETURN(ValueId w1, f.param("vision_encoder.neck.conv1.weight", {c.out_channels, d, 1, 1}));
  x = b.label("vision_encoder.neck.conv1").conv(x, w1, std::nullopt, ir::ConvAttrs{});
  ASSIGN_OR_RETURN(x, layer_norm_2d(f, x, "vision_encoder.neck.layer_norm1", kChannelNormEps));
  ASSIGN_OR_RETURN(ValueId w2, f.param("vision_encoder.neck.conv2.weight", {c.out_channels, c.out_channels, 3, 3}));
  ir::ConvAttrs same;
  same.padding = {1, 1};
  x = b.label("vision_encoder.neck.conv2").conv(x, w2, std::nullopt, same);
  ASSIGN_OR_RETURN(x, layer_norm_2d(f, x, "vision_encoder.neck.layer_norm2", kChannelNormEps));
  return f.finish({{x, "image_embeddings"}}, policy);
}

Expected<BuiltModel> build_sam_mask_decoder(const SamConfig& c, const WeightSource& weights, const SamDecoderShape& s,
                                            ir::FusionPolicy policy) {
  TRY(c.validate());
  if (s.images < 1 || s.prompts < 1 || s.tokens < 1 || s.images * s.prompts > 65536 || s.tokens > 4096)
    return Error::invalid_argument("sam: {} images x {} prompts of {} tokens is out of range", s.images, s.prompts,
                                   s.tokens);
  const int64_t h = c.prompt_dim, g = c.embed_side, gg = g * g, items = s.images * s.prompts, n = s.tokens;
  const int64_t mask_tokens = c.multimask + 1, internal = h / c.downsample, side = c.mask_side();
  Flow f(weights);
  ir::GraphBuilder& b = f.builder();
  Decoder dec{f, c, items};
  const ValueId image = b.input("image_embeddings", ir::DType::F32, Shape{s.images, h, g, g});
  const ValueId coords = b.input("point_coords", ir::DType::F32, Shape{items * n, 2});
  const ValueId kinds = b.input("point_kinds", ir::DType::F32, Shape{items * n, 2 + c.point_kinds});

  // Sparse prompts: each token's position embedding (pixel centres, in [0, 1]) where it
  // counts, plus the embedding its kind selects (not_a_point_embed or point_embed[k]).
  const ValueId unit = b.mul(b.add(coords, b.scalar(0.5f)), b.scalar(1.0f / static_cast<float>(c.image_size)));
  ASSIGN_OR_RETURN(ValueId pe, fourier_features(f, unit, c.pos_feats));
  std::vector<ValueId> kind_rows;
  ASSIGN_OR_RETURN(ValueId not_a_point, f.param("prompt_encoder.not_a_point_embed.weight", {1, h}));
  kind_rows.push_back(not_a_point);
  for (int64_t k = 0; k < c.point_kinds; ++k) {
    ASSIGN_OR_RETURN(ValueId row, f.param(fmt::format("prompt_encoder.point_embed.{}.weight", k), {1, h}));
    kind_rows.push_back(row);
  }
  const ValueId keep = b.narrow(kinds, 1, 0, Dim(1)), select = b.narrow(kinds, 1, 1, Dim(1 + c.point_kinds));
  const ValueId sparse = b.add(b.mul(pe, keep), b.matmul(select, b.concat(kind_rows, 0)));  // [items*n, h]

  ASSIGN_OR_RETURN(ValueId iou_token, f.param("mask_decoder.iou_token.weight", {1, h}));
  ASSIGN_OR_RETURN(ValueId mask_tok, f.param("mask_decoder.mask_tokens.weight", {mask_tokens, h}));
  const ValueId outputs = b.expand(b.reshape(b.concat({iou_token, mask_tok}, 0), Shape{1, 1 + mask_tokens, h}),
                                   Shape{items, 1 + mask_tokens, h});
  const ValueId tokens = b.concat({outputs, b.reshape(sparse, Shape{items, n, h})}, 1);  // [items, 1 + M + n, h]

  // Dense side: the image embedding plus no_mask_embed, once per prompt of its image, as
  // [items, g*g, h]; and the image-wide position embedding of the patch centres.
  ASSIGN_OR_RETURN(ValueId no_mask, f.param("prompt_encoder.no_mask_embed.weight", {1, h}));
  ValueId keys = b.add(image, b.reshape(no_mask, Shape{1, h, 1, 1}));
  keys = b.reshape(b.expand(b.reshape(keys, Shape{s.images, 1, h, gg}), Shape{s.images, s.prompts, h, gg}),
                   Shape{items, h, gg});
  keys = b.transpose(keys, {0, 2, 1});
  std::vector<float> centres(static_cast<size_t>(2 * gg));
  for (int64_t y = 0; y < g; ++y)
    for (int64_t x = 0; x < g; ++x) {
      centres[static_cast<size_t>(2 * (y * g + x))] =
          static_cast<float>((static_cast<double>(x) + 0.5) / static_cast<double>(g));
      centres[static_cast<size_t>(2 * (y * g + x) + 1)] =
          static_cast<float>((static_cast<double>(y) + 0.5) / static_cast<double>(g));
    }
  ASSIGN_OR_RETURN(ValueId image_pe, fourier_features(f, b.constant_f32(Shape{gg, 2}, centres), c.pos_feats));
  image_pe = b.expand(b.reshape(image_pe, Shape{1, gg, h}), Shape{items, gg, h});

  // The two-way transformer.
  ValueId queries = tokens;
  for (int64_t il = 0; il < c.dec_layers; ++il) {
    const std::string p = fmt::format("mask_decoder.transformer.layers.{}", il);
    if (il == 0) {  // skip_first_layer_pe: the self-attention replaces the queries
      ASSIGN_OR_RETURN(queries, dec.attention(p + ".self_attn", queries, queries, queries, h));
    } else {
      const ValueId q = b.add(queries, tokens);
      ASSIGN_OR_RETURN(ValueId a, dec.attention(p + ".self_attn", q, q, queries, h));
      queries = b.add(queries, a);
    }
    ASSIGN_OR_RETURN(queries, dec.norm(queries, p + ".layer_norm1", c.dec_eps));
    ValueId q = b.add(queries, tokens), k = b.add(keys, image_pe);
    ASSIGN_OR_RETURN(ValueId a, dec.attention(p + ".cross_attn_token_to_image", q, k, keys, internal));
    ASSIGN_OR_RETURN(queries, dec.norm(b.add(queries, a), p + ".layer_norm2", c.dec_eps));
    ASSIGN_OR_RETURN(ValueId m, f.dense(queries, p + ".mlp.lin1.weight", p + ".mlp.lin1.bias", c.dec_ff, h, c.dec_act,
                                        p + ".mlp.lin1"));
    ASSIGN_OR_RETURN(m, f.dense(m, p + ".mlp.lin2.weight", p + ".mlp.lin2.bias", h, c.dec_ff, ir::ActKind::Identity,
                                p + ".mlp.lin2"));
    ASSIGN_OR_RETURN(queries, dec.norm(b.add(queries, m), p + ".layer_norm3", c.dec_eps));
    q = b.add(queries, tokens);
    k = b.add(keys, image_pe);
    ASSIGN_OR_RETURN(a, dec.attention(p + ".cross_attn_image_to_token", k, q, queries, internal));
    ASSIGN_OR_RETURN(keys, dec.norm(b.add(keys, a), p + ".layer_norm4", c.dec_eps));
  }
  {
    const ValueId q = b.add(queries, tokens), k = b.add(keys, image_pe);
    ASSIGN_OR_RETURN(ValueId a,
                     dec.attention("mask_decoder.transformer.final_attn_token_to_image", q, k, keys, internal));
    ASSIGN_OR_RETURN(queries,
                     dec.norm(b.add(queries, a), "mask_decoder.transformer.layer_norm_final_attn", kFinalNormEps));
  }

  // Upscaling: two stride-2 transposed convs (channel norm and GELU between, GELU after).
  ValueId up = b.reshape(b.transpose(keys, {0, 2, 1}), Shape{items, h, g, g});
  ir::ConvTransposeAttrs twice;
  twice.stride = {2, 2};
  ASSIGN_OR_RETURN(ValueId uw1, f.param("mask_decoder.upscale_conv1.weight", {h, h / 4, 2, 2}));
  ASSIGN_OR_RETURN(ValueId ub1, f.param("mask_decoder.upscale_conv1.bias", {h / 4}));
  up = b.label("mask_decoder.upscale_conv1").conv_transpose(up, uw1, ub1, twice);
  ASSIGN_OR_RETURN(up, layer_norm_2d(f, up, "mask_decoder.upscale_layer_norm", kChannelNormEps));
  up = b.activation(ir::ActKind::Gelu, up);
  ASSIGN_OR_RETURN(ValueId uw2, f.param("mask_decoder.upscale_conv2.weight", {h / 4, h / 8, 2, 2}));
  ASSIGN_OR_RETURN(ValueId ub2, f.param("mask_decoder.upscale_conv2.bias", {h / 8}));
  up = b.activation(ir::ActKind::Gelu, b.label("mask_decoder.upscale_conv2").conv_transpose(up, uw2, ub2, twice));

  // Each mask token's hypernetwork MLP gives the weights of its mask over the upscaled channels.
  std::vector<ValueId> hyper;
  for (int64_t i = 0; i < mask_tokens; ++i) {
    const ValueId t = b.reshape(b.narrow(queries, 1, 1 + i, Dim(1)), Shape{items, h});
    ASSIGN_OR_RETURN(ValueId w,
                     dec.feed_forward(fmt::format("mask_decoder.output_hypernetworks_mlps.{}", i), t, h, h, h / 8, 3));
    hyper.push_back(b.reshape(w, Shape{items, 1, h / 8}));
  }
  ValueId masks = b.matmul(b.concat(hyper, 1), b.reshape(up, Shape{items, h / 8, side * side}));  // [items, M, side²]
  const ValueId iou_in = b.reshape(b.narrow(queries, 1, 0, Dim(1)), Shape{items, h});
  ASSIGN_OR_RETURN(ValueId iou, dec.feed_forward("mask_decoder.iou_prediction_head", iou_in, h, c.iou_hidden,
                                                 mask_tokens, c.iou_depth));
  const int64_t first = s.multimask ? 1 : 0, count = s.multimask ? c.multimask : 1;
  masks = b.reshape(b.narrow(masks, 1, first, Dim(count)), Shape{s.images, s.prompts, count, side, side});
  iou = b.reshape(b.narrow(iou, 1, first, Dim(count)), Shape{s.images, s.prompts, count});
  return f.finish({{masks, "pred_masks"}, {iou, "iou_scores"}}, policy);
}

}  // namespace rlx::models
