// SamModel: loads a sam folder and drives its two templates (image encoder, prompt
// encoder + mask decoder) through ModelCompilePipeline, one executable per shape, the
// weights bound once into every executable. decode() turns points, labels and boxes
// into the decoder's token rows the way SamPromptEncoder orders and embeds them.
#include <fmt/ranges.h>

#include <filesystem>

#include "models/model_support.h"
#include "rlx/base/hash.h"
#include "rlx/base/log.h"
#include "rlx/base/memory_budget.h"
#include "rlx/models/sam.h"

namespace rlx::models {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kMaxPrompts = 4096;  // prompts per image in one decode
constexpr int64_t kMaxPoints = 1024;   // points per prompt
constexpr int64_t kMaxItems = 65536;   // images x prompts in one decode (the template's bound)

}  // namespace

SamModel::~SamModel() = default;

Expected<std::unique_ptr<SamModel>> SamModel::load(const std::string& path, const MediaLoadOptions& options) {
  TRY(check_thread_count(options.threads, "threads"));
  std::error_code ec;
  if (!fs::is_directory(path, ec))
    return Error::invalid_argument("{}: a sam model is a Hugging Face folder (config.json + safetensors)", path);
  std::unique_ptr<SamModel> m(new SamModel());
  m->options_ = options;
  m->source_ = path;
  ASSIGN_OR_RETURN(m->config_, sam_config_from_hf((fs::path(path) / "config.json").string()));
  ASSIGN_OR_RETURN(m->weights_, open_hf_sam_weights(path));
  // Every stored tensor must be read, except the mask-prompt encoder (mask inputs are
  // not supported): it is named in the warning list below.
  ASSIGN_OR_RETURN(BuiltModel enc, build_sam_image_encoder(m->config_, *m->weights_, 1));
  ASSIGN_OR_RETURN(BuiltModel dec, build_sam_mask_decoder(m->config_, *m->weights_, SamDecoderShape{}));
  std::vector<std::string> used = enc.param_names;
  used.insert(used.end(), dec.param_names.begin(), dec.param_names.end());
  for (const std::string& name : unused_tensors(*m->weights_, used, {}))
    if (name.rfind("prompt_encoder.mask_embed.", 0) != 0)
      RLX_LOG_WARN("{}: tensor '{}' is not used by the sam model (ignored)", path, name);
  m->model_id_ = model_file_identity(path);
  m->cache_dir_ = disk_cache_dir(options.compile_cache, options.cache_dir);
  ASSIGN_OR_RETURN(m->pipeline_, make_model_pipeline(options.device, options.threads, m->cache_dir_));
  return m;
}

Expected<std::shared_ptr<const CompiledVariant>> SamModel::variant(
    uint64_t key, const std::function<Expected<BuiltModel>(ir::FusionPolicy)>& build) {
  StableHasher h;
  h.str("rlx.sam.variant.v1");
  h.u64(model_id_);
  h.u64(key);
  const auto hir = [&](ir::FusionPolicy policy) -> Expected<ir::HirModule> {
    ASSIGN_OR_RETURN(BuiltModel built, build(policy));
    return std::move(built.hir);
  };
  return compile_family_variant(*pipeline_, options_.profile, cache_dir_, fmt::format("sam-{:016x}", model_id_),
                                h.digest(), hir, *weights_, params_, source_);
}

Expected<SamImageEmbeddings> SamModel::encode(std::span<const int64_t> shape, std::span<const float> pixels) {
  const SamConfig& c = config_;
  if (shape.size() != 4 || shape[1] != c.n_channels || shape[2] != c.image_size || shape[3] != c.image_size)
    return Error::invalid_argument(
        "sam: pixel_values must be [batch, {}, {}, {}] (resized and padded as SamProcessor "
        "does), got [{}]",
        c.n_channels, c.image_size, c.image_size, fmt::join(shape, ", "));
  const int64_t batch = shape[0];
  if (batch < 1 || batch > 4096) return Error::invalid_argument("sam: a batch has 1..4096 images, got {}", batch);
  if (static_cast<int64_t>(pixels.size()) != batch * c.n_channels * c.image_size * c.image_size)
    return Error::invalid_argument("sam: {} values given for pixel_values [{}]", pixels.size(), fmt::join(shape, ", "));
  const double tokens = static_cast<double>(c.grid() * c.grid());
  TRY(check_memory_request(4.0 * static_cast<double>(batch) *
                               (8.0 * tokens * static_cast<double>(std::max(c.n_ff, 3 * c.n_embd)) +
                                static_cast<double>(c.n_head) * tokens * 64.0),
                           fmt::format("sam activations for {} images", batch)));
  ASSIGN_OR_RETURN(auto v, variant(static_cast<uint64_t>(batch), [&](ir::FusionPolicy policy) {
                     return build_sam_image_encoder(config_, *weights_, batch, policy);
                   }));
  const std::vector<int64_t> dims(shape.begin(), shape.end());
  ASSIGN_OR_RETURN(std::vector<Tensor> res,
                   v->graph->run({{"pixel_values", TensorView{ir::DType::F32, dims, pixels.data()}}}));
  SamImageEmbeddings out;
  out.batch = batch;
  out.channels = c.out_channels;
  out.side = c.grid();
  const std::span<const float> e = res[0].as<float>();
  out.values.assign(e.begin(), e.end());
  return out;
}

Expected<SamMasks> SamModel::decode(const SamImageEmbeddings& image, const SamPrompts& pr, bool multimask) {
  const SamConfig& c = config_;
  const int64_t B = image.batch, P = pr.prompts, N = pr.points, side = c.embed_side;
  if (image.channels != c.prompt_dim || image.side != side ||
      static_cast<int64_t>(image.values.size()) != B * c.prompt_dim * side * side || B < 1)
    return Error::invalid_argument(
        "sam: image embeddings must be [batch, {}, {}, {}], got [{}, {}, {}, {}] ({} values)", c.prompt_dim, side, side,
        B, image.channels, image.side, image.side, image.values.size());
  if (P < 1 || P > kMaxPrompts || N < 0 || N > kMaxPoints)
    return Error::invalid_argument("sam: {} prompts of {} points are out of range (1..{} prompts, 0..{} points)", P, N,
                                   kMaxPrompts, kMaxPoints);
  if (B * P > kMaxItems)
    return Error::invalid_argument("sam: {} images x {} prompts are over the {} a decode takes", B, P, kMaxItems);
  // The decoder holds a few [items, g*g, dim] tensors and the upscaled [items, dim/4, 4g, 4g].
  TRY(check_memory_request(4.0 * static_cast<double>(B * P) * static_cast<double>(side * side) *
                               static_cast<double>(c.prompt_dim) * 16.0,
                           fmt::format("sam decoder activations for {} prompts", B * P)));
  const bool boxes = !pr.boxes.empty();
  if (N == 0 && !boxes) return Error::invalid_argument("sam: a prompt needs points or a box");
  if (static_cast<int64_t>(pr.coords.size()) != B * P * N * 2)
    return Error::invalid_argument("sam: input_points must be [{}, {}, {}, 2], got {} values", B, P, N,
                                   pr.coords.size());
  if (!pr.labels.empty() && static_cast<int64_t>(pr.labels.size()) != B * P * N)
    return Error::invalid_argument("sam: input_labels must be [{}, {}, {}], got {} values", B, P, N, pr.labels.size());
  if (boxes && static_cast<int64_t>(pr.boxes.size()) != B * P * 4)
    return Error::invalid_argument("sam: input_boxes must be [{}, {}, 4], got {} values", B, P, pr.boxes.size());
  for (float v : pr.coords)
    if (!std::isfinite(v)) return Error::invalid_argument("sam: input_points holds a value that is not finite");
  for (float v : pr.boxes)
    if (!std::isfinite(v)) return Error::invalid_argument("sam: input_boxes holds a value that is not finite");
  // Token rows per prompt: the points, then the padding point (no box) or the two box
  // corners. Kinds: column 0 keeps the position embedding, 1 selects not_a_point_embed,
  // 2 + k point_embed[k] (0 negative, 1 positive, 2 and 3 the box corners).
  const int64_t n = N + (boxes ? 2 : 1), items = B * P, width = 2 + c.point_kinds;
  std::vector<float> coords(static_cast<size_t>(items * n * 2), 0.0f),
      kinds(static_cast<size_t>(items * n * width), 0.0f);
  for (int64_t it = 0; it < items; ++it) {
    auto row = [&](int64_t t) { return static_cast<size_t>(it * n + t); };
    for (int64_t t = 0; t < N; ++t) {
      const size_t src = static_cast<size_t>(it * N + t), r = row(t);
      coords[2 * r] = pr.coords[2 * src];
      coords[2 * r + 1] = pr.coords[2 * src + 1];
      const int32_t label = pr.labels.empty() ? 1 : pr.labels[src];
      float* k = kinds.data() + r * static_cast<size_t>(width);
      if (label == -1) {
        k[1] = 1.0f;
      } else if (label == 0 || label == 1) {
        k[0] = 1.0f;
        k[2 + label] = 1.0f;
      } else if (label != -10) {
        return Error::invalid_argument("sam: input_labels value {} (prompt {}, point {}) is none of 1, 0, -1, -10",
                                       label, it, t);
      }
    }
    if (!boxes) {
      kinds[row(N) * static_cast<size_t>(width) + 1] = 1.0f;
      continue;
    }
    for (int64_t corner = 0; corner < 2; ++corner) {
      const size_t r = row(N + corner);
      coords[2 * r] = pr.boxes[static_cast<size_t>(it * 4 + 2 * corner)];
      coords[2 * r + 1] = pr.boxes[static_cast<size_t>(it * 4 + 2 * corner + 1)];
      kinds[r * static_cast<size_t>(width)] = 1.0f;
      kinds[r * static_cast<size_t>(width) + 4 + static_cast<size_t>(corner)] = 1.0f;
    }
  }
  const SamDecoderShape shape{B, P, n, multimask};
  StableHasher key;
  key.str("decoder");
  key.i64(B);
  key.i64(P);
  key.i64(n);
  key.i64(multimask ? 1 : 0);
  ASSIGN_OR_RETURN(auto v, variant(key.digest(), [&](ir::FusionPolicy policy) {
                     return build_sam_mask_decoder(config_, *weights_, shape, policy);
                   }));
  const std::vector<int64_t> img_dims{B, c.prompt_dim, side, side}, coord_dims{items * n, 2},
      kind_dims{items * n, width};
  ASSIGN_OR_RETURN(std::vector<Tensor> res,
                   v->graph->run({{"image_embeddings", TensorView{ir::DType::F32, img_dims, image.values.data()}},
                                  {"point_coords", TensorView{ir::DType::F32, coord_dims, coords.data()}},
                                  {"point_kinds", TensorView{ir::DType::F32, kind_dims, kinds.data()}}}));
  SamMasks out;
  out.batch = B;
  out.prompts = P;
  out.masks = multimask ? c.multimask : 1;
  out.side = c.mask_side();
  const std::span<const float> m = res[0].as<float>(), s = res[1].as<float>();
  out.pred_masks.assign(m.begin(), m.end());
  out.iou_scores.assign(s.begin(), s.end());
  return out;
}

}  // namespace rlx::models
