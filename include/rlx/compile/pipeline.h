// CompilePipeline: HIR -> lower -> MIR passes -> fusion -> precision -> legalize -> plan
// -> LIR, as a readable list of passes (src/compile/pipeline.cpp). Optionally dumps the
// IR after every stage to CompileOptions::ir_dump_dir and verifies after each pass when
// verbose or in debug builds.
#pragma once

#include <string>
#include <vector>

#include "rlx/base/status.h"
#include "rlx/compile/fusion_report.h"
#include "rlx/compile/legalize.h"
#include "rlx/compile/op_set.h"
#include "rlx/compile/options.h"
#include "rlx/compile/passes.h"
#include "rlx/ir/module.h"

namespace rlx::compile {

struct PassTiming {
  std::string pass;
  double ms = 0;
  int64_t nodes_after = 0;
};

struct CompileResult {
  ir::LirModule lir;
  FusionReport fusion;
  DispatchReport dispatch;
  ShardReport shard;  ///< tensor parallelism (Target::tensor_parallel > 1)
  std::vector<PassTiming> timings;
  double total_ms = 0;
};

class CompilePipeline {
 public:
  CompilePipeline(CompileOptions options, OpSet backend_ops, Target target)
      : options_(std::move(options)), backend_ops_(std::move(backend_ops)), target_(std::move(target)) {}

  Expected<CompileResult> compile_hir(const ir::HirModule& hir) const;
  Expected<CompileResult> compile_mir(const ir::MirModule& mir) const;

  const CompileOptions& options() const { return options_; }
  const OpSet& backend_ops() const { return backend_ops_; }
  const Target& target() const { return target_; }

 private:
  CompileOptions options_;
  OpSet backend_ops_;
  Target target_;
};

/// Lowers `hir` and compiles it for `target`, a backend claiming `backend_ops`.
Expected<CompileResult> compile_hir(const ir::HirModule& hir, const CompileOptions& options, const OpSet& backend_ops,
                                    const Target& target);
/// The same from MIR (no lowering).
Expected<CompileResult> compile_mir(const ir::MirModule& mir, const CompileOptions& options, const OpSet& backend_ops,
                                    const Target& target);

}  // namespace rlx::compile
