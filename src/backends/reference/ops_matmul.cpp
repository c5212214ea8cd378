// Reference kernels for the matmul family: MatMul (batched with broadcast batch dims,
// optional transposes), DequantMatMul (f16/bf16 or packed GGUF weights, decoded exactly),
// FusedMatMulBiasAct and FusedSwiGLU. Every dot product is a plain double sum.
#include <cmath>

#include "backends/reference/reference_kernels.h"

namespace rlx::reference_backend {
namespace {

// x[.., K] . W as [rows, K] . W: W is [N, K] when transpose_b (the nn.Linear layout),
// else [K, N].
struct Linear {
  std::vector<double> x, w;
  int64_t rows = 0, k = 0, n = 0;
  bool transpose_b = true;

  double at(int64_t row, int64_t col) const {
    double sum = 0.0;
    for (int64_t i = 0; i < k; ++i) {
      const double wv = transpose_b ? w[static_cast<size_t>(col * k + i)] : w[static_cast<size_t>(i * n + col)];
      sum += x[static_cast<size_t>(row * k + i)] * wv;
    }
    return sum;
  }
};

// Reads x (input 0) and the weight `w_input` of a linear-style node.
Expected<Linear> read_linear(const RefCall& call, size_t w_input, bool transpose_b) {
  Linear l;
  ASSIGN_OR_RETURN(l.x, read_values(call.in[0]));
  ASSIGN_OR_RETURN(l.w, read_values(call.in[w_input]));
  const std::vector<int64_t>& xd = call.in[0].dims;
  const std::vector<int64_t>& wd = call.in[w_input].dims;
  l.k = xd.back();
  l.rows = element_count(std::vector<int64_t>(xd.begin(), xd.end() - 1));
  l.n = transpose_b ? wd[0] : wd[1];
  l.transpose_b = transpose_b;
  return l;
}

}  // namespace

Status run_matmul(const RefCall& call) {
  const auto& attrs = call.attr<ir::MatMulAttrs>();
  ASSIGN_OR_RETURN(std::vector<double> a, read_values(call.in[0]));
  ASSIGN_OR_RETURN(std::vector<double> b, read_values(call.in[1]));
  const std::vector<int64_t>& ad = call.in[0].dims;
  const std::vector<int64_t>& bd = call.in[1].dims;
  const std::vector<int64_t>& od = call.out.dims;
  const int64_t m = od[od.size() - 2], n = od[od.size() - 1];
  const int64_t k = attrs.transpose_a ? ad[ad.size() - 2] : ad[ad.size() - 1];
  const std::vector<int64_t> out_batch(od.begin(), od.end() - 2);
  const std::vector<int64_t> a_batch(ad.begin(), ad.end() - 2), b_batch(bd.begin(), bd.end() - 2);
  std::vector<double> c(static_cast<size_t>(element_count(od)));
  for (int64_t batch = 0; batch < element_count(out_batch); ++batch) {
    const std::vector<int64_t> index = unravel(batch, out_batch);
    const double* am = a.data() + broadcast_flat(index, a_batch) * m * k;
    const double* bm = b.data() + broadcast_flat(index, b_batch) * k * n;
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double sum = 0.0;
        for (int64_t p = 0; p < k; ++p) {
          const double av = attrs.transpose_a ? am[p * m + i] : am[i * k + p];  // A is [K, M] when transposed
          const double bv = attrs.transpose_b ? bm[j * k + p] : bm[p * n + j];  // B is [N, K] when transposed
          sum += av * bv;
        }
        c[static_cast<size_t>((batch * m + i) * n + j)] = sum;
      }
    }
  }
  write_values(call.out, c);
  return {};
}

// f16/bf16 weights: x is rounded to the weight's dtype before the products, the vec-dot
// rule of llama.cpp that the CPU and CUDA backends follow. Packed weights: the exact
// product with the decoded blocks (backends may quantize x to 8 bits; see README.md).
Status run_dequant_matmul(const RefCall& call) {
  ASSIGN_OR_RETURN(Linear l, read_linear(call, 1, true));
  const ir::DType w_dtype = call.in[1].dtype;
  if (w_dtype == ir::DType::F16 || w_dtype == ir::DType::BF16)
    for (double& v : l.x) v = round_to(w_dtype, v);
  std::vector<double> y(static_cast<size_t>(l.rows * l.n));
  for (int64_t r = 0; r < l.rows; ++r)
    for (int64_t j = 0; j < l.n; ++j) y[static_cast<size_t>(r * l.n + j)] = l.at(r, j);
  write_values(call.out, y);
  return {};
}

Status run_fused_matmul_bias_act(const RefCall& call) {
  const auto& attrs = call.attr<ir::FusedMatMulAttrs>();
  ASSIGN_OR_RETURN(Linear l, read_linear(call, 1, attrs.transpose_b));
  std::vector<double> bias(static_cast<size_t>(l.n), 0.0);
  if (attrs.has_bias) {
    if (call.in.size() < 3) return kernel_error(call, "has_bias is set but there is no bias input");
    ASSIGN_OR_RETURN(bias, read_values(call.in[2]));
  }
  std::vector<double> y(static_cast<size_t>(l.rows * l.n));
  for (int64_t r = 0; r < l.rows; ++r)
    for (int64_t j = 0; j < l.n; ++j)
      y[static_cast<size_t>(r * l.n + j)] = activation(attrs.act, l.at(r, j) + bias[static_cast<size_t>(j)]);
  write_values(call.out, y);
  return {};
}

Status run_fused_swiglu(const RefCall& call) {
  const bool transpose_b = call.attr<ir::FusedSwiGLUAttrs>().transpose_b;
  ASSIGN_OR_RETURN(Linear gate, read_linear(call, 1, transpose_b));
  ASSIGN_OR_RETURN(Linear up, read_linear(call, 2, transpose_b));
  std::vector<double> y(static_cast<size_t>(gate.rows * gate.n));
  for (int64_t r = 0; r < gate.rows; ++r)
    for (int64_t j = 0; j < gate.n; ++j)
      y[static_cast<size_t>(r * gate.n + j)] = activation(ir::ActKind::Silu, gate.at(r, j)) * up.at(r, j);
  write_values(call.out, y);
  return {};
}

}  // namespace rlx::reference_backend
