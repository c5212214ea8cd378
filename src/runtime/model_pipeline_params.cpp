// ParamStore (rlx/runtime/model_pipeline.h): one immutable copy of a model's weights,
// bound into every compiled variant in place through Executable::set_param_shared,
// with a converting copy only where the backend or the dtype requires one.
#include "rlx/runtime/model_pipeline.h"

#include <cstdint>
#include <cstring>

#include "rlx/base/log.h"

namespace rlx {
namespace {

Expected<int64_t> param_bytes(const std::string& name, ir::DType dtype, const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0 || (d != 0 && n > INT64_MAX / d))
      return Error::invalid_argument("param '{}': bad or overflowing shape", name);
    n *= d;
  }
  const std::optional<int64_t> bytes = ir::dtype_bytes(dtype, n);
  if (!bytes)
    return Error::invalid_argument("param '{}': {} elements do not fit whole {} blocks", name, n, ir::dtype_name(dtype));
  return *bytes;
}

std::string dims_string(const std::vector<int64_t>& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + "]";
}

}  // namespace

Status ParamStore::add(const std::string& name, ir::DType dtype, std::vector<int64_t> shape,
                       std::span<const uint8_t> bytes) {
  ASSIGN_OR_RETURN(int64_t want, param_bytes(name, dtype, shape));
  if (static_cast<int64_t>(bytes.size()) != want)
    return Error::invalid_argument("param '{}': {} bytes given, {} {} needs {}", name, bytes.size(),
                                   ir::dtype_name(dtype), dims_string(shape), want);
  auto buf = std::make_shared<AlignedBuffer>(bytes.size());
  if (!bytes.empty()) std::memcpy(buf->data(), bytes.data(), bytes.size());
  return add_shared(name, SharedParam{dtype, std::move(shape), ByteView::of(std::move(buf))});
}

Status ParamStore::add_f32(const std::string& name, std::vector<int64_t> shape, std::span<const float> values) {
  return add(name, ir::DType::F32, std::move(shape),
             std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(values.data()), values.size_bytes()));
}

Status ParamStore::add_shared(const std::string& name, SharedParam param) {
  if (params_.count(name) != 0) return Error::invalid_argument("param '{}' is already in the store", name);
  ASSIGN_OR_RETURN(int64_t want, param_bytes(name, param.dtype, param.shape));
  if (param.bytes.data() == nullptr && want > 0) return Error::invalid_argument("param '{}': no bytes", name);
  if (static_cast<int64_t>(param.bytes.size()) != want)
    return Error::invalid_argument("param '{}': buffer of {} bytes, {} {} needs {}", name, param.bytes.size(),
                                   ir::dtype_name(param.dtype), dims_string(param.shape), want);
  params_.emplace(name, std::move(param));
  return {};
}

const SharedParam* ParamStore::find(std::string_view name) const {
  const auto it = params_.find(name);
  return it == params_.end() ? nullptr : &it->second;
}

int64_t ParamStore::total_bytes() const {
  int64_t total = 0;
  for (const auto& [name, p] : params_) total += static_cast<int64_t>(p.bytes.size());
  return total;
}

Expected<ParamBindReport> ParamStore::bind(CompiledGraph& graph) const {
  ParamBindReport report;
  const ir::IoManifest& m = graph.manifest();
  for (size_t i = 0; i < m.params.size(); ++i) {
    const ir::ManifestEntry& e = m.params[i];
    const SharedParam* p = find(e.name);
    if (p == nullptr) return Error::not_found("param '{}' ({}) is not in the store", e.name, e.type.to_string());
    if (!e.type.shape.is_static() || e.type.shape.static_dims() != p->shape)
      return Error::invalid_argument("param '{}': the store holds {}, the graph takes {}", e.name,
                                     dims_string(p->shape), e.type.to_string());
    if (p->dtype == e.type.dtype && static_cast<int64_t>(p->bytes.size()) == e.bytes) {
      Status s = graph.executable().set_param_shared(i, p->bytes);
      if (s.ok()) {
        ++report.shared;
        continue;
      }
      if (s.error().code() != ErrorCode::kUnsupported) return s.error().with_context("param '" + e.name + "'");
    }
    RLX_LOG_DEBUG("param store: copying '{}' ({} -> {})", e.name, ir::dtype_name(p->dtype),
                  ir::dtype_name(e.type.dtype));
    TRY(graph.set_param_typed(e.name, std::span<const uint8_t>(p->bytes.data(), p->bytes.size()), p->dtype));
    ++report.copied;
  }
  return report;
}

}  // namespace rlx
