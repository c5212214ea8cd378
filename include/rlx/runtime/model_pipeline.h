// ModelCompilePipeline: compile a model's symbolic HIR once into a template (lowering +
// passes + legalize + symbolic plan), specialize it per shape (bind symbols, re-infer
// shapes, re-plan memory; no fusion pass re-runs), hand each specialization to the
// backend, and cache the executables in memory (FIFO) and the specialized LIR on disk
// (AOT cache, aot_cache.h). Around it: ModelComponent (a stable description of one
// executable variant), SeqBuckets + BucketedCompileCache + run_padded (sequence lengths
// rounded up to buckets, padded rows masked by set_active_extent) and ParamStore (one
// copy of the weights shared by every variant, bound without copying).
//
//   ModelCompilePipeline p(Device::cpu());
//   auto v = p.get_or_compile(key, ir::DimBinding{{ir::SEQ, 128}}, build_hir, options);
//   TRY(store.bind(*(*v)->graph));      // shared weights
//   auto out = run_padded(**v, inputs, /*actual=*/100);
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "rlx/base/aligned_buffer.h"
#include "rlx/base/byte_view.h"
#include "rlx/base/status.h"
#include "rlx/compile/fusion_report.h"
#include "rlx/compile/legalize.h"
#include "rlx/compile/options.h"
#include "rlx/ir/module.h"
#include "rlx/runtime/aot_cache.h"
#include "rlx/runtime/compiled_graph.h"
#include "rlx/runtime/device.h"
#include "rlx/runtime/session.h"
#include "rlx/runtime/tensor.h"

namespace rlx {

/// Builds the model's symbolic HIR (dims such as SEQ left as symbols). Called on every
/// cache miss to fingerprint the model (cheap: no lowering); lowering and the passes
/// run only when no template of that fingerprint and those options exists.
using HirBuildFn = std::function<Expected<ir::HirModule>()>;

/// Runs once on every executable the pipeline compiles, before it is cached: binds what
/// the model holds once for all its variants (weights, the KV cache / state storage).
/// An error drops the executable and is returned to the caller.
using VariantPrepareFn = std::function<Status(CompiledGraph&)>;

/// Stable digest of every CompileOptions field that changes the compiled code. Not
/// hashed: `binding` (supplied per specialization), `verbose`, `ir_dump_dir`.
uint64_t compile_options_hash(const compile::CompileOptions& options);

/// The optimized symbolic module: lowered, passed, legalized and planned with symbols
/// unbound (the plan holds slot kinds and view roots; sizes come with specialize).
struct ModelTemplate {
  ir::LirModule lir;
  uint64_t hir_fingerprint = 0;  ///< ir::fingerprint of the HIR graph
  ir::FusionPolicy policy = ir::FusionPolicy::Direct;
  uint64_t options_hash = 0;     ///< compile_options_hash of the options it was built with
  uint64_t key = 0;              ///< digest of the above + backend name
  compile::CompileOptions options;  ///< the options it was built with (binding cleared)
  compile::FusionReport fusion;
  compile::DispatchReport dispatch;
  double build_ms = 0;
};

/// One compiled variant: the runnable graph plus what callers need around it.
struct CompiledVariant {
  std::shared_ptr<CompiledGraph> graph;  ///< run from one thread at a time (or clone())
  ir::BindingManifest manifest;          ///< inputs/params/handles/outputs at this binding
  ir::DimBinding binding;
  ExtentInfo extent;                     ///< bucket symbol, its size, each value's bucket axis
  uint64_t key = 0;                      ///< the cache key it is stored under
  uint64_t options_hash = 0;
  bool from_aot = false;                 ///< its specialized LIR came from the AOT disk cache
  double compile_ms = 0;                 ///< HIR build, template / AOT load, specialize, backend compile
  /// Bucket axis of manifest input/output `i` (-1: none, -2: only inside a combined dim).
  int input_axis(size_t i) const;
  int output_axis(size_t i) const;
};

/// Counters, for tests and reports.
struct PipelineStats {
  int64_t hir_builds = 0;        ///< build_hir calls
  int64_t template_builds = 0;   ///< lowerings + pass pipelines run
  int64_t specializations = 0;   ///< bind + re-plan runs
  int64_t backend_compiles = 0;  ///< Backend::compile_with_extent calls
  int64_t cache_hits = 0;
  int64_t cache_misses = 0;
  int64_t evictions = 0;
  int64_t aot_loads = 0;         ///< entries loaded from disk
  int64_t aot_rejects = 0;       ///< entries found but rejected (corrupt, stale, foreign)
  int64_t aot_stores = 0;
};

/// What get_or_specialize_aot produced.
struct AotSpecialization {
  SpecializedModel model;
  bool from_disk = false;          ///< loaded (no lowering, passes or planning ran)
  std::filesystem::path path;      ///< the entry file
  uint64_t entry_key = 0;          ///< the key in the file name and header
};

// ---- variant descriptions -------------------------------------------------------------

enum class ModelPhase : uint8_t { kPrefill, kDecode };
/// kLazy: compiled on first request. kEager: also compiled up front by warm_up().
/// kAot: the specialized LIR goes through the pipeline's AOT disk cache (set_aot_cache).
enum class CompilationMode : uint8_t { kEager, kLazy, kAot };

std::string_view to_string(ModelPhase p);       ///< "prefill", "decode"
std::string_view to_string(CompilationMode m);  ///< "eager", "lazy", "aot"

/// How a variant is compiled and dispatched.
struct ModelExecutionConfig {
  compile::KernelDispatchPolicy dispatch = compile::KernelDispatchPolicy::PreferNative;
  CompilationMode mode = CompilationMode::kLazy;
  std::string profile;  ///< compile profile preset name; "" = "<family>_<phase>"
  /// Stable digest of the fields above (the profile as given).
  uint64_t cache_key() const;
  friend bool operator==(const ModelExecutionConfig&, const ModelExecutionConfig&) = default;
};

/// One executable variant of a model: family preset, phase, batch, sequence bucket and
/// execution config. Prefill binds BATCH=batch, SEQ=seq_bucket; decode binds BATCH=batch,
/// SEQ=1, PAST_SEQ=seq_bucket (the context bucket).
struct ModelComponent {
  std::string family = "llama32";
  ModelPhase phase = ModelPhase::kPrefill;
  int64_t batch = 1;
  int64_t seq_bucket = 1;
  ModelExecutionConfig exec;

  /// Stable across processes and platforms (StableHasher over names, not enum values).
  uint64_t cache_key() const;
  ir::DimBinding dim_binding() const;
  /// exec.profile, or "<family>_<phase>".
  std::string profile_name() const;
  /// The profile preset mapped onto CompileOptions for `target` (the backend's), with exec.dispatch.
  Expected<compile::CompileOptions> compile_options(const compile::Target& target) const;
  /// "llama32/prefill batch=1 seq=128 prefer_native lazy llama32_prefill".
  std::string to_string() const;
  friend bool operator==(const ModelComponent&, const ModelComponent&) = default;
};

// ---- the pipeline ---------------------------------------------------------------------

/// Thread-safe: every method may be called from several threads; compiles run one at
/// a time under the pipeline's lock, and hits wait for a compile in progress.
class ModelCompilePipeline {
 public:
  static constexpr size_t kDefaultCapacity = 8;

  /// `capacity`: executables kept in memory (at least 1; the oldest is evicted first).
  explicit ModelCompilePipeline(Session session, size_t capacity = kDefaultCapacity);
  explicit ModelCompilePipeline(Device device, size_t capacity = kDefaultCapacity);

  /// Why the pipeline cannot compile (the session's device is unavailable), else success.
  Status status() const { return session_.status(); }
  const Session& session() const { return session_; }

  // ---- the three steps ----------------------------------------------------------------
  /// Step 1: lowers build_hir()'s module and runs passes, legalization and symbolic
  /// planning once per (HIR fingerprint, policy, options, backend); later calls return
  /// the kept template. It becomes the current template (specialize, binding_manifest_for).
  Expected<std::shared_ptr<const ModelTemplate>> build_template(const HirBuildFn& build_hir,
                                                                const compile::CompileOptions& options);
  /// Step 2: binds `binding` in the current template, re-infers shapes and re-plans
  /// memory (options.arena_alignment, options.in_place). Every symbol must be bound.
  Expected<SpecializedModel> specialize(const ir::DimBinding& binding, const compile::CompileOptions& options);
  /// The same for an explicit template.
  Expected<SpecializedModel> specialize(const ModelTemplate& tmpl, const ir::DimBinding& binding,
                                        const compile::CompileOptions& options);
  /// Step 3: the backend executable. Unlike Session::compile_lir, keeps the bucket axis
  /// (`specialized.extent`) so that set_active_extent works on the result.
  Expected<CompiledGraph> compile_lir(const SpecializedModel& specialized, const compile::CompileOptions& options);

  // ---- cached ---------------------------------------------------------------------------
  /// The executable cached under `key`, or steps 1-3 and insertion (evicting the oldest
  /// entry when full). A hit whose binding or options differ from the cached entry's is
  /// treated as a miss and replaces it.
  Expected<std::shared_ptr<const CompiledVariant>> get_or_compile(uint64_t key, const ir::DimBinding& binding,
                                                                  const HirBuildFn& build_hir,
                                                                  const compile::CompileOptions& options,
                                                                  const VariantPrepareFn& prepare = {});
  /// get_or_compile keyed by component.cache_key() and bound by component.dim_binding();
  /// CompilationMode::kAot specializes through the AOT cache set by set_aot_cache.
  Expected<std::shared_ptr<const CompiledVariant>> get_or_compile_component(const ModelComponent& component,
                                                                            const HirBuildFn& build_hir,
                                                                            const compile::CompileOptions& options);
  /// Compiles every kEager component (with component.compile_options of the backend's target).
  Status warm_up(std::span<const ModelComponent> components, const HirBuildFn& build_hir);

  // ---- AOT disk cache -------------------------------------------------------------------
  /// The specialized LIR for (key, binding) from `cache_dir`, or built (template +
  /// specialize) and stored there. The entry key covers `key`, the HIR fingerprint and
  /// policy, the options, the binding, device, backend, kRlxVersion, the build
  /// (build_identity) and kAotFormatVersion;
  /// build_hir runs to fingerprint the model (no lowering unless the entry is rebuilt).
  /// With `graph_key` the caller vouches that it determines the HIR build_hir makes (in
  /// this build: e.g. the model file's identity and the builder's options): it stands
  /// for the fingerprint, and build_hir runs only when the entry is (re)built.
  Expected<AotSpecialization> get_or_specialize_aot(const std::filesystem::path& cache_dir, std::string_view base,
                                                    uint64_t key, const ir::DimBinding& binding,
                                                    const HirBuildFn& build_hir,
                                                    const compile::CompileOptions& options,
                                                    std::optional<uint64_t> graph_key = std::nullopt);
  /// get_or_specialize_aot + compile_lir, cached in memory under `key` like get_or_compile.
  Expected<std::shared_ptr<const CompiledVariant>> get_or_compile_aot(const std::filesystem::path& cache_dir,
                                                                      std::string_view base, uint64_t key,
                                                                      const ir::DimBinding& binding,
                                                                      const HirBuildFn& build_hir,
                                                                      const compile::CompileOptions& options,
                                                                      const VariantPrepareFn& prepare = {},
                                                                      std::optional<uint64_t> graph_key = std::nullopt);
  /// Directory and base name used for CompilationMode::kAot components.
  void set_aot_cache(std::filesystem::path dir, std::string base);

  // ---- inspection -----------------------------------------------------------------------
  bool contains(uint64_t key) const;
  size_t len() const;
  size_t capacity() const { return capacity_; }
  /// Cached keys, oldest first (the next eviction is keys().front()).
  std::vector<uint64_t> keys() const;
  /// Inputs/params/handles/outputs of the current template at `binding`.
  Expected<ir::BindingManifest> binding_manifest_for(const ir::DimBinding& binding) const;
  PipelineStats stats() const;
  /// Drops cached executables and templates (counters stay).
  void clear();

 private:
  struct Entry {
    std::shared_ptr<const CompiledVariant> variant;
  };
  Expected<std::shared_ptr<const ModelTemplate>> build_template_locked(const HirBuildFn& build_hir,
                                                                       const compile::CompileOptions& options);
  Expected<std::shared_ptr<const ModelTemplate>> template_from_hir_locked(const ir::HirModule& hir,
                                                                          const compile::CompileOptions& options);
  Expected<SpecializedModel> specialize_locked(const ModelTemplate& tmpl, const ir::DimBinding& binding,
                                               const compile::CompileOptions& options);
  Expected<CompiledGraph> compile_lir_locked(const SpecializedModel& s, const compile::CompileOptions& options,
                                             const ModelTemplate* tmpl);
  Expected<AotSpecialization> specialize_aot_locked(const std::filesystem::path& cache_dir, std::string_view base,
                                                    uint64_t key, const ir::DimBinding& binding,
                                                    const HirBuildFn& build_hir,
                                                    const compile::CompileOptions& options,
                                                    std::optional<uint64_t> graph_key);
  std::shared_ptr<const CompiledVariant> lookup_locked(uint64_t key, const ir::DimBinding& binding,
                                                       uint64_t options_hash);
  Expected<std::shared_ptr<const CompiledVariant>> insert_locked(uint64_t key, const SpecializedModel& s,
                                                                 CompiledGraph graph,
                                                                 const compile::CompileOptions& options,
                                                                 const VariantPrepareFn& prepare, bool from_aot,
                                                                 double compile_ms);
  Expected<ir::HirModule> build_hir_locked(const HirBuildFn& build_hir);
  std::string backend_name() const;
  /// The backend's name and its target's options_key: what identifies it in cache keys.
  std::string backend_key() const;

  Session session_;
  size_t capacity_;
  mutable std::mutex mu_;
  std::map<uint64_t, Entry> entries_;
  std::deque<uint64_t> order_;  // FIFO, oldest first
  std::map<uint64_t, std::shared_ptr<const ModelTemplate>> templates_;  // by template key
  std::deque<uint64_t> template_order_;
  std::shared_ptr<const ModelTemplate> current_;
  std::filesystem::path aot_dir_;
  std::string aot_base_ = "model";
  PipelineStats stats_;
};

// ---- sequence buckets -----------------------------------------------------------------

/// Ascending bucket sizes along a sequence axis; a length is rounded up to the smallest
/// bucket that holds it.
class SeqBuckets {
 public:
  /// 1, 2, 4, ... up to `max_context` (the last bucket is max_context itself when it is
  /// not a power of two), starting at the smallest power of two >= `min_bucket`.
  static Expected<SeqBuckets> powers_of_two(int64_t max_context, int64_t min_bucket = 1);
  /// Caller-chosen sizes (positive, strictly ascending).
  static Expected<SeqBuckets> from_list(std::vector<int64_t> sizes);

  /// The smallest bucket >= `length`; an error when length < 1 or above the largest.
  Expected<int64_t> bucket_for(int64_t length) const;
  const std::vector<int64_t>& sizes() const { return sizes_; }
  int64_t max_length() const { return sizes_.back(); }

 private:
  explicit SeqBuckets(std::vector<int64_t> sizes) : sizes_(std::move(sizes)) {}
  std::vector<int64_t> sizes_;
};

/// Executables per sequence bucket, through a ModelCompilePipeline: a length is rounded
/// up to its bucket and the graph is compiled with `symbol` bound to the bucket size.
class BucketedCompileCache {
 public:
  BucketedCompileCache(ModelCompilePipeline& pipeline, SeqBuckets buckets, ir::SymbolId symbol = ir::SEQ)
      : pipeline_(pipeline), buckets_(std::move(buckets)), symbol_(symbol) {}

  /// The variant for `length` rows (bucket = buckets().bucket_for(length)); `base`
  /// binds the other symbols (e.g. BATCH).
  Expected<std::shared_ptr<const CompiledVariant>> get(int64_t length, const HirBuildFn& build_hir,
                                                       const compile::CompileOptions& options,
                                                       const ir::DimBinding& base = {});
  /// The cache key of (length's bucket, base, options).
  Expected<uint64_t> key_for(int64_t length, const compile::CompileOptions& options,
                             const ir::DimBinding& base = {}) const;
  /// get() then run_padded().
  Expected<std::vector<Tensor>> run(std::span<const NamedTensorView> inputs, int64_t length,
                                    const HirBuildFn& build_hir, const compile::CompileOptions& options,
                                    const ir::DimBinding& base = {});

  const SeqBuckets& buckets() const { return buckets_; }
  ir::SymbolId symbol() const { return symbol_; }

 private:
  ModelCompilePipeline& pipeline_;
  SeqBuckets buckets_;
  ir::SymbolId symbol_;
};

/// Runs a bucketed variant on `actual` real rows: inputs with a bucket axis are given
/// with `actual` rows along it and padded with zeros to the bucket size, the graph's
/// active extent is set to (actual, bucket), and outputs with a bucket axis come back
/// with only their `actual` real rows (others whole; f16/bf16/f64 widened to f32 as
/// CompiledGraph::run). Inputs without a bucket axis keep their compiled shapes.
Expected<std::vector<Tensor>> run_padded(const CompiledVariant& variant, std::span<const NamedTensorView> inputs,
                                         int64_t actual);

// ---- shared parameters ----------------------------------------------------------------

/// One immutable weight: dtype, shape and bytes (declared-dtype layout), read-only and
/// owned elsewhere (the store's own copy, or a model file's mapping).
struct SharedParam {
  ir::DType dtype = ir::DType::F32;
  std::vector<int64_t> shape;
  ByteView bytes;
};

/// How ParamStore::bind served a graph's params.
struct ParamBindReport {
  size_t shared = 0;  ///< bound in place (no copy)
  size_t copied = 0;  ///< copied, because the backend cannot share or the dtype differs
};

/// All weights of one model, by name, held once and bound into every compiled variant
/// without copying (Executable::set_param_shared). Fill it, then treat it as read-only:
/// binding from several threads is safe, adding while binding is not.
class ParamStore {
 public:
  /// Copies `bytes` (exactly dtype_bytes(dtype, elements of shape)) into the store.
  Status add(const std::string& name, ir::DType dtype, std::vector<int64_t> shape, std::span<const uint8_t> bytes);
  Status add_f32(const std::string& name, std::vector<int64_t> shape, std::span<const float> values);
  /// Adopts bytes owned elsewhere (no copy; their size is checked).
  Status add_shared(const std::string& name, SharedParam param);

  const SharedParam* find(std::string_view name) const;
  size_t size() const { return params_.size(); }
  /// Bytes held (each weight counted once).
  int64_t total_bytes() const;

  /// Sets every param of `graph` from the store: shared in place when the dtype matches
  /// and the backend supports it, else copied (converted) through set_param_typed.
  /// Errors name a param the store lacks or whose shape differs.
  Expected<ParamBindReport> bind(CompiledGraph& graph) const;

 private:
  std::map<std::string, SharedParam, std::less<>> params_;
};

}  // namespace rlx
