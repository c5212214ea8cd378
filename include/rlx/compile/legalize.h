// Legalization: rewrites every MIR op a backend does not claim (its OpSet) into common-IR
// primitives it does claim, under a KernelDispatchConfig. What cannot be rewritten fails
// with an error naming node, kind and backend. The DispatchReport says, per kind, what ran
// natively, what was rewritten and what is missing.
#pragma once

#include <map>
#include <string>

#include "rlx/base/status.h"
#include "rlx/compile/op_set.h"
#include "rlx/compile/options.h"
#include "rlx/ir/module.h"

namespace rlx::compile {

struct DispatchEntry {
  int64_t native = 0;     ///< nodes of this kind left for the backend's kernel
  int64_t rewritten = 0;  ///< nodes of this kind rewritten into primitives
  int64_t missing = 0;    ///< nodes of this kind neither claimed nor rewritable
};

struct DispatchReport {
  std::string backend;
  std::map<ir::OpKind, DispatchEntry> kinds;
  bool complete() const;
  /// One line per kind: "matmul: native 3", "fused_swiglu: rewritten 2", ...
  std::string to_string() const;
};

/// True when legalization knows a rewrite of `kind` into other kinds.
bool has_common_rewrite(ir::OpKind kind);

/// Rewrites until every node's kind is in `backend_ops` (boundary kinds always are).
/// With `target`, a fused_linear whose form the target's check (when it has one) refuses (made elsewhere
/// than by fuse_linear for this target: text IR, another target) is rewritten too.
/// Fills `report` (when given) even on failure.
Expected<ir::MirModule> legalize(const ir::MirModule& m, const OpSet& backend_ops, const std::string& backend_name,
                                 const KernelDispatchConfig& dispatch = {}, DispatchReport* report = nullptr,
                                 const Target* target = nullptr);

}  // namespace rlx::compile
