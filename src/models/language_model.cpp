// LanguageModel: loads a GGUF decoder, compiles prefill/decode variants on demand,
// keeps the KV cache in the handles of the executable that ran last.
#include "rlx/models/language_model.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>

#include "rlx/compile/profile.h"
#include "rlx/base/log.h"
#include "rlx/formats/gguf.h"

namespace rlx::models {

struct LanguageModel::Variant {
  int64_t rows = 0;  // compiled SEQ
  bool all_rows = false;
  std::unique_ptr<CompiledGraph> graph;
};

LanguageModel::~LanguageModel() = default;

Expected<std::unique_ptr<LanguageModel>> LanguageModel::load(const std::string& path, const LoadOptions& options) {
  if (options.ctx <= 0) return Error::invalid_argument("context length must be positive, got {}", options.ctx);
  if (options.max_chunk < 1) return Error::invalid_argument("max_chunk must be positive, got {}", options.max_chunk);
  if (options.batch < 1 || options.batch > 256)
    return Error::invalid_argument("batch must be 1..256 sequences, got {}", options.batch);
  if (options.kv_dtype != ir::DType::F32 && options.kv_dtype != ir::DType::F16)
    return Error::invalid_argument("KV cache dtype must be f32 or f16, got {}", ir::dtype_name(options.kv_dtype));
  std::unique_ptr<LanguageModel> m(new LanguageModel());
  m->options_ = options;
  m->source_ = path;
  m->n_past_.assign(static_cast<size_t>(options.batch), 0);
  namespace fs = std::filesystem;
  if (fs::is_directory(path)) {
    ASSIGN_OR_RETURN(m->config_, config_from_hf((fs::path(path) / "config.json").string()));
    ASSIGN_OR_RETURN(m->weights_, SafetensorsWeightSource::open(path, m->config_));
  } else {
    ASSIGN_OR_RETURN(formats::GgufFile file, formats::GgufFile::open(path));
    auto shared = std::make_shared<const formats::GgufFile>(std::move(file));
    ASSIGN_OR_RETURN(m->config_, config_from_gguf(*shared));
    m->weights_ = std::make_unique<GgufWeightSource>(shared);
  }
  if (m->config_.fused_projections) m->weights_ = split_fused_projections(std::move(m->weights_), m->config_);
  // Every stored tensor must be read by the model or be known to be safe to ignore: a
  // leftover usually is a feature of the file RLX does not implement (as rope_freqs was).
  DecoderOptions probe;
  probe.seq = ir::Dim::symbol(ir::SEQ);
  probe.ctx = options.ctx;
  probe.kv_dtype = options.kv_dtype;
  probe.batch = options.batch;
  ASSIGN_OR_RETURN(BuiltModel probe_model, build_decoder(m->config_, *m->weights_, probe));
  std::vector<std::string> ignorable = {"rope_freqs.weight", "rope_factors_long.weight", "rope_factors_short.weight"};
  if (m->config_.tied_embeddings) ignorable.push_back("output.weight");  // a stored copy of the tied embeddings
  m->unused_ = models::unused_tensors(*m->weights_, probe_model.param_names, ignorable);
  for (const std::string& name : m->unused_)
    RLX_LOG_WARN("{}: tensor '{}' is not used by the {} model (ignored; the file may hold a feature RLX does not run)",
                 path, name, arch_name(m->config_.arch));
  BackendOptions backend;
  backend.threads = options.threads;
  ASSIGN_OR_RETURN(Session session, Session::create(options.device, backend));
  m->session_ = std::make_unique<Session>(std::move(session));
  return m;
}

void LanguageModel::reset() { std::fill(n_past_.begin(), n_past_.end(), 0); }

Expected<LanguageModel::Variant*> LanguageModel::variant(int64_t rows, bool all_rows, const Pick& pick) {
  const VariantKey key{rows, all_rows, pick.greedy, pick.sample.has_value()};
  auto it = variants_.find(key);
  if (it != variants_.end()) return it->second.get();

  DecoderOptions d;
  d.seq = ir::Dim::symbol(ir::SEQ);
  d.ctx = options_.ctx;
  d.kv_dtype = options_.kv_dtype;
  d.last_row_logits = !all_rows;
  d.greedy_token = pick.greedy;
  d.sample_token = pick.sample.has_value();
  d.batch = options_.batch;
  const bool decode = rows == 1;
  std::string profile_name = decode ? options_.decode_profile : options_.prefill_profile;
  if (profile_name.empty()) {
    const char* family = config_.arch == Arch::Qwen3 || config_.arch == Arch::Qwen2 ? "qwen3"
                         : config_.arch == Arch::Llama || config_.arch == Arch::Phi3 ? "llama32"
                                                                                    : "gemma";
    profile_name = fmt::format("{}_{}", family, decode ? "decode" : "prefill");
  }
  auto profile = compile::CompileProfile::preset(profile_name);
  if (!profile) profile = compile::CompileProfile::load(profile_name);
  if (!profile) return profile.error().with_context("compile profile");
  d.policy = profile->fusion.policy;
  ASSIGN_OR_RETURN(BuiltModel built, build_decoder(config_, *weights_, d));
  compile::CompileOptions co = profile->to_compile_options(session_->backend()->name());
  co.binding.set(ir::SEQ, rows);
  ASSIGN_OR_RETURN(CompiledGraph graph, session_->compile_hir_with(built.hir, co));
  // Weights stay where the source keeps them (the file mapping): the store holds views
  // and every variant binds them in place, so no executable copies a weight.
  if (!params_) {
    auto store = std::make_unique<ParamStore>();
    int64_t total = 0, done = 0;
    std::vector<WeightView> views;
    views.reserve(built.param_names.size());
    for (const std::string& name : built.param_names) {
      ASSIGN_OR_RETURN(WeightView w, weights_->take(name));
      total += static_cast<int64_t>(w.bytes.size());
      views.push_back(std::move(w));
    }
    for (const WeightView& w : views) {
      auto view = std::make_shared<const AlignedBuffer>(
          w.file_mapped ? AlignedBuffer::file_view(w.bytes.data(), w.bytes.size(), w.owner)
                        : AlignedBuffer::view(w.bytes.data(), w.bytes.size(), w.owner));
      if (Status s = store->add_shared(w.name, SharedParam{w.dtype, w.shape, std::move(view)}); !s.ok())
        return s.error().with_context(fmt::format("{}: loading '{}'", source_, w.name));
      done += static_cast<int64_t>(w.bytes.size());
      if (options_.on_weight_progress) options_.on_weight_progress(done, total);
    }
    params_ = std::move(store);
  }
  if (auto bound = params_->bind(graph); !bound) return bound.error().with_context(source_);
  // One KV cache for all variants: a new executable adopts the first one's handles, so
  // moving from prefill to decode copies nothing (backends without host handles copy).
  if (!variants_.empty() && shared_cache_) {
    auto shared = graph.share_handles_with(*variants_.begin()->second->graph);
    if (!shared) {
      if (shared.error().code() != ErrorCode::kUnsupported) return shared.error().with_context(source_);
      shared_cache_ = false;
    }
  }
  auto v = std::make_unique<Variant>();
  v->rows = rows;
  v->all_rows = all_rows;
  v->graph = std::make_unique<CompiledGraph>(std::move(graph));
  Variant* raw = v.get();
  variants_[key] = std::move(v);
  return raw;
}

Status LanguageModel::move_cache_to(Variant* next) {
  if (cache_owner_ == next) return {};
  const bool any_cached = std::any_of(n_past_.begin(), n_past_.end(), [](int64_t n) { return n > 0; });
  if (cache_owner_ != nullptr && any_cached && !shared_cache_) {
    for (const auto& h : cache_owner_->graph->manifest().handles) {
      ASSIGN_OR_RETURN(Tensor t, cache_owner_->graph->read_handle(h.name));
      TRY(next->graph->bind_handle(h.name, t.view()));
    }
  }
  cache_owner_ = next;
  return {};
}

Expected<Tensor> LanguageModel::run_chunk(std::span<const int32_t> tokens, bool all_rows, const Pick& pick) {
  const auto n = static_cast<int64_t>(tokens.size());
  int64_t rows = 1;
  if (n > 1) {
    rows = std::max<int64_t>(options_.min_bucket, 1);
    while (rows < n) rows *= 2;
  }
  ASSIGN_OR_RETURN(Variant * v, variant(rows, all_rows, pick));
  TRY(move_cache_to(v));

  std::vector<int32_t> tok(static_cast<size_t>(rows), 0), pos(static_cast<size_t>(rows));
  std::copy(tokens.begin(), tokens.end(), tok.begin());
  for (int64_t i = 0; i < rows; ++i) pos[i] = static_cast<int32_t>(n_past_[0] + std::min(i, n - 1));
  const int32_t last = static_cast<int32_t>(n - 1);
  const std::vector<int64_t> shape{rows}, one{1};
  std::vector<NamedTensorView> inputs{
      {"tokens", TensorView{ir::DType::I32, shape, tok.data()}},
      {"pos", TensorView{ir::DType::I32, shape, pos.data()}},
  };
  if (!all_rows) inputs.push_back({"last", TensorView{ir::DType::I32, one, &last}});
  const std::vector<int64_t> params_shape{1, ir::kSampleParams};
  std::array<float, ir::kSampleParams> params{};
  if (pick.sample) {
    const TokenFilter& f = *pick.sample;
    params = {static_cast<float>(pick.draw), static_cast<float>(f.temperature), static_cast<float>(f.top_k),
              static_cast<float>(f.top_p), static_cast<float>(f.min_p)};
    inputs.push_back({"sampling", TensorView{ir::DType::F32, params_shape, params.data()}});
  }
  if (rows > 1) TRY(v->graph->set_active_extent(n, rows));
  ASSIGN_OR_RETURN(std::vector<Tensor> out, v->graph->run(inputs));
  n_past_[0] += n;
  return std::move(out[0]);
}

Status LanguageModel::check_forward(std::span<const int32_t> tokens) const {
  if (options_.batch != 1)
    return Error::invalid_argument("forward: this model serves {} sequences; use forward_batch", options_.batch);
  if (tokens.empty()) return Error::invalid_argument("forward: no tokens");
  if (n_past_[0] + static_cast<int64_t>(tokens.size()) > options_.ctx)
    return Error::invalid_argument("context overflow: {} cached + {} new tokens exceed the context length {}",
                                   n_past_[0], tokens.size(), options_.ctx);
  for (int32_t t : tokens)
    if (t < 0 || t >= config_.n_vocab)
      return Error::invalid_argument("token id {} is outside the vocabulary [0, {})", t, config_.n_vocab);
  return {};
}

Expected<int32_t> LanguageModel::forward_pick(std::span<const int32_t> tokens, const Pick& pick) {
  TRY(check_forward(tokens));
  const auto chunk = static_cast<size_t>(std::min(options_.ctx, options_.max_chunk));
  size_t done = 0;
  while (tokens.size() - done > chunk) {  // earlier chunks fill the cache only
    TRY(run_chunk(tokens.subspan(done, chunk), false, Pick{}));
    done += chunk;
  }
  ASSIGN_OR_RETURN(Tensor next, run_chunk(tokens.subspan(done), false, pick));
  return next.as<int32_t>()[0];
}

Expected<int32_t> LanguageModel::forward_greedy(std::span<const int32_t> tokens) {
  Pick pick;
  pick.greedy = true;
  return forward_pick(tokens, pick);
}

Expected<int32_t> LanguageModel::forward_sample(std::span<const int32_t> tokens, const TokenFilter& filter,
                                                double draw) {
  if (!(filter.temperature > 0.0) || !std::isfinite(filter.temperature))
    return Error::invalid_argument("forward_sample: temperature must be > 0, got {}", filter.temperature);
  if (filter.top_k < 1 || filter.top_k > ir::kMaxSampleTopK)
    return Error::invalid_argument("forward_sample: top_k must be in [1, {}] (top-k off: forward + Sampler), got {}",
                                   ir::kMaxSampleTopK, filter.top_k);
  if (!(filter.top_p > 0.0 && filter.top_p <= 1.0))
    return Error::invalid_argument("forward_sample: top_p must be in (0, 1], got {}", filter.top_p);
  if (!(filter.min_p >= 0.0 && filter.min_p < 1.0))
    return Error::invalid_argument("forward_sample: min_p must be in [0, 1), got {}", filter.min_p);
  if (!(draw >= 0.0 && draw < 1.0)) return Error::invalid_argument("forward_sample: draw must be in [0, 1), got {}", draw);
  Pick pick;
  pick.sample = filter;
  pick.draw = draw;
  return forward_pick(tokens, pick);
}

Expected<std::vector<float>> LanguageModel::forward(std::span<const int32_t> tokens, bool all_rows) {
  TRY(check_forward(tokens));
  std::vector<float> result;
  // Chunks of at most max_chunk (and ctx) rows: one prefill never needs a bucket above
  // either, and the activation arena stays bounded.
  size_t done = 0;
  const auto chunk = static_cast<size_t>(std::min(options_.ctx, options_.max_chunk));
  while (done < tokens.size()) {
    const size_t len = std::min(tokens.size() - done, chunk);
    ASSIGN_OR_RETURN(Tensor out, run_chunk(tokens.subspan(done, len), all_rows, Pick{}));
    if (all_rows || done + len == tokens.size()) {
      if (!all_rows) result.clear();
      std::span<const float> logits = out.as<float>();
      const size_t keep = (all_rows ? len : 1) * static_cast<size_t>(config_.n_vocab);
      result.insert(result.end(), logits.begin(), logits.begin() + static_cast<std::ptrdiff_t>(keep));
    }
    done += len;
  }
  return result;
}

Expected<std::vector<std::vector<float>>> LanguageModel::forward_batch(std::span<const std::vector<int32_t>> tokens,
                                                                      bool all_rows) {
  const int64_t batch = options_.batch, ctx = options_.ctx;
  if (static_cast<int64_t>(tokens.size()) != batch)
    return Error::invalid_argument("forward_batch: {} token lists for a model of {} sequences", tokens.size(), batch);
  int64_t longest = 0;
  for (int64_t b = 0; b < batch; ++b) {
    const auto& t = tokens[static_cast<size_t>(b)];
    longest = std::max<int64_t>(longest, static_cast<int64_t>(t.size()));
    if (n_past_[static_cast<size_t>(b)] + static_cast<int64_t>(t.size()) > ctx)
      return Error::invalid_argument("context overflow in sequence {}: {} cached + {} new tokens exceed the context length {}",
                                     b, n_past_[static_cast<size_t>(b)], t.size(), ctx);
    for (int32_t id : t)
      if (id < 0 || id >= config_.n_vocab)
        return Error::invalid_argument("sequence {}: token id {} is outside the vocabulary [0, {})", b, id, config_.n_vocab);
  }
  if (longest == 0) return Error::invalid_argument("forward_batch: no tokens in any sequence");
  // Every sequence writes S cache rows from its position; a sequence given fewer tokens
  // pads (rows past its own are never attended to by its real rows and are overwritten
  // by its next tokens). Pick S so that all writes stay inside the caches.
  auto fits = [&](int64_t s) {
    for (int64_t b = 0; b < batch; ++b) {
      const int64_t np = n_past_[static_cast<size_t>(b)];
      const bool idle_full = tokens[static_cast<size_t>(b)].empty() && np >= ctx;  // clamped below
      if (!idle_full && np + s > ctx) return false;
    }
    return true;
  };
  int64_t rows = 1;
  if (longest > 1) {
    rows = std::max<int64_t>(options_.min_bucket, 1);
    while (rows < longest) rows *= 2;
    if (!fits(rows)) rows = longest;
  }
  if (!fits(rows)) {
    for (int64_t b = 0; b < batch; ++b)
      if (n_past_[static_cast<size_t>(b)] + rows > ctx)
        return Error::invalid_argument(
            "forward_batch: sequence {} has {} cached tokens, so a run of {} rows would pass the context length {}; "
            "run the longer inputs in a separate call",
            b, n_past_[static_cast<size_t>(b)], rows, ctx);
  }
  ASSIGN_OR_RETURN(Variant * v, variant(rows, all_rows, Pick{}));
  TRY(move_cache_to(v));
  const size_t total = static_cast<size_t>(batch * rows);
  std::vector<int32_t> tok(total, 0), pos(total), last(static_cast<size_t>(batch));
  for (int64_t b = 0; b < batch; ++b) {
    const auto& t = tokens[static_cast<size_t>(b)];
    // A full sequence given no tokens can never take another one: its padding rows
    // overwrite its last cache rows, which nothing will read again.
    const int64_t start = std::min(n_past_[static_cast<size_t>(b)], ctx - rows);
    for (int64_t i = 0; i < rows; ++i) {
      const size_t r = static_cast<size_t>(b * rows + i);
      if (i < static_cast<int64_t>(t.size())) tok[r] = t[static_cast<size_t>(i)];
      pos[r] = static_cast<int32_t>(start + i);
    }
    last[static_cast<size_t>(b)] = static_cast<int32_t>(b * rows + std::max<int64_t>(static_cast<int64_t>(t.size()), 1) - 1);
  }
  const std::vector<int64_t> shape{batch * rows}, lshape{batch};
  std::vector<NamedTensorView> inputs{
      {"tokens", TensorView{ir::DType::I32, shape, tok.data()}},
      {"pos", TensorView{ir::DType::I32, shape, pos.data()}},
  };
  if (!all_rows) inputs.push_back({"last", TensorView{ir::DType::I32, lshape, last.data()}});
  ASSIGN_OR_RETURN(std::vector<Tensor> out, v->graph->run(inputs));
  std::span<const float> logits = out[0].as<float>();
  const auto V = static_cast<size_t>(config_.n_vocab);
  std::vector<std::vector<float>> result(static_cast<size_t>(batch));
  for (int64_t b = 0; b < batch; ++b) {
    const size_t len = tokens[static_cast<size_t>(b)].size();
    n_past_[static_cast<size_t>(b)] += static_cast<int64_t>(len);
    if (len == 0) continue;
    const size_t first = all_rows ? static_cast<size_t>(b * rows) * V : static_cast<size_t>(b) * V;
    const size_t count = (all_rows ? len : 1) * V;
    result[static_cast<size_t>(b)].assign(logits.begin() + static_cast<std::ptrdiff_t>(first),
                                          logits.begin() + static_cast<std::ptrdiff_t>(first + count));
  }
  return result;
}

}  // namespace rlx::models
