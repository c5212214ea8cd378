// Reference kernels for the recurrent-state ops: CausalConv1d and GatedDeltaRule, in
// double, token by token exactly as CausalConvAttrs and DeltaRuleAttrs define them
// (the chunked form of the delta rule is the same recurrence, so the reference runs it
// sequentially whatever `chunk` says). The state (input 0) is the handle's storage,
// read and written in place through RefCall::state.
#include <cmath>

#include "backends/reference/reference_kernels.h"

namespace rlx::reference_backend {
namespace {

struct SeqInfo {
  int64_t seen = 0, len = 0;
};

// Sequence b's (tokens seen, real rows); an error when they do not fit `rows`.
Expected<SeqInfo> seq_info(const RefCall& call, const RefInput& seq, int64_t b, int64_t rows) {
  SeqInfo s{load_index(seq.dtype, seq.data, 2 * b), load_index(seq.dtype, seq.data, 2 * b + 1)};
  if (s.seen < 0 || s.len < 0 || s.len > rows)
    return kernel_error(call, "sequence {}: seq (seen {}, rows {}) must be >= 0 with rows <= {}", b, s.seen, s.len,
                        rows);
  return s;
}

double silu(double x) { return x / (1.0 + std::exp(-x)); }

}  // namespace

Status run_causal_conv1d(const RefCall& call) {
  const ir::ActKind act = call.attr<ir::CausalConvAttrs>().act;
  ASSIGN_OR_RETURN(std::vector<double> x, read_values(call.in[1]));
  ASSIGN_OR_RETURN(std::vector<double> w, read_values(call.in[2]));
  const int64_t batch = call.in[0].dims[0], hist = call.in[0].dims[1], chans = call.in[0].dims[2];
  const int64_t rows = call.in[1].dims[0] / batch, kernel = hist + 1;
  auto* state = reinterpret_cast<float*>(call.state);
  std::vector<double> y(x.size());
  for (int64_t b = 0; b < batch; ++b) {
    ASSIGN_OR_RETURN(SeqInfo s, seq_info(call, call.in[3], b, rows));
    // The window: K-1 rows of history (zeros for a fresh sequence), then this run's rows.
    std::vector<double> win(static_cast<size_t>((hist + rows) * chans), 0.0);
    if (s.seen > 0)
      for (int64_t i = 0; i < hist * chans; ++i) win[static_cast<size_t>(i)] = state[b * hist * chans + i];
    for (int64_t i = 0; i < rows * chans; ++i)
      win[static_cast<size_t>(hist * chans + i)] = x[static_cast<size_t>(b * rows * chans + i)];
    for (int64_t t = 0; t < rows; ++t)
      for (int64_t c = 0; c < chans; ++c) {
        double acc = 0;
        for (int64_t j = 0; j < kernel; ++j)
          acc += w[static_cast<size_t>(c * kernel + j)] * win[static_cast<size_t>((t + j) * chans + c)];
        y[static_cast<size_t>((b * rows + t) * chans + c)] = act == ir::ActKind::Silu ? silu(acc) : acc;
      }
    if (s.len == 0) continue;  // no real rows: the state stays as it was
    // The new history: the last K-1 rows of (history, real rows).
    for (int64_t i = 0; i < hist; ++i)
      for (int64_t c = 0; c < chans; ++c)
        state[(b * hist + i) * chans + c] = static_cast<float>(win[static_cast<size_t>((s.len + i) * chans + c)]);
  }
  write_values(call.out, y);
  return {};
}

Status run_gated_delta_rule(const RefCall& call) {
  const auto& a = call.attr<ir::DeltaRuleAttrs>();
  ASSIGN_OR_RETURN(std::vector<double> q, read_values(call.in[1]));
  ASSIGN_OR_RETURN(std::vector<double> k, read_values(call.in[2]));
  ASSIGN_OR_RETURN(std::vector<double> v, read_values(call.in[3]));
  ASSIGN_OR_RETURN(std::vector<double> g, read_values(call.in[4]));
  ASSIGN_OR_RETURN(std::vector<double> beta, read_values(call.in[5]));
  const int64_t batch = call.in[0].dims[0], hv = call.in[0].dims[1];
  const int64_t dk = a.head_k_dim, dv = a.head_v_dim, hk = call.in[1].dims[1] / dk;
  const int64_t rows = call.in[1].dims[0] / batch, group = hv / hk;
  const double scale = a.scale > 0 ? a.scale : 1.0 / std::sqrt(static_cast<double>(dk));
  auto* state = reinterpret_cast<float*>(call.state);
  std::vector<double> y(static_cast<size_t>(batch * rows * hv * dv), 0.0);
  std::vector<double> S(static_cast<size_t>(dk * dv)), qn(static_cast<size_t>(dk)), kn(static_cast<size_t>(dk));
  for (int64_t b = 0; b < batch; ++b) {
    ASSIGN_OR_RETURN(SeqInfo s, seq_info(call, call.in[6], b, rows));
    for (int64_t h = 0; h < hv; ++h) {
      float* Sh = state + (b * hv + h) * dk * dv;
      for (int64_t i = 0; i < dk * dv; ++i) S[static_cast<size_t>(i)] = s.seen > 0 ? Sh[i] : 0.0;
      const int64_t kh = h / group;
      for (int64_t t = 0; t < rows; ++t) {
        const int64_t r = b * rows + t;
        double qq = 0, kk = 0;
        for (int64_t i = 0; i < dk; ++i) {
          qn[static_cast<size_t>(i)] = q[static_cast<size_t>(r * hk * dk + kh * dk + i)];
          kn[static_cast<size_t>(i)] = k[static_cast<size_t>(r * hk * dk + kh * dk + i)];
          qq += qn[static_cast<size_t>(i)] * qn[static_cast<size_t>(i)];
          kk += kn[static_cast<size_t>(i)] * kn[static_cast<size_t>(i)];
        }
        const double qs = (a.l2norm_qk ? 1.0 / std::sqrt(qq + 1e-6) : 1.0) * scale;
        const double ks = a.l2norm_qk ? 1.0 / std::sqrt(kk + 1e-6) : 1.0;
        for (int64_t i = 0; i < dk; ++i) {
          qn[static_cast<size_t>(i)] *= qs;
          kn[static_cast<size_t>(i)] *= ks;
        }
        // Padding rows read the state and never change it.
        const double decay = std::exp(g[static_cast<size_t>(r * hv + h)]);
        const double bt = beta[static_cast<size_t>(r * hv + h)];
        if (t < s.len) for (double& e : S) e *= decay;
        for (int64_t j = 0; j < dv && t < s.len; ++j) {
          double mem = 0;
          for (int64_t i = 0; i < dk; ++i) mem += S[static_cast<size_t>(i * dv + j)] * kn[static_cast<size_t>(i)];
          const double delta = bt * (v[static_cast<size_t>(r * hv * dv + h * dv + j)] - mem);
          for (int64_t i = 0; i < dk; ++i) S[static_cast<size_t>(i * dv + j)] += kn[static_cast<size_t>(i)] * delta;
        }
        for (int64_t j = 0; j < dv; ++j) {
          double o = 0;
          for (int64_t i = 0; i < dk; ++i) o += S[static_cast<size_t>(i * dv + j)] * qn[static_cast<size_t>(i)];
          y[static_cast<size_t>(r * hv * dv + h * dv + j)] = o;
        }
      }
      if (s.len > 0)
        for (int64_t i = 0; i < dk * dv; ++i) Sh[i] = static_cast<float>(S[static_cast<size_t>(i)]);
    }
  }
  write_values(call.out, y);
  return {};
}

}  // namespace rlx::reference_backend
