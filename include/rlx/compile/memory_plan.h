// The memory planner: MIR + a BufferPlan = LIR. Liveness over the schedule, one arena
// (alignment configurable), greedy-by-size best-fit offsets, zero-cost views (Reshape,
// contiguous Narrow, same-dtype Cast, UpdateSlice of a handle), in-place reuse for
// elementwise ops. Params, handles and constants live outside the arena.
#pragma once

#include <string>

#include "rlx/base/status.h"
#include "rlx/compile/options.h"
#include "rlx/ir/module.h"

namespace rlx::compile {

struct PlanOptions {
  int64_t alignment = 64;  ///< arena slot alignment in bytes (power of two)
  bool in_place = true;    ///< allow elementwise outputs to take a dying input's slot
};

/// The plan options of a compile: alignment and in-place reuse from `o`.
PlanOptions plan_options(const CompileOptions& o);

/// Plans `m`. With unbound symbols the plan holds slot kinds and view roots but sizes and
/// offsets are 0 and `dynamic_symbols` lists the symbols; specialize() binds and re-plans.
Expected<ir::LirModule> plan_memory(const ir::MirModule& m, const PlanOptions& options = {});

/// Binds `binding` in `lir`'s graph, re-infers shapes and re-plans (same alignment).
Expected<ir::LirModule> specialize(const ir::LirModule& lir, const ir::DimBinding& binding);
/// The same with these plan options.
Expected<ir::LirModule> specialize(const ir::LirModule& lir, const ir::DimBinding& binding, const PlanOptions& options);

/// Human-readable plan: arena size, unshared sum, bytes saved, one line per value.
std::string plan_report(const ir::LirModule& lir);

/// Checks a plan's invariants: alignment, slots inside the arena, no two arena values
/// live at the same time overlap (a sweep over the schedule, n log n), views inside roots.
Status check_plan(const ir::LirModule& lir);

}  // namespace rlx::compile
