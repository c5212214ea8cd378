// Vision and audio encoders from Hugging Face folders: DINOv2 (Dinov2Model: a ViT with a
// conv patch embedding, a CLS token, learned positions resampled bicubically to the
// image's patch grid, layer scale; outputs last_hidden_state and pooler_output, the
// final-normed CLS state) and Wav2Vec2 (Wav2Vec2Model: a conv feature extractor with
// group or layer norm, a feature projection, a grouped convolutional position embedding
// and a post- or pre-LN transformer; output last_hidden_state).
//
// They are family templates of the one model pipeline: build_media_encoder composes Flow
// blocks and the spatial ops (conv, group_norm, interpolate) into HIR with static shapes
// (a batch and an image or clip size); MediaEncoderModel compiles one executable per
// input shape through ModelCompilePipeline (memory and AOT disk cache) and binds one copy
// of the weights into all of them. Tensors keep their Hugging Face names.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "rlx/ir/op.h"
#include "rlx/models/flow.h"
#include "rlx/models/weight_source.h"
#include "rlx/runtime/model_pipeline.h"
#include "rlx/runtime/session.h"

namespace rlx::models {

enum class MediaArch : uint8_t { Dinov2, Wav2Vec2 };
const char* media_arch_name(MediaArch a);

/// What a vision / audio encoder is made of, read from config.json.
struct MediaConfig {
  MediaArch arch = MediaArch::Dinov2;
  // The transformer.
  int64_t n_embd = 0, n_layer = 0, n_head = 0, head_dim = 0, n_ff = 0;
  double norm_eps = 1e-5;
  ir::ActKind act = ir::ActKind::Gelu;  ///< hidden_act of the FFN
  // DINOv2.
  int64_t image_size = 0, patch_size = 0, n_channels = 3;
  bool qkv_bias = true;
  bool swiglu_ffn = false;  ///< use_swiglu_ffn: weights_in [2F, D] (gate | up), weights_out
  // Wav2Vec2.
  std::vector<int64_t> conv_dim, conv_kernel, conv_stride;
  bool conv_bias = false;
  bool feat_group_norm = true;  ///< feat_extract_norm "group" (first layer only), else "layer" (every layer)
  ir::ActKind feat_act = ir::ActKind::Gelu;
  int64_t pos_conv_kernel = 0, pos_conv_groups = 1;
  bool stable_layer_norm = false;  ///< do_stable_layer_norm: pre-LN layers, the encoder norm last

  /// Frames the feature extractor makes of `samples` audio samples (0: too short).
  int64_t frames(int64_t samples) const;
  /// Checks sizes (positive, heads divide, conv lists of one length); errors name the key.
  Status validate() const;
};

/// True when `model_type` (config.json) is a family MediaEncoderModel runs.
bool is_media_model_type(std::string_view model_type);
/// The model_type of a Hugging Face folder's config.json ("" when it has none); errors
/// for an unreadable or malformed file name it.
Expected<std::string> hf_model_type(const std::string& folder);
/// Reads a dinov2 / wav2vec2 config.json; errors name the file and key.
Expected<MediaConfig> media_config_from_hf(const std::string& config_json_path);

/// The weights of a Hugging Face folder under their own names. Wav2Vec2's weight-normed
/// position convolution (parametrizations.weight.original0/1, or weight_g / weight_v) is
/// served as its effective weight encoder.pos_conv_embed.conv.weight = g * v / |v|, the
/// norm over all dims but the kernel's (weight_norm dim=2), computed once in double.
Expected<std::unique_ptr<WeightSource>> open_hf_media_weights(const std::string& folder, const MediaConfig& config);

/// Shapes of one build: `batch` images of height x width pixels (DINOv2), or `batch`
/// clips of `samples` samples (Wav2Vec2; height and width unused).
struct MediaBuildOptions {
  int64_t batch = 1;
  int64_t height = 0, width = 0;
  int64_t samples = 0;
  /// DINOv2: resample the learned positions even when the patch grid is the trained one
  /// (transformers does so when tracing); the result then equals the stored positions.
  bool interpolate_positions = false;
  ir::FusionPolicy policy = ir::FusionPolicy::Direct;
};

/// The encoder's HIR. Inputs: pixel_values f32[B, C, H, W] (DINOv2) or input_values
/// f32[B, samples] (Wav2Vec2), pos i32[S] (0 .. S-1) and kv_len i32[B] (S each), S the
/// tokens (1 + patches) or frames per item. Outputs: last_hidden_state f32[B*S, D];
/// DINOv2 also pooler_output f32[B, D].
Expected<BuiltModel> build_media_encoder(const MediaConfig& config, const WeightSource& weights,
                                         const MediaBuildOptions& options);

struct MediaLoadOptions {
  Device device = Device::cpu();
  int threads = 0;            ///< CPU threads (0 = RLX_THREADS or all cores)
  std::string profile;        ///< compile profile (preset or *.rlx.toml); empty = "encoder"
  bool compile_cache = true;  ///< keep specialized modules in the AOT disk cache
  std::string cache_dir;      ///< empty: RLX_CACHE_DIR / the user cache folder
};

/// One forward pass: hidden [batch, tokens, dim] and, for DINOv2, pooler [batch, dim].
struct MediaOutput {
  int64_t batch = 0, tokens = 0, dim = 0;
  std::vector<float> hidden;
  std::vector<float> pooler;
};

class MediaEncoderModel {
 public:
  /// Opens a Hugging Face folder (config.json + safetensors) of a dinov2 or wav2vec2
  /// model. Executables compile on first use. Errors name the file.
  static Expected<std::unique_ptr<MediaEncoderModel>> load(const std::string& path, const MediaLoadOptions& options);
  ~MediaEncoderModel();

  const MediaConfig& config() const { return config_; }
  /// The input's Hugging Face name: pixel_values (DINOv2) or input_values (Wav2Vec2).
  std::string_view input_name() const;
  /// The outputs forward() fills: last_hidden_state, and pooler_output for DINOv2.
  std::vector<std::string> output_names() const;

  /// Runs `values` of shape `shape`: [B, C, H, W] pixels (H, W at least one patch) or
  /// [B, samples] audio ([samples] means one clip). Errors name what does not fit.
  Expected<MediaOutput> forward(std::span<const int64_t> shape, std::span<const float> values);

  /// Executables compiled so far, and the pipeline behind them.
  const ModelCompilePipeline& pipeline() const { return *pipeline_; }

 private:
  MediaEncoderModel() = default;
  Expected<std::shared_ptr<const CompiledVariant>> variant(const MediaBuildOptions& shape);

  MediaLoadOptions options_;
  MediaConfig config_;
  std::string source_;
  std::string cache_dir_;  ///< disk caches (empty: none)
  uint64_t model_id_ = 0;
  std::unique_ptr<WeightSource> weights_;
  std::unique_ptr<ModelCompilePipeline> pipeline_;
  std::unique_ptr<ParamStore> params_;
};

}  // namespace rlx::models
