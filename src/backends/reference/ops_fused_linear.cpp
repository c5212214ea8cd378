// Reference kernel of fused_linear: the product of x (RMS-normed first when `norm`) with
// w, then silu(.) * the up product, + residual, rope and the write into a cache's rows,
// each exactly as the op's definition (ir/op.h) says, in double.
#include "backends/reference/reference_kernels.h"

namespace rlx::reference_backend {
namespace {

// y[r, n] = sum_k x[r, k] * w[n, k]
std::vector<double> product(const std::vector<double>& x, const std::vector<double>& w, int64_t rows, int64_t k,
                            int64_t n) {
  std::vector<double> y(static_cast<size_t>(rows * n));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < n; ++c) {
      double sum = 0.0;
      for (int64_t i = 0; i < k; ++i) sum += x[static_cast<size_t>(r * k + i)] * w[static_cast<size_t>(c * k + i)];
      y[static_cast<size_t>(r * n + c)] = sum;
    }
  return y;
}

}  // namespace

Status run_fused_linear(const RefCall& call) {
  const auto& a = call.attr<ir::FusedLinearAttrs>();
  const auto input = [&](int i) -> const RefInput& { return call.in[static_cast<size_t>(i)]; };
  ASSIGN_OR_RETURN(std::vector<double> x, read_values(call.in[0]));
  ASSIGN_OR_RETURN(std::vector<double> w, read_values(call.in[1]));
  const int64_t k = call.in[0].dims.back(), n = call.in[1].dims[0];
  const int64_t rows = k == 0 ? 0 : static_cast<int64_t>(x.size()) / k;
  if (a.norm) {
    ASSIGN_OR_RETURN(std::vector<double> gamma, read_values(input(a.gamma_input())));
    x = normalize_rows(x, k, true, a.eps, gamma, nullptr);
  }
  std::vector<double> y = product(x, w, rows, k, n);
  if (a.swiglu) {
    ASSIGN_OR_RETURN(std::vector<double> w_up, read_values(input(a.w_up_input())));
    const std::vector<double> up = product(x, w_up, rows, k, n);
    for (size_t i = 0; i < y.size(); ++i) y[i] = activation(ir::ActKind::Silu, y[i]) * up[i];
  }
  if (a.residual) {
    ASSIGN_OR_RETURN(std::vector<double> res, read_values(input(a.residual_input())));
    for (size_t i = 0; i < y.size(); ++i) y[i] += res[i];
  }
  if (a.rope) {
    ASSIGN_OR_RETURN(std::vector<double> pos, read_values(input(a.pos_input())));
    std::vector<int64_t> dims(call.in[0].dims.begin(), call.in[0].dims.end() - 1);
    dims.push_back(n);
    y = rope_rows(y, n, dims, pos, a.rope_attrs);
  }
  if (!a.cache_write) {
    write_values(call.out, y);
    return {};
  }
  // The output is the cache's own storage: only rows [start, start + rows) are written.
  const RefInput& start = input(a.cache_input() + 1);
  const int64_t at = load_index(start.dtype, start.data, 0), cache_rows = call.out.dims[0];
  if (at < 0 || at > cache_rows - rows)
    return kernel_error(call, "writing {} rows at {} exceeds the cache's {} rows", rows, at, cache_rows);
  for (int64_t i = 0; i < rows * n; ++i) store_element(call.out.dtype, call.out.data, at * n + i, y[static_cast<size_t>(i)]);
  return {};
}

}  // namespace rlx::reference_backend
