// Session: the entry point that turns graphs into CompiledGraphs on one device.
//
//   Session s(Device::cpu());                       // or Session::create(device) -> Expected
//   Expected<CompiledGraph> g = s.compile(graph);   // MIR graph, default options
//   Expected<CompiledGraph> h = s.compile_hir_with(hir, options);
//
// compile_* run the compile pipeline (lower, passes, legalize against the backend's
// OpSet, plan) and hand the LIR to the backend. A graph with symbolic dims compiles
// once as a template and is specialized with CompileOptions::binding; the first
// symbolic dim of its inputs becomes the bucket axis for set_active_extent.
#pragma once

#include <memory>
#include <optional>

#include "rlx/base/status.h"
#include "rlx/compile/options.h"
#include "rlx/ir/module.h"
#include "rlx/runtime/backend.h"
#include "rlx/runtime/compiled_graph.h"
#include "rlx/runtime/device.h"

namespace rlx {

class Session {
 public:
  /// Never aborts: when the device is unavailable, ok() is false and every compile
  /// returns the reason.
  explicit Session(Device device = Device::cpu(), BackendOptions options = {});
  /// The same, as an error value when the device is unavailable.
  static Expected<Session> create(Device device, BackendOptions options = {});

  const Device& device() const { return device_; }
  bool ok() const { return backend_ != nullptr; }
  /// Why the session is unusable (ok() == false), else success.
  Status status() const;
  /// The backend (null when !ok()).
  Backend* backend() const { return backend_.get(); }

  Expected<CompiledGraph> compile(const ir::Graph& graph) const;
  Expected<CompiledGraph> compile_with(const ir::Graph& graph, const compile::CompileOptions& options) const;
  Expected<CompiledGraph> compile_hir(const ir::HirModule& hir) const;
  Expected<CompiledGraph> compile_hir_with(const ir::HirModule& hir, const compile::CompileOptions& options) const;
  /// Compiles an already planned, fully bound LIR module (no passes).
  Expected<CompiledGraph> compile_lir(const ir::LirModule& lir, const compile::CompileOptions& options = {}) const;

 private:
  Expected<CompiledGraph> finish(const ir::LirModule& lir, const compile::CompileOptions& options,
                                 compile::FusionReport fusion, compile::DispatchReport dispatch) const;
  Device device_;
  std::shared_ptr<Backend> backend_;
  std::optional<Error> error_;
};

}  // namespace rlx
