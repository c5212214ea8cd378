// Reference kernels for the reductions: Reduce, Softmax, Cumsum, TopK and Sample. Sums
// are plain double loops; Sample defers to rlx::choose_token, the one definition of a
// sampled token that every backend and the host sampler share.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <span>

#include "backends/reference/reference_kernels.h"
#include "rlx/base/token_choice.h"

namespace rlx::reference_backend {
namespace {

// A tensor seen as [outer, len, inner] around one axis: element (o, j, i) is at
// (o * len + j) * inner + i.
struct AxisLines {
  int64_t outer = 1, len = 1, inner = 1;
  int64_t at(int64_t o, int64_t j, int64_t i) const { return (o * len + j) * inner + i; }
};

AxisLines lines_around(const std::vector<int64_t>& dims, int64_t axis) {
  AxisLines l;
  for (int64_t d = 0; d < axis; ++d) l.outer *= dims[static_cast<size_t>(d)];
  l.len = dims[static_cast<size_t>(axis)];
  for (size_t d = static_cast<size_t>(axis) + 1; d < dims.size(); ++d) l.inner *= dims[d];
  return l;
}

}  // namespace

Status run_reduce(const RefCall& call) {
  const auto& attrs = call.attr<ir::ReduceAttrs>();
  ASSIGN_OR_RETURN(std::vector<double> x, read_values(call.in[0]));
  const std::vector<int64_t>& xd = call.in[0].dims;
  // Each input element goes to the output element at its index with the reduced axes
  // zeroed, in the input's dims with the reduced axes set to 1 (the keep_dims shape;
  // dropping size-1 dims keeps flat indices).
  std::vector<bool> reduced(xd.size(), false);
  for (int64_t a : attrs.axes) reduced[static_cast<size_t>(normalize_axis(a, xd.size()))] = true;
  std::vector<int64_t> kept_dims = xd;
  int64_t count = 1;
  for (size_t d = 0; d < xd.size(); ++d) {
    if (!reduced[d]) continue;
    kept_dims[d] = 1;
    count *= xd[d];
  }
  const double inf = std::numeric_limits<double>::infinity();
  const double init = attrs.kind == ir::ReduceKind::Max ? -inf : attrs.kind == ir::ReduceKind::Min ? inf : 0.0;
  std::vector<double> acc(static_cast<size_t>(element_count(call.out.dims)), init);
  for (int64_t i = 0; i < static_cast<int64_t>(x.size()); ++i) {
    std::vector<int64_t> index = unravel(i, xd);
    for (size_t d = 0; d < xd.size(); ++d)
      if (reduced[d]) index[d] = 0;
    double& a = acc[static_cast<size_t>(ravel(index, kept_dims))];
    const double v = x[static_cast<size_t>(i)];
    switch (attrs.kind) {
      case ir::ReduceKind::Sum:
      case ir::ReduceKind::Mean:
        a += v;
        break;
      case ir::ReduceKind::Max:
        a = v > a ? v : a;
        break;
      case ir::ReduceKind::Min:
        a = v < a ? v : a;
        break;
    }
  }
  if (attrs.kind == ir::ReduceKind::Mean)
    for (double& a : acc) a = count > 0 ? a / static_cast<double>(count) : 0.0;
  write_values(call.out, acc);
  return {};
}

// softmax(x)_j = exp(x_j - max) / sum_k exp(x_k - max); a line that is all -inf gives zeros.
Status run_softmax(const RefCall& call) {
  ASSIGN_OR_RETURN(std::vector<double> x, read_values(call.in[0]));
  const std::vector<int64_t>& dims = call.in[0].dims;
  const AxisLines l = lines_around(dims, normalize_axis(call.attr<ir::SoftmaxAttrs>().axis, dims.size()));
  std::vector<double> y(x.size(), 0.0);
  for (int64_t o = 0; o < l.outer; ++o) {
    for (int64_t i = 0; i < l.inner; ++i) {
      double mx = -std::numeric_limits<double>::infinity();
      for (int64_t j = 0; j < l.len; ++j) mx = std::max(mx, x[static_cast<size_t>(l.at(o, j, i))]);
      if (mx == -std::numeric_limits<double>::infinity()) continue;
      double sum = 0.0;
      for (int64_t j = 0; j < l.len; ++j) sum += std::exp(x[static_cast<size_t>(l.at(o, j, i))] - mx);
      for (int64_t j = 0; j < l.len; ++j)
        y[static_cast<size_t>(l.at(o, j, i))] = std::exp(x[static_cast<size_t>(l.at(o, j, i))] - mx) / sum;
    }
  }
  write_values(call.out, y);
  return {};
}

// Running sums along the axis; exclusive: the sum of the elements before.
Status run_cumsum(const RefCall& call) {
  const auto& attrs = call.attr<ir::CumsumAttrs>();
  ASSIGN_OR_RETURN(std::vector<double> x, read_values(call.in[0]));
  const std::vector<int64_t>& dims = call.in[0].dims;
  const AxisLines l = lines_around(dims, normalize_axis(attrs.axis, dims.size()));
  std::vector<double> y(x.size(), 0.0);
  for (int64_t o = 0; o < l.outer; ++o) {
    for (int64_t i = 0; i < l.inner; ++i) {
      double sum = 0.0;
      for (int64_t j = 0; j < l.len; ++j) {
        const auto at = static_cast<size_t>(l.at(o, j, i));
        if (attrs.exclusive) {
          y[at] = sum;
          sum += x[at];
        } else {
          sum += x[at];
          y[at] = sum;
        }
      }
    }
  }
  write_values(call.out, y);
  return {};
}

// The k largest of each last-axis row, descending; equal values by lower index; NaN last.
// Outputs the values or their i32 indices.
Status run_topk(const RefCall& call) {
  const auto& attrs = call.attr<ir::TopKAttrs>();
  ASSIGN_OR_RETURN(std::vector<double> x, read_values(call.in[0]));
  const int64_t len = call.in[0].dims.back();
  const int64_t rows = len == 0 ? 0 : static_cast<int64_t>(x.size()) / len;
  std::vector<double> y(static_cast<size_t>(rows * attrs.k));
  std::vector<int64_t> order(static_cast<size_t>(len));
  for (int64_t r = 0; r < rows; ++r) {
    const double* row = x.data() + r * len;
    std::iota(order.begin(), order.end(), int64_t{0});
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
      const bool a_nan = std::isnan(row[a]), b_nan = std::isnan(row[b]);
      if (a_nan || b_nan) return !a_nan && b_nan;
      return row[a] > row[b];
    });
    for (int64_t j = 0; j < attrs.k; ++j) {
      const int64_t picked = order[static_cast<size_t>(j)];
      y[static_cast<size_t>(r * attrs.k + j)] = attrs.values ? row[picked] : static_cast<double>(picked);
    }
    if (attrs.finite_check && !std::all_of(row, row + len, [](double v) { return std::isfinite(v); }))
      y[static_cast<size_t>(r)] = -1;  // k == 1 (verified)
  }
  write_values(call.out, y);
  return {};
}

// One token per row of logits[.., V]: choose_token with the row's parameters (input 1,
// f32[.., kSampleParams]) read and clamped by read_sample_params.
Status run_sample(const RefCall& call) {
  ASSIGN_OR_RETURN(std::vector<double> logits, read_values(call.in[0]));
  ASSIGN_OR_RETURN(std::vector<double> params, read_values(call.in[1]));
  const int64_t vocab = call.in[0].dims.back();
  const int64_t rows = vocab == 0 ? 0 : static_cast<int64_t>(logits.size()) / vocab;
  std::vector<float> row(static_cast<size_t>(vocab));
  float row_params[ir::kSampleParams];
  TokenChoiceScratch scratch;
  std::vector<double> tokens(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < vocab; ++j)
      row[static_cast<size_t>(j)] = static_cast<float>(logits[static_cast<size_t>(r * vocab + j)]);
    for (int64_t p = 0; p < ir::kSampleParams; ++p)
      row_params[p] = static_cast<float>(params[static_cast<size_t>(r * ir::kSampleParams + p)]);
    const SampleRow choice = read_sample_params(row_params, ir::kMaxSampleTopK);
    tokens[static_cast<size_t>(r)] = choose_token(std::span<const float>(row), choice.filter, choice.draw, scratch);
  }
  write_values(call.out, tokens);
  return {};
}

}  // namespace rlx::reference_backend
