// The CPU backend: its capability table (derived from the kernel table, so the two
// cannot disagree) and its compiler from LIR to a CpuExecutable.
#pragma once

#include <memory>

#include "backends/cpu/kernels/thread_pool.h"
#include "rlx/runtime/backend.h"

namespace rlx::cpu_backend {

class CpuBackend final : public Backend {
 public:
  /// `threads` < 1: RLX_THREADS when set, else all cores.
  explicit CpuBackend(int threads = 0);
  std::string name() const override { return "cpu"; }
  const compile::OpSet& supported_ops() const override { return ops_; }
  Expected<std::unique_ptr<Executable>> compile(const ir::LirModule& lir,
                                                const compile::CompileOptions& options) override;
  Expected<std::unique_ptr<Executable>> compile_with_extent(const ir::LirModule& lir,
                                                            const compile::CompileOptions& options,
                                                            const ExtentInfo& extent) override;
  int threads() const { return pool_->size(); }

 private:
  compile::OpSet ops_;
  std::shared_ptr<cpu::ThreadPool> pool_;
};

/// The op kinds the CPU kernel table covers.
compile::OpSet cpu_supported_ops();

}  // namespace rlx::cpu_backend
