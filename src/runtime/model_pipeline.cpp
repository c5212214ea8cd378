// ModelCompilePipeline (rlx/runtime/model_pipeline.h): template once per (HIR
// fingerprint, options, backend), specialize per binding (bind + re-plan, no passes),
// backend compile with the bucket axis kept, FIFO cache of executables, and the AOT
// disk path that loads a specialized LIR instead of lowering and planning.
#include "rlx/runtime/model_pipeline.h"

#include <algorithm>
#include <chrono>

#include "rlx/base/hash.h"
#include "rlx/base/log.h"
#include "rlx/compile/memory_plan.h"
#include "rlx/compile/pipeline.h"
#include "rlx/ir/text.h"

namespace rlx {
namespace {

void hash_op_set(StableHasher& h, const compile::OpSet& s) {
  const std::vector<ir::OpKind> kinds = s.kinds();
  h.u64(kinds.size());
  for (ir::OpKind k : kinds) h.str(ir::op_name(k));  // names: stable when ops.def grows
}

uint64_t template_key(uint64_t hir_fingerprint, ir::FusionPolicy policy, uint64_t options_hash,
                      std::string_view backend) {
  StableHasher h;
  h.str("rlx.model_template.v1");
  h.u64(hir_fingerprint);
  h.str(ir::fusion_policy_name(policy));
  h.u64(options_hash);
  h.str(backend);
  return h.digest();
}

// The bucket symbol: the first symbolic dim of the graph's inputs, in input order (the
// rule Session uses, so that both agree on which axis set_active_extent restricts).
ir::SymbolId bucket_symbol(const ir::Graph& g) {
  for (ir::ValueId v : g.inputs())
    for (const ir::Dim& d : g.node(v).shape)
      if (!d.is_static()) return d.syms[0];
  return 0;
}

// Per value of the symbolic template: the axis equal to `sym`, -1 without one, -2 when
// `sym` only appears inside a combined dim (2*SEQ, BATCH*SEQ).
ExtentInfo extent_info(const ir::Graph& tmpl, ir::SymbolId sym, int64_t upper) {
  ExtentInfo e;
  e.symbol = sym;
  e.upper = upper;
  e.axis.assign(static_cast<size_t>(tmpl.size()), -1);
  for (ir::ValueId v = 0; v < tmpl.size(); ++v) {
    int axis = -1;
    bool combined = false;
    const ir::Shape& s = tmpl.node(v).shape;
    for (int64_t i = 0; i < s.rank(); ++i) {
      const ir::Dim& d = s[i];
      if (d.syms[0] != sym && d.syms[1] != sym) continue;
      if (d == ir::Dim::symbol(sym) && axis < 0) axis = static_cast<int>(i);
      else combined = true;
    }
    e.axis[static_cast<size_t>(v)] = combined ? -2 : axis;
  }
  return e;
}

int axis_of(const ExtentInfo& e, const std::vector<ir::ManifestEntry>& list, size_t i) {
  if (e.empty() || i >= list.size()) return -1;
  const auto v = static_cast<size_t>(list[i].value);
  return v < e.axis.size() ? e.axis[v] : -1;
}

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

uint64_t compile_options_hash(const compile::CompileOptions& o) {
  StableHasher h;
  h.str("rlx.compile_options.v1");
  h.u64(o.dce);
  h.u64(o.constant_folding);
  h.u64(o.cse);
  h.u64(o.assert_fusion_clean);
  h.u64(o.fusion.skip);
  h.u64(o.fusion.unfuse_regions);
  h.str(compile::to_string(o.fusion.target));
  h.u64(o.fusion.limits.has_value());
  if (o.fusion.limits) {
    h.i64(o.fusion.limits->max_inputs);
    h.i64(o.fusion.limits->max_steps);
  }
  std::vector<std::string> disabled = o.fusion.disabled_patterns;  // a set: order does not matter
  std::sort(disabled.begin(), disabled.end());
  h.u64(disabled.size());
  for (const std::string& p : disabled) h.str(p);
  h.str(compile::to_string(o.precision));
  h.str(compile::to_string(o.mixed));
  h.str(compile::to_string(o.dispatch.policy));
  hash_op_set(h, o.dispatch.force_common);
  hash_op_set(h, o.dispatch.force_native);
  h.i64(o.arena_alignment);
  h.u64(o.in_place);
  return h.digest();
}

int CompiledVariant::input_axis(size_t i) const { return axis_of(extent, manifest.inputs, i); }
int CompiledVariant::output_axis(size_t i) const { return axis_of(extent, manifest.outputs, i); }

ModelCompilePipeline::ModelCompilePipeline(Session session, size_t capacity)
    : session_(std::move(session)), capacity_(capacity == 0 ? 1 : capacity) {}

ModelCompilePipeline::ModelCompilePipeline(Device device, size_t capacity)
    : ModelCompilePipeline(Session(device), capacity) {}

std::string ModelCompilePipeline::backend_name() const {
  return session_.backend() ? session_.backend()->name() : std::string();
}

std::string ModelCompilePipeline::backend_key() const {
  return session_.backend() ? session_.backend()->name() + " | " + session_.backend()->target().options_key
                            : std::string();
}

Expected<ir::HirModule> ModelCompilePipeline::build_hir_locked(const HirBuildFn& build_hir) {
  if (!build_hir) return Error::invalid_argument("model pipeline: no HIR builder given");
  ++stats_.hir_builds;
  auto hir = build_hir();
  if (!hir) return hir.error().with_context("model pipeline: building the HIR");
  return hir;
}

// ---- step 1 -------------------------------------------------------------------------------

Expected<std::shared_ptr<const ModelTemplate>> ModelCompilePipeline::build_template(
    const HirBuildFn& build_hir, const compile::CompileOptions& options) {
  std::lock_guard<std::mutex> lock(mu_);
  return build_template_locked(build_hir, options);
}

Expected<std::shared_ptr<const ModelTemplate>> ModelCompilePipeline::build_template_locked(
    const HirBuildFn& build_hir, const compile::CompileOptions& options) {
  ASSIGN_OR_RETURN(ir::HirModule hir, build_hir_locked(build_hir));
  return template_from_hir_locked(hir, options);
}

Expected<std::shared_ptr<const ModelTemplate>> ModelCompilePipeline::template_from_hir_locked(
    const ir::HirModule& hir, const compile::CompileOptions& options) {
  TRY(session_.status());
  const uint64_t fp = ir::fingerprint(hir.graph);
  const uint64_t oh = compile_options_hash(options);
  const uint64_t key = template_key(fp, hir.policy, oh, backend_key());
  if (auto it = templates_.find(key); it != templates_.end()) {
    current_ = it->second;
    return it->second;
  }
  const auto t0 = std::chrono::steady_clock::now();
  compile::CompileOptions o = options;
  o.binding = {};  // symbols stay: this is the template
  ASSIGN_OR_RETURN(compile::CompileResult r, compile::compile_hir(hir, o, session_.backend()->supported_ops(),
                                                                  session_.backend()->target()));
  ++stats_.template_builds;
  auto t = std::make_shared<ModelTemplate>();
  t->lir = std::move(r.lir);
  t->hir_fingerprint = fp;
  t->policy = hir.policy;
  t->options_hash = oh;
  t->key = key;
  t->options = std::move(o);
  t->fusion = std::move(r.fusion);
  t->dispatch = std::move(r.dispatch);
  t->build_ms = ms_since(t0);
  // Templates are few (one per graph and options); keep as many as executables.
  while (templates_.size() >= capacity_) {
    templates_.erase(template_order_.front());
    template_order_.pop_front();
  }
  templates_.emplace(key, t);
  template_order_.push_back(key);
  current_ = t;
  return std::shared_ptr<const ModelTemplate>(std::move(t));
}

// ---- step 2 -------------------------------------------------------------------------------

Expected<SpecializedModel> ModelCompilePipeline::specialize(const ir::DimBinding& binding,
                                                            const compile::CompileOptions& options) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!current_) return Error::invalid_argument("model pipeline: specialize before build_template");
  const std::shared_ptr<const ModelTemplate> t = current_;
  return specialize_locked(*t, binding, options);
}

Expected<SpecializedModel> ModelCompilePipeline::specialize(const ModelTemplate& tmpl, const ir::DimBinding& binding,
                                                            const compile::CompileOptions& options) {
  std::lock_guard<std::mutex> lock(mu_);
  return specialize_locked(tmpl, binding, options);
}

Expected<SpecializedModel> ModelCompilePipeline::specialize_locked(const ModelTemplate& tmpl,
                                                                   const ir::DimBinding& binding,
                                                                   const compile::CompileOptions& options) {
  std::string missing;
  for (ir::SymbolId s : tmpl.lir.dynamic_symbols)
    if (!binding.has(s)) missing += (missing.empty() ? "" : ", ") + ir::symbol_name(s);
  if (!missing.empty())
    return Error::invalid_argument("model pipeline: binding '{}' leaves symbols {} unbound", binding.to_string(),
                                   missing);
  ASSIGN_OR_RETURN(ir::Graph bound, ir::bind(tmpl.lir.graph, binding));
  SpecializedModel s;
  ASSIGN_OR_RETURN(s.lir, compile::plan_memory(ir::MirModule{std::move(bound)}, compile::plan_options(options)));
  // bind() and plan_memory() keep value ids, so the template's bucket axes apply.
  RLX_ASSERT(s.lir.graph.size() == tmpl.lir.graph.size());
  s.binding = binding;
  const ir::SymbolId sym = bucket_symbol(tmpl.lir.graph);
  if (sym != 0 && binding.has(sym)) s.extent = extent_info(tmpl.lir.graph, sym, binding.get(sym));
  ++stats_.specializations;
  return s;
}

// ---- step 3 -------------------------------------------------------------------------------

Expected<CompiledGraph> ModelCompilePipeline::compile_lir(const SpecializedModel& specialized,
                                                          const compile::CompileOptions& options) {
  std::lock_guard<std::mutex> lock(mu_);
  return compile_lir_locked(specialized, options, nullptr);
}

Expected<CompiledGraph> ModelCompilePipeline::compile_lir_locked(const SpecializedModel& s,
                                                                 const compile::CompileOptions& options,
                                                                 const ModelTemplate* tmpl) {
  TRY(session_.status());
  if (!s.lir.dynamic_symbols.empty())
    return Error::invalid_argument("model pipeline: compile_lir needs a specialized module (symbols unbound)");
  if (!s.extent.empty() && s.extent.axis.size() != static_cast<size_t>(s.lir.graph.size()))
    return Error::invalid_argument("model pipeline: extent has {} axes for {} values", s.extent.axis.size(),
                                   s.lir.graph.size());
  ASSIGN_OR_RETURN(std::unique_ptr<Executable> exe, session_.backend()->compile_with_extent(s.lir, options, s.extent));
  ++stats_.backend_compiles;
  return CompiledGraph(session_.device(), std::move(exe), tmpl ? tmpl->fusion : compile::FusionReport{},
                       tmpl ? tmpl->dispatch : compile::DispatchReport{}, s.extent.symbol, s.extent.upper);
}

// ---- the executable cache ---------------------------------------------------------------

std::shared_ptr<const CompiledVariant> ModelCompilePipeline::lookup_locked(uint64_t key, const ir::DimBinding& binding,
                                                                           uint64_t options_hash) {
  auto it = entries_.find(key);
  if (it == entries_.end()) return nullptr;
  const CompiledVariant& v = *it->second.variant;
  if (v.binding.values() == binding.values() && v.options_hash == options_hash) {
    ++stats_.cache_hits;
    return it->second.variant;
  }
  RLX_LOG_DEBUG("model pipeline: key {:016x} cached for {} / options {:016x}, asked for {} / {:016x}: recompiling",
                key, v.binding.to_string(), v.options_hash, binding.to_string(), options_hash);
  entries_.erase(it);
  order_.erase(std::find(order_.begin(), order_.end(), key));
  return nullptr;
}

Expected<std::shared_ptr<const CompiledVariant>> ModelCompilePipeline::insert_locked(
    uint64_t key, const SpecializedModel& s, CompiledGraph graph, const compile::CompileOptions& options,
    const VariantPrepareFn& prepare, bool from_aot, double compile_ms) {
  if (prepare) TRY(prepare(graph));
  auto v = std::make_shared<CompiledVariant>();
  v->graph = std::make_shared<CompiledGraph>(std::move(graph));
  const ir::IoManifest& m = s.lir.manifest;
  v->manifest = ir::BindingManifest{m.inputs, m.params, m.handles, m.outputs};
  v->binding = s.binding;
  v->extent = s.extent;
  v->key = key;
  v->options_hash = compile_options_hash(options);
  v->from_aot = from_aot;
  v->compile_ms = compile_ms;
  while (entries_.size() >= capacity_) {
    entries_.erase(order_.front());
    order_.pop_front();
    ++stats_.evictions;
  }
  entries_[key] = Entry{v};
  order_.push_back(key);
  return std::shared_ptr<const CompiledVariant>(std::move(v));
}

Expected<std::shared_ptr<const CompiledVariant>> ModelCompilePipeline::get_or_compile(
    uint64_t key, const ir::DimBinding& binding, const HirBuildFn& build_hir, const compile::CompileOptions& options,
    const VariantPrepareFn& prepare) {
  std::lock_guard<std::mutex> lock(mu_);
  if (auto v = lookup_locked(key, binding, compile_options_hash(options))) return v;
  ++stats_.cache_misses;
  const auto t0 = std::chrono::steady_clock::now();
  ASSIGN_OR_RETURN(std::shared_ptr<const ModelTemplate> t, build_template_locked(build_hir, options));
  ASSIGN_OR_RETURN(SpecializedModel s, specialize_locked(*t, binding, options));
  ASSIGN_OR_RETURN(CompiledGraph g, compile_lir_locked(s, options, t.get()));
  return insert_locked(key, s, std::move(g), options, prepare, false, ms_since(t0));
}

Expected<std::shared_ptr<const CompiledVariant>> ModelCompilePipeline::get_or_compile_component(
    const ModelComponent& component, const HirBuildFn& build_hir, const compile::CompileOptions& options) {
  compile::CompileOptions o = options;
  o.dispatch.policy = component.exec.dispatch;  // the component's dispatch is part of its key
  const uint64_t key = component.cache_key();
  const ir::DimBinding binding = component.dim_binding();
  if (component.exec.mode == CompilationMode::kAot) {
    std::filesystem::path dir;
    std::string base;
    {
      std::lock_guard<std::mutex> lock(mu_);
      dir = aot_dir_;
      base = aot_base_;
    }
    if (dir.empty())
      return Error::invalid_argument("model pipeline: component {} is AOT but no AOT cache is set (set_aot_cache)",
                                     component.to_string());
    return get_or_compile_aot(dir, base, key, binding, build_hir, o);
  }
  return get_or_compile(key, binding, build_hir, o);
}

Status ModelCompilePipeline::warm_up(std::span<const ModelComponent> components, const HirBuildFn& build_hir) {
  for (const ModelComponent& c : components) {
    if (c.exec.mode != CompilationMode::kEager) continue;
    ASSIGN_OR_RETURN(compile::CompileOptions o, c.compile_options(session_.backend()->target()));
    auto v = get_or_compile_component(c, build_hir, o);
    if (!v) return v.error().with_context("warm_up " + c.to_string());
  }
  return {};
}

// ---- AOT ------------------------------------------------------------------------------------

Expected<AotSpecialization> ModelCompilePipeline::get_or_specialize_aot(const std::filesystem::path& cache_dir,
                                                                        std::string_view base, uint64_t key,
                                                                        const ir::DimBinding& binding,
                                                                        const HirBuildFn& build_hir,
                                                                        const compile::CompileOptions& options,
                                                                        std::optional<uint64_t> graph_key) {
  std::lock_guard<std::mutex> lock(mu_);
  return specialize_aot_locked(cache_dir, base, key, binding, build_hir, options, graph_key);
}

Expected<AotSpecialization> ModelCompilePipeline::specialize_aot_locked(const std::filesystem::path& cache_dir,
                                                                        std::string_view base, uint64_t key,
                                                                        const ir::DimBinding& binding,
                                                                        const HirBuildFn& build_hir,
                                                                        const compile::CompileOptions& options,
                                                                        std::optional<uint64_t> graph_key) {
  TRY(session_.status());
  if (!is_valid_aot_base(base))
    return Error::invalid_argument("AOT cache base name '{}' must be [A-Za-z0-9._-]+", base);
  std::optional<ir::HirModule> hir;  // built only when needed: to fingerprint, or on a miss
  if (!graph_key) {
    ASSIGN_OR_RETURN(ir::HirModule built, build_hir_locked(build_hir));
    hir = std::move(built);
  }
  const std::string device = session_.device().to_string();
  StableHasher h;
  h.str("rlx.aot_entry.v2");
  h.str(kRlxVersion);
  h.str(build_identity());
  h.u64(kAotFormatVersion);
  h.u64(key);
  if (graph_key) {
    h.str("graph key");
    h.u64(*graph_key);
  } else {
    h.u64(ir::fingerprint(hir->graph));
    h.str(ir::fusion_policy_name(hir->policy));
  }
  h.u64(compile_options_hash(options));
  h.str(binding.to_string());
  h.str(device);
  h.str(backend_key());
  AotSpecialization out;
  out.entry_key = h.digest();
  const AotCache cache(cache_dir);
  out.path = cache.path_for(base, out.entry_key);
  std::string why;
  if (std::optional<SpecializedModel> m = cache.load(base, out.entry_key, device, &why)) {
    if (m->binding.values() == binding.values()) {
      ++stats_.aot_loads;
      out.model = std::move(*m);
      out.from_disk = true;
      return out;
    }
    why = fmt::format("binding {} differs from the requested {}", m->binding.to_string(), binding.to_string());
    RLX_LOG_DEBUG("aot cache: ignoring {}: {}", out.path.string(), why);
  }
  if (!why.empty()) ++stats_.aot_rejects;
  if (!hir) {
    ASSIGN_OR_RETURN(ir::HirModule built, build_hir_locked(build_hir));
    hir = std::move(built);
  }
  ASSIGN_OR_RETURN(std::shared_ptr<const ModelTemplate> t, template_from_hir_locked(*hir, options));
  ASSIGN_OR_RETURN(out.model, specialize_locked(*t, binding, options));
  // A cache that cannot be written costs the next process a compile, nothing more.
  Status stored = cache.store(base, out.entry_key, device, out.model);
  if (stored.ok()) ++stats_.aot_stores;
  else RLX_LOG_WARN("aot cache: {}", stored.error().message());
  return out;
}

Expected<std::shared_ptr<const CompiledVariant>> ModelCompilePipeline::get_or_compile_aot(
    const std::filesystem::path& cache_dir, std::string_view base, uint64_t key, const ir::DimBinding& binding,
    const HirBuildFn& build_hir, const compile::CompileOptions& options, const VariantPrepareFn& prepare,
    std::optional<uint64_t> graph_key) {
  std::lock_guard<std::mutex> lock(mu_);
  if (auto v = lookup_locked(key, binding, compile_options_hash(options))) return v;
  ++stats_.cache_misses;
  const auto t0 = std::chrono::steady_clock::now();
  ASSIGN_OR_RETURN(AotSpecialization a,
                   specialize_aot_locked(cache_dir, base, key, binding, build_hir, options, graph_key));
  const double specialize_ms = ms_since(t0);
  // A template built here (the entry was missing) keeps its fusion and dispatch reports.
  const ModelTemplate* t = a.from_disk || !current_ ? nullptr : current_.get();
  ASSIGN_OR_RETURN(CompiledGraph g, compile_lir_locked(a.model, options, t));
  const double backend_ms = ms_since(t0) - specialize_ms;
  auto v = insert_locked(key, a.model, std::move(g), options, prepare, a.from_disk, ms_since(t0));
  RLX_LOG_DEBUG("model pipeline: {} {} in {:.2f} ms ({}: {:.2f}, backend compile {:.2f}, prepare {:.2f})",
                binding.to_string(), a.from_disk ? "loaded" : "compiled", ms_since(t0),
                a.from_disk ? (graph_key ? "cache load" : "HIR + cache load") : "HIR + passes", specialize_ms, backend_ms,
                ms_since(t0) - specialize_ms - backend_ms);
  return v;
}

void ModelCompilePipeline::set_aot_cache(std::filesystem::path dir, std::string base) {
  std::lock_guard<std::mutex> lock(mu_);
  aot_dir_ = std::move(dir);
  aot_base_ = std::move(base);
}

// ---- inspection -------------------------------------------------------------------------------

bool ModelCompilePipeline::contains(uint64_t key) const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.count(key) != 0;
}

size_t ModelCompilePipeline::len() const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.size();
}

std::vector<uint64_t> ModelCompilePipeline::keys() const {
  std::lock_guard<std::mutex> lock(mu_);
  return {order_.begin(), order_.end()};
}

Expected<ir::BindingManifest> ModelCompilePipeline::binding_manifest_for(const ir::DimBinding& binding) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!current_) return Error::invalid_argument("model pipeline: binding_manifest_for before build_template");
  return ir::binding_manifest(current_->lir.graph, binding);
}

PipelineStats ModelCompilePipeline::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void ModelCompilePipeline::clear() {
  std::lock_guard<std::mutex> lock(mu_);
  entries_.clear();
  order_.clear();
  templates_.clear();
  template_order_.clear();
  current_.reset();
}

}  // namespace rlx
