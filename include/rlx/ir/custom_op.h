// Registry of user-defined ("Custom") ops: a name, an arity range and a type
// function. Kernels for a custom op are registered with each backend separately.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "rlx/ir/graph.h"

namespace rlx::ir {

struct CustomOpDef {
  std::string name;
  int min_inputs = 0;
  int max_inputs = -1;
  /// Result type from input types and the node's config string.
  std::function<Expected<TensorType>(const std::vector<TensorType>& inputs, const std::string& config)> infer;
};

/// Registers (or replaces) a custom op definition. Thread-safe.
void register_custom_op(CustomOpDef def);
/// Looks up a definition; nullptr when unknown.
const CustomOpDef* find_custom_op(const std::string& name);

}  // namespace rlx::ir
