// Segment Anything (transformers' SamModel) from a Hugging Face folder: a ViT image
// encoder with windowed and global attention carrying decomposed relative-position
// biases and a conv neck (pixel_values -> image_embeddings), and a prompt encoder with
// a two-way-transformer mask decoder (image_embeddings + points / boxes -> low-resolution
// pred_masks and iou_scores).
//
// Both are family templates of the one model pipeline: build_sam_image_encoder and
// build_sam_mask_decoder compose Flow blocks and the spatial ops (conv, conv_transpose,
// window_partition, rel_pos_attention) into HIR with static shapes, and SamModel
// compiles each through ModelCompilePipeline (memory and AOT disk cache) into its own
// executable with one copy of the weights bound into both, so an image is encoded once
// and prompted many times. Tensors keep their Hugging Face names.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "rlx/ir/op.h"
#include "rlx/models/flow.h"
#include "rlx/models/media_encoder.h"
#include "rlx/models/weight_source.h"
#include "rlx/runtime/model_pipeline.h"

namespace rlx::models {

/// What a SAM checkpoint is made of: config.json's vision_config, prompt_encoder_config
/// and mask_decoder_config.
struct SamConfig {
  // Image encoder (vision_config).
  int64_t image_size = 0, patch_size = 0, n_channels = 3;
  int64_t n_embd = 0, n_layer = 0, n_head = 0, n_ff = 0;  ///< n_ff: mlp_dim
  int64_t out_channels = 0;                               ///< the neck's output_channels
  int64_t window = 0;                                     ///< window_size of the windowed layers
  std::vector<int64_t> global_layers;                     ///< global_attn_indexes
  bool qkv_bias = true, abs_pos = true, rel_pos = true;
  double vision_eps = 1e-6;
  ir::ActKind vision_act = ir::ActKind::Gelu;
  // Prompt encoder.
  int64_t prompt_dim = 0;   ///< hidden_size (= the decoder's)
  int64_t embed_side = 0;   ///< image_embedding_size: the image embedding's side
  int64_t pos_feats = 0;    ///< the shared positional embedding's num_pos_feats (2 * pos_feats = prompt_dim)
  int64_t point_kinds = 4;  ///< num_point_embeddings (positive, negative, box corners)
  // Mask decoder.
  int64_t dec_layers = 0, dec_heads = 0, dec_ff = 0, downsample = 2;
  int64_t iou_hidden = 0, iou_depth = 3, multimask = 3;
  double dec_eps = 1e-6;
  ir::ActKind dec_act = ir::ActKind::Relu;

  int64_t grid() const { return image_size / patch_size; }  ///< patches per side
  int64_t mask_side() const { return 4 * embed_side; }      ///< side of a low-resolution mask
  /// Checks sizes and that the parts agree (grid = image_embedding_size, channels);
  /// errors name the key.
  Status validate() const;
};

/// Reads a sam config.json; errors name the file and key.
Expected<SamConfig> sam_config_from_hf(const std::string& config_json_path);
/// The weights of a Hugging Face folder under their own names.
Expected<std::unique_ptr<WeightSource>> open_hf_sam_weights(const std::string& folder);

/// The image encoder's HIR for `batch` images of image_size x image_size: input
/// pixel_values f32[B, C, S, S], output image_embeddings f32[B, out_channels, g, g].
Expected<BuiltModel> build_sam_image_encoder(const SamConfig& c, const WeightSource& weights, int64_t batch,
                                             ir::FusionPolicy policy = ir::FusionPolicy::Direct);

/// Shapes of one mask-decoder build: `images` image embeddings, `prompts` prompts per
/// image (HF's point_batch), `tokens` sparse prompt tokens per prompt (points, the padding
/// point, box corners).
struct SamDecoderShape {
  int64_t images = 1, prompts = 1, tokens = 1;
  bool multimask = true;  ///< the three multimask outputs, else the single-mask one
};

/// The prompt encoder and mask decoder's HIR. Inputs: image_embeddings f32[B, C, g, g];
/// point_coords f32[B*P*N, 2] (x, y in the image_size frame); point_kinds f32[B*P*N, 1 +
/// point_kinds + 1]: column 0 is 1 where the token's position embedding counts, column 1
/// selects not_a_point_embed, columns 2.. point_embed[k] (see SamModel::decode). Outputs:
/// pred_masks f32[B, P, M, 4g, 4g], iou_scores f32[B, P, M] (M = 3 or 1).
Expected<BuiltModel> build_sam_mask_decoder(const SamConfig& c, const WeightSource& weights, const SamDecoderShape& s,
                                            ir::FusionPolicy policy = ir::FusionPolicy::Direct);

/// One image batch's embeddings [batch, channels, side, side].
struct SamImageEmbeddings {
  int64_t batch = 0, channels = 0, side = 0;
  std::vector<float> values;
};

/// Prompts for decode(), per image and prompt as in transformers' SamModel: points
/// [B, P, N, 2] (x, y in the resized-image frame) with labels [B, P, N] (1 positive, 0
/// negative, -1 not a point, -10 padding; empty: all 1), and/or boxes [B, P, 4]
/// (x0, y0, x1, y1).
struct SamPrompts {
  int64_t prompts = 1;  ///< P
  int64_t points = 0;   ///< N per prompt (0: no points)
  std::vector<float> coords;
  std::vector<int32_t> labels;
  std::vector<float> boxes;  ///< empty: no boxes
};

/// pred_masks [B, P, M, side, side] (low-resolution logits) and iou_scores [B, P, M].
struct SamMasks {
  int64_t batch = 0, prompts = 0, masks = 0, side = 0;
  std::vector<float> pred_masks;
  std::vector<float> iou_scores;
};

/// An RGB image prepared as SamProcessor prepares it: resized so that its longer side is
/// image_size (PIL's bilinear filter, widened when shrinking), scaled to [0, 1],
/// normalized with the ImageNet mean and std, zero padded at the bottom and right.
struct SamPreprocessed {
  std::vector<float> pixels;                      ///< [1, 3, image_size, image_size]
  int64_t height = 0, width = 0;                  ///< the original image
  int64_t resized_height = 0, resized_width = 0;  ///< inside the padded square
  /// A point of the original image in the resized frame the prompts use.
  std::pair<float, float> to_resized(float x, float y) const;
};

/// Prepares `rgb` (height x width pixels, 3 bytes each, row-major). Errors for an empty
/// or oversized image.
Expected<SamPreprocessed> sam_preprocess(const SamConfig& c, std::span<const uint8_t> rgb, int64_t height,
                                         int64_t width);

/// One low-resolution mask (side x side logits) back at the original image's size as
/// SamProcessor.post_process_masks does (bilinear to image_size, the padding cropped,
/// bilinear to the original size), thresholded at 0: 255 inside, 0 outside.
std::vector<uint8_t> sam_mask_image(const SamConfig& c, std::span<const float> low_res, const SamPreprocessed& image);

class SamModel {
 public:
  /// Opens a Hugging Face folder (config.json + safetensors) of a sam model. Executables
  /// compile on first use. Errors name the file.
  static Expected<std::unique_ptr<SamModel>> load(const std::string& path, const MediaLoadOptions& options);
  ~SamModel();

  const SamConfig& config() const { return config_; }
  /// Runs the image encoder on pixel_values [B, C, S, S] (already resized, normalized and
  /// padded as SamProcessor does).
  Expected<SamImageEmbeddings> encode(std::span<const int64_t> shape, std::span<const float> pixels);
  /// Runs the prompt encoder and mask decoder on embeddings from encode().
  Expected<SamMasks> decode(const SamImageEmbeddings& image, const SamPrompts& prompts, bool multimask = true);

  const ModelCompilePipeline& pipeline() const { return *pipeline_; }

 private:
  SamModel() = default;
  Expected<std::shared_ptr<const CompiledVariant>> variant(
      uint64_t key, const std::function<Expected<BuiltModel>(ir::FusionPolicy)>& build);

  MediaLoadOptions options_;
  SamConfig config_;
  std::string source_;
  std::string cache_dir_;  ///< disk caches (empty: none)
  uint64_t model_id_ = 0;
  std::unique_ptr<WeightSource> weights_;
  std::unique_ptr<ModelCompilePipeline> pipeline_;
  std::unique_ptr<ParamStore> params_;
};

}  // namespace rlx::models
