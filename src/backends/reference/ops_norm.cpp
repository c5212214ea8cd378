// Reference kernels for the norms over the last dim: LayerNorm, RmsNorm and the fused
// residual forms, whose result [2, ..] holds the sum x + res (stored in the node's dtype)
// and then the norm of that stored sum.
#include <cmath>

#include "backends/reference/reference_kernels.h"

namespace rlx::reference_backend {
namespace {

// x, gamma[, beta] (`first_weight` = 1), or x, res, gamma[, beta] (`first_weight` = 2).
Status run_norm(const RefCall& call, bool rms, bool residual) {
  const size_t first_weight = residual ? 2 : 1;
  const double eps = call.attr<ir::NormAttrs>().eps;
  ASSIGN_OR_RETURN(std::vector<double> x, read_values(call.in[0]));
  ASSIGN_OR_RETURN(std::vector<double> gamma, read_values(call.in[first_weight]));
  std::vector<double> beta;
  const bool has_beta = call.in.size() > first_weight + 1;
  if (has_beta) {
    ASSIGN_OR_RETURN(beta, read_values(call.in[first_weight + 1]));
  }
  const int64_t d = call.in[0].dims.back();
  if (!residual) {
    write_values(call.out, normalize_rows(x, d, rms, eps, gamma, has_beta ? &beta : nullptr));
    return {};
  }
  ASSIGN_OR_RETURN(std::vector<double> res, read_values(call.in[1]));
  std::vector<double> sum(x.size());
  for (size_t i = 0; i < x.size(); ++i) sum[i] = round_to(call.out.dtype, x[i] + res[i]);
  std::vector<double> y = normalize_rows(sum, d, rms, eps, gamma, has_beta ? &beta : nullptr);
  std::vector<double> both = sum;  // [2, ..]: the sum, then its norm
  both.insert(both.end(), y.begin(), y.end());
  write_values(call.out, both);
  return {};
}

}  // namespace

// (reference_kernels.h) Row by row over rows of length d:
//   layer norm: y = (x - mean) / sqrt(mean((x - mean)^2) + eps) * gamma (+ beta)
//   rms norm:   y = x / sqrt(mean(x^2) + eps) * gamma
std::vector<double> normalize_rows(const std::vector<double>& x, int64_t d, bool rms, double eps,
                                   const std::vector<double>& gamma, const std::vector<double>* beta) {
  std::vector<double> y(x.size());
  const int64_t rows = d == 0 ? 0 : static_cast<int64_t>(x.size()) / d;
  for (int64_t r = 0; r < rows; ++r) {
    const double* row = x.data() + r * d;
    double mean = 0.0;
    if (!rms) {
      for (int64_t j = 0; j < d; ++j) mean += row[j];
      mean /= static_cast<double>(d);
    }
    double squares = 0.0;
    for (int64_t j = 0; j < d; ++j) squares += (row[j] - mean) * (row[j] - mean);
    const double scale = 1.0 / std::sqrt(squares / static_cast<double>(d) + eps);
    for (int64_t j = 0; j < d; ++j) {
      double v = (row[j] - mean) * scale * gamma[static_cast<size_t>(j)];
      if (beta) v += (*beta)[static_cast<size_t>(j)];
      y[static_cast<size_t>(r * d + j)] = v;
    }
  }
  return y;
}

Status run_layer_norm(const RefCall& call) { return run_norm(call, false, false); }
Status run_rms_norm(const RefCall& call) { return run_norm(call, true, false); }
Status run_fused_residual_rms_norm(const RefCall& call) { return run_norm(call, true, true); }
Status run_fused_residual_layer_norm(const RefCall& call) { return run_norm(call, false, true); }

}  // namespace rlx::reference_backend
