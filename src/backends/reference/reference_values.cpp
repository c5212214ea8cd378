// The reference backend's value helpers (dtype-true element loads and stores, packed
// rows decoded with the GGUF block decoders, broadcast indexing) and its kernel table,
// the one list of op kinds the backend runs.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "backends/reference/reference_kernels.h"
#include "rlx/base/half.h"
#include "rlx/formats/ggml_type.h"
#include "rlx/formats/quant.h"

namespace rlx::reference_backend {

using ir::DType;

int64_t element_count(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

namespace {

template <typename T>
T read_raw(const uint8_t* data, int64_t i) {
  T v;
  std::memcpy(&v, data + static_cast<size_t>(i) * sizeof(T), sizeof(T));
  return v;
}

template <typename T>
void write_raw(uint8_t* data, int64_t i, T v) {
  std::memcpy(data + static_cast<size_t>(i) * sizeof(T), &v, sizeof(T));
}

// Truncates toward zero and saturates at [lo, hi]; NaN becomes 0.
int64_t to_integer(double v, double lo, double hi) {
  if (std::isnan(v)) return 0;
  const double t = std::clamp(std::trunc(v), lo, hi);
  // hi for i64 is 2^63 - 1, which a double cannot hold: the clamp gives 2^63.
  if (t >= 9.2233720368547758e18) return std::numeric_limits<int64_t>::max();
  return static_cast<int64_t>(t);
}

}  // namespace

double load_element(DType dtype, const uint8_t* data, int64_t i) {
  switch (dtype) {
    case DType::F32:
      return read_raw<float>(data, i);
    case DType::F16:
      return f16_bits_to_f32(read_raw<uint16_t>(data, i));
    case DType::BF16:
      return bf16_bits_to_f32(read_raw<uint16_t>(data, i));
    case DType::F64:
      return read_raw<double>(data, i);
    case DType::I8:
      return read_raw<int8_t>(data, i);
    case DType::U8:
      return read_raw<uint8_t>(data, i);
    case DType::I32:
      return read_raw<int32_t>(data, i);
    case DType::I64:
      return static_cast<double>(read_raw<int64_t>(data, i));
    case DType::Bool:
      return read_raw<uint8_t>(data, i) != 0 ? 1.0 : 0.0;
    default:
      break;
  }
  RLX_ASSERT(false && "load_element: packed dtype");
  return 0.0;
}

void store_element(DType dtype, uint8_t* data, int64_t i, double v) {
  switch (dtype) {
    case DType::F32:
      write_raw<float>(data, i, static_cast<float>(v));
      return;
    case DType::F16:
      write_raw<uint16_t>(data, i, f32_to_f16_bits(static_cast<float>(v)));
      return;
    case DType::BF16:
      write_raw<uint16_t>(data, i, f32_to_bf16_bits(static_cast<float>(v)));
      return;
    case DType::F64:
      write_raw<double>(data, i, v);
      return;
    case DType::I8:
      write_raw<int8_t>(data, i, static_cast<int8_t>(to_integer(v, -128, 127)));
      return;
    case DType::U8:
      write_raw<uint8_t>(data, i, static_cast<uint8_t>(to_integer(v, 0, 255)));
      return;
    case DType::I32:
      write_raw<int32_t>(data, i, static_cast<int32_t>(to_integer(v, -2147483648.0, 2147483647.0)));
      return;
    case DType::I64:
      write_raw<int64_t>(data, i, to_integer(v, -9.2233720368547758e18, 9.2233720368547758e18));
      return;
    case DType::Bool:
      write_raw<uint8_t>(data, i, v != 0 ? 1 : 0);
      return;
    default:
      break;
  }
  RLX_ASSERT(false && "store_element: packed dtype");
}

int64_t load_index(DType dtype, const uint8_t* data, int64_t i) {
  switch (dtype) {
    case DType::I32:
      return read_raw<int32_t>(data, i);
    case DType::I64:
      return read_raw<int64_t>(data, i);
    default:
      return static_cast<int64_t>(load_element(dtype, data, i));  // small integer types and bool
  }
}

double round_to(DType dtype, double v) {
  uint8_t cell[8] = {};
  store_element(dtype, cell, 0, v);
  return load_element(dtype, cell, 0);
}

Expected<std::vector<double>> read_values(const RefInput& x) {
  const int64_t n = element_count(x.dims);
  std::vector<double> out(static_cast<size_t>(n));
  if (!ir::is_packed(x.dtype)) {
    for (int64_t i = 0; i < n; ++i) out[static_cast<size_t>(i)] = load_element(x.dtype, x.data, i);
    return out;
  }
  // Packed: rows of GGUF blocks along the last dim (rows = the product of the others),
  // each row ggml_bytes_for(type, cols) bytes.
  const auto type = formats::ggml_type_from_name(ir::dtype_name(x.dtype));
  if (!type || !formats::can_dequantize(*type) || x.dims.size() < 2)
    return Error::unsupported("reference backend: no block decoder for {} [{} dims]", ir::dtype_name(x.dtype),
                              x.dims.size());
  const int64_t cols = x.dims.back(), rows = cols == 0 ? 0 : n / cols;
  const int64_t row_bytes = ir::dtype_bytes(x.dtype, cols).value_or(0);
  std::vector<float> row(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    TRY(formats::dequantize_row(*type, x.data + r * row_bytes, row.data(), cols));
    for (int64_t c = 0; c < cols; ++c) out[static_cast<size_t>(r * cols + c)] = row[static_cast<size_t>(c)];
  }
  return out;
}

void write_values(const RefOutput& y, const std::vector<double>& values) {
  RLX_ASSERT(static_cast<int64_t>(values.size()) == element_count(y.dims));
  for (size_t i = 0; i < values.size(); ++i) store_element(y.dtype, y.data, static_cast<int64_t>(i), values[i]);
}

std::vector<int64_t> unravel(int64_t flat, const std::vector<int64_t>& dims) {
  std::vector<int64_t> index(dims.size(), 0);
  for (size_t d = dims.size(); d-- > 0;) {
    if (dims[d] == 0) continue;
    index[d] = flat % dims[d];
    flat /= dims[d];
  }
  return index;
}

int64_t broadcast_flat(const std::vector<int64_t>& out_index, const std::vector<int64_t>& in_dims) {
  const size_t lead = out_index.size() - in_dims.size();
  int64_t flat = 0;
  for (size_t d = 0; d < in_dims.size(); ++d) flat = flat * in_dims[d] + (in_dims[d] == 1 ? 0 : out_index[lead + d]);
  return flat;
}

int64_t ravel(const std::vector<int64_t>& index, const std::vector<int64_t>& dims) {
  int64_t flat = 0;
  for (size_t d = 0; d < dims.size(); ++d) flat = flat * dims[d] + index[d];
  return flat;
}

int64_t normalize_axis(int64_t axis, size_t rank) { return axis < 0 ? axis + static_cast<int64_t>(rank) : axis; }

const std::vector<RefKernelEntry>& reference_kernel_table() {
  using ir::OpKind;
  // Boundary kinds have no work: their values are the inputs, weights, constants and
  // handles the executable stores (see reference_backend.cpp).
  static const std::vector<RefKernelEntry> table = {
      {OpKind::Input, nullptr},
      {OpKind::Param, nullptr},
      {OpKind::Constant, nullptr},
      {OpKind::Handle, nullptr},
      {OpKind::Activation, &run_activation},
      {OpKind::Binary, &run_binary},
      {OpKind::Compare, &run_compare},
      {OpKind::Where, &run_where},
      {OpKind::Cast, &run_cast},
      {OpKind::MatMul, &run_matmul},
      {OpKind::DequantMatMul, &run_dequant_matmul},
      {OpKind::Reduce, &run_reduce},
      {OpKind::Softmax, &run_softmax},
      {OpKind::Cumsum, &run_cumsum},
      {OpKind::TopK, &run_topk},
      {OpKind::MoeRoute, &run_moe_route},
      {OpKind::MoeFfn, &run_moe_ffn},
      {OpKind::CausalConv1d, &run_causal_conv1d},
      {OpKind::GatedDeltaRule, &run_gated_delta_rule},
      {OpKind::Sample, &run_sample},
      {OpKind::LayerNorm, &run_layer_norm},
      {OpKind::RmsNorm, &run_rms_norm},
      {OpKind::Rope, &run_rope},
      {OpKind::Attention, &run_attention},
      {OpKind::Reshape, &run_reshape},
      {OpKind::Transpose, &run_transpose},
      {OpKind::Narrow, &run_narrow},
      {OpKind::Concat, &run_concat},
      {OpKind::Expand, &run_expand},
      {OpKind::Gather, &run_gather},
      {OpKind::UpdateSlice, &run_update_slice},
      {OpKind::FusedLinear, &run_fused_linear},
      {OpKind::FusedMatMulBiasAct, &run_fused_matmul_bias_act},
      {OpKind::FusedSwiGLU, &run_fused_swiglu},
      {OpKind::FusedResidualRmsNorm, &run_fused_residual_rms_norm},
      {OpKind::FusedResidualLayerNorm, &run_fused_residual_layer_norm},
      {OpKind::ElementwiseRegion, &run_elementwise_region},
      {OpKind::Conv, &run_conv},
      {OpKind::ConvTranspose, &run_conv_transpose},
      {OpKind::GroupNorm, &run_group_norm},
      {OpKind::Interpolate, &run_interpolate},
      {OpKind::WindowPartition, &run_window_partition},
      {OpKind::WindowUnpartition, &run_window_unpartition},
      {OpKind::RelPosAttention, &run_rel_pos_attention},
  };
  return table;
}

}  // namespace rlx::reference_backend
