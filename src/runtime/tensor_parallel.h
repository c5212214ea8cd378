// The backend of a tensor-parallel device group ("cuda:0,1", "cpu:0,1"): one backend
// per rank underneath, one executable per rank for every LIR module, one process.
// Its target asks the compiler to shard the model (Target::tensor_parallel), so the LIR
// it compiles is one rank's graph; the group executable presents the full model to
// its callers (params take the whole weight and are split per rank here; outputs come
// from rank 0, whose values every rank holds after the collectives) and runs the ranks
// in parallel, one thread each. The executables of one group (clones included) run one
// at a time: they share its threads and communicators.
#pragma once

#include <memory>
#include <vector>

#include "rlx/runtime/backend.h"

namespace rlx::runtime {

/// The backend of `group` (count > 1) over the backends of its ranks (ranks[r] runs
/// rank r), with the communicators the ranks' backend kind makes; an error (e.g. NCCL
/// missing) says why the group cannot run.
Expected<std::shared_ptr<Backend>> make_tensor_parallel_backend(const Device& group,
                                                                std::vector<std::shared_ptr<Backend>> ranks);

}  // namespace rlx::runtime
