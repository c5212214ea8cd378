// Reference kernels for data movement: Reshape, Transpose, Narrow, Concat, Expand, Gather
// and UpdateSlice. Elements are copied byte for byte (so i64 values stay exact), one
// output element at a time from its source index; packed Gather tables are decoded.
#include <cstring>

#include "backends/reference/reference_kernels.h"

namespace rlx::reference_backend {
namespace {

int64_t element_bytes(ir::DType dtype) { return ir::dtype_info(dtype).bytes_per_block; }

// out element `to` = in element `from` (same dtype).
void copy_element(const RefInput& in, int64_t from, const RefOutput& out, int64_t to) {
  const int64_t size = element_bytes(out.dtype);
  std::memcpy(out.data + to * size, in.data + from * size, static_cast<size_t>(size));
}

// Fills every output element from the input element `source(out_index)` names.
template <typename Source>
void gather_elements(const RefInput& in, const RefOutput& out, const Source& source) {
  const int64_t n = element_count(out.dims);
  for (int64_t o = 0; o < n; ++o) copy_element(in, ravel(source(unravel(o, out.dims)), in.dims), out, o);
}

int64_t product(const std::vector<int64_t>& dims, size_t from, size_t to) {
  int64_t p = 1;
  for (size_t d = from; d < to; ++d) p *= dims[d];
  return p;
}

}  // namespace

Status run_reshape(const RefCall& call) {
  const int64_t n = element_count(call.out.dims);
  for (int64_t i = 0; i < n; ++i) copy_element(call.in[0], i, call.out, i);
  return {};
}

// out dim d is input dim perm[d].
Status run_transpose(const RefCall& call) {
  const auto& perm = call.attr<ir::TransposeAttrs>().perm;
  gather_elements(call.in[0], call.out, [&](const std::vector<int64_t>& index) {
    std::vector<int64_t> from(index.size());
    for (size_t d = 0; d < perm.size(); ++d) from[static_cast<size_t>(perm[d])] = index[d];
    return from;
  });
  return {};
}

Status run_narrow(const RefCall& call) {
  const auto& attrs = call.attr<ir::NarrowAttrs>();
  const auto axis = static_cast<size_t>(normalize_axis(attrs.axis, call.in[0].dims.size()));
  gather_elements(call.in[0], call.out, [&](std::vector<int64_t> index) {
    index[axis] += attrs.start;
    return index;
  });
  return {};
}

Status run_concat(const RefCall& call) {
  const auto axis = static_cast<size_t>(normalize_axis(call.attr<ir::AxisAttrs>().axis, call.out.dims.size()));
  const int64_t n = element_count(call.out.dims);
  for (int64_t o = 0; o < n; ++o) {
    std::vector<int64_t> index = unravel(o, call.out.dims);
    size_t part = 0;  // the input holding this position along the axis
    while (index[axis] >= call.in[part].dims[axis]) index[axis] -= call.in[part++].dims[axis];
    copy_element(call.in[part], ravel(index, call.in[part].dims), call.out, o);
  }
  return {};
}

Status run_expand(const RefCall& call) {
  const int64_t n = element_count(call.out.dims);
  for (int64_t o = 0; o < n; ++o)
    copy_element(call.in[0], broadcast_flat(unravel(o, call.out.dims), call.in[0].dims), call.out, o);
  return {};
}

// out[a.., i.., b..] = table[a.., indices[i..], b..] along `axis`; indices must lie in
// [0, table.dims[axis]). A packed [rows, cols] table (axis 0) is decoded to f32 rows.
Status run_gather(const RefCall& call) {
  const RefInput& table = call.in[0];
  const auto axis = static_cast<size_t>(normalize_axis(call.attr<ir::AxisAttrs>().axis, table.dims.size()));
  const int64_t axis_len = table.dims[axis], n_idx = element_count(call.in[1].dims);
  std::vector<int64_t> indices(static_cast<size_t>(n_idx));
  for (int64_t i = 0; i < n_idx; ++i) {
    const int64_t index = load_index(call.in[1].dtype, call.in[1].data, i);
    if (index < 0 || index >= axis_len)
      return kernel_error(call, "index {} at position {} is out of range [0, {})", index, i, axis_len);
    indices[static_cast<size_t>(i)] = index;
  }
  const int64_t outer = product(table.dims, 0, axis);
  const int64_t inner = product(table.dims, axis + 1, table.dims.size());
  std::vector<double> decoded;
  if (ir::is_packed(table.dtype)) {
    ASSIGN_OR_RETURN(decoded, read_values(table));
  }
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < n_idx; ++i) {
      const int64_t row = indices[static_cast<size_t>(i)];
      for (int64_t j = 0; j < inner; ++j) {
        const int64_t from = (o * axis_len + row) * inner + j, to = (o * n_idx + i) * inner + j;
        if (decoded.empty())
          copy_element(table, from, call.out, to);
        else
          store_element(call.out.dtype, call.out.data, to, decoded[static_cast<size_t>(from)]);
      }
    }
  }
  return {};
}

// Writes src into the handle (whose storage is call.out) at rows [start, start + len)
// along `axis`; start comes from input 2 and must keep the rows inside the handle.
Status run_update_slice(const RefCall& call) {
  const RefInput& src = call.in[1];
  const std::vector<int64_t>& dd = call.out.dims;
  const auto axis = static_cast<size_t>(normalize_axis(call.attr<ir::AxisAttrs>().axis, dd.size()));
  const int64_t len = src.dims[axis], dst_len = dd[axis];
  const int64_t outer = product(dd, 0, axis), inner = product(dd, axis + 1, dd.size());
  // One start for every outer slice, or one each (a stacked cache of several sequences).
  const bool per_outer = element_count(call.in[2].dims) != 1;
  for (int64_t o = 0; o < (per_outer ? outer : 1); ++o) {  // (nothing is written unless every slice fits)
    const int64_t start = load_index(call.in[2].dtype, call.in[2].data, o);
    if (start < 0 || start > dst_len - len)
      return kernel_error(call, "writing {} rows at {} exceeds the handle's {} rows{}", len, start, dst_len,
                          per_outer ? fmt::format(" (slice {})", o) : std::string());
  }
  for (int64_t o = 0; o < outer; ++o) {
    const int64_t start = load_index(call.in[2].dtype, call.in[2].data, per_outer ? o : 0);
    for (int64_t j = 0; j < len; ++j)
      for (int64_t e = 0; e < inner; ++e)
        copy_element(src, (o * len + j) * inner + e, call.out, (o * dst_len + start + j) * inner + e);
  }
  return {};
}

}  // namespace rlx::reference_backend
