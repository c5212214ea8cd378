// Variant descriptions and bucketed shapes for ModelCompilePipeline
// (rlx/runtime/model_pipeline.h): ModelComponent / ModelExecutionConfig keys and
// bindings, SeqBuckets, BucketedCompileCache and run_padded.
#include "rlx/runtime/model_pipeline.h"

#include <algorithm>
#include <cstring>

#include "rlx/base/hash.h"
#include "rlx/compile/profile.h"

namespace rlx {

// ---- descriptions ---------------------------------------------------------------------------

std::string_view to_string(ModelPhase p) { return p == ModelPhase::kPrefill ? "prefill" : "decode"; }

std::string_view to_string(CompilationMode m) {
  switch (m) {
    case CompilationMode::kEager: return "eager";
    case CompilationMode::kLazy: return "lazy";
    case CompilationMode::kAot: return "aot";
  }
  return "lazy";
}

uint64_t ModelExecutionConfig::cache_key() const {
  StableHasher h;
  h.str("rlx.model_execution_config.v1");
  h.str(compile::to_string(dispatch));
  h.str(to_string(mode));
  h.str(profile);
  return h.digest();
}

std::string ModelComponent::profile_name() const {
  if (!exec.profile.empty()) return exec.profile;
  return family + "_" + std::string(rlx::to_string(phase));
}

uint64_t ModelComponent::cache_key() const {
  StableHasher h;
  h.str("rlx.model_component.v1");
  h.str(family);
  h.str(rlx::to_string(phase));
  h.i64(batch);
  h.i64(seq_bucket);
  h.str(compile::to_string(exec.dispatch));
  h.str(rlx::to_string(exec.mode));
  h.str(profile_name());
  return h.digest();
}

ir::DimBinding ModelComponent::dim_binding() const {
  ir::DimBinding b;
  b.set(ir::BATCH, batch);
  if (phase == ModelPhase::kPrefill) {
    b.set(ir::SEQ, seq_bucket);
  } else {
    b.set(ir::SEQ, 1);
    b.set(ir::PAST_SEQ, seq_bucket);
  }
  return b;
}

Expected<compile::CompileOptions> ModelComponent::compile_options(const compile::Target& target) const {
  auto profile = compile::CompileProfile::preset(profile_name());
  if (!profile) return profile.error().with_context("component " + to_string());
  compile::CompileOptions o = profile->to_compile_options(target);
  o.dispatch.policy = exec.dispatch;
  return o;
}

std::string ModelComponent::to_string() const {
  return fmt::format("{}/{} batch={} seq={} {} {} {}", family, rlx::to_string(phase), batch, seq_bucket,
                     compile::to_string(exec.dispatch), rlx::to_string(exec.mode), profile_name());
}

// ---- buckets --------------------------------------------------------------------------------

Expected<SeqBuckets> SeqBuckets::powers_of_two(int64_t max_context, int64_t min_bucket) {
  if (max_context < 1 || min_bucket < 1 || min_bucket > max_context)
    return Error::invalid_argument("sequence buckets: need 1 <= min_bucket ({}) <= max_context ({})", min_bucket,
                                   max_context);
  std::vector<int64_t> sizes;
  int64_t b = 1;
  while (b < min_bucket) b *= 2;
  for (; b < max_context; b *= 2) sizes.push_back(b);
  sizes.push_back(max_context);
  return SeqBuckets(std::move(sizes));
}

Expected<SeqBuckets> SeqBuckets::from_list(std::vector<int64_t> sizes) {
  if (sizes.empty()) return Error::invalid_argument("sequence buckets: the list is empty");
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] < 1) return Error::invalid_argument("sequence buckets: size {} is not positive", sizes[i]);
    if (i > 0 && sizes[i] <= sizes[i - 1])
      return Error::invalid_argument("sequence buckets: {} after {} is not ascending", sizes[i], sizes[i - 1]);
  }
  return SeqBuckets(std::move(sizes));
}

Expected<int64_t> SeqBuckets::bucket_for(int64_t length) const {
  if (length < 1) return Error::invalid_argument("sequence length {} must be at least 1", length);
  const auto it = std::lower_bound(sizes_.begin(), sizes_.end(), length);
  if (it == sizes_.end())
    return Error::invalid_argument("sequence length {} exceeds the largest bucket {}", length, sizes_.back());
  return *it;
}

Expected<uint64_t> BucketedCompileCache::key_for(int64_t length, const compile::CompileOptions& options,
                                                 const ir::DimBinding& base) const {
  ASSIGN_OR_RETURN(int64_t bucket, buckets_.bucket_for(length));
  ir::DimBinding b = base;
  b.set(symbol_, bucket);
  StableHasher h;
  h.str("rlx.bucketed_compile_cache.v1");
  h.str(ir::symbol_name(symbol_));
  h.i64(bucket);
  h.str(b.to_string());
  h.u64(compile_options_hash(options));
  return h.digest();
}

Expected<std::shared_ptr<const CompiledVariant>> BucketedCompileCache::get(int64_t length, const HirBuildFn& build_hir,
                                                                           const compile::CompileOptions& options,
                                                                           const ir::DimBinding& base) {
  ASSIGN_OR_RETURN(uint64_t key, key_for(length, options, base));
  ir::DimBinding b = base;
  b.set(symbol_, *buckets_.bucket_for(length));
  return pipeline_.get_or_compile(key, b, build_hir, options);
}

Expected<std::vector<Tensor>> BucketedCompileCache::run(std::span<const NamedTensorView> inputs, int64_t length,
                                                        const HirBuildFn& build_hir,
                                                        const compile::CompileOptions& options,
                                                        const ir::DimBinding& base) {
  ASSIGN_OR_RETURN(std::shared_ptr<const CompiledVariant> v, get(length, build_hir, options, base));
  if (v->extent.symbol != symbol_)
    return Error::invalid_argument("bucketed cache: the graph's bucket axis is {}, not {}",
                                   v->extent.empty() ? std::string("none") : ir::symbol_name(v->extent.symbol),
                                   ir::symbol_name(symbol_));
  return run_padded(*v, inputs, length);
}

// ---- padded runs ----------------------------------------------------------------------------

namespace {

// Copies `rows` of `src_rows` rows along `axis` of a row-major tensor into a tensor with
// `dst_rows` rows along that axis (the rest of dst untouched).
void copy_rows(const uint8_t* src, int64_t src_rows, uint8_t* dst, int64_t dst_rows, int64_t rows,
               const std::vector<int64_t>& dims, size_t axis, int64_t elem_bytes) {
  int64_t outer = 1, inner = elem_bytes;
  for (size_t i = 0; i < axis; ++i) outer *= dims[i];
  for (size_t i = axis + 1; i < dims.size(); ++i) inner *= dims[i];
  for (int64_t o = 0; o < outer; ++o)
    std::memcpy(dst + o * dst_rows * inner, src + o * src_rows * inner, static_cast<size_t>(rows * inner));
}

}  // namespace

Expected<std::vector<Tensor>> run_padded(const CompiledVariant& variant, std::span<const NamedTensorView> inputs,
                                         int64_t actual) {
  if (!variant.graph) return Error::invalid_argument("run_padded: empty variant");
  if (variant.extent.empty())
    return Error::invalid_argument("run_padded: the graph has no bucket axis (no symbolic input dim was bound)");
  const int64_t upper = variant.extent.upper;
  if (actual < 1 || actual > upper)
    return Error::invalid_argument("run_padded: {} rows do not fit the bucket {}={}", actual,
                                   ir::symbol_name(variant.extent.symbol), upper);
  CompiledGraph& g = *variant.graph;
  const ir::IoManifest& m = g.manifest();
  for (const NamedTensorView& in : inputs) {
    const bool known = std::any_of(m.inputs.begin(), m.inputs.end(), [&](const auto& e) { return e.name == in.name; });
    if (!known) return Error::not_found("run_padded: the graph has no input '{}'", in.name);
  }
  std::vector<Tensor> staged;
  staged.reserve(m.inputs.size());  // views below point into these: no reallocation
  std::vector<NamedTensorView> views;
  for (size_t i = 0; i < m.inputs.size(); ++i) {
    const ir::ManifestEntry& e = m.inputs[i];
    const auto it = std::find_if(inputs.begin(), inputs.end(), [&](const auto& in) { return in.name == e.name; });
    if (it == inputs.end()) return Error::invalid_argument("run_padded: input '{}' is missing", e.name);
    const int axis = variant.input_axis(i);
    if (axis == -1) {
      views.push_back(*it);
      continue;
    }
    if (axis < 0)
      return Error::unsupported("run_padded: input '{}' has {} only inside a combined dim", e.name,
                                ir::symbol_name(variant.extent.symbol));
    const std::vector<int64_t> dims = e.type.shape.static_dims();
    const TensorView& v = it->view;
    if (v.dtype != e.type.dtype)
      return Error::invalid_argument("run_padded: input '{}' is {}, the graph takes {}", e.name,
                                     ir::dtype_name(v.dtype), ir::dtype_name(e.type.dtype));
    bool shape_ok = v.shape.size() == dims.size();
    for (size_t d = 0; shape_ok && d < dims.size(); ++d)
      shape_ok = v.shape[d] == (d == static_cast<size_t>(axis) ? actual : dims[d]);
    if (!shape_ok || v.data == nullptr)
      return Error::invalid_argument("run_padded: input '{}' is {}, expected {} rows along axis {} of {}", e.name,
                                     v.type_string(), actual, axis, e.type.to_string());
    if (ir::dtype_info(e.type.dtype).block_size != 1)
      return Error::unsupported("run_padded: input '{}' has a packed dtype", e.name);
    Tensor& t = staged.emplace_back(e.type.dtype, dims);  // zero-filled: padded rows are zeros
    copy_rows(static_cast<const uint8_t*>(v.data), actual, t.mutable_bytes().data(), dims[static_cast<size_t>(axis)],
              actual, dims, static_cast<size_t>(axis), ir::dtype_info(e.type.dtype).bytes_per_block);
    views.push_back({e.name, t.view()});
  }
  TRY(g.set_active_extent(actual, upper));
  ASSIGN_OR_RETURN(std::vector<Tensor> outs, g.run(views));
  for (size_t i = 0; i < outs.size(); ++i) {
    const int axis = variant.output_axis(i);
    if (axis < 0 || actual == upper) continue;
    Tensor& full = outs[i];
    std::vector<int64_t> dims = full.shape();
    const auto a = static_cast<size_t>(axis);
    Tensor real(full.dtype(), [&] {
      std::vector<int64_t> d = dims;
      d[a] = actual;
      return d;
    }());
    copy_rows(full.mutable_bytes().data(), dims[a], real.mutable_bytes().data(), actual, actual, dims, a,
              ir::dtype_info(full.dtype()).bytes_per_block);
    full = std::move(real);
  }
  return outs;
}

}  // namespace rlx
