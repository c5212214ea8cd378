// Encoder models: the BERT / NomicBERT / ModernBERT template as Flow blocks, and
// EncoderModel, which drives it through ModelCompilePipeline (one template per profile,
// specialized per batch and length bucket) with the weights bound once.
#include "rlx/models/encoder.h"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "models/model_support.h"
#include "rlx/base/env.h"
#include "rlx/base/json_limits.h"
#include "rlx/base/hash.h"
#include "rlx/base/log.h"
#include "rlx/base/memory_budget.h"
#include "rlx/compile/profile.h"
#include "rlx/formats/gguf.h"
#include "rlx/formats/mapped_file.h"

namespace rlx::models {
namespace {

namespace fs = std::filesystem;
using ir::Dim;
using ir::Shape;
using ir::ValueId;

ir::AttentionBlockAttrs encoder_attention(const ModelConfig& c, int64_t il) {
  ir::AttentionBlockAttrs a;
  a.attn.n_heads = c.n_head;
  a.attn.n_kv_heads = c.n_head_kv;
  a.attn.head_dim = c.head_dim;
  a.attn.scale = c.attn_scale;
  a.attn.mask = ir::MaskKind::None;
  a.rope = c.rope;
  a.rope.head_dim = c.head_dim;
  if (c.layer_is_sliding(il)) {  // ModernBERT's local layers: a window both ways, their own rotary base
    a.attn.mask = ir::MaskKind::Local;
    a.attn.window = c.sliding_window;
    if (c.rope_theta_local > 0) a.rope.theta = c.rope_theta_local;
  }
  a.use_rope = c.n_positions == 0;
  a.qkv_bias = c.linear_bias;
  a.key_lengths = true;
  return a;
}

Expected<ValueId> encoder_ffn(Flow& f, const ModelConfig& c, const std::string& blk, ValueId x) {
  if (c.ffn == FfnKind::Gelu) {
    auto bias = [&](const char* t) { return c.linear_bias ? blk + t : std::string(); };
    const ir::ActKind gelu = c.gelu_tanh ? ir::ActKind::GeluTanh : ir::ActKind::Gelu;
    ASSIGN_OR_RETURN(ValueId h, f.dense(x, blk + ".ffn_up.weight", bias(".ffn_up.bias"), c.n_ff, c.n_embd, gelu,
                                        blk + ".ffn_up"));
    return f.dense(h, blk + ".ffn_down.weight", bias(".ffn_down.bias"), c.n_embd, c.n_ff, ir::ActKind::Identity,
                   blk + ".ffn_down");
  }
  FfnSpec fs;
  fs.prefix = blk;
  fs.kind = c.ffn == FfnKind::SwiGLU ? FfnBlock::SwiGLU : FfnBlock::GeGLU;
  fs.dim = c.n_embd;
  fs.hidden = c.n_ff;
  fs.tanh_approx = c.gelu_tanh;
  return f.ffn(x, fs);
}

// sentence-transformers' description of a folder: 1_Pooling/config.json picks the
// pooling (pooling_mode_cls_token / _mean_tokens / _lasttoken), a Normalize module in
// modules.json L2-normalizes. Absent files leave the defaults; malformed ones are errors.
Status read_sentence_transformers(const fs::path& dir, Pooling* pooling, bool* normalize) {
  auto read_json = [](const fs::path& p) -> Expected<nlohmann::json> {
    ASSIGN_OR_RETURN(formats::MappedFile f, formats::MappedFile::open(p.string()));
    const std::string_view text(reinterpret_cast<const char*>(f.bytes().data()), f.size());
    TRY(check_json_depth(text, p.string()));
    nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) return Error::parse("{}: not JSON", p.string());
    return j;
  };
  std::error_code ec;
  if (fs::is_regular_file(dir / "modules.json", ec)) {
    ASSIGN_OR_RETURN(nlohmann::json modules, read_json(dir / "modules.json"));
    if (!modules.is_array()) return Error::invalid_file("{}: modules.json must be a list", dir.string());
    for (const nlohmann::json& m : modules)
      if (m.is_object() && m.contains("type") && m["type"].is_string() &&
          m["type"].get<std::string>().find("Normalize") != std::string::npos)
        *normalize = true;
  }
  const fs::path pool = dir / "1_Pooling" / "config.json";
  if (fs::is_regular_file(pool, ec)) {
    ASSIGN_OR_RETURN(nlohmann::json p, read_json(pool));
    if (!p.is_object()) return Error::invalid_file("{}: must be a JSON object", pool.string());
    auto on = [&](const char* key) { return p.contains(key) && p[key].is_boolean() && p[key].get<bool>(); };
    if (on("pooling_mode_cls_token")) *pooling = Pooling::Cls;
    else if (on("pooling_mode_mean_tokens")) *pooling = Pooling::Mean;
    else if (on("pooling_mode_lasttoken")) *pooling = Pooling::Last;
  }
  return {};
}

}  // namespace

Expected<BuiltModel> build_encoder(const ModelConfig& c, const WeightSource& weights, const EncoderBuildOptions& o) {
  TRY(c.validate());
  if (!is_encoder(c.arch)) return Error::invalid_argument("build_encoder: {} is not an encoder", arch_name(c.arch));
  const std::optional<Dim> rows = Dim::mul(o.batch, o.seq);
  if (!rows) return Error::invalid_argument("encoder: batch {} x seq {} is not a dim", o.batch.to_string(), o.seq.to_string());
  const Dim D(c.n_embd);
  const double eps = c.norm_eps;
  auto norm_bias = [&](const std::string& n) { return c.norm_bias ? n + ".bias" : std::string(); };
  Flow f(weights);
  ir::GraphBuilder& b = f.builder();
  const ValueId tokens = f.input_ids("tokens", *rows);
  const ValueId types = c.n_token_types > 0 ? f.input_ids("types", *rows) : ir::kNoValue;
  const ValueId pos = f.input_ids("pos", o.seq);
  const ValueId kv_len = f.input_ids("kv_len", o.batch);

  ASSIGN_OR_RETURN(ValueId x, f.embedding(tokens, "token_embd.weight", c.n_vocab, c.n_embd));
  if (types != ir::kNoValue) {
    ASSIGN_OR_RETURN(ValueId t, f.embedding(types, "token_types.weight", c.n_token_types, c.n_embd));
    x = b.add(x, t);
  }
  if (c.n_positions > 0) {  // learned positions [S, D], the same for every sequence
    ASSIGN_OR_RETURN(ValueId p, f.embedding(pos, "position_embd.weight", c.n_positions, c.n_embd));
    x = b.reshape(b.add(b.reshape(x, Shape{o.batch, o.seq, D}), p), Shape{*rows, D});
  }
  ASSIGN_OR_RETURN(x, f.layer_norm(x, "token_embd_norm.weight", norm_bias("token_embd_norm"), eps));

  for (int64_t il = 0; il < c.n_layer; ++il) {
    const std::string blk = fmt::format("blk.{}", il);
    AttentionSpec as;
    as.prefix = blk;
    as.layer = il;
    as.attrs = encoder_attention(c, il);
    as.kv_len = kv_len;
    as.o_bias = c.linear_bias;
    if (c.pre_norm) {
      // ModernBERT: the first layer's attention reads the embedding norm's output as is.
      ValueId h = x;
      if (weights.has(blk + ".attn_norm.weight")) {
        ASSIGN_OR_RETURN(h, f.layer_norm(x, blk + ".attn_norm.weight", norm_bias(blk + ".attn_norm"), eps));
      }
      ASSIGN_OR_RETURN(ValueId a, f.attention(h, pos, as));
      x = f.residual(x, a);
      ASSIGN_OR_RETURN(h, f.layer_norm(x, blk + ".ffn_norm.weight", norm_bias(blk + ".ffn_norm"), eps));
      ASSIGN_OR_RETURN(ValueId ff, encoder_ffn(f, c, blk, h));
      x = f.residual(x, ff);
    } else {  // BERT, NomicBERT: the norm after each residual add
      ASSIGN_OR_RETURN(ValueId a, f.attention(x, pos, as));
      ASSIGN_OR_RETURN(x, f.layer_norm(f.residual(x, a), blk + ".attn_output_norm.weight",
                                       norm_bias(blk + ".attn_output_norm"), eps));
      ASSIGN_OR_RETURN(ValueId ff, encoder_ffn(f, c, blk, x));
      ASSIGN_OR_RETURN(x, f.layer_norm(f.residual(x, ff), blk + ".layer_output_norm.weight",
                                       norm_bias(blk + ".layer_output_norm"), eps));
    }
  }
  if (c.pre_norm) {
    ASSIGN_OR_RETURN(x, f.layer_norm(x, "output_norm.weight", norm_bias("output_norm"), eps));
  }
  std::vector<std::pair<ValueId, std::string>> outputs{{x, "last_hidden_state"}};
  if (o.pooler) {
    const ValueId cls = b.gather(x, f.input_ids("first", o.batch), 0);
    ASSIGN_OR_RETURN(ValueId pooled, f.dense(cls, "pooler.weight", "pooler.bias", c.n_embd, c.n_embd,
                                             ir::ActKind::Tanh, "pooler"));
    outputs.emplace_back(pooled, "pooler_output");
  }
  ASSIGN_OR_RETURN(BuiltModel m, f.finish(outputs, o.policy));
  m.config = c;
  return m;
}

Expected<std::vector<float>> pool_states(std::span<const float> states, int64_t len, int64_t dim, Pooling pooling) {
  if (len < 1 || dim < 1 || static_cast<int64_t>(states.size()) < len * dim)
    return Error::invalid_argument("pooling: {} states of width {} in {} values", len, dim, states.size());
  std::vector<float> out(static_cast<size_t>(dim), 0.0f);
  switch (pooling) {
    case Pooling::None: return Error::invalid_argument("pooling 'none' keeps every token's state; no embedding to pool");
    case Pooling::Cls: std::copy_n(states.begin(), dim, out.begin()); break;
    case Pooling::Last: std::copy_n(states.begin() + (len - 1) * dim, dim, out.begin()); break;
    case Pooling::Mean: {
      std::vector<double> sum(static_cast<size_t>(dim), 0.0);
      for (int64_t i = 0; i < len; ++i)
        for (int64_t d = 0; d < dim; ++d) sum[static_cast<size_t>(d)] += states[static_cast<size_t>(i * dim + d)];
      for (int64_t d = 0; d < dim; ++d)
        out[static_cast<size_t>(d)] = static_cast<float>(sum[static_cast<size_t>(d)] / static_cast<double>(len));
      break;
    }
  }
  return out;
}

void l2_normalize(std::span<float> v) {
  double ss = 0;
  for (float x : v) ss += static_cast<double>(x) * x;
  if (!(ss > 0)) return;
  const auto inv = static_cast<float>(1.0 / std::sqrt(ss));
  for (float& x : v) x *= inv;
}

EncoderModel::~EncoderModel() = default;

Expected<std::unique_ptr<EncoderModel>> EncoderModel::load(const std::string& path, const EncoderLoadOptions& options) {
  if (options.min_bucket < 1 || options.min_bucket > 4096)
    return Error::invalid_argument("min_bucket must be 1..4096, got {}", options.min_bucket);
  TRY(check_thread_count(options.threads, "threads"));
  std::unique_ptr<EncoderModel> m(new EncoderModel());
  m->options_ = options;
  m->source_ = path;
  if (fs::is_directory(path)) {
    ASSIGN_OR_RETURN(m->config_, config_from_hf((fs::path(path) / "config.json").string()));
    if (!is_encoder(m->config_.arch))
      return Error::invalid_argument("{}: a {} model is a language model, not an encoder (use rlx run / rlx logits)",
                                     path, arch_name(m->config_.arch));
    ASSIGN_OR_RETURN(m->weights_, SafetensorsWeightSource::open(path, m->config_));
    TRY(read_sentence_transformers(path, &m->config_.pooling, &m->normalize_));
  } else {
    ASSIGN_OR_RETURN(formats::GgufFile file, formats::GgufFile::open(path));
    auto shared = std::make_shared<const formats::GgufFile>(std::move(file));
    ASSIGN_OR_RETURN(m->config_, config_from_gguf(*shared));
    if (!is_encoder(m->config_.arch))
      return Error::invalid_argument("{}: a {} model is a language model, not an encoder (use rlx run / rlx logits)",
                                     path, arch_name(m->config_.arch));
    m->weights_ = std::make_unique<GgufWeightSource>(shared);
  }
  if (m->weights_->has("blk.0.attn_qkv.weight")) m->weights_ = split_fused_projections(std::move(m->weights_), m->config_);
  m->pooler_ = m->weights_->has("pooler.weight") && m->weights_->has("pooler.bias");
  // Every stored tensor must be read (a leftover is a feature RLX does not run), except
  // heads of task models that an encoder's outputs do not include.
  EncoderBuildOptions probe;
  probe.pooler = m->pooler_;
  ASSIGN_OR_RETURN(BuiltModel probe_model, build_encoder(m->config_, *m->weights_, probe));
  for (const std::string& name : unused_tensors(*m->weights_, probe_model.param_names, {}))
    RLX_LOG_WARN("{}: tensor '{}' is not used by the {} encoder (ignored)", path, name, arch_name(m->config_.arch));
  m->model_id_ = model_file_identity(path);
  const std::string cache_dir = disk_cache_dir(options.compile_cache, options.cache_dir);
  ASSIGN_OR_RETURN(m->pipeline_, make_model_pipeline(options.device, options.threads, cache_dir));
  return m;
}

int64_t EncoderModel::max_tokens() const {
  return config_.n_positions > 0 ? config_.n_positions : std::max<int64_t>(config_.n_ctx_train, 1);
}

Status EncoderModel::prepare(CompiledGraph& graph) {
  if (!params_) params_ = std::make_unique<ParamStore>();
  return bind_weights(*weights_, *params_, graph, source_, {});
}

Expected<std::shared_ptr<const CompiledVariant>> EncoderModel::variant(int64_t batch, int64_t seq) {
  const std::string profile_name = options_.profile.empty() ? "encoder" : options_.profile;
  auto profile = compile::CompileProfile::preset(profile_name);
  if (!profile) profile = compile::CompileProfile::load(profile_name);
  if (!profile) return profile.error().with_context("compile profile");
  TRY(check_profile_backends(*profile, profile_name));
  EncoderBuildOptions eo;
  eo.pooler = pooler_;
  eo.policy = profile->fusion.policy;
  const compile::CompileOptions co = profile->to_compile_options(pipeline_->session().backend()->target());
  StableHasher h;
  h.str("rlx.encoder.variant.v1");
  h.u64(model_id_);
  h.str(profile_name);
  h.i64(batch);
  h.i64(seq);
  const uint64_t key = h.digest();
  const ir::DimBinding binding{{ir::BATCH, batch}, {ir::SEQ, seq}};
  const HirBuildFn build = [&]() -> Expected<ir::HirModule> {
    ASSIGN_OR_RETURN(BuiltModel built, build_encoder(config_, *weights_, eo));
    return std::move(built.hir);
  };
  const VariantPrepareFn prep = [this](CompiledGraph& g) { return prepare(g); };
  Expected<std::shared_ptr<const CompiledVariant>> v = Error::internal("not compiled");
  if (options_.compile_cache) {
    const std::string dir = !options_.cache_dir.empty() ? options_.cache_dir : env_config().cache_dir;
    v = pipeline_->get_or_compile_aot(fs::path(dir) / "aot", fmt::format("enc-{:016x}", model_id_), key, binding,
                                      build, co, prep);
  } else {
    v = pipeline_->get_or_compile(key, binding, build, co, prep);
  }
  if (!v) return v.error().with_context(source_);
  return v;
}

Expected<EncoderOutput> EncoderModel::forward(std::span<const std::vector<int32_t>> tokens,
                                              std::span<const std::vector<int32_t>> types) {
  const auto B = static_cast<int64_t>(tokens.size());
  if (B < 1 || B > 4096) return Error::invalid_argument("encoder: a batch has 1..4096 sequences, got {}", B);
  if (!types.empty() && types.size() != tokens.size())
    return Error::invalid_argument("encoder: {} token-type lists for {} sequences", types.size(), tokens.size());
  int64_t longest = 0;
  for (int64_t b = 0; b < B; ++b) {
    const auto& t = tokens[static_cast<size_t>(b)];
    const auto len = static_cast<int64_t>(t.size());
    if (len < 1 || len > max_tokens())
      return Error::invalid_argument("encoder: sequence {} has {} tokens; the model takes 1..{}", b, len, max_tokens());
    for (int32_t id : t)
      if (id < 0 || id >= config_.n_vocab)
        return Error::invalid_argument("encoder: sequence {}: token id {} is outside the vocabulary [0, {})", b, id,
                                       config_.n_vocab);
    if (!types.empty()) {
      const auto& ty = types[static_cast<size_t>(b)];
      if (ty.size() != t.size())
        return Error::invalid_argument("encoder: sequence {} has {} tokens but {} token types", b, t.size(), ty.size());
      for (int32_t id : ty)
        if (id < 0 || id >= std::max<int64_t>(config_.n_token_types, 1))
          return Error::invalid_argument("encoder: sequence {}: token type {} is outside [0, {})", b, id,
                                         std::max<int64_t>(config_.n_token_types, 1));
    }
    longest = std::max(longest, len);
  }
  // Padded length: a power-of-two bucket, clamped to what the positions allow.
  int64_t S = options_.min_bucket;
  while (S < longest) S *= 2;
  S = std::min(S, max_tokens());
  TRY(check_memory_request(4.0 * static_cast<double>(B) * static_cast<double>(S) *
                               static_cast<double>(std::max(config_.n_embd, config_.n_ff)) * 4,
                           fmt::format("encoder activations for {} x {} tokens", B, S)));
  ASSIGN_OR_RETURN(auto v, variant(B, S));
  const auto total = static_cast<size_t>(B * S);
  std::vector<int32_t> tok(total, 0), typ(total, 0), pos(static_cast<size_t>(S)), len(static_cast<size_t>(B)),
      first(static_cast<size_t>(B));
  for (int64_t i = 0; i < S; ++i) pos[static_cast<size_t>(i)] = static_cast<int32_t>(i);
  EncoderOutput out;
  out.batch = B;
  out.seq = S;
  out.dim = config_.n_embd;
  for (int64_t b = 0; b < B; ++b) {
    const auto& t = tokens[static_cast<size_t>(b)];
    std::copy(t.begin(), t.end(), tok.begin() + b * S);
    if (!types.empty()) std::copy(types[static_cast<size_t>(b)].begin(), types[static_cast<size_t>(b)].end(), typ.begin() + b * S);
    len[static_cast<size_t>(b)] = static_cast<int32_t>(t.size());
    first[static_cast<size_t>(b)] = static_cast<int32_t>(b * S);
    out.lengths.push_back(static_cast<int64_t>(t.size()));
  }
  const std::vector<int64_t> rows_shape{B * S}, seq_shape{S}, batch_shape{B};
  std::vector<NamedTensorView> inputs{{"tokens", TensorView{ir::DType::I32, rows_shape, tok.data()}},
                                      {"pos", TensorView{ir::DType::I32, seq_shape, pos.data()}},
                                      {"kv_len", TensorView{ir::DType::I32, batch_shape, len.data()}}};
  if (config_.n_token_types > 0) inputs.push_back({"types", TensorView{ir::DType::I32, rows_shape, typ.data()}});
  if (pooler_) inputs.push_back({"first", TensorView{ir::DType::I32, batch_shape, first.data()}});
  ASSIGN_OR_RETURN(std::vector<Tensor> res, v->graph->run(inputs));
  const std::span<const float> hidden = res[0].as<float>();
  out.hidden.assign(hidden.begin(), hidden.end());
  if (pooler_) {
    const std::span<const float> pooled = res[1].as<float>();
    out.pooler.assign(pooled.begin(), pooled.end());
  }
  return out;
}

Expected<std::vector<std::vector<float>>> EncoderModel::embed(std::span<const std::vector<int32_t>> tokens,
                                                             Pooling pooling, bool normalize) {
  ASSIGN_OR_RETURN(EncoderOutput o, forward(tokens));
  std::vector<std::vector<float>> result;
  for (int64_t b = 0; b < o.batch; ++b) {
    ASSIGN_OR_RETURN(std::vector<float> e, pool_states(o.sequence(b), o.lengths[static_cast<size_t>(b)], o.dim, pooling));
    if (normalize) l2_normalize(e);
    result.push_back(std::move(e));
  }
  return result;
}

}  // namespace rlx::models
