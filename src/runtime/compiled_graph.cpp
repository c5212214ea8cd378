// CompiledGraph: names, checks and conveniences over a backend Executable. The
// success paths of run_slots allocate nothing; run allocates only its outputs.
#include "rlx/runtime/compiled_graph.h"

#include <cstring>

namespace rlx {

using ir::DType;

namespace {

bool shape_matches(const ir::Shape& s, std::span<const int64_t> dims) {
  if (static_cast<size_t>(s.rank()) != dims.size()) return false;
  for (size_t i = 0; i < dims.size(); ++i)
    if (!s[static_cast<int64_t>(i)].is_static() || s[static_cast<int64_t>(i)].coeff != dims[i]) return false;
  return true;
}

std::string names_of(const std::vector<ir::ManifestEntry>& list) {
  std::string s;
  for (const auto& e : list) s += (s.empty() ? "" : ", ") + e.name;
  return s.empty() ? "none" : s;
}

bool widenable(DType t) { return t == DType::F16 || t == DType::BF16 || t == DType::F64; }

}  // namespace

CompiledGraph::CompiledGraph(Device device, std::unique_ptr<Executable> exe, compile::FusionReport fusion,
                             compile::DispatchReport dispatch, ir::SymbolId bucket, int64_t bucket_upper)
    : device_(device),
      exe_(std::move(exe)),
      fusion_(std::move(fusion)),
      dispatch_(std::move(dispatch)),
      bucket_(bucket),
      bucket_upper_(bucket_upper) {
  input_ptrs_.assign(exe_->manifest().inputs.size(), nullptr);
  input_staging_.resize(exe_->manifest().inputs.size());
}

CompiledGraph::CompiledGraph(CompiledGraph&&) noexcept = default;
CompiledGraph& CompiledGraph::operator=(CompiledGraph&&) noexcept = default;
CompiledGraph::~CompiledGraph() = default;

Expected<size_t> CompiledGraph::find(const std::vector<ir::ManifestEntry>& list, std::string_view name,
                                     const char* what) const {
  for (size_t i = 0; i < list.size(); ++i)
    if (list[i].name == name) return i;
  return Error::not_found("unknown {} '{}' ({}s: {})", what, name, what, names_of(list));
}

Status CompiledGraph::set_param(std::string_view name, std::span<const float> values) {
  return set_param_typed(name, std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(values.data()), values.size_bytes()),
                         DType::F32);
}

Status CompiledGraph::set_param_typed(std::string_view name, std::span<const uint8_t> bytes, DType dtype) {
  ASSIGN_OR_RETURN(size_t i, find(manifest().params, name, "param"));
  const ir::ManifestEntry& e = manifest().params[i];
  const int64_t n = *e.type.shape.num_elements();
  if (dtype != e.type.dtype) {
    const bool convertible = ir::is_float(dtype) && ir::is_float(e.type.dtype);
    if (!convertible)
      return Error::invalid_argument("param '{}' is {}; cannot set it from {} data", name, e.type.to_string(),
                                     ir::dtype_name(dtype));
  }
  const auto want = ir::dtype_bytes(dtype, n);
  if (!want || *want != static_cast<int64_t>(bytes.size()))
    return Error::invalid_argument("param '{}' is {}: needs {} bytes of {}, got {}", name, e.type.to_string(),
                                   want.value_or(-1), ir::dtype_name(dtype), bytes.size());
  return exe_->set_param(i, bytes.data(), static_cast<int64_t>(bytes.size()), dtype);
}

Status CompiledGraph::check_view(const ir::ManifestEntry& e, const TensorView& v) const {
  if (v.dtype != e.type.dtype || !shape_matches(e.type.shape, v.shape))
    return Error::invalid_argument("input '{}': expected {}, got {}", e.name, e.type.to_string(), v.type_string());
  if (v.data == nullptr && e.bytes > 0) return Error::invalid_argument("input '{}': data is null", e.name);
  return {};
}

Status CompiledGraph::bind_inputs(size_t n, const NamedTensorView* typed, const NamedF32* f32s) {
  const auto& ins = manifest().inputs;
  std::fill(input_ptrs_.begin(), input_ptrs_.end(), nullptr);
  for (size_t k = 0; k < n; ++k) {
    const std::string_view name = typed ? typed[k].name : f32s[k].name;
    size_t i = 0;
    while (i < ins.size() && ins[i].name != name) ++i;
    if (i == ins.size()) return Error::not_found("unknown input '{}' (inputs: {})", name, names_of(ins));
    if (input_ptrs_[i] != nullptr) return Error::invalid_argument("input '{}' given twice", name);
    const ir::ManifestEntry& e = ins[i];
    if (typed) {
      TRY(check_view(e, typed[k].view));
      input_ptrs_[i] = typed[k].view.data;
    } else {
      const NamedF32& f = f32s[k];
      const TensorView as_f32{DType::F32, f.shape, f.values.data()};
      if (!shape_matches(e.type.shape, f.shape))
        return Error::invalid_argument("input '{}': expected {}, got {}", e.name, e.type.to_string(), as_f32.type_string());
      if (static_cast<int64_t>(f.values.size()) != as_f32.num_elements())
        return Error::invalid_argument("input '{}': {} values for shape {}", e.name, f.values.size(),
                                       as_f32.type_string());
      if (e.type.dtype == DType::F32) {
        input_ptrs_[i] = f.values.data();
      } else {
        if (ir::is_packed(e.type.dtype) || e.type.dtype == DType::Bool)
          return Error::invalid_argument("input '{}' is {}; pass it as a typed view", e.name, e.type.to_string());
        auto& buf = input_staging_[i];
        buf.resize(static_cast<size_t>(e.bytes));  // allocates on first use only
        convert_from_f32(e.type.dtype, f.values.data(), buf.data(), as_f32.num_elements());
        input_ptrs_[i] = buf.data();
      }
    }
  }
  for (size_t i = 0; i < ins.size(); ++i)
    if (input_ptrs_[i] == nullptr && ins[i].bytes > 0)
      return Error::invalid_argument("input '{}' is missing ({} expected)", ins[i].name, ins[i].type.to_string());
  return {};
}

Tensor CompiledGraph::output_tensor(size_t i, bool widen) const {
  const ir::ManifestEntry& e = manifest().outputs[i];
  const OutputSlot slot = exe_->output_slots()[i];
  const uint8_t* p = exe_->arena_ptr() + slot.first;
  std::vector<int64_t> shape = e.type.shape.static_dims();
  if (widen && widenable(e.type.dtype)) {
    const int64_t n = *e.type.shape.num_elements();
    std::vector<uint8_t> bytes(static_cast<size_t>(n) * 4);
    convert_to_f32(e.type.dtype, p, reinterpret_cast<float*>(bytes.data()), n);
    return Tensor(DType::F32, std::move(shape), std::move(bytes));
  }
  return Tensor(e.type.dtype, std::move(shape), std::vector<uint8_t>(p, p + slot.second));
}

Expected<std::vector<Tensor>> CompiledGraph::collect_outputs(bool widen) const {
  std::vector<Tensor> out;
  out.reserve(manifest().outputs.size());
  for (size_t i = 0; i < manifest().outputs.size(); ++i) out.push_back(output_tensor(i, widen));
  return out;
}

Expected<std::vector<Tensor>> CompiledGraph::run(std::span<const NamedTensorView> inputs) {
  TRY(bind_inputs(inputs.size(), inputs.data(), nullptr));
  TRY(exe_->run(input_ptrs_));
  return collect_outputs(true);
}

Expected<std::vector<Tensor>> CompiledGraph::run(std::span<const NamedF32> inputs) {
  TRY(bind_inputs(inputs.size(), nullptr, inputs.data()));
  TRY(exe_->run(input_ptrs_));
  return collect_outputs(true);
}

Expected<std::vector<Tensor>> CompiledGraph::run_typed(std::span<const NamedTensorView> inputs) {
  TRY(bind_inputs(inputs.size(), inputs.data(), nullptr));
  TRY(exe_->run(input_ptrs_));
  return collect_outputs(false);
}

Expected<std::vector<Tensor>> CompiledGraph::run_read_outputs(std::span<const NamedTensorView> inputs,
                                                              std::span<const size_t> indices) {
  for (size_t i : indices)
    if (i >= manifest().outputs.size())
      return Error::invalid_argument("output index {} out of range (graph has {} outputs)", i, manifest().outputs.size());
  TRY(bind_inputs(inputs.size(), inputs.data(), nullptr));
  TRY(exe_->run(input_ptrs_));
  std::vector<Tensor> out;
  out.reserve(indices.size());
  for (size_t i : indices) out.push_back(output_tensor(i, false));
  return out;
}

Status CompiledGraph::read_output_row_into(size_t out_index, int64_t row, std::span<float> dst) const {
  if (out_index >= manifest().outputs.size())
    return Error::invalid_argument("output index {} out of range (graph has {} outputs)", out_index,
                                   manifest().outputs.size());
  const ir::ManifestEntry& e = manifest().outputs[out_index];
  if (ir::is_packed(e.type.dtype)) return Error::unsupported("output '{}' is packed", e.name);
  const int64_t n = *e.type.shape.num_elements();
  const auto inner = static_cast<int64_t>(dst.size());
  if (row < 0 || inner <= 0 || (row + 1) * inner > n)
    return Error::invalid_argument("output '{}' ({}): row {} of {} elements is out of range", e.name,
                                   e.type.to_string(), row, inner);
  const int64_t es = ir::dtype_info(e.type.dtype).bytes_per_block;
  convert_to_f32(e.type.dtype, exe_->arena_ptr() + exe_->output_slots()[out_index].first + row * inner * es,
                 dst.data(), inner);
  return {};
}

Expected<std::vector<float>> CompiledGraph::read_output_row(size_t out_index, int64_t row, int64_t inner) const {
  if (inner <= 0) return Error::invalid_argument("read_output_row: inner must be positive, got {}", inner);
  std::vector<float> out(static_cast<size_t>(inner));
  TRY(read_output_row_into(out_index, row, out));
  return out;
}

Expected<std::span<const OutputSlot>> CompiledGraph::run_slots(std::span<const TensorView> inputs) {
  const auto& ins = manifest().inputs;
  if (inputs.size() != ins.size())
    return Error::invalid_argument("run_slots: {} inputs given, graph has {} ({})", inputs.size(), ins.size(),
                                   names_of(ins));
  for (size_t i = 0; i < ins.size(); ++i) {
    TRY(check_view(ins[i], inputs[i]));
    input_ptrs_[i] = inputs[i].data;
  }
  TRY(exe_->run(input_ptrs_));
  return exe_->output_slots();
}

Status CompiledGraph::bind_handle(std::string_view name, const TensorView& data) {
  ASSIGN_OR_RETURN(size_t i, find(manifest().handles, name, "handle"));
  const ir::ManifestEntry& e = manifest().handles[i];
  if (data.dtype != e.type.dtype || !shape_matches(e.type.shape, data.shape))
    return Error::invalid_argument("handle '{}': expected {}, got {}", name, e.type.to_string(), data.type_string());
  return exe_->write_handle(i, data.data, e.bytes);
}

Status CompiledGraph::bind_handle(std::string_view name, std::span<const float> values) {
  ASSIGN_OR_RETURN(size_t i, find(manifest().handles, name, "handle"));
  const ir::ManifestEntry& e = manifest().handles[i];
  if (e.type.dtype != DType::F32 || static_cast<int64_t>(values.size()) != *e.type.shape.num_elements())
    return Error::invalid_argument("handle '{}': expected {}, got {} f32 values", name, e.type.to_string(),
                                   values.size());
  return exe_->write_handle(i, values.data(), e.bytes);
}

Expected<Tensor> CompiledGraph::read_handle(std::string_view name) const {
  ASSIGN_OR_RETURN(size_t i, find(manifest().handles, name, "handle"));
  const ir::ManifestEntry& e = manifest().handles[i];
  const auto* p = static_cast<const uint8_t*>(exe_->handle_data(i));
  if (p == nullptr)
    return Error::unsupported("handle '{}' cannot be read whole from this executable ({})", e.name, exe_->describe());
  return Tensor(e.type.dtype, e.type.shape.static_dims(), std::vector<uint8_t>(p, p + e.bytes));
}

Expected<size_t> CompiledGraph::share_handles_with(CompiledGraph& owner) {
  size_t shared = 0;
  const auto& mine = manifest().handles;
  const auto& theirs = owner.manifest().handles;
  for (size_t i = 0; i < mine.size(); ++i) {
    size_t j = 0;
    while (j < theirs.size() && theirs[j].name != mine[i].name) ++j;
    if (j == theirs.size()) continue;
    if (theirs[j].type != mine[i].type)
      return Error::invalid_argument("handle '{}': {} here but {} in the owner", mine[i].name, mine[i].type.to_string(),
                                     theirs[j].type.to_string());
    std::shared_ptr<HandleStorage> storage = owner.exe_->handle_storage(j);
    if (!storage) return Error::unsupported("handle '{}': this backend cannot share handles", mine[i].name);
    TRY(exe_->share_handle(i, std::move(storage)));
    ++shared;
  }
  return shared;
}

std::vector<std::pair<std::string, std::shared_ptr<HandleStorage>>> CompiledGraph::handle_storage() {
  std::vector<std::pair<std::string, std::shared_ptr<HandleStorage>>> out;
  const auto& hs = manifest().handles;
  for (size_t i = 0; i < hs.size(); ++i) {
    std::shared_ptr<HandleStorage> s = exe_->handle_storage(i);
    if (!s) return {};
    out.emplace_back(hs[i].name, std::move(s));
  }
  return out;
}

Status CompiledGraph::bind_handle_storage(std::string_view name, std::shared_ptr<HandleStorage> storage) {
  ASSIGN_OR_RETURN(size_t i, find(manifest().handles, name, "handle"));
  return exe_->share_handle(i, std::move(storage));
}

Status CompiledGraph::set_active_extent(int64_t actual, int64_t upper) { return exe_->set_active_extent(actual, upper); }

Status CompiledGraph::commit_no_wait(std::span<const NamedTensorView> inputs) {
  if (pending_) return Error::invalid_argument("commit_no_wait: a run is already pending; call sync_pending first");
  TRY(bind_inputs(inputs.size(), inputs.data(), nullptr));
  TRY(exe_->commit_no_wait(input_ptrs_));
  pending_ = true;
  return {};
}

Expected<std::vector<Tensor>> CompiledGraph::sync_pending() {
  if (!pending_) return Error::invalid_argument("sync_pending: nothing was committed");
  pending_ = false;
  TRY(exe_->sync_pending());
  return collect_outputs(true);
}

Expected<std::vector<std::vector<Tensor>>> CompiledGraph::run_pipelined(
    std::span<const std::vector<NamedTensorView>> input_sets) {
  std::vector<std::vector<Tensor>> all;
  all.reserve(input_sets.size());
  for (const auto& set : input_sets) {
    TRY(commit_no_wait(set));
    ASSIGN_OR_RETURN(std::vector<Tensor> out, sync_pending());
    all.push_back(std::move(out));
  }
  return all;
}

Expected<CompiledGraph> CompiledGraph::clone() const {
  ASSIGN_OR_RETURN(std::unique_ptr<Executable> exe, exe_->clone());
  return CompiledGraph(device_, std::move(exe), fusion_, dispatch_, bucket_, bucket_upper_);
}

}  // namespace rlx
