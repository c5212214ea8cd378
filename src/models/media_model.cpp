// MediaEncoderModel: loads a dinov2 / wav2vec2 folder and drives build_media_encoder
// through ModelCompilePipeline, one executable per input shape (memory and AOT disk
// cache), the weights bound once into every executable.
#include <algorithm>
#include <filesystem>

#include <fmt/ranges.h>

#include "models/model_support.h"
#include "rlx/base/hash.h"
#include "rlx/base/log.h"
#include "rlx/base/memory_budget.h"
#include "rlx/models/media_encoder.h"

namespace rlx::models {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kMaxImageSide = 8192;
constexpr int64_t kMaxSamples = int64_t{1} << 26;

}  // namespace

MediaEncoderModel::~MediaEncoderModel() = default;

Expected<std::unique_ptr<MediaEncoderModel>> MediaEncoderModel::load(const std::string& path,
                                                                     const MediaLoadOptions& options) {
  TRY(check_thread_count(options.threads, "threads"));
  std::error_code ec;
  if (!fs::is_directory(path, ec))
    return Error::invalid_argument("{}: a vision / audio encoder is a Hugging Face folder (config.json + safetensors)", path);
  std::unique_ptr<MediaEncoderModel> m(new MediaEncoderModel());
  m->options_ = options;
  m->source_ = path;
  ASSIGN_OR_RETURN(m->config_, media_config_from_hf((fs::path(path) / "config.json").string()));
  ASSIGN_OR_RETURN(m->weights_, open_hf_media_weights(path, m->config_));
  // Every stored tensor must be read, except the ones eval never uses (DINOv2's mask
  // token, Wav2Vec2's SpecAugment embedding).
  MediaBuildOptions probe;
  probe.height = probe.width = m->config_.image_size;
  probe.samples = 16000;
  ASSIGN_OR_RETURN(BuiltModel probe_model, build_media_encoder(m->config_, *m->weights_, probe));
  for (const std::string& name :
       unused_tensors(*m->weights_, probe_model.param_names, {"embeddings.mask_token", "masked_spec_embed"}))
    RLX_LOG_WARN("{}: tensor '{}' is not used by the {} encoder (ignored)", path, name, media_arch_name(m->config_.arch));
  m->model_id_ = model_file_identity(path);
  m->cache_dir_ = disk_cache_dir(options.compile_cache, options.cache_dir);
  ASSIGN_OR_RETURN(m->pipeline_, make_model_pipeline(options.device, options.threads, m->cache_dir_));
  return m;
}

std::string_view MediaEncoderModel::input_name() const {
  return config_.arch == MediaArch::Dinov2 ? "pixel_values" : "input_values";
}

std::vector<std::string> MediaEncoderModel::output_names() const {
  if (config_.arch == MediaArch::Dinov2) return {"last_hidden_state", "pooler_output"};
  return {"last_hidden_state"};
}

Expected<std::shared_ptr<const CompiledVariant>> MediaEncoderModel::variant(const MediaBuildOptions& shape) {
  StableHasher h;
  h.str("rlx.media.variant.v2");
  h.u64(model_id_);
  h.i64(shape.batch);
  h.i64(shape.height);
  h.i64(shape.width);
  h.i64(shape.samples);
  const auto build = [&](ir::FusionPolicy policy) -> Expected<ir::HirModule> {
    MediaBuildOptions mo = shape;
    mo.policy = policy;
    ASSIGN_OR_RETURN(BuiltModel built, build_media_encoder(config_, *weights_, mo));
    return std::move(built.hir);
  };
  return compile_family_variant(*pipeline_, options_.profile, cache_dir_, fmt::format("media-{:016x}", model_id_),
                                h.digest(), build, *weights_, params_, source_);
}

Expected<MediaOutput> MediaEncoderModel::forward(std::span<const int64_t> shape, std::span<const float> values) {
  const MediaConfig& c = config_;
  const char* arch = media_arch_name(c.arch);
  MediaBuildOptions mo;
  int64_t tokens = 0;
  if (c.arch == MediaArch::Dinov2) {
    if (shape.size() != 4 || shape[1] != c.n_channels)
      return Error::invalid_argument("{}: pixel_values must be [batch, {}, height, width], got [{}]", arch, c.n_channels,
                                     fmt::join(shape, ", "));
    mo.height = shape[2];
    mo.width = shape[3];
    if (mo.height < c.patch_size || mo.width < c.patch_size || mo.height > kMaxImageSide || mo.width > kMaxImageSide)
      return Error::invalid_argument("{}: a {}x{} image does not fit: height and width must be in [{}, {}] (patch {})",
                                     arch, mo.height, mo.width, c.patch_size, kMaxImageSide, c.patch_size);
    tokens = 1 + (mo.height / c.patch_size) * (mo.width / c.patch_size);
  } else {
    if (shape.size() != 1 && shape.size() != 2)
      return Error::invalid_argument("{}: input_values must be [batch, samples] (or [samples]), got rank {}", arch,
                                     shape.size());
    mo.samples = shape.back();
    if (mo.samples > kMaxSamples) return Error::invalid_argument("{}: {} samples exceed the limit {}", arch, mo.samples, kMaxSamples);
    tokens = c.frames(mo.samples);
    if (tokens < 1)
      return Error::invalid_argument("{}: {} samples are too few: the feature extractor needs at least {}", arch,
                                     mo.samples, c.conv_kernel[0]);
  }
  mo.batch = shape.size() == 1 ? 1 : shape[0];
  if (mo.batch < 1 || mo.batch > 4096) return Error::invalid_argument("{}: a batch has 1..4096 items, got {}", arch, mo.batch);
  int64_t count = 1;
  for (int64_t d : shape) count *= d;
  if (static_cast<int64_t>(values.size()) != count)
    return Error::invalid_argument("{}: {} values given for shape [{}] ({} needed)", arch, values.size(),
                                   fmt::join(shape, ", "), count);
  const double widest = static_cast<double>(std::max({c.n_ff, c.n_embd, c.conv_dim.empty() ? 0 : c.conv_dim[0]}));
  TRY(check_memory_request(8.0 * static_cast<double>(mo.batch) *
                               std::max(static_cast<double>(tokens), static_cast<double>(mo.samples)) * widest * 4,
                           fmt::format("{} activations for {} items of {} tokens", arch, mo.batch, tokens)));
  ASSIGN_OR_RETURN(auto v, variant(mo));
  std::vector<int32_t> pos(static_cast<size_t>(tokens)), kv_len(static_cast<size_t>(mo.batch), static_cast<int32_t>(tokens));
  for (int64_t i = 0; i < tokens; ++i) pos[static_cast<size_t>(i)] = static_cast<int32_t>(i);
  std::vector<int64_t> in_shape(shape.begin(), shape.end());
  if (in_shape.size() == 1) in_shape.insert(in_shape.begin(), 1);
  const std::vector<int64_t> pos_shape{tokens}, len_shape{mo.batch};
  std::vector<NamedTensorView> inputs{{input_name(), TensorView{ir::DType::F32, in_shape, values.data()}},
                                      {"pos", TensorView{ir::DType::I32, pos_shape, pos.data()}},
                                      {"kv_len", TensorView{ir::DType::I32, len_shape, kv_len.data()}}};
  ASSIGN_OR_RETURN(std::vector<Tensor> res, v->graph->run(inputs));
  MediaOutput out;
  out.batch = mo.batch;
  out.tokens = tokens;
  out.dim = c.n_embd;
  const std::span<const float> hidden = res[0].as<float>();
  out.hidden.assign(hidden.begin(), hidden.end());
  if (res.size() > 1) {
    const std::span<const float> pooled = res[1].as<float>();
    out.pooler.assign(pooled.begin(), pooled.end());
  }
  return out;
}

}  // namespace rlx::models
