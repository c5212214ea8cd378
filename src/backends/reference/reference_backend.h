// The reference backend ("reference", Device::reference()): a scalar, double-precision
// interpreter of LIR graphs, one node at a time. It is the oracle that backend tests
// compare against and the smallest complete example of a backend (see README.md).
#pragma once

#include <memory>

#include "rlx/runtime/backend.h"

namespace rlx::reference_backend {

class ReferenceBackend final : public Backend {
 public:
  ReferenceBackend();
  std::string name() const override { return "reference"; }
  /// Every MIR op kind except Custom (user kernels are registered for the CPU only).
  const compile::OpSet& supported_ops() const override { return ops_; }
  /// Checks that every node is runnable (static shapes, a kernel for its kind, handles
  /// written by UpdateSlice) and makes an executable; errors name the node.
  Expected<std::unique_ptr<Executable>> compile(const ir::LirModule& lir,
                                                const compile::CompileOptions& options) override;

 private:
  compile::OpSet ops_;
};

/// The op kinds the reference kernel table covers.
compile::OpSet reference_supported_ops();

}  // namespace rlx::reference_backend
