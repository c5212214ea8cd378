// LanguageModel: a decoder family template driven through ModelCompilePipeline (one
// template per phase and output kind, specialized per prefill bucket, AOT disk cache),
// with the weights and the KV cache held once and bound into every executable.
#include "rlx/models/language_model.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>
#include <limits>

#include "rlx/base/env.h"
#include "rlx/base/hash.h"
#include "rlx/base/log.h"
#include "rlx/base/memory_budget.h"
#include "rlx/compile/profile.h"
#include "rlx/ir/text.h"
#include "rlx/models/sampler.h"
#include "models/model_support.h"
#include "rlx/formats/gguf.h"

namespace rlx::models {

namespace fs = std::filesystem;

LanguageModel::~LanguageModel() = default;

Expected<std::unique_ptr<LanguageModel>> LanguageModel::load(const std::string& path, const LoadOptions& options) {
  if (options.ctx <= 0) return Error::invalid_argument("context length must be positive, got {}", options.ctx);
  if (options.max_chunk < 0)
    return Error::invalid_argument("max_chunk must be positive (or 0: the device's default), got {}", options.max_chunk);
  if (options.batch < 1 || options.batch > 256)
    return Error::invalid_argument("batch must be 1..256 sequences, got {}", options.batch);
  if (options.kv_dtype != ir::DType::F32 && options.kv_dtype != ir::DType::F16)
    return Error::invalid_argument("KV cache dtype must be f32 or f16, got {}", ir::dtype_name(options.kv_dtype));
  TRY(check_thread_count(options.threads, "threads"));
  if (options.kv_memory < 0)
    return Error::invalid_argument("the KV memory budget must be positive (or 0: the whole cache), got {}",
                                   options.kv_memory);
  std::unique_ptr<LanguageModel> m(new LanguageModel());
  m->options_ = options;
  if (m->options_.max_chunk == 0) {
    const bool host = options.device.kind == DeviceKind::kCpu || options.device.kind == DeviceKind::kReference;
    m->options_.max_chunk = host ? kCpuMaxChunk : kGpuMaxChunk;
  }
  m->source_ = path;
  m->n_past_.assign(static_cast<size_t>(options.batch), 0);
  m->intact_.assign(static_cast<size_t>(options.batch), std::numeric_limits<int64_t>::max());
  if (fs::is_directory(path)) {
    ASSIGN_OR_RETURN(m->config_, config_from_hf((fs::path(path) / "config.json").string()));
    ASSIGN_OR_RETURN(m->weights_, SafetensorsWeightSource::open(path, m->config_));
  } else {
    ASSIGN_OR_RETURN(formats::GgufFile file, formats::GgufFile::open(path));
    auto shared = std::make_shared<const formats::GgufFile>(std::move(file));
    ASSIGN_OR_RETURN(m->config_, config_from_gguf(*shared));
    m->weights_ = std::make_unique<GgufWeightSource>(shared);
    // llama.cpp's qwen3next files keep the delta-net projections grouped by key head.
    if (m->config_.ssm_grouped_projections)
      m->weights_ = regroup_delta_net_projections(std::move(m->weights_), m->config_);
  }
  if (is_encoder(m->config_.arch))
    return Error::unsupported("{}: a {} model is an encoder (no language-model head): run it with rlx embed or "
                              "rlx forward", path, arch_name(m->config_.arch));
  // The KV cache (k and v of every layer, ctx rows per sequence) is allocated when the
  // first executable is bound: check now that host memory can hold it.
  if (options.device.kind == DeviceKind::kCpu || options.device.kind == DeviceKind::kReference) {
    const ModelConfig& c = m->config_;
    const double kv_bytes = 2.0 * static_cast<double>(options.batch) * static_cast<double>(c.n_layer) *
                            static_cast<double>(options.ctx) * static_cast<double>(c.kv_width()) *
                            (options.kv_dtype == ir::DType::F16 ? 2 : 4);
    // A budget below the whole cache (a paged cache) is what must fit.
    const double held = options.kv_memory > 0 ? std::min(kv_bytes, static_cast<double>(options.kv_memory)) : kv_bytes;
    TRY(check_memory_request(held, fmt::format("the KV cache for ctx {}", options.ctx)));
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
  m->model_id_ = model_file_identity(path);
  const std::string cache_dir = disk_cache_dir(options.compile_cache, options.cache_dir);
  // Room for every executable a server's runs may use: each row bucket up to the longest
  // run, for each sequence bucket, in each output kind (logits of the last or of every
  // row, a greedy or a sampled token).
  const LoadOptions& o = m->options_;
  const int64_t longest = std::min(o.max_chunk, o.ctx);
  size_t row_buckets = 1, seq_buckets = 1;
  for (int64_t r = std::max<int64_t>(o.min_bucket, 2); r / 2 < longest; r *= 2) ++row_buckets;
  for (int64_t s = 1; s < o.batch; s *= kSequenceBucketGrowth) ++seq_buckets;
  // and the compact-rows executables (buckets of real rows) under each layout of several
  // sequences and rows.
  size_t executables = row_buckets * seq_buckets;
  for (int64_t seqs = kSequenceBucketGrowth; seqs / kSequenceBucketGrowth < o.batch; seqs *= kSequenceBucketGrowth)
    for (int64_t rows = std::max<int64_t>(o.min_bucket, 2); rows / 2 < longest; rows *= 2)
      executables += m->compact_buckets(std::min(seqs, o.batch), rows).size();
  ASSIGN_OR_RETURN(m->pipeline_, make_model_pipeline(options.device, options.threads, cache_dir, 4 * executables));
  return m;
}

void LanguageModel::reset() {
  std::fill(n_past_.begin(), n_past_.end(), 0);
  std::fill(intact_.begin(), intact_.end(), std::numeric_limits<int64_t>::max());
}

Status LanguageModel::truncate(int64_t seq, int64_t n_keep) {
  if (seq < 0 || seq >= options_.batch)
    return Error::invalid_argument("truncate: sequence {} is outside [0, {})", seq, options_.batch);
  const int64_t have = n_past_[static_cast<size_t>(seq)];
  if (n_keep < 0 || n_keep > have)
    return Error::invalid_argument("truncate: sequence {} holds {} tokens, cannot keep {}", seq, have, n_keep);
  if (!can_truncate() && n_keep != 0 && n_keep != have)
    return Error::invalid_argument(
        "truncate: sequence {} of a model with recurrent layers keeps all {} tokens or none, not {} (its state "
        "cannot be rolled back)", seq, have, n_keep);
  int64_t& intact = intact_[static_cast<size_t>(seq)];
  if (n_keep > intact)
    return Error::invalid_argument(
        "truncate: sequence {} can keep at most {} tokens, not {}: a batched run it sat out while full wrote its "
        "padding over the cache rows from {} on", seq, intact, n_keep, intact);
  n_past_[static_cast<size_t>(seq)] = n_keep;
  intact = std::numeric_limits<int64_t>::max();  // rows past n_keep are rewritten before they are read
  return Status{};
}

Status LanguageModel::copy_prefix(int64_t src, int64_t dst, int64_t n) {
  const int64_t batch = options_.batch;
  if (src < 0 || src >= batch || dst < 0 || dst >= batch || src == dst)
    return Error::invalid_argument("copy_prefix: sequences {} -> {} are outside [0, {}) or the same", src, dst, batch);
  if (n < 0 || n > max_keep(src))
    return Error::invalid_argument("copy_prefix: sequence {} can give at most {} tokens, not {}", src, max_keep(src), n);
  if (!can_truncate())
    return Error::invalid_argument("copy_prefix: a model with recurrent layers keeps one state per sequence, not "
                                   "one cache row per token");
  if (!shared_state_) return Error::unsupported("copy_prefix: this backend's caches cannot be copied in place");
  if (state_.empty() && n > 0) return Error::invalid_argument("copy_prefix: no cache exists before the first run");
  const std::pair<int64_t, int64_t> end{dst, n};
  TRY(kv_back({&end, 1}));
  for (const auto& [name, storage] : state_)
    if (Status st = storage->copy_sequence_rows(batch, options_.ctx, src, dst, n); !st.ok()) {
      // Some caches may hold the copy and others not: the sequence holds nothing certain.
      n_past_[static_cast<size_t>(dst)] = 0;
      return st.error().with_context(fmt::format("copy_prefix, cache '{}'", name));
    }
  n_past_[static_cast<size_t>(dst)] = n;
  intact_[static_cast<size_t>(dst)] = std::numeric_limits<int64_t>::max();
  return {};
}

Status LanguageModel::prepare(CompiledGraph& graph) {
  // Weights stay where the source keeps them (the file mapping): the store holds views
  // and every executable binds them in place, so none copies a weight.
  if (!params_) params_ = std::make_unique<ParamStore>();
  TRY(bind_weights(*weights_, *params_, graph, source_, options_.on_weight_progress));
  // One run memory (activations, scratch) for every executable: they run in turn, so the
  // largest one's block serves all (32 variants of a server would otherwise each hold
  // their own).
  if (!run_memory_) {
    run_memory_ = graph.run_memory();
  } else if (Status st = graph.share_run_memory(run_memory_); !st.ok() && st.error().code() != ErrorCode::kUnsupported) {
    return st;
  }
  // The KV cache: the first executable's storage (allocated by the backend, on the
  // device) is the model's; every later executable binds it.
  if (!shared_state_) return {};
  if (state_.empty()) {
    state_ = graph.handle_storage();
    if (state_.empty() && !graph.manifest().handles.empty()) shared_state_ = false;
    return index_state();
  }
  for (const auto& [name, storage] : state_) TRY(graph.bind_handle_storage(name, storage));
  return {};
}

std::string default_profile_name(const ModelConfig& config, bool decode) {
  const char* family = config.arch == Arch::Qwen35 ? "qwen35"
                       : config.arch == Arch::Qwen3 || config.arch == Arch::Qwen2 || config.arch == Arch::Qwen3Moe
                           ? "qwen3"
                       : config.arch == Arch::Llama || config.arch == Arch::Phi3 || config.arch == Arch::MiniCPM3
                           ? "llama32"
                                                                                : "gemma";
  return fmt::format("{}_{}", family, decode ? "decode" : "prefill");
}

Expected<LanguageModel::Variant> LanguageModel::variant(int64_t rows, bool all_rows, const Pick& pick, int64_t seqs,
                                                        int64_t compact) {
  if (seqs <= 0 || seqs > options_.batch) seqs = options_.batch;
  if (seqs < options_.batch) TRY(make_state());
  const bool decode = rows == 1;
  std::string profile_name = decode ? options_.decode_profile : options_.prefill_profile;
  if (profile_name.empty()) profile_name = default_profile_name(config_, decode);
  auto profile = compile::CompileProfile::preset(profile_name);
  if (!profile) profile = compile::CompileProfile::load(profile_name);
  if (!profile) return profile.error().with_context("compile profile");
  TRY(check_profile_backends(*profile, profile_name));
  DecoderOptions d;
  // The decode template has its one row static: what the decode fusions of a backend
  // (fused_linear: one-row products) are decided on. Prefill rows stay a symbol, bound
  // per bucket.
  d.seq = decode ? ir::Dim(1) : ir::Dim::symbol(ir::SEQ);
  d.ctx = options_.ctx;
  d.kv_dtype = options_.kv_dtype;
  d.last_row_logits = !all_rows;
  d.greedy_token = pick.greedy;
  d.sample_token = pick.sample.has_value();
  d.batch = seqs;
  d.delta_chunk = options_.delta_chunk;
  d.policy = profile->fusion.policy;
  // Compact rows: the real rows are a second symbol, bound per bucket like SEQ.
  const ir::SymbolId compact_symbol = ir::intern_symbol("ROWS");
  if (compact > 0) d.compact_rows = ir::Dim::symbol(compact_symbol);
  const compile::CompileOptions co = profile->to_compile_options(pipeline_->session().backend()->target());
  // One key per (model file, profile, output kind, bucket); the graph itself is part of
  // the pipeline's template and AOT keys.
  StableHasher h;
  h.str("rlx.language_model.variant.v1");
  h.u64(model_id_);
  h.str(profile_name);
  h.u64(all_rows);
  h.u64(pick.greedy);
  h.u64(pick.sample.has_value());
  h.i64(rows);
  h.i64(options_.delta_chunk);
  if (seqs != options_.batch) h.i64(seqs);  // (keys of the full batch as before)
  if (compact > 0) h.i64(compact);           // (and of padded runs)
  const uint64_t key = h.digest();
  // What build_decoder's graph depends on besides this build: the model file and the
  // decoder options. It stands for the graph in the AOT key, so that a warm start reads
  // its entries without building the graph at all.
  StableHasher gh;
  // v2: a picked token is -1 for non-finite logits; v3: a batched model keeps one stacked
  // KV cache per layer ([batch, ctx, W]), not one per sequence
  gh.str("rlx.language_model.graph.v3");
  gh.u64(model_id_);
  gh.i64(decode ? 1 : -1);  // (static one row, or the symbol)
  gh.i64(d.ctx);
  gh.str(ir::dtype_name(d.kv_dtype));
  gh.u64(d.last_row_logits);
  gh.u64(d.greedy_token);
  gh.u64(d.sample_token);
  gh.i64(d.batch);
  gh.i64(d.delta_chunk);
  gh.str(ir::fusion_policy_name(d.policy));
  if (compact > 0) gh.str("compact_rows");
  const uint64_t graph_key = gh.digest();
  ir::DimBinding binding{{ir::SEQ, rows}};
  if (compact > 0) binding.set(compact_symbol, compact);
  const HirBuildFn build = [&]() -> Expected<ir::HirModule> {
    ASSIGN_OR_RETURN(BuiltModel built, build_decoder(config_, *weights_, d));
    return std::move(built.hir);
  };
  const VariantPrepareFn prep = [this](CompiledGraph& g) { return prepare(g); };
  if (options_.on_compile && !pipeline_->contains(key)) {
    std::string what = decode ? std::string("decode") : fmt::format("prefill, {} rows", rows);
    if (compact > 0) what += fmt::format(" ({} real)", compact);
    options_.on_compile(seqs == options_.batch ? what : fmt::format("{}, {} of {} sequences", what, seqs, options_.batch));
  }
  const int64_t compiles_before = pipeline_->stats().backend_compiles;
  Expected<Variant> v = Error::internal("not compiled");
  if (options_.compile_cache) {
    const std::string dir = !options_.cache_dir.empty() ? options_.cache_dir : env_config().cache_dir;
    v = pipeline_->get_or_compile_aot(fs::path(dir) / "aot", fmt::format("lm-{:016x}", model_id_), key, binding, build,
                                      co, prep, graph_key);
  } else {
    v = pipeline_->get_or_compile(key, binding, build, co, prep);
  }
  if (!v) return v.error().with_context(source_);
  if (pipeline_->stats().backend_compiles != compiles_before) {  // made now, not a hit
    const PipelineStats st = pipeline_->stats();
    ++compile_stats_.executables;
    compile_stats_.templates = st.template_builds;
    compile_stats_.graphs = st.hir_builds;
    compile_stats_.aot_loads = st.aot_loads;
    compile_stats_.compile_ms += (*v)->compile_ms;
  }
  return v;
}

Status LanguageModel::make_state() {
  if (shared_state_ && state_.empty()) TRY(variant(1, false, Pick{}, options_.batch));
  return {};
}

int64_t LanguageModel::sequence_bucket(int64_t n) const {
  int64_t seqs = 1;
  while (seqs < n) seqs *= kSequenceBucketGrowth;
  return std::min(seqs, options_.batch);
}

Status LanguageModel::prepare_batch(int64_t max_rows, bool greedy) {
  Pick pick;
  pick.greedy = greedy;
  TRY(make_state());
  for (int64_t active = 1;; active = active * kSequenceBucketGrowth) {
    const int64_t seqs = run_sequences(active);
    // Row buckets as run_batch picks them: 1, then min_bucket doubling up to the one
    // that holds max_rows (a bucket past the context is never picked).
    for (int64_t rows = 1; rows <= options_.ctx;) {
      TRY(variant(rows, false, pick, seqs));
      // and the compact-rows executables plan_batch may pick under this layout
      for (int64_t real : compact_buckets(seqs, rows)) TRY(variant(rows, false, pick, seqs, real));
      if (rows >= max_rows) break;
      rows = rows == 1 ? std::max<int64_t>(options_.min_bucket, 2) : rows * 2;
    }
    if (seqs >= options_.batch) break;
  }
  return {};
}

int64_t LanguageModel::compact_bucket(int64_t n) const {
  const int64_t octave = bucket_rows(n);
  const int64_t step = std::max<int64_t>(std::max<int64_t>(options_.min_bucket, 1), octave / 8);
  return std::min(octave, (n + step - 1) / step * step);
}

bool LanguageModel::compact_allowed(int64_t seqs, int64_t rows) const {
  return options_.compact_rows && seqs > 1 && rows > 1 && !config_.has_recurrent_layers();
}

std::vector<int64_t> LanguageModel::compact_buckets(int64_t seqs, int64_t rows) const {
  std::vector<int64_t> buckets;
  if (!compact_allowed(seqs, rows)) return buckets;
  for (int64_t real = compact_bucket(2); 2 * real <= seqs * rows; real = compact_bucket(real + 1)) buckets.push_back(real);
  return buckets;
}

int64_t LanguageModel::bucket_rows(int64_t n) const {
  if (n <= 1) return 1;
  int64_t rows = std::max<int64_t>(options_.min_bucket, 1);
  while (rows < n) rows *= 2;
  return rows;
}

Status LanguageModel::prepare_generation(int64_t prompt_tokens, Output output) {
  if (prompt_tokens < 1) return Error::invalid_argument("prepare_generation: a prompt has at least one token");
  Pick pick;
  pick.greedy = output == Output::kGreedy;
  if (output == Output::kSampled) pick.sample = TokenFilter{};
  const int64_t chunk = std::min(options_.ctx, options_.max_chunk);
  const int64_t last = prompt_tokens - (prompt_tokens - 1) / chunk * chunk;
  if (prompt_tokens > chunk) TRY(variant(bucket_rows(chunk), false, Pick{}));  // the earlier chunks
  TRY(variant(bucket_rows(last), false, pick));
  TRY(variant(1, false, pick));
  return {};
}

Status LanguageModel::move_cache_to(const Variant& next) {
  if (shared_state_ || cache_owner_ == next) {
    cache_owner_ = next;
    return {};
  }
  const bool any_cached = std::any_of(n_past_.begin(), n_past_.end(), [](int64_t n) { return n > 0; });
  if (cache_owner_ && any_cached) {
    for (const auto& h : cache_owner_->graph->manifest().handles) {
      ASSIGN_OR_RETURN(Tensor t, cache_owner_->graph->read_handle(h.name));
      TRY(next->graph->bind_handle(h.name, t.view()));
    }
  }
  cache_owner_ = next;
  return {};
}

Expected<Tensor> LanguageModel::run_chunk(std::span<const int32_t> tokens, bool all_rows, const Pick& pick) {
  Expected<Tensor> r = run_chunk_once(tokens, all_rows, pick);
  kv_failed_ = !r && r.error().code() == ErrorCode::kResourceExhausted;
  return r;
}

Expected<Tensor> LanguageModel::run_chunk_once(std::span<const int32_t> tokens, bool all_rows, const Pick& pick) {
  const auto n = static_cast<int64_t>(tokens.size());
  const int64_t rows = bucket_rows(n);
  ASSIGN_OR_RETURN(Variant v, variant(rows, all_rows, pick));
  TRY(move_cache_to(v));
  const std::pair<int64_t, int64_t> end{0, n_past_[0] + rows};
  TRY(kv_back({&end, 1}));

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
  // Recurrent layers: tokens seen before this run and its real rows.
  const std::array<int32_t, 2> seq{static_cast<int32_t>(n_past_[0]), static_cast<int32_t>(n)};
  const std::vector<int64_t> seq_shape{1, 2};
  if (config_.has_recurrent_layers()) inputs.push_back({"seq", TensorView{ir::DType::I32, seq_shape, seq.data()}});
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
  // A picked token of a row whose logits are not all finite comes back as
  // kNonFiniteToken (decoder.h): no choice at all.
  if ((pick.greedy || pick.sample) && out[0].as<int32_t>()[0] == kNonFiniteToken)
    return non_finite_logits_error(n_past_[0] - 1);
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

Expected<LanguageModel::BatchPlan> LanguageModel::plan_batch(std::span<const std::vector<int32_t>> tokens) {
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
  // The sequences this run covers: up to the last one given tokens, in a bucket (one
  // executable each); all of them where caches cannot be shared (make_state tells).
  TRY(make_state());
  int64_t active = 0;
  for (int64_t b = 0; b < batch; ++b)
    if (!tokens[static_cast<size_t>(b)].empty()) active = b + 1;
  const int64_t seqs = run_sequences(active);
  // Every sequence writes S cache rows from its position; a sequence given fewer tokens
  // pads (rows past its own are never attended to by its real rows and are overwritten
  // by its next tokens). Pick S so that all writes stay inside the caches.
  auto fits = [&](int64_t s) {
    for (int64_t b = 0; b < seqs; ++b) {
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
    for (int64_t b = 0; b < seqs; ++b)
      if (n_past_[static_cast<size_t>(b)] + rows > ctx)
        return Error::invalid_argument(
            "forward_batch: sequence {} has {} cached tokens, so a run of {} rows would pass the context length {}; "
            "run the longer inputs in a separate call",
            b, n_past_[static_cast<size_t>(b)], rows, ctx);
  }
  BatchPlan plan{seqs, rows, longest, std::vector<int64_t>(static_cast<size_t>(seqs))};
  // A full sequence given no tokens writes its padding over its last cache rows: it
  // takes no token before a truncate, which may then keep only the rows before them.
  for (int64_t b = 0; b < seqs; ++b)
    plan.start[static_cast<size_t>(b)] = std::min(n_past_[static_cast<size_t>(b)], ctx - rows);
  // Compact rows when the real rows, in their bucket, fill at most half the padded run
  // (one of compact_buckets(seqs, rows)).
  if (compact_allowed(seqs, rows)) {
    int64_t real = 0;
    for (int64_t b = 0; b < seqs; ++b) real += static_cast<int64_t>(tokens[static_cast<size_t>(b)].size());
    const int64_t bucket = compact_bucket(real);
    if (2 * bucket <= seqs * rows) plan.compact = bucket;
  }
  return plan;
}

Expected<LanguageModel::BatchRun> LanguageModel::run_batch(std::span<const std::vector<int32_t>> tokens,
                                                           bool all_rows, const Pick& pick) {
  // Memory that could not be had (KV rows past the budget, the device's memory for the
  // caches or a new executable's run block) fails a run before anything ran: a server
  // frees memory and runs it again.
  Expected<BatchRun> r = run_batch_once(tokens, all_rows, pick);
  kv_failed_ = !r && r.error().code() == ErrorCode::kResourceExhausted;
  return r;
}

Expected<LanguageModel::BatchRun> LanguageModel::run_batch_once(std::span<const std::vector<int32_t>> tokens,
                                                                bool all_rows, const Pick& pick) {
  ASSIGN_OR_RETURN(const BatchPlan plan, plan_batch(tokens));
  const int64_t seqs = plan.seqs, rows = plan.rows, compact = plan.compact;
  ASSIGN_OR_RETURN(Variant v, variant(rows, all_rows, pick, seqs, compact));
  TRY(move_cache_to(v));
  TRY(kv_back(plan_ends(plan)));
  // The rows the products see: every padded row, or with compact rows the sequences'
  // tokens one after the other (then padding up to the bucket); slot_rows / row_slots
  // map between those and the padded layout that the caches and attention keep.
  const size_t padded = static_cast<size_t>(seqs * rows), total = compact > 0 ? static_cast<size_t>(compact) : padded;
  std::vector<int32_t> tok(total, 0), pos(padded), last(static_cast<size_t>(seqs)), seq(static_cast<size_t>(2 * seqs));
  std::vector<int32_t> slot_rows(compact > 0 ? padded : 0), row_slots(compact > 0 ? total : 0, 0);
  std::vector<int64_t> first_row(static_cast<size_t>(seqs));
  int64_t next_row = 0;  // compact rows used so far
  for (int64_t b = 0; b < seqs; ++b) {
    const auto& t = tokens[static_cast<size_t>(b)];
    const auto len = static_cast<int64_t>(t.size());
    const int64_t start = plan.start[static_cast<size_t>(b)];
    if (start < n_past_[static_cast<size_t>(b)])
      intact_[static_cast<size_t>(b)] = std::min(intact_[static_cast<size_t>(b)], start);
    const int64_t first = compact > 0 ? next_row : b * rows;
    first_row[static_cast<size_t>(b)] = first;
    for (int64_t i = 0; i < rows; ++i) {
      const size_t r = static_cast<size_t>(b * rows + i);
      pos[r] = static_cast<int32_t>(start + i);
      if (compact > 0) {
        // A padding row copies the sequence's last real row (row 0 for a sequence given
        // none): its k/v land past the sequence's tokens, as padding's always did.
        slot_rows[r] = static_cast<int32_t>(len > 0 ? first + std::min(i, len - 1) : 0);
        if (i < len) row_slots[static_cast<size_t>(first + i)] = static_cast<int32_t>(r);
      }
      if (i < len) tok[static_cast<size_t>(first + i)] = t[static_cast<size_t>(i)];
    }
    last[static_cast<size_t>(b)] = static_cast<int32_t>(len > 0 ? first + len - 1 : 0);  // (none: its pick is unread)
    next_row += len;
    seq[static_cast<size_t>(2 * b)] = static_cast<int32_t>(n_past_[static_cast<size_t>(b)]);
    seq[static_cast<size_t>(2 * b + 1)] = static_cast<int32_t>(len);
  }
  const std::vector<int64_t> shape{static_cast<int64_t>(total)}, pshape{static_cast<int64_t>(padded)}, lshape{seqs},
      seq_shape{seqs, 2};
  std::vector<NamedTensorView> inputs{
      {"tokens", TensorView{ir::DType::I32, shape, tok.data()}},
      {"pos", TensorView{ir::DType::I32, pshape, pos.data()}},
  };
  if (compact > 0) {
    inputs.push_back({"slot_rows", TensorView{ir::DType::I32, pshape, slot_rows.data()}});
    inputs.push_back({"row_slots", TensorView{ir::DType::I32, shape, row_slots.data()}});
  }
  if (!all_rows) inputs.push_back({"last", TensorView{ir::DType::I32, lshape, last.data()}});
  if (config_.has_recurrent_layers()) inputs.push_back({"seq", TensorView{ir::DType::I32, seq_shape, seq.data()}});
  // One sequence: the executable of an unbatched run, whose active extent (run_chunk's
  // rows of real tokens) persists: set it for this run, computing only the given rows.
  if (seqs == 1 && rows > 1) TRY(v->graph->set_active_extent(plan.longest, rows));
  ASSIGN_OR_RETURN(std::vector<Tensor> out, v->graph->run(inputs));
  for (int64_t b = 0; b < seqs; ++b) n_past_[static_cast<size_t>(b)] += static_cast<int64_t>(tokens[static_cast<size_t>(b)].size());
  last_run_sequences_ = seqs;
  return BatchRun{std::move(out[0]), std::move(first_row)};
}

Expected<std::vector<std::vector<float>>> LanguageModel::forward_batch(std::span<const std::vector<int32_t>> tokens,
                                                                      bool all_rows) {
  ASSIGN_OR_RETURN(BatchRun run, run_batch(tokens, all_rows, Pick{}));
  const int64_t batch = options_.batch;
  std::span<const float> logits = run.out.as<float>();
  const auto V = static_cast<size_t>(config_.n_vocab);
  std::vector<std::vector<float>> result(static_cast<size_t>(batch));
  for (int64_t b = 0; b < batch; ++b) {
    const size_t len = tokens[static_cast<size_t>(b)].size();
    if (len == 0) continue;
    const size_t first = all_rows ? static_cast<size_t>(run.first_row[static_cast<size_t>(b)]) * V : static_cast<size_t>(b) * V;
    const size_t count = (all_rows ? len : 1) * V;
    result[static_cast<size_t>(b)].assign(logits.begin() + static_cast<std::ptrdiff_t>(first),
                                          logits.begin() + static_cast<std::ptrdiff_t>(first + count));
  }
  return result;
}

Expected<std::vector<int32_t>> LanguageModel::forward_batch_greedy(std::span<const std::vector<int32_t>> tokens,
                                                                   bool mark_non_finite) {
  Pick pick;
  pick.greedy = true;
  ASSIGN_OR_RETURN(BatchRun run, run_batch(tokens, false, pick));
  std::span<const int32_t> picked = run.out.as<int32_t>();
  std::vector<int32_t> next(static_cast<size_t>(options_.batch), kNoBatchToken);
  for (size_t b = 0; b < next.size(); ++b) {
    if (tokens[b].empty()) continue;
    // (the executable's -1 for a row whose logits are not all finite: decoder.h)
    if (picked[b] == kNonFiniteToken && !mark_non_finite)
      return non_finite_logits_error(n_past_[b] - 1).with_context(fmt::format("sequence {}", b));
    next[b] = picked[b];
  }
  return next;
}

}  // namespace rlx::models
