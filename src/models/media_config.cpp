// MediaConfig from a dinov2 / wav2vec2 config.json and SamConfig from a sam one, and the
// weights of such a folder under their Hugging Face names (with Wav2Vec2's weight-normed position convolution
// resolved into its effective weight once, at load).
#include <cmath>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "rlx/base/half.h"
#include "rlx/base/json_limits.h"
#include "rlx/formats/mapped_file.h"
#include "rlx/formats/safetensors.h"
#include "rlx/models/media_encoder.h"
#include "rlx/models/sam.h"

namespace rlx::models {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

constexpr int64_t kMaxSize = int64_t{1} << 24;  // any one size or length in a config

Expected<json> read_json_object(const std::string& path) {
  ASSIGN_OR_RETURN(formats::MappedFile file, formats::MappedFile::open(path));
  const std::string_view text(reinterpret_cast<const char*>(file.bytes().data()), file.size());
  TRY(check_json_depth(text, path));
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Error::parse("{}: not a JSON object", path);
  return j;
}

// Typed reads of config.json members; a member of the wrong type is an error naming it.
struct Keys {
  const json& j;
  const std::string& path;
  const json* find(const char* key) const {
    auto it = j.find(key);
    return it == j.end() || it->is_null() ? nullptr : &*it;
  }
  Expected<int64_t> as_int(const char* key, const json& v) const {
    if (v.is_number_integer()) {
      if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(kMaxSize))
        return Error::invalid_file("{}: '{}' is out of range", path, key);
      const int64_t i = v.get<int64_t>();
      if (i < 0 || i > kMaxSize) return Error::invalid_file("{}: '{}' = {} is out of range [0, {}]", path, key, i, kMaxSize);
      return i;
    }
    if (v.is_number_float()) {
      const double d = v.get<double>();
      if (std::isfinite(d) && d == std::floor(d) && d >= 0 && d <= static_cast<double>(kMaxSize))
        return static_cast<int64_t>(d);
    }
    return Error::invalid_file("{}: '{}' must be an integer in [0, {}]", path, key, kMaxSize);
  }
  Expected<int64_t> req_int(const char* key) const {
    const json* v = find(key);
    if (!v) return Error::invalid_file("{}: '{}' is missing", path, key);
    return as_int(key, *v);
  }
  Expected<int64_t> opt_int(const char* key, int64_t fallback) const {
    const json* v = find(key);
    return v ? as_int(key, *v) : Expected<int64_t>(fallback);
  }
  Expected<double> opt_float(const char* key, double fallback) const {
    const json* v = find(key);
    if (!v) return fallback;
    if (!v->is_number() || !std::isfinite(v->get<double>()))
      return Error::invalid_file("{}: '{}' must be a finite number", path, key);
    return v->get<double>();
  }
  Expected<bool> opt_bool(const char* key, bool fallback) const {
    const json* v = find(key);
    if (!v) return fallback;
    if (!v->is_boolean()) return Error::invalid_file("{}: '{}' must be true or false", path, key);
    return v->get<bool>();
  }
  Expected<std::string> opt_string(const char* key, const char* fallback) const {
    const json* v = find(key);
    if (!v) return std::string(fallback);
    if (!v->is_string()) return Error::invalid_file("{}: '{}' must be a string", path, key);
    return v->get<std::string>();
  }
  Expected<std::vector<int64_t>> int_list(const char* key) const {
    const json* v = find(key);
    if (!v) return Error::invalid_file("{}: '{}' is missing", path, key);
    if (!v->is_array() || v->empty() || v->size() > 64)
      return Error::invalid_file("{}: '{}' must be a list of 1..64 integers", path, key);
    std::vector<int64_t> out;
    for (const json& e : *v) {
      ASSIGN_OR_RETURN(const int64_t i, as_int(key, e));
      out.push_back(i);
    }
    return out;
  }
  Expected<ir::ActKind> activation(const char* key, const char* fallback) const {
    ASSIGN_OR_RETURN(const std::string a, opt_string(key, fallback));
    if (a == "gelu") return ir::ActKind::Gelu;
    if (a == "gelu_new" || a == "gelu_pytorch_tanh" || a == "gelu_fast") return ir::ActKind::GeluTanh;
    if (a == "relu") return ir::ActKind::Relu;
    if (a == "silu" || a == "swish") return ir::ActKind::Silu;
    return Error::unsupported("{}: {} '{}' is not supported (gelu, gelu_new, gelu_pytorch_tanh, relu, silu)", path, key, a);
  }
};

Expected<ir::DType> dtype_of(const formats::SafetensorsTensor& t, const std::string& where) {
  switch (t.dtype) {
    case formats::SafetensorsDType::kF32: return ir::DType::F32;
    case formats::SafetensorsDType::kF16: return ir::DType::F16;
    case formats::SafetensorsDType::kBF16: return ir::DType::BF16;
    default:
      return Error::unsupported("{}: tensor '{}' has dtype {} (F32, F16, BF16 supported)", where, t.name,
                                formats::safetensors_dtype_name(t.dtype));
  }
}

// Element i of a float tensor as a double.
double element(ir::DType dt, const uint8_t* p, int64_t i) {
  if (dt == ir::DType::F32) {
    float v;
    std::memcpy(&v, p + 4 * i, 4);
    return v;
  }
  uint16_t h;
  std::memcpy(&h, p + 2 * i, 2);
  return dt == ir::DType::F16 ? f16_bits_to_f32(h) : bf16_bits_to_f32(h);
}

constexpr std::string_view kPosConv = "encoder.pos_conv_embed.conv.weight";

// Tensors under their stored names; f16 / bf16 tensors are served as f32 copies (the
// spatial kernels compute in f32); a few derived tensors are computed at open.
class HfMediaWeights : public WeightSource {
 public:
  HfMediaWeights(std::string path, std::shared_ptr<const formats::SafetensorsModel> model)
      : path_(std::move(path)), model_(std::move(model)) {}

  bool has(std::string_view name) const override { return derived_.count(std::string(name)) || model_->find(name); }
  std::string describe() const override { return path_; }

  Expected<WeightView> take(std::string_view name) const override {
    if (auto it = derived_.find(std::string(name)); it != derived_.end()) return it->second;
    ASSIGN_OR_RETURN(const formats::SafetensorsTensor* t, model_->tensor(name));
    ASSIGN_OR_RETURN(const ir::DType dt, dtype_of(*t, path_));
    WeightView w;
    w.name = std::string(name);
    w.shape = t->shape;
    w.dtype = ir::DType::F32;
    if (dt == ir::DType::F32) {
      w.bytes = t->bytes();
      w.owner = model_;
      w.file_mapped = true;
      return aligned_view(std::move(w));
    }
    auto copy = std::make_shared<std::vector<float>>(static_cast<size_t>(t->n_elements()));
    for (int64_t i = 0; i < t->n_elements(); ++i) (*copy)[static_cast<size_t>(i)] = static_cast<float>(element(dt, t->data, i));
    w.bytes = std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(copy->data()), copy->size() * sizeof(float));
    w.owner = copy;
    return w;
  }

  std::vector<std::pair<std::string, std::string>> stored_tensors() const override {
    std::vector<std::pair<std::string, std::string>> out;
    for (std::string_view n : model_->tensor_names()) {
      auto it = serves_.find(std::string(n));
      out.emplace_back(std::string(n), it != serves_.end() ? it->second : std::string(n));
    }
    return out;
  }

  /// Wav2Vec2's position convolution: its effective weight from g and v when the file
  /// stores the weight-norm parametrization (either naming), else nothing to do.
  Status resolve_weight_norm() {
    const std::string base = "encoder.pos_conv_embed.conv.";
    for (auto [g_name, v_name] : {std::pair{base + "parametrizations.weight.original0", base + "parametrizations.weight.original1"},
                                  std::pair{base + "weight_g", base + "weight_v"}}) {
      const formats::SafetensorsTensor* g = model_->find(g_name);
      const formats::SafetensorsTensor* v = model_->find(v_name);
      if (!g && !v) continue;
      if (!g || !v) return Error::invalid_file("{}: '{}' needs its partner '{}'", path_, g ? g_name : v_name, g ? v_name : g_name);
      ASSIGN_OR_RETURN(const ir::DType gd, dtype_of(*g, path_));
      ASSIGN_OR_RETURN(const ir::DType vd, dtype_of(*v, path_));
      if (v->shape.size() != 3 || g->shape != std::vector<int64_t>{1, 1, v->shape[2]})
        return Error::invalid_file("{}: weight norm tensors '{}' {} and '{}' {} must be [1, 1, K] and [O, I, K]", path_,
                                   g_name, ir::Shape::of(g->shape).to_string(), v_name, ir::Shape::of(v->shape).to_string());
      const int64_t rows = v->shape[0] * v->shape[1], k = v->shape[2];
      std::vector<double> norm(static_cast<size_t>(k), 0.0);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = 0; j < k; ++j) {
          const double e = element(vd, v->data, r * k + j);
          norm[static_cast<size_t>(j)] += e * e;
        }
      auto w = std::make_shared<std::vector<float>>(static_cast<size_t>(rows * k));
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = 0; j < k; ++j) {
          const double n = std::sqrt(norm[static_cast<size_t>(j)]);
          const double scale = n > 0 ? element(gd, g->data, j) / n : 0.0;
          (*w)[static_cast<size_t>(r * k + j)] = static_cast<float>(element(vd, v->data, r * k + j) * scale);
        }
      WeightView view;
      view.name = std::string(kPosConv);
      view.dtype = ir::DType::F32;
      view.shape = v->shape;
      view.bytes = std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(w->data()), w->size() * sizeof(float));
      view.owner = w;
      derived_[std::string(kPosConv)] = view;
      serves_[g_name] = std::string(kPosConv);
      serves_[v_name] = std::string(kPosConv);
      return {};
    }
    return {};
  }

 private:
  std::string path_;
  std::shared_ptr<const formats::SafetensorsModel> model_;
  std::map<std::string, WeightView> derived_;  // computed tensors by served name
  std::map<std::string, std::string> serves_;  // stored name -> the derived tensor it feeds
};

}  // namespace

const char* media_arch_name(MediaArch a) { return a == MediaArch::Dinov2 ? "dinov2" : "wav2vec2"; }

bool is_media_model_type(std::string_view t) { return t == "dinov2" || t == "wav2vec2"; }

Expected<std::string> hf_model_type(const std::string& folder) {
  const fs::path p = fs::path(folder) / "config.json";
  std::error_code ec;
  if (!fs::is_regular_file(p, ec)) return std::string();
  ASSIGN_OR_RETURN(json j, read_json_object(p.string()));
  auto it = j.find("model_type");
  if (it == j.end() || !it->is_string()) return std::string();
  return it->get<std::string>();
}

int64_t MediaConfig::frames(int64_t samples) const {
  int64_t n = samples;
  for (size_t i = 0; i < conv_kernel.size(); ++i) {
    if (n < conv_kernel[i]) return 0;
    n = (n - conv_kernel[i]) / conv_stride[i] + 1;
  }
  return n;
}

Status MediaConfig::validate() const {
  auto positive = [](const char* what, int64_t v) -> Status {
    if (v < 1) return Error::invalid_argument("{} must be positive, got {}", what, v);
    return {};
  };
  TRY(positive("hidden_size", n_embd));
  TRY(positive("num_hidden_layers", n_layer));
  TRY(positive("num_attention_heads", n_head));
  TRY(positive("intermediate size", n_ff));
  if (n_embd % n_head != 0 || head_dim * n_head != n_embd)
    return Error::invalid_argument("hidden_size {} is not a multiple of num_attention_heads {}", n_embd, n_head);
  if (!(norm_eps > 0)) return Error::invalid_argument("layer_norm_eps must be positive, got {}", norm_eps);
  if (arch == MediaArch::Dinov2) {
    TRY(positive("patch_size", patch_size));
    TRY(positive("image_size", image_size));
    TRY(positive("num_channels", n_channels));
    if (image_size < patch_size)
      return Error::invalid_argument("image_size {} is smaller than patch_size {}", image_size, patch_size);
    return {};
  }
  if (conv_dim.empty() || conv_dim.size() != conv_kernel.size() || conv_dim.size() != conv_stride.size())
    return Error::invalid_argument("conv_dim, conv_kernel and conv_stride must be lists of one length, got {}, {}, {}",
                                   conv_dim.size(), conv_kernel.size(), conv_stride.size());
  for (size_t i = 0; i < conv_dim.size(); ++i) {
    TRY(positive("conv_dim entry", conv_dim[i]));
    TRY(positive("conv_kernel entry", conv_kernel[i]));
    TRY(positive("conv_stride entry", conv_stride[i]));
  }
  TRY(positive("num_conv_pos_embeddings", pos_conv_kernel));
  TRY(positive("num_conv_pos_embedding_groups", pos_conv_groups));
  if (n_embd % pos_conv_groups != 0)
    return Error::invalid_argument("num_conv_pos_embedding_groups {} does not divide hidden_size {}", pos_conv_groups, n_embd);
  return {};
}

Expected<MediaConfig> media_config_from_hf(const std::string& path) {
  ASSIGN_OR_RETURN(json j, read_json_object(path));
  Keys k{j, path};
  ASSIGN_OR_RETURN(const std::string type, k.opt_string("model_type", ""));
  if (!is_media_model_type(type))
    return Error::unsupported("{}: model_type '{}' is not a vision / audio encoder (dinov2, wav2vec2)", path, type);
  MediaConfig c;
  c.arch = type == "dinov2" ? MediaArch::Dinov2 : MediaArch::Wav2Vec2;
  ASSIGN_OR_RETURN(c.n_embd, k.req_int("hidden_size"));
  ASSIGN_OR_RETURN(c.n_layer, k.req_int("num_hidden_layers"));
  ASSIGN_OR_RETURN(c.n_head, k.req_int("num_attention_heads"));
  c.head_dim = c.n_head > 0 ? c.n_embd / c.n_head : 0;
  ASSIGN_OR_RETURN(c.act, k.activation("hidden_act", "gelu"));
  if (c.arch == MediaArch::Dinov2) {
    ASSIGN_OR_RETURN(c.norm_eps, k.opt_float("layer_norm_eps", 1e-6));
    ASSIGN_OR_RETURN(c.image_size, k.req_int("image_size"));
    ASSIGN_OR_RETURN(c.patch_size, k.req_int("patch_size"));
    ASSIGN_OR_RETURN(c.n_channels, k.opt_int("num_channels", 3));
    ASSIGN_OR_RETURN(c.qkv_bias, k.opt_bool("qkv_bias", true));
    ASSIGN_OR_RETURN(c.swiglu_ffn, k.opt_bool("use_swiglu_ffn", false));
    ASSIGN_OR_RETURN(const double ratio, k.opt_float("mlp_ratio", 4.0));
    if (!(ratio > 0 && ratio < 1024)) return Error::invalid_file("{}: 'mlp_ratio' must be in (0, 1024), got {}", path, ratio);
    c.n_ff = static_cast<int64_t>(static_cast<double>(c.n_embd) * ratio);  // int(hidden_size * mlp_ratio)
    if (c.swiglu_ffn) c.n_ff = (c.n_ff * 2 / 3 + 7) / 8 * 8;
  } else {
    ASSIGN_OR_RETURN(c.norm_eps, k.opt_float("layer_norm_eps", 1e-5));
    ASSIGN_OR_RETURN(c.n_ff, k.req_int("intermediate_size"));
    ASSIGN_OR_RETURN(c.conv_dim, k.int_list("conv_dim"));
    ASSIGN_OR_RETURN(c.conv_kernel, k.int_list("conv_kernel"));
    ASSIGN_OR_RETURN(c.conv_stride, k.int_list("conv_stride"));
    ASSIGN_OR_RETURN(c.conv_bias, k.opt_bool("conv_bias", false));
    ASSIGN_OR_RETURN(const std::string norm, k.opt_string("feat_extract_norm", "group"));
    if (norm != "group" && norm != "layer")
      return Error::invalid_file("{}: 'feat_extract_norm' must be \"group\" or \"layer\", got \"{}\"", path, norm);
    c.feat_group_norm = norm == "group";
    ASSIGN_OR_RETURN(c.feat_act, k.activation("feat_extract_activation", "gelu"));
    ASSIGN_OR_RETURN(c.pos_conv_kernel, k.req_int("num_conv_pos_embeddings"));
    ASSIGN_OR_RETURN(c.pos_conv_groups, k.req_int("num_conv_pos_embedding_groups"));
    ASSIGN_OR_RETURN(c.stable_layer_norm, k.opt_bool("do_stable_layer_norm", false));
    ASSIGN_OR_RETURN(const bool adapter, k.opt_bool("add_adapter", false));
    if (adapter) return Error::unsupported("{}: 'add_adapter' (the output adapter) is not supported", path);
    if (const json* n = k.find("num_feat_extract_layers")) {
      ASSIGN_OR_RETURN(const int64_t layers, k.as_int("num_feat_extract_layers", *n));
      if (layers != static_cast<int64_t>(c.conv_dim.size()))
        return Error::invalid_file("{}: 'num_feat_extract_layers' {} differs from conv_dim's {} entries", path, layers,
                                   c.conv_dim.size());
    }
  }
  if (Status s = c.validate(); !s.ok()) return s.error().with_context(path);
  return c;
}

Expected<std::unique_ptr<WeightSource>> open_hf_media_weights(const std::string& folder, const MediaConfig& config) {
  ASSIGN_OR_RETURN(formats::SafetensorsModel model, formats::SafetensorsModel::open(folder));
  auto shared = std::make_shared<const formats::SafetensorsModel>(std::move(model));
  auto w = std::make_unique<HfMediaWeights>(folder, std::move(shared));
  if (config.arch == MediaArch::Wav2Vec2) TRY(w->resolve_weight_norm());
  return std::unique_ptr<WeightSource>(std::move(w));
}

Status SamConfig::validate() const {
  auto positive = [](const char* what, int64_t v) -> Status {
    if (v < 1) return Error::invalid_argument("{} must be positive, got {}", what, v);
    return {};
  };
  TRY(positive("vision_config.image_size", image_size));
  TRY(positive("vision_config.patch_size", patch_size));
  TRY(positive("vision_config.num_channels", n_channels));
  TRY(positive("vision_config.hidden_size", n_embd));
  TRY(positive("vision_config.num_hidden_layers", n_layer));
  TRY(positive("vision_config.num_attention_heads", n_head));
  TRY(positive("vision_config.mlp_dim", n_ff));
  TRY(positive("vision_config.output_channels", out_channels));
  TRY(positive("prompt_encoder_config.hidden_size", prompt_dim));
  TRY(positive("mask_decoder_config.num_hidden_layers", dec_layers));
  TRY(positive("mask_decoder_config.num_attention_heads", dec_heads));
  TRY(positive("mask_decoder_config.mlp_dim", dec_ff));
  TRY(positive("mask_decoder_config.attention_downsample_rate", downsample));
  TRY(positive("mask_decoder_config.iou_head_hidden_dim", iou_hidden));
  TRY(positive("mask_decoder_config.num_multimask_outputs", multimask));
  if (image_size % patch_size != 0)
    return Error::invalid_argument("vision_config.image_size {} is not a multiple of patch_size {}", image_size, patch_size);
  if (n_embd % n_head != 0)
    return Error::invalid_argument("vision_config.hidden_size {} is not a multiple of num_attention_heads {}", n_embd, n_head);
  if (window < 0 || window > grid()) return Error::invalid_argument("vision_config.window_size {} is out of [0, {}]", window, grid());
  for (int64_t l : global_layers)
    if (l < 0 || l >= n_layer) return Error::invalid_argument("vision_config.global_attn_indexes entry {} is no layer", l);
  if (embed_side != grid())
    return Error::invalid_argument("prompt_encoder_config.image_embedding_size {} differs from the encoder's {} x {} patches",
                                   embed_side, grid(), grid());
  if (out_channels != prompt_dim || 2 * pos_feats != prompt_dim)
    return Error::invalid_argument("the neck's output_channels {}, 2 x num_pos_feats {} and the decoder's hidden_size {} "
                                   "must agree", out_channels, 2 * pos_feats, prompt_dim);
  if (point_kinds != 4) return Error::unsupported("prompt_encoder_config.num_point_embeddings must be 4, got {}", point_kinds);
  if (prompt_dim % 8 != 0 || (prompt_dim / downsample) % dec_heads != 0 || prompt_dim % dec_heads != 0)
    return Error::invalid_argument("mask_decoder_config.hidden_size {} must be a multiple of 8 and of num_attention_heads {} "
                                   "(also after attention_downsample_rate {})", prompt_dim, dec_heads, downsample);
  if (iou_depth < 2) return Error::invalid_argument("mask_decoder_config.iou_head_depth must be >= 2, got {}", iou_depth);
  if (!(vision_eps > 0) || !(dec_eps > 0)) return Error::invalid_argument("layer_norm_eps must be positive");
  return {};
}

Expected<SamConfig> sam_config_from_hf(const std::string& path) {
  ASSIGN_OR_RETURN(json j, read_json_object(path));
  Keys top{j, path};
  ASSIGN_OR_RETURN(const std::string type, top.opt_string("model_type", ""));
  if (type != "sam") return Error::unsupported("{}: model_type '{}' is not sam", path, type);
  auto part = [&](const char* key) -> Expected<const json*> {
    const json* v = top.find(key);
    if (!v || !v->is_object()) return Error::invalid_file("{}: '{}' must be an object", path, key);
    return v;
  };
  ASSIGN_OR_RETURN(const json* vj, part("vision_config"));
  ASSIGN_OR_RETURN(const json* pj, part("prompt_encoder_config"));
  ASSIGN_OR_RETURN(const json* mj, part("mask_decoder_config"));
  const std::string vpath = path + " vision_config", ppath = path + " prompt_encoder_config",
                    mpath = path + " mask_decoder_config";
  Keys v{*vj, vpath}, pr{*pj, ppath}, m{*mj, mpath};
  SamConfig c;
  ASSIGN_OR_RETURN(c.image_size, v.opt_int("image_size", 1024));
  ASSIGN_OR_RETURN(c.patch_size, v.opt_int("patch_size", 16));
  ASSIGN_OR_RETURN(c.n_channels, v.opt_int("num_channels", 3));
  ASSIGN_OR_RETURN(c.n_embd, v.opt_int("hidden_size", 768));
  ASSIGN_OR_RETURN(c.n_layer, v.opt_int("num_hidden_layers", 12));
  ASSIGN_OR_RETURN(c.n_head, v.opt_int("num_attention_heads", 12));
  ASSIGN_OR_RETURN(const double ratio, v.opt_float("mlp_ratio", 4.0));
  if (!(ratio > 0 && ratio < 1024)) return Error::invalid_file("{}: 'mlp_ratio' must be in (0, 1024), got {}", vpath, ratio);
  ASSIGN_OR_RETURN(c.n_ff, v.opt_int("mlp_dim", static_cast<int64_t>(static_cast<double>(c.n_embd) * ratio)));
  ASSIGN_OR_RETURN(c.out_channels, v.opt_int("output_channels", 256));
  ASSIGN_OR_RETURN(c.window, v.opt_int("window_size", 14));
  if (v.find("global_attn_indexes")) {
    ASSIGN_OR_RETURN(c.global_layers, v.int_list("global_attn_indexes"));
  }
  ASSIGN_OR_RETURN(c.qkv_bias, v.opt_bool("qkv_bias", true));
  ASSIGN_OR_RETURN(c.abs_pos, v.opt_bool("use_abs_pos", true));
  ASSIGN_OR_RETURN(c.rel_pos, v.opt_bool("use_rel_pos", true));
  ASSIGN_OR_RETURN(c.vision_eps, v.opt_float("layer_norm_eps", 1e-6));
  ASSIGN_OR_RETURN(c.vision_act, v.activation("hidden_act", "gelu"));
  ASSIGN_OR_RETURN(c.pos_feats, v.opt_int("num_pos_feats", 128));
  ASSIGN_OR_RETURN(c.prompt_dim, pr.opt_int("hidden_size", 256));
  ASSIGN_OR_RETURN(c.embed_side, pr.opt_int("image_embedding_size", 64));
  ASSIGN_OR_RETURN(c.point_kinds, pr.opt_int("num_point_embeddings", 4));
  ASSIGN_OR_RETURN(const int64_t prompt_image, pr.opt_int("image_size", c.image_size));
  if (prompt_image != c.image_size)
    return Error::invalid_file("{}: 'image_size' {} differs from vision_config's {}", ppath, prompt_image, c.image_size);
  ASSIGN_OR_RETURN(const int64_t dec_dim, m.opt_int("hidden_size", 256));
  if (dec_dim != c.prompt_dim)
    return Error::invalid_file("{}: 'hidden_size' {} differs from the prompt encoder's {}", mpath, dec_dim, c.prompt_dim);
  ASSIGN_OR_RETURN(c.dec_layers, m.opt_int("num_hidden_layers", 2));
  ASSIGN_OR_RETURN(c.dec_heads, m.opt_int("num_attention_heads", 8));
  ASSIGN_OR_RETURN(c.dec_ff, m.opt_int("mlp_dim", 2048));
  ASSIGN_OR_RETURN(c.downsample, m.opt_int("attention_downsample_rate", 2));
  ASSIGN_OR_RETURN(c.iou_hidden, m.opt_int("iou_head_hidden_dim", 256));
  ASSIGN_OR_RETURN(c.iou_depth, m.opt_int("iou_head_depth", 3));
  ASSIGN_OR_RETURN(c.multimask, m.opt_int("num_multimask_outputs", 3));
  ASSIGN_OR_RETURN(c.dec_eps, m.opt_float("layer_norm_eps", 1e-6));
  ASSIGN_OR_RETURN(c.dec_act, m.activation("hidden_act", "relu"));
  if (Status s = c.validate(); !s.ok()) return s.error().with_context(path);
  return c;
}

Expected<std::unique_ptr<WeightSource>> open_hf_sam_weights(const std::string& folder) {
  ASSIGN_OR_RETURN(formats::SafetensorsModel model, formats::SafetensorsModel::open(folder));
  auto shared = std::make_shared<const formats::SafetensorsModel>(std::move(model));
  return std::unique_ptr<WeightSource>(std::make_unique<HfMediaWeights>(folder, std::move(shared)));
}

}  // namespace rlx::models
