// Reference kernels for mixtures of experts: MoeRoute (gate probabilities, the k largest
// with ties to the lower expert, optional renormalization) and MoeFfn (every routed
// expert's gated FFN, summed with its weight), in double, as MoeRouteAttrs and
// MoeFfnAttrs define them.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "backends/reference/reference_kernels.h"

namespace rlx::reference_backend {

Status run_moe_route(const RefCall& call) {
  const auto& attrs = call.attr<ir::MoeRouteAttrs>();
  ASSIGN_OR_RETURN(std::vector<double> logits, read_values(call.in[0]));
  const int64_t rows = call.in[0].dims[0], experts = call.in[0].dims[1];
  std::vector<double> y(logits.size(), 0.0), p(static_cast<size_t>(experts));
  std::vector<int64_t> order(static_cast<size_t>(experts));
  for (int64_t r = 0; r < rows; ++r) {
    const double* row = logits.data() + r * experts;
    if (attrs.gating == ir::MoeGating::Softmax) {
      const double mx = *std::max_element(row, row + experts);
      double sum = 0;
      for (int64_t j = 0; j < experts; ++j) sum += p[static_cast<size_t>(j)] = std::exp(row[j] - mx);
      for (double& v : p) v /= sum;
    } else {
      for (int64_t j = 0; j < experts; ++j) p[static_cast<size_t>(j)] = 1.0 / (1.0 + std::exp(-row[j]));
    }
    std::iota(order.begin(), order.end(), int64_t{0});
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
      const double pa = p[static_cast<size_t>(a)], pb = p[static_cast<size_t>(b)];
      if (std::isnan(pa) || std::isnan(pb)) return !std::isnan(pa) && std::isnan(pb);
      return pa > pb;
    });
    double chosen = 0;
    for (int64_t c = 0; c < attrs.k; ++c) chosen += p[static_cast<size_t>(order[static_cast<size_t>(c)])];
    for (int64_t c = 0; c < attrs.k; ++c) {
      const auto j = static_cast<size_t>(order[static_cast<size_t>(c)]);
      y[static_cast<size_t>(r * experts) + j] = attrs.normalize && chosen > 0 ? p[j] / chosen : p[j];
    }
  }
  write_values(call.out, y);
  return {};
}

Status run_moe_ffn(const RefCall& call) {
  const ir::ActKind act = call.attr<ir::MoeFfnAttrs>().act;
  ASSIGN_OR_RETURN(std::vector<double> x, read_values(call.in[0]));
  ASSIGN_OR_RETURN(std::vector<double> route, read_values(call.in[1]));
  ASSIGN_OR_RETURN(std::vector<double> gate, read_values(call.in[2]));
  ASSIGN_OR_RETURN(std::vector<double> up, read_values(call.in[3]));
  ASSIGN_OR_RETURN(std::vector<double> down, read_values(call.in[4]));
  const int64_t rows = call.in[0].dims[0], dim = call.in[0].dims[1];
  const int64_t experts = call.in[2].dims[0], hidden = call.in[2].dims[1];
  std::vector<double> y(static_cast<size_t>(rows * dim), 0.0), h(static_cast<size_t>(hidden));
  for (int64_t r = 0; r < rows; ++r) {
    const double* xr = x.data() + r * dim;
    for (int64_t e = 0; e < experts; ++e) {
      const double w = route[static_cast<size_t>(r * experts + e)];
      if (w == 0.0) continue;
      for (int64_t f = 0; f < hidden; ++f) {
        const double* g_row = gate.data() + (e * hidden + f) * dim;
        const double* u_row = up.data() + (e * hidden + f) * dim;
        double g = 0, u = 0;
        for (int64_t c = 0; c < dim; ++c) {
          g += g_row[c] * xr[c];
          u += u_row[c] * xr[c];
        }
        h[static_cast<size_t>(f)] = activation(act, g) * u;
      }
      for (int64_t c = 0; c < dim; ++c) {
        const double* d_row = down.data() + (e * dim + c) * hidden;
        double sum = 0;
        for (int64_t f = 0; f < hidden; ++f) sum += d_row[f] * h[static_cast<size_t>(f)];
        y[static_cast<size_t>(r * dim + c)] += w * sum;
      }
    }
  }
  write_values(call.out, y);
  return {};
}

}  // namespace rlx::reference_backend
