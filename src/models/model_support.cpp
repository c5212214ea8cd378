// What the model classes share (see model_support.h).
#include "models/model_support.h"

#include <algorithm>
#include <filesystem>
#include <vector>

#include "rlx/base/env.h"
#include "rlx/base/hash.h"
#include "rlx/compile/profile.h"
#include "rlx/runtime/backend.h"

namespace rlx::models {

namespace fs = std::filesystem;

// The identity of a model's files for cache keys: canonical path, size and write time of
// the file (or of every file directly in an HF folder).
uint64_t model_file_identity(const std::string& path) {
  StableHasher h;
  h.str("rlx.model_identity.v1");
  std::error_code ec;
  const fs::path p = fs::weakly_canonical(path, ec);
  h.str(ec ? path : p.string());
  auto add = [&](const fs::path& f) {
    std::error_code e;
    h.str(f.filename().string());
    h.u64(static_cast<uint64_t>(fs::file_size(f, e)));
    h.i64(static_cast<int64_t>(fs::last_write_time(f, e).time_since_epoch().count()));
  };
  if (fs::is_directory(path, ec)) {
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(path, ec))
      if (e.is_regular_file()) files.push_back(e.path());
    std::sort(files.begin(), files.end());
    for (const fs::path& f : files) add(f);
  } else {
    add(path);
  }
  return h.digest();
}

Expected<std::unique_ptr<ModelCompilePipeline>> make_model_pipeline(const Device& device, int threads,
                                                                    const std::string& cache_dir, size_t capacity) {
  BackendOptions backend;
  backend.threads = threads;
  if (!cache_dir.empty()) backend.packed_cache_dir = (std::filesystem::path(cache_dir) / "packed").string();
  ASSIGN_OR_RETURN(Session session, Session::create(device, backend));
  return std::make_unique<ModelCompilePipeline>(std::move(session), std::max<size_t>(capacity, 64));
}

Status bind_weights(const WeightSource& weights, ParamStore& store, CompiledGraph& graph, const std::string& source,
                    const std::function<void(int64_t, int64_t)>& progress) {
  std::vector<WeightView> views;
  int64_t total = 0, done = 0;
  for (const ir::ManifestEntry& e : graph.manifest().params) {
    if (store.find(e.name)) continue;
    ASSIGN_OR_RETURN(WeightView w, weights.take(e.name));
    total += static_cast<int64_t>(w.bytes.size());
    views.push_back(std::move(w));
  }
  for (const WeightView& w : views) {
    // The bytes' name across processes: the file's identity and the offset of these
    // bytes (not of the tensor they came from: a row slice has its own).
    std::string file_key;
    const auto at = reinterpret_cast<uintptr_t>(w.bytes.data()), start = reinterpret_cast<uintptr_t>(w.file_start);
    if (w.file_mapped && start != 0 && at >= start && at + w.bytes.size() <= start + w.file_size)
      file_key = fmt::format("{}@{}", w.file_identity, at - start);
    ByteView view = w.file_mapped ? ByteView::file_pages(w.bytes.data(), w.bytes.size(), w.owner, std::move(file_key))
                                  : ByteView(w.bytes.data(), w.bytes.size(), w.owner);
    if (Status s = store.add_shared(w.name, SharedParam{w.dtype, w.shape, std::move(view)}); !s.ok())
      return s.error().with_context(fmt::format("{}: loading '{}'", source, w.name));
    done += static_cast<int64_t>(w.bytes.size());
    if (progress) progress(done, total);
  }
  if (auto bound = store.bind(graph); !bound) return bound.error().with_context(source);
  return {};
}

std::string disk_cache_dir(bool compile_cache, const std::string& cache_dir) {
  if (!compile_cache) return {};
  return cache_dir.empty() ? env_config().cache_dir : cache_dir;
}

Expected<std::shared_ptr<const CompiledVariant>> compile_family_variant(
    ModelCompilePipeline& pipeline, const std::string& profile, const std::string& cache_dir, const std::string& aot_name,
    uint64_t key, const std::function<Expected<ir::HirModule>(ir::FusionPolicy)>& build, const WeightSource& weights,
    std::unique_ptr<ParamStore>& params, const std::string& source) {
  const std::string profile_name = profile.empty() ? "encoder" : profile;
  auto resolved = compile::CompileProfile::preset(profile_name);
  if (!resolved) resolved = compile::CompileProfile::load(profile_name);
  if (!resolved) return resolved.error().with_context("compile profile");
  TRY(check_profile_backends(*resolved, profile_name));
  const ir::FusionPolicy policy = resolved->fusion.policy;
  const compile::CompileOptions co = resolved->to_compile_options(pipeline.session().backend()->target());
  StableHasher h;
  h.str("rlx.family.variant.v1");
  h.u64(key);
  h.str(profile_name);
  const uint64_t full_key = h.digest();
  const HirBuildFn hir = [&]() { return build(policy); };
  const VariantPrepareFn prepare = [&](CompiledGraph& g) -> Status {
    if (!params) params = std::make_unique<ParamStore>();
    return bind_weights(weights, *params, g, source, {});
  };
  auto v = cache_dir.empty()
               ? pipeline.get_or_compile(full_key, {}, hir, co, prepare)
               : pipeline.get_or_compile_aot(std::filesystem::path(cache_dir) / "aot", aot_name, full_key, {}, hir, co,
                                             prepare);
  if (!v) return v.error().with_context(source);
  return v;
}

}  // namespace rlx::models
