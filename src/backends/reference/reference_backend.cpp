// ReferenceExecutable: interprets one LIR graph node by node in schedule order. Every
// value has its own byte buffer in its declared dtype (the buffer plan's arena and views
// are ignored); inputs are copied in, weights and handles live outside, and the outputs
// are copied into a small arena of their own after each run.
#include "backends/reference/reference_backend.h"

#include <algorithm>
#include <cstring>

#include "backends/reference/reference_kernels.h"
#include "rlx/base/aligned_buffer.h"
#include "rlx/base/byte_view.h"

namespace rlx::reference_backend {
namespace {

using ir::DType;
using ir::OpKind;
using ir::ValueId;

// A handle's memory, shareable by the executables of one model (share_handle).
class ReferenceHandle final : public HandleStorage {
 public:
  explicit ReferenceHandle(int64_t bytes) : data(static_cast<size_t>(std::max<int64_t>(bytes, 1)), 0) {}
  int64_t bytes() const override { return static_cast<int64_t>(data.size()); }
  std::string where() const override { return "reference"; }
  Status copy_sequence_rows(int64_t batch, int64_t rows, int64_t src, int64_t dst, int64_t n) override {
    ASSIGN_OR_RETURN(const SequenceRowsSpan span, sequence_rows_span(bytes(), batch, rows, src, dst, n));
    std::memcpy(data.data() + span.dst_offset, data.data() + span.src_offset, static_cast<size_t>(span.length));
    return {};
  }
  std::vector<uint8_t> data;
};

// Where a value's bytes live: its own buffer, or the input, weight, constant or handle
// (UpdateSlice: the handle it writes) numbered `index`.
enum class Home : uint8_t { kOwn, kInput, kParam, kConstant, kHandle };
struct ValueHome {
  Home kind = Home::kOwn;
  int32_t index = 0;
};

// What every clone shares: the graph and how to run it.
struct Program {
  ir::Graph graph;
  ir::IoManifest manifest;
  std::vector<ValueId> schedule;
  std::vector<RefKernel> kernels;          // per value; null for boundary kinds
  std::vector<ValueHome> homes;            // per value
  std::vector<std::string> what;           // per value, for messages
  std::vector<std::vector<int64_t>> dims;  // per value
  std::vector<OutputSlot> output_slots;
  int64_t output_bytes = 0;
};

int64_t value_bytes(const ir::Node& n) {
  return ir::dtype_bytes(n.dtype, n.shape.num_elements().value_or(0)).value_or(0);
}

class ReferenceExecutable final : public Executable {
 public:
  explicit ReferenceExecutable(std::shared_ptr<const Program> program) : program_(std::move(program)) {
    const Program& p = *program_;
    own_.resize(static_cast<size_t>(p.graph.size()));
    for (ValueId v = 0; v < p.graph.size(); ++v)
      if (p.homes[static_cast<size_t>(v)].kind == Home::kOwn || p.homes[static_cast<size_t>(v)].kind == Home::kInput)
        own_[static_cast<size_t>(v)].assign(static_cast<size_t>(std::max<int64_t>(value_bytes(p.graph.node(v)), 1)), 0);
    params_.assign(p.manifest.params.size(), ByteView());
    for (const ir::ManifestEntry& e : p.manifest.handles)
      handles_.push_back(std::make_shared<ReferenceHandle>(e.bytes));
    outputs_ = AlignedBuffer(static_cast<size_t>(std::max<int64_t>(p.output_bytes, 64)));
  }

  const ir::IoManifest& manifest() const override { return program_->manifest; }

  Status set_param(size_t index, const void* data, int64_t bytes, DType dtype) override {
    const ir::ManifestEntry& e = program_->manifest.params[index];
    auto buf = std::make_shared<AlignedBuffer>(static_cast<size_t>(std::max<int64_t>(e.bytes, 1)));
    if (dtype == e.type.dtype) {
      if (bytes != e.bytes)
        return Error::invalid_argument("param '{}': {} bytes given, {} declared", e.name, bytes, e.bytes);
      std::memcpy(buf->data(), data, static_cast<size_t>(bytes));
    } else {
      if (ir::is_packed(dtype) || ir::is_packed(e.type.dtype))
        return Error::invalid_argument("param '{}': cannot convert {} to {}", e.name, ir::dtype_name(dtype),
                                       ir::dtype_name(e.type.dtype));
      const int64_t n = e.type.shape.num_elements().value_or(0);
      for (int64_t i = 0; i < n; ++i)
        store_element(e.type.dtype, buf->data(), i, load_element(dtype, static_cast<const uint8_t*>(data), i));
    }
    params_[index] = ByteView::of(std::move(buf));
    return {};
  }
  bool param_is_set(size_t index) const override { return params_[index].data() != nullptr; }
  Status set_param_shared(size_t index, ByteView bytes) override {
    const ir::ManifestEntry& e = program_->manifest.params[index];
    if (bytes.data() == nullptr || static_cast<int64_t>(bytes.size()) != e.bytes)
      return Error::invalid_argument("param '{}': shared bytes of {} bytes for {} declared", e.name, bytes.size(),
                                     e.bytes);
    params_[index] = std::move(bytes);  // read in place, never written
    return {};
  }
  const void* param_data(size_t index) const override { return params_[index].data(); }

  Status write_handle(size_t index, const void* data, int64_t bytes) override {
    const ir::ManifestEntry& e = program_->manifest.handles[index];
    if (bytes != e.bytes)
      return Error::invalid_argument("handle '{}': {} bytes given, {} declared", e.name, bytes, e.bytes);
    std::memcpy(handles_[index]->data.data(), data, static_cast<size_t>(bytes));
    return {};
  }
  const void* handle_data(size_t index) const override { return handles_[index]->data.data(); }
  std::shared_ptr<HandleStorage> handle_storage(size_t index) override { return handles_[index]; }
  Status share_handle(size_t index, std::shared_ptr<HandleStorage> storage) override {
    const ir::ManifestEntry& e = program_->manifest.handles[index];
    auto mine = std::dynamic_pointer_cast<ReferenceHandle>(storage);
    const int64_t want = std::max<int64_t>(e.bytes, 1);
    if (!mine || mine->bytes() < want) {
      const std::string got = storage ? fmt::format("{} bytes on {}", storage->bytes(), storage->where()) : "none";
      return Error::invalid_argument(
          "handle '{}': the reference backend binds only its own storage of at least {} bytes, not {}", e.name, want,
          got);
    }
    handles_[index] = std::move(mine);
    return {};
  }

  Status run(std::span<const void* const> inputs) override;

  const uint8_t* arena_ptr() const override { return outputs_.data(); }
  std::span<const OutputSlot> output_slots() const override { return program_->output_slots; }

  Status set_active_extent(int64_t actual, int64_t upper) override {
    if (actual == upper) return {};  // full runs: what this backend always does
    return Error::unsupported(
        "set_active_extent({} of {}): the reference backend always runs the full compiled shape; compile the "
        "graph for {} rows instead",
        actual, upper, actual);
  }

  Expected<std::unique_ptr<Executable>> clone() const override {
    auto c = std::make_unique<ReferenceExecutable>(program_);
    c->params_ = params_;  // shared and immutable: set_param replaces a buffer, never writes it
    for (size_t i = 0; i < handles_.size(); ++i) c->handles_[i]->data = handles_[i]->data;
    return std::unique_ptr<Executable>(std::move(c));
  }

  std::string describe() const override {
    return fmt::format("reference executable: {} nodes, {} params, {} handles, {} output bytes",
                       program_->schedule.size(), params_.size(), handles_.size(), program_->output_bytes);
  }

 private:
  // The bytes of value v (weights and constants are only ever read).
  const uint8_t* bytes_of(ValueId v) const;
  // The buffer a kernel writes value v into: its own, or the handle an UpdateSlice writes.
  uint8_t* buffer_of(ValueId v);

  std::shared_ptr<const Program> program_;
  std::vector<std::vector<uint8_t>> own_;  // per value with Home::kOwn or kInput
  std::vector<ByteView> params_;           // empty until set; never written (set_param replaces)
  std::vector<std::shared_ptr<ReferenceHandle>> handles_;
  AlignedBuffer outputs_;
};

const uint8_t* ReferenceExecutable::bytes_of(ValueId v) const {
  static const uint8_t no_bytes[8] = {};
  const ValueHome& home = program_->homes[static_cast<size_t>(v)];
  switch (home.kind) {
    case Home::kOwn:
    case Home::kInput:
      return own_[static_cast<size_t>(v)].data();
    case Home::kParam:
      return params_[static_cast<size_t>(home.index)].data();
    case Home::kHandle:
      return handles_[static_cast<size_t>(home.index)]->data.data();
    case Home::kConstant: {
      const auto& bytes = program_->graph.node(v).attr<ir::ConstantAttrs>().data.bytes;
      return bytes ? bytes->data() : no_bytes;
    }
  }
  return no_bytes;
}

uint8_t* ReferenceExecutable::buffer_of(ValueId v) {
  const ValueHome& home = program_->homes[static_cast<size_t>(v)];
  RLX_ASSERT(home.kind == Home::kOwn || home.kind == Home::kInput || home.kind == Home::kHandle);
  if (home.kind == Home::kHandle) return handles_[static_cast<size_t>(home.index)]->data.data();
  return own_[static_cast<size_t>(v)].data();
}

Status ReferenceExecutable::run(std::span<const void* const> inputs) {
  const Program& p = *program_;
  for (size_t i = 0; i < params_.size(); ++i)
    if (params_[i].data() == nullptr)
      return Error::invalid_argument("param '{}' was never set", p.manifest.params[i].name);
  if (inputs.size() != p.manifest.inputs.size())
    return Error::invalid_argument("reference executable: {} inputs given, {} expected", inputs.size(),
                                   p.manifest.inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const ir::ManifestEntry& e = p.manifest.inputs[i];
    std::memcpy(buffer_of(e.value), inputs[i], static_cast<size_t>(e.bytes));
  }
  for (ValueId v : p.schedule) {
    const RefKernel kernel = p.kernels[static_cast<size_t>(v)];
    if (kernel == nullptr) continue;  // a boundary value: already in place
    const ir::Node& n = p.graph.node(v);
    RefCall call;
    call.node = &n;
    call.what = p.what[static_cast<size_t>(v)];
    for (ValueId in : n.inputs) {
      const ir::Node& src = p.graph.node(in);
      call.in.push_back(RefInput{src.dtype, p.dims[static_cast<size_t>(in)], bytes_of(in)});
    }
    call.out = RefOutput{n.dtype, p.dims[static_cast<size_t>(v)], buffer_of(v)};
    if (ir::updates_state(n.op)) call.state = buffer_of(n.inputs[0]);
    TRY(kernel(call));
  }
  for (size_t i = 0; i < p.manifest.outputs.size(); ++i) {
    const auto& [offset, bytes] = p.output_slots[i];
    std::memcpy(outputs_.data() + offset, bytes_of(p.manifest.outputs[i].value), static_cast<size_t>(bytes));
  }
  return {};
}

// Index of the manifest entry of value `v` in `list`, or -1.
int32_t entry_index(const std::vector<ir::ManifestEntry>& list, ValueId v) {
  for (size_t i = 0; i < list.size(); ++i)
    if (list[i].value == v) return static_cast<int32_t>(i);
  return -1;
}

// Where value `v` lives; an error when a boundary value is missing from the manifest or an
// UpdateSlice does not write a handle.
Expected<ValueHome> home_of(const ir::LirModule& lir, ValueId v) {
  const ir::Graph& g = lir.graph;
  const ir::IoManifest& m = lir.manifest;
  const ir::Node& n = g.node(v);
  auto listed = [&](const std::vector<ir::ManifestEntry>& list, Home kind, const char* what) -> Expected<ValueHome> {
    const int32_t i = entry_index(list, v);
    if (i < 0) return Error::internal("reference backend: {} is not among the manifest's {}", g.describe(v), what);
    return ValueHome{kind, i};
  };
  switch (n.op) {
    case OpKind::Input:
      return listed(m.inputs, Home::kInput, "inputs");
    case OpKind::Param:
      return listed(m.params, Home::kParam, "params");
    case OpKind::Constant:
      return ValueHome{Home::kConstant, 0};
    case OpKind::Handle:
      return listed(m.handles, Home::kHandle, "handles");
    case OpKind::UpdateSlice: {
      ValueId root = n.inputs[0];  // through chains of updates to the handle they write
      while (g.node(root).op == OpKind::UpdateSlice) root = g.node(root).inputs[0];
      if (g.node(root).op != OpKind::Handle)
        return Error::unsupported("reference backend: {} must write a handle, not {}", g.describe(v), g.describe(root));
      const int32_t i = entry_index(m.handles, root);
      if (i < 0) return Error::internal("reference backend: {} is not among the manifest's handles", g.describe(root));
      return ValueHome{Home::kHandle, i};
    }
    case OpKind::FusedLinear: {
      if (ir::in_place_input(n) < 0) return ValueHome{Home::kOwn, 0};
      const ValueId cache = n.inputs[static_cast<size_t>(ir::in_place_input(n))];  // a handle (verified)
      const int32_t i = entry_index(m.handles, cache);
      if (i < 0) return Error::internal("reference backend: {} is not among the manifest's handles", g.describe(cache));
      return ValueHome{Home::kHandle, i};
    }
    default:
      return ValueHome{Home::kOwn, 0};
  }
}

Expected<std::shared_ptr<const Program>> make_program(const ir::LirModule& lir) {
  const ir::Graph& g = lir.graph;
  if (!lir.dynamic_symbols.empty())
    return Error::invalid_argument("reference backend: the module still has unbound symbols (bind them first)");
  auto p = std::make_shared<Program>();
  p->graph = g;
  p->manifest = lir.manifest;
  p->schedule = lir.plan.schedule;
  if (p->schedule.empty())
    for (ValueId v = 0; v < g.size(); ++v) p->schedule.push_back(v);
  std::vector<RefKernel> by_kind(static_cast<size_t>(ir::kNumOpKinds), nullptr);
  std::vector<bool> known(static_cast<size_t>(ir::kNumOpKinds), false);
  for (const RefKernelEntry& e : reference_kernel_table()) {
    by_kind[static_cast<size_t>(e.kind)] = e.run;
    known[static_cast<size_t>(e.kind)] = true;
  }
  for (ValueId v = 0; v < g.size(); ++v) {
    const ir::Node& n = g.node(v);
    if (!n.shape.is_static())
      return Error::invalid_argument("reference backend: {} has the symbolic shape {}", g.describe(v),
                                     n.shape.to_string());
    if (n.op == OpKind::Custom)
      return Error::unsupported(
          "reference backend: {} is custom op '{}'; custom kernels are registered for the cpu "
          "backend only",
          g.describe(v), n.attr<ir::CustomAttrs>().name);
    if (!known[static_cast<size_t>(n.op)])
      return Error::unsupported("reference backend has no kernel for {} (op {})", g.describe(v), ir::op_name(n.op));
    p->kernels.push_back(by_kind[static_cast<size_t>(n.op)]);
    ASSIGN_OR_RETURN(ValueHome home, home_of(lir, v));
    p->homes.push_back(home);
    p->what.push_back(g.describe(v));
    p->dims.push_back(n.shape.static_dims());
  }
  for (const ir::ManifestEntry& e : p->manifest.outputs) {
    const int64_t offset = (p->output_bytes + 63) / 64 * 64;
    p->output_slots.emplace_back(offset, e.bytes);
    p->output_bytes = offset + e.bytes;
  }
  return std::shared_ptr<const Program>(std::move(p));
}

}  // namespace

compile::OpSet reference_supported_ops() {
  compile::OpSet ops;
  for (const RefKernelEntry& e : reference_kernel_table()) ops.add(e.kind);
  return ops;
}

ReferenceBackend::ReferenceBackend() : ops_(reference_supported_ops()) {}

Expected<std::unique_ptr<Executable>> ReferenceBackend::compile(const ir::LirModule& lir,
                                                                const compile::CompileOptions&) {
  ASSIGN_OR_RETURN(std::shared_ptr<const Program> program, make_program(lir));
  return std::unique_ptr<Executable>(std::make_unique<ReferenceExecutable>(std::move(program)));
}

}  // namespace rlx::reference_backend
