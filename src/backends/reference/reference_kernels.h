// The reference backend's kernels: one plain function per op kind, listed in one table.
// A kernel reads its inputs as doubles (from their declared dtypes, packed GGUF blocks
// decoded row by row), computes in double, and stores its result in the node's dtype.
// Nothing here is fast on purpose: every kernel should read like the op's definition.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "rlx/base/status.h"
#include "rlx/ir/graph.h"

namespace rlx::reference_backend {

/// One input of a node: its dtype, static dims and bytes (read-only).
struct RefInput {
  ir::DType dtype = ir::DType::F32;
  std::vector<int64_t> dims;
  const uint8_t* data = nullptr;
};

/// The node's result: dtype, dims and the buffer the kernel fills. For UpdateSlice the
/// buffer is the handle's own storage, so the kernel writes only the updated rows.
struct RefOutput {
  ir::DType dtype = ir::DType::F32;
  std::vector<int64_t> dims;
  uint8_t* data = nullptr;
};

/// Everything a kernel sees for one node.
struct RefCall {
  const ir::Node* node = nullptr;
  std::string what;  ///< "%3 (matmul 'x')", for error messages
  std::vector<RefInput> in;
  RefOutput out;
  /// The state ops (ir::updates_state): input 0's handle storage, written in place.
  uint8_t* state = nullptr;
  template <typename A>
  const A& attr() const {
    return node->attr<A>();
  }
};

using RefKernel = Status (*)(const RefCall&);

/// One row of the kernel table.
struct RefKernelEntry {
  ir::OpKind kind;
  RefKernel run;
};

/// Every op kind the reference backend runs (all MIR kinds but Custom), with its kernel.
const std::vector<RefKernelEntry>& reference_kernel_table();

// ---- values: dtype-true loads and stores ------------------------------------------------

/// Number of elements of `dims` (1 for a scalar).
int64_t element_count(const std::vector<int64_t>& dims);
/// Element `i` of non-packed `dtype` data, exactly, as a double.
double load_element(ir::DType dtype, const uint8_t* data, int64_t i);
/// Stores `v` as element `i` of non-packed `dtype`: f32/f16/bf16 round to nearest even
/// (f16/bf16 through f32, as every backend rounds); integers truncate toward zero,
/// saturate at the type's range and take 0 for NaN; bool is v != 0.
void store_element(ir::DType dtype, uint8_t* data, int64_t i, double v);
/// Element `i` of i32/i64 (or other integer) data exactly, for indices and positions.
int64_t load_index(ir::DType dtype, const uint8_t* data, int64_t i);
/// The value `v` becomes when stored as `dtype` and read back.
double round_to(ir::DType dtype, double v);
/// All elements of `x` as doubles; packed dtypes ([rows, cols]) are decoded row by row
/// with formats::dequantize_row. Error: a packed dtype without a block decoder.
Expected<std::vector<double>> read_values(const RefInput& x);
/// Stores every element of `values` into `y` (values.size() == element_count(y.dims)).
void write_values(const RefOutput& y, const std::vector<double>& values);

// ---- indexing ---------------------------------------------------------------------------

/// The multi-index of row-major flat index `flat` in `dims`.
std::vector<int64_t> unravel(int64_t flat, const std::vector<int64_t>& dims);
/// The flat index in `in_dims` of `out_index` under numpy broadcasting (dims right-aligned,
/// size-1 dims read index 0).
int64_t broadcast_flat(const std::vector<int64_t>& out_index, const std::vector<int64_t>& in_dims);
/// Row-major flat index of `index` in `dims`.
int64_t ravel(const std::vector<int64_t>& index, const std::vector<int64_t>& dims);
/// Normalizes a possibly negative axis of a rank-`rank` tensor.
int64_t normalize_axis(int64_t axis, size_t rank);

/// The activation `kind` at x, in double (gelu: the erf form; gelu_tanh: the tanh form).
double activation(ir::ActKind kind, double x);

/// Row by row over rows of length d: the layer norm (x - mean) / sqrt(var + eps) * gamma
/// (+ beta), or with `rms` the RMS norm x / sqrt(mean(x^2) + eps) * gamma.
std::vector<double> normalize_rows(const std::vector<double>& x, int64_t d, bool rms, double eps,
                                   const std::vector<double>& gamma, const std::vector<double>* beta);
/// Rotary embedding of rows of `x` (each `in_width` wide, columns from r.offset) into a
/// tensor of `out_dims` ([.., S, width]) at positions pos[S], as the rope op defines it.
std::vector<double> rope_rows(const std::vector<double>& x, int64_t in_width, const std::vector<int64_t>& out_dims,
                              const std::vector<double>& pos, const ir::RopeAttrs& r);

/// Error naming the node: "reference backend: %3 (matmul 'x'): <what>".
template <typename... Args>
Error kernel_error(const RefCall& call, fmt::format_string<Args...> f, Args&&... args) {
  return Error::invalid_argument("reference backend: {}: {}", call.what, fmt::format(f, std::forward<Args>(args)...));
}

// ---- kernels, one per op kind (ops_*.cpp) ------------------------------------------------
Status run_activation(const RefCall&);
Status run_binary(const RefCall&);
Status run_compare(const RefCall&);
Status run_where(const RefCall&);
Status run_cast(const RefCall&);
Status run_elementwise_region(const RefCall&);
Status run_matmul(const RefCall&);
Status run_dequant_matmul(const RefCall&);
Status run_fused_matmul_bias_act(const RefCall&);
Status run_fused_swiglu(const RefCall&);
Status run_reduce(const RefCall&);
Status run_softmax(const RefCall&);
Status run_cumsum(const RefCall&);
Status run_topk(const RefCall&);
Status run_sample(const RefCall&);
Status run_layer_norm(const RefCall&);
Status run_rms_norm(const RefCall&);
Status run_fused_residual_rms_norm(const RefCall&);
Status run_fused_residual_layer_norm(const RefCall&);
Status run_rope(const RefCall&);
Status run_attention(const RefCall&);
Status run_reshape(const RefCall&);
Status run_transpose(const RefCall&);
Status run_narrow(const RefCall&);
Status run_concat(const RefCall&);
Status run_expand(const RefCall&);
Status run_gather(const RefCall&);
Status run_update_slice(const RefCall&);
Status run_moe_route(const RefCall&);
Status run_moe_ffn(const RefCall&);
Status run_causal_conv1d(const RefCall&);
Status run_gated_delta_rule(const RefCall&);
Status run_conv(const RefCall&);
Status run_conv_transpose(const RefCall&);
Status run_group_norm(const RefCall&);
Status run_interpolate(const RefCall&);
Status run_window_partition(const RefCall&);
Status run_window_unpartition(const RefCall&);
Status run_rel_pos_attention(const RefCall&);
Status run_fused_linear(const RefCall&);

}  // namespace rlx::reference_backend
