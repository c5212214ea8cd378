// CPU kernels for Custom ops, registered by op name. The op's semantics (arity,
// type inference) are registered with ir::register_custom_op; this registry supplies
// the CPU implementation. A Custom node without a kernel here fails the CPU compile.
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "rlx/base/status.h"
#include "rlx/runtime/tensor.h"

namespace rlx {

/// One invocation: the node's inputs, its output buffer (dtype and shape of the
/// node, row-major, already allocated) and the node's config string.
struct CpuCustomCall {
  std::span<const TensorView> inputs;
  ir::DType out_dtype = ir::DType::F32;
  std::span<const int64_t> out_shape;
  void* out = nullptr;
  std::string_view config;
};

/// Must not allocate if the graph is to stay allocation-free; returns an error on
/// bad data (the run then fails with that error).
using CpuCustomKernel = std::function<Status(const CpuCustomCall&)>;

/// Registers (or replaces) the CPU kernel of custom op `name`. Thread-safe.
void register_cpu_custom_kernel(const std::string& name, CpuCustomKernel kernel);
/// The kernel for `name`, or nullptr. The pointer stays valid until it is replaced.
std::shared_ptr<const CpuCustomKernel> find_cpu_custom_kernel(const std::string& name);

}  // namespace rlx
