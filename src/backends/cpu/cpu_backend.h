// The CPU backend: its capability table (derived from the kernel table, so the two
// cannot disagree) and its compiler from LIR to a CpuExecutable.
#pragma once

#include <memory>
#include <string>

#include "backends/cpu/kernels/thread_pool.h"
#include "backends/cpu/packed_weights.h"
#include "rlx/runtime/backend.h"

namespace rlx::cpu_backend {

class CpuBackend final : public Backend {
 public:
  /// `threads` < 1: RLX_THREADS when set, else all cores. `prepack_weights`: see
  /// BackendOptions::prepack_weights (RLX_CPU_PREPACK=0 turns it off too).
  /// packed_cache_dir: where packed copies of file-mapped weights persist (empty: none).
  /// `check_finite`: see BackendOptions::check_finite.
  explicit CpuBackend(int threads = 0, bool prepack_weights = true, std::string packed_cache_dir = {},
                      bool check_finite = false);
  std::string name() const override { return "cpu"; }
  const compile::OpSet& supported_ops() const override { return ops_; }
  Expected<std::unique_ptr<Executable>> compile(const ir::LirModule& lir,
                                                const compile::CompileOptions& options) override;
  Expected<std::unique_ptr<Executable>> compile_with_extent(const ir::LirModule& lir,
                                                            const compile::CompileOptions& options,
                                                            const ExtentInfo& extent) override;
  /// The ranks of a CPU group meet in host memory (HostCommunicator): one per rank.
  Expected<std::vector<std::shared_ptr<Communicator>>> create_communicators(
      const std::vector<std::shared_ptr<Backend>>& ranks) override;
  int threads() const { return pool_->size(); }
  /// True when executables read matmul weights pre-packed.
  bool prepacks_weights() const { return packed_ != nullptr; }
  /// The shared packed weights' counters (zeros when prepacking is off).
  PackedWeightStats packed_weight_stats() const { return packed_ ? packed_->stats() : PackedWeightStats{}; }

 private:
  compile::OpSet ops_;
  std::shared_ptr<cpu::ThreadPool> pool_;
  std::shared_ptr<PackedWeightCache> packed_;  ///< null: weights are packed per call
  bool check_finite_ = false;
};

/// The op kinds the CPU kernel table covers.
compile::OpSet cpu_supported_ops();

}  // namespace rlx::cpu_backend
