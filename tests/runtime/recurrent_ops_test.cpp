// The recurrent-state ops (causal_conv1d, gated_delta_rule) on every device against a
// float64 loop written here from their definitions: odd sizes, grouped value heads,
// several chunk sizes of the delta rule's prefill form (0 = token by token), a state
// carried across calls, padding rows (which must not reach the state, whatever they
// hold), batches against separate runs, and the error paths.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "rt_util.h"

namespace rlx {
namespace {

using ir::DType;
using ir::GraphBuilder;
using ir::ValueId;
using namespace rt_test;

std::vector<Device> devices() {
  std::vector<Device> d{Device::cpu(), Device::reference()};
  if (is_available(Device::cuda())) d.push_back(Device::cuda());
  return d;
}

struct SeqRow {
  int32_t seen, len;
};

// ---- gated_delta_rule -----------------------------------------------------------------

struct DeltaShape {
  int64_t batch = 2, rows = 13, hk = 2, hv = 4, dk = 5, dv = 3;
};

struct DeltaData {
  std::vector<float> q, k, v, g, beta, state;
};

DeltaData delta_data(const DeltaShape& s, uint32_t seed) {
  const auto n = static_cast<size_t>(s.batch * s.rows);
  DeltaData d;
  d.q = random_vec(n * s.hk * s.dk, seed);
  d.k = random_vec(n * s.hk * s.dk, seed + 1);
  d.v = random_vec(n * s.hv * s.dv, seed + 2);
  d.g = random_vec(n * s.hv, seed + 3, -1.5f, 0.0f);
  d.beta = random_vec(n * s.hv, seed + 4, 0.05f, 1.0f);
  d.state = random_vec(static_cast<size_t>(s.batch * s.hv * s.dk * s.dv), seed + 5, -0.5f, 0.5f);
  return d;
}

// The definition, in double: per real row, q and k l2-normalized, q scaled by
// 1/sqrt(dk); S <- exp(g) S; S <- S + k (beta (v - Sᵀk))ᵀ; o = Sᵀq. Padding rows read S.
void delta_ref(const DeltaShape& s, const DeltaData& d, const std::vector<SeqRow>& seq, std::vector<double>* out,
               std::vector<double>* state) {
  out->assign(static_cast<size_t>(s.batch * s.rows * s.hv * s.dv), 0.0);
  state->assign(d.state.begin(), d.state.end());
  const int64_t group = s.hv / s.hk;
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t h = 0; h < s.hv; ++h) {
      double* S = state->data() + (b * s.hv + h) * s.dk * s.dv;
      if (seq[b].seen == 0) std::fill(S, S + s.dk * s.dv, 0.0);
      for (int64_t t = 0; t < s.rows; ++t) {
        const int64_t r = b * s.rows + t, kh = h / group;
        std::vector<double> q(s.dk), k(s.dk);
        double qq = 0, kk = 0;
        for (int64_t i = 0; i < s.dk; ++i) {
          q[i] = d.q[(r * s.hk + kh) * s.dk + i];
          k[i] = d.k[(r * s.hk + kh) * s.dk + i];
          qq += q[i] * q[i];
          kk += k[i] * k[i];
        }
        for (int64_t i = 0; i < s.dk; ++i) {
          q[i] /= std::sqrt(qq + 1e-6) * std::sqrt(double(s.dk));
          k[i] /= std::sqrt(kk + 1e-6);
        }
        if (t < seq[b].len) {
          const double decay = std::exp(double(d.g[r * s.hv + h])), beta = d.beta[r * s.hv + h];
          for (int64_t i = 0; i < s.dk * s.dv; ++i) S[i] *= decay;
          for (int64_t j = 0; j < s.dv; ++j) {
            double mem = 0;
            for (int64_t i = 0; i < s.dk; ++i) mem += S[i * s.dv + j] * k[i];
            const double u = beta * (d.v[(r * s.hv + h) * s.dv + j] - mem);
            for (int64_t i = 0; i < s.dk; ++i) S[i * s.dv + j] += k[i] * u;
          }
        }
        for (int64_t j = 0; j < s.dv; ++j) {
          double o = 0;
          for (int64_t i = 0; i < s.dk; ++i) o += S[i * s.dv + j] * q[i];
          (*out)[(r * s.hv + h) * s.dv + j] = o;
        }
      }
    }
}

struct DeltaRun {
  std::vector<float> out, state;
};

Expected<DeltaRun> run_delta(const Device& dev, const DeltaShape& s, const DeltaData& d,
                             const std::vector<SeqRow>& seq, int64_t chunk) {
  GraphBuilder b;
  const int64_t rows = s.batch * s.rows;
  const ValueId st = b.handle("ssm", DType::F32, ir::Shape::of({s.batch, s.hv, s.dk, s.dv}));
  const ValueId q = b.input("q", DType::F32, ir::Shape::of({rows, s.hk * s.dk}));
  const ValueId k = b.input("k", DType::F32, ir::Shape::of({rows, s.hk * s.dk}));
  const ValueId v = b.input("v", DType::F32, ir::Shape::of({rows, s.hv * s.dv}));
  const ValueId g = b.input("g", DType::F32, ir::Shape::of({rows, s.hv}));
  const ValueId beta = b.input("beta", DType::F32, ir::Shape::of({rows, s.hv}));
  const ValueId sq = b.input("seq", DType::I32, ir::Shape::of({s.batch, 2}));
  ir::DeltaRuleAttrs a;
  a.head_k_dim = s.dk;
  a.head_v_dim = s.dv;
  a.chunk = chunk;
  b.output(b.gated_delta_rule(st, q, k, v, g, beta, sq, a), "o");
  ASSIGN_OR_RETURN(ir::Graph graph, b.build());
  Session session(dev);
  ASSIGN_OR_RETURN(CompiledGraph c, session.compile(graph));
  TRY(c.bind_handle("ssm", d.state));
  std::vector<int32_t> seq_v;
  for (const SeqRow& r : seq) seq_v.insert(seq_v.end(), {r.seen, r.len});
  const std::vector<int64_t> seq_shape{s.batch, 2}, qk_shape{rows, s.hk * s.dk}, v_shape{rows, s.hv * s.dv},
      g_shape{rows, s.hv};
  std::vector<NamedTensorView> in{
      {"q", TensorView{DType::F32, qk_shape, d.q.data()}},
      {"k", TensorView{DType::F32, qk_shape, d.k.data()}},
      {"v", TensorView{DType::F32, v_shape, d.v.data()}},
      {"g", TensorView{DType::F32, g_shape, d.g.data()}},
      {"beta", TensorView{DType::F32, g_shape, d.beta.data()}},
      {"seq", TensorView{DType::I32, seq_shape, seq_v.data()}},
  };
  ASSIGN_OR_RETURN(std::vector<Tensor> out, c.run_typed(in));
  ASSIGN_OR_RETURN(Tensor state, c.read_handle("ssm"));
  return DeltaRun{as_f32(out[0]), as_f32(state)};
}

TEST(DeltaRule, EveryChunkSizeMatchesTheFloat64Recurrence) {
  const DeltaShape s;
  const DeltaData d = delta_data(s, 11);
  // Sequence 0 continues a state over all its rows; sequence 1 starts fresh with 4 padding rows.
  const std::vector<SeqRow> seq{{5, 13}, {0, 9}};
  std::vector<double> want, want_state;
  delta_ref(s, d, seq, &want, &want_state);
  for (const Device& dev : devices())
    for (int64_t chunk : {0, 1, 3, 8, 64}) {
      SCOPED_TRACE(dev.to_string() + " chunk " + std::to_string(chunk));
      auto got = run_delta(dev, s, d, seq, chunk);
      ASSERT_TRUE(got) << got.error().to_string();
      EXPECT_LE(max_abs_diff(got->out, want), 2e-5);
      EXPECT_LE(max_abs_diff(got->state, want_state), 2e-5);
    }
}

// Real head sizes: the CUDA chunked kernel's column slices (80 columns: two full slices
// and a partial one), chunks of 64 with a partial last one, and a sequence whose padding
// starts inside a chunk; the CPU's GEMM-based chunk on the same data.
TEST(DeltaRule, RealHeadSizesMatchTheFloat64Recurrence) {
  DeltaShape s;
  s.batch = 2;
  s.rows = 150;
  s.hk = 1;
  s.hv = 2;
  s.dk = 128;
  s.dv = 80;
  const DeltaData d = delta_data(s, 13);
  const std::vector<SeqRow> seq{{4, 150}, {0, 131}};
  std::vector<double> want, want_state;
  delta_ref(s, d, seq, &want, &want_state);
  for (const Device& dev : devices())
    for (int64_t chunk : {64, 48}) {
      SCOPED_TRACE(dev.to_string() + " chunk " + std::to_string(chunk));
      auto got = run_delta(dev, s, d, seq, chunk);
      ASSERT_TRUE(got) << got.error().to_string();
      EXPECT_LE(max_abs_diff(got->out, want), 5e-5);
      EXPECT_LE(max_abs_diff(got->state, want_state), 5e-5);
    }
}

TEST(DeltaRule, StateCarriedAcrossCallsEqualsOneCall) {
  DeltaShape whole;
  whole.batch = 1;
  whole.rows = 21;
  const DeltaData d = delta_data(whole, 21);
  for (const Device& dev : devices())
    for (int64_t chunk : {0, 4}) {
      SCOPED_TRACE(dev.to_string() + " chunk " + std::to_string(chunk));
      auto one = run_delta(dev, whole, d, {{0, 21}}, chunk);
      ASSERT_TRUE(one) << one.error().to_string();
      // The same rows as 8 + 13, the second call starting from the first's state.
      DeltaShape part = whole;
      DeltaData first = d, second = d;
      auto rows_of = [](const std::vector<float>& x, int64_t width, int64_t from, int64_t n) {
        return std::vector<float>(x.begin() + from * width, x.begin() + (from + n) * width);
      };
      for (auto [dst, from, n] : {std::tuple{&first, 0, 8}, {&second, 8, 13}}) {
        dst->q = rows_of(d.q, whole.hk * whole.dk, from, n);
        dst->k = rows_of(d.k, whole.hk * whole.dk, from, n);
        dst->v = rows_of(d.v, whole.hv * whole.dv, from, n);
        dst->g = rows_of(d.g, whole.hv, from, n);
        dst->beta = rows_of(d.beta, whole.hv, from, n);
      }
      part.rows = 8;
      auto a = run_delta(dev, part, first, {{0, 8}}, chunk);
      ASSERT_TRUE(a) << a.error().to_string();
      second.state = a->state;
      part.rows = 13;
      auto b = run_delta(dev, part, second, {{8, 13}}, chunk);
      ASSERT_TRUE(b) << b.error().to_string();
      std::vector<float> joined = a->out;
      joined.insert(joined.end(), b->out.begin(), b->out.end());
      EXPECT_LE(max_abs_diff(joined, one->out), 1e-5);
      EXPECT_LE(max_abs_diff(b->state, one->state), 1e-5);
    }
}

TEST(DeltaRule, PaddingNeverReachesTheState) {
  DeltaShape s;
  s.batch = 1;
  DeltaData d = delta_data(s, 31);
  const std::vector<SeqRow> seq{{3, 6}};
  for (const Device& dev : devices())
    for (int64_t chunk : {0, 4, 64}) {
      SCOPED_TRACE(dev.to_string() + " chunk " + std::to_string(chunk));
      auto clean = run_delta(dev, s, d, seq, chunk);
      ASSERT_TRUE(clean) << clean.error().to_string();
      DeltaData dirty = d;  // rows 6.. hold non-finite garbage
      const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
      for (int64_t r = 6; r < s.rows; ++r) {
        for (int64_t i = 0; i < s.hk * s.dk; ++i) dirty.k[r * s.hk * s.dk + i] = inf;
        for (int64_t i = 0; i < s.hv * s.dv; ++i) dirty.v[r * s.hv * s.dv + i] = nan;
        for (int64_t i = 0; i < s.hv; ++i) dirty.g[r * s.hv + i] = nan;
      }
      auto got = run_delta(dev, s, dirty, seq, chunk);
      ASSERT_TRUE(got) << got.error().to_string();
      EXPECT_LE(max_abs_diff(got->state, clean->state), 0.0);
      const auto real = static_cast<size_t>(6 * s.hv * s.dv);
      EXPECT_LE(max_abs_diff(std::span(got->out).first(real), std::span(clean->out).first(real)), 0.0);
      // No real rows at all: the state stays exactly as bound.
      auto idle = run_delta(dev, s, d, {{3, 0}}, chunk);
      ASSERT_TRUE(idle) << idle.error().to_string();
      EXPECT_EQ(idle->state, d.state);
    }
}

TEST(DeltaRule, BatchEqualsSeparateRuns) {
  DeltaShape s;
  s.batch = 3;
  s.rows = 7;
  const DeltaData d = delta_data(s, 41);
  const std::vector<SeqRow> seq{{0, 7}, {4, 2}, {9, 5}};
  for (const Device& dev : devices()) {
    SCOPED_TRACE(dev.to_string());
    auto all = run_delta(dev, s, d, seq, 3);
    ASSERT_TRUE(all) << all.error().to_string();
    DeltaShape one = s;
    one.batch = 1;
    for (int64_t b = 0; b < s.batch; ++b) {
      auto slice = [&](const std::vector<float>& x, int64_t per) {
        return std::vector<float>(x.begin() + b * per, x.begin() + (b + 1) * per);
      };
      DeltaData db;
      db.q = slice(d.q, s.rows * s.hk * s.dk);
      db.k = slice(d.k, s.rows * s.hk * s.dk);
      db.v = slice(d.v, s.rows * s.hv * s.dv);
      db.g = slice(d.g, s.rows * s.hv);
      db.beta = slice(d.beta, s.rows * s.hv);
      db.state = slice(d.state, s.hv * s.dk * s.dv);
      auto sep = run_delta(dev, one, db, {seq[b]}, 3);
      ASSERT_TRUE(sep) << sep.error().to_string();
      EXPECT_LE(max_abs_diff(slice(all->out, s.rows * s.hv * s.dv), sep->out), 1e-6) << "sequence " << b;
      EXPECT_LE(max_abs_diff(slice(all->state, s.hv * s.dk * s.dv), sep->state), 1e-6) << "sequence " << b;
    }
  }
}

// ---- causal_conv1d --------------------------------------------------------------------

struct ConvRun {
  std::vector<float> out, state;
};

Expected<ConvRun> run_conv(const Device& dev, int64_t batch, int64_t rows, int64_t chans, int64_t kernel,
                           const std::vector<float>& x, const std::vector<float>& w, const std::vector<float>& state,
                           const std::vector<SeqRow>& seq, ir::ActKind act) {
  GraphBuilder b;
  const ValueId st = b.handle("conv", DType::F32, ir::Shape::of({batch, kernel - 1, chans}));
  const ValueId xi = b.input("x", DType::F32, ir::Shape::of({batch * rows, chans}));
  const ValueId wi = b.input("w", DType::F32, ir::Shape::of({chans, kernel}));
  const ValueId sq = b.input("seq", DType::I32, ir::Shape::of({batch, 2}));
  b.output(b.causal_conv1d(st, xi, wi, sq, act), "y");
  ASSIGN_OR_RETURN(ir::Graph graph, b.build());
  Session session(dev);
  ASSIGN_OR_RETURN(CompiledGraph c, session.compile(graph));
  TRY(c.bind_handle("conv", state));
  std::vector<int32_t> seq_v;
  for (const SeqRow& r : seq) seq_v.insert(seq_v.end(), {r.seen, r.len});
  const std::vector<int64_t> x_shape{batch * rows, chans}, w_shape{chans, kernel}, seq_shape{batch, 2};
  std::vector<NamedTensorView> in{
      {"x", TensorView{DType::F32, x_shape, x.data()}},
      {"w", TensorView{DType::F32, w_shape, w.data()}},
      {"seq", TensorView{DType::I32, seq_shape, seq_v.data()}},
  };
  ASSIGN_OR_RETURN(std::vector<Tensor> out, c.run_typed(in));
  ASSIGN_OR_RETURN(Tensor s, c.read_handle("conv"));
  return ConvRun{as_f32(out[0]), as_f32(s)};
}

// 70 rows: CUDA runs slices of 32 rows, only the first of which reads the state.
TEST(CausalConv1d, MatchesTheFloat64DefinitionWithCarriedState) {
  for (const int64_t rows : {6, 70}) {
    SCOPED_TRACE("rows " + std::to_string(rows));
    const int64_t batch = 3, chans = 7, kernel = 4, hist = kernel - 1;
    const auto x = random_vec(batch * rows * chans, 51), w = random_vec(chans * kernel, 52);
    const auto state = random_vec(batch * hist * chans, 53);
    // A continued sequence, a fresh one with padding, and one whose 2 real rows are fewer than K-1.
    const std::vector<SeqRow> seq{{7, static_cast<int32_t>(rows)}, {0, static_cast<int32_t>(rows - 2)}, {2, 2}};
    for (ir::ActKind act : {ir::ActKind::Identity, ir::ActKind::Silu}) {
      std::vector<double> want(x.size()), want_state(state.begin(), state.end());
      for (int64_t b = 0; b < batch; ++b) {
        // window row i < hist: history (zeros when fresh); then x rows.
        auto win = [&](int64_t i, int64_t c) -> double {
          if (i < hist) return seq[b].seen > 0 ? state[(b * hist + i) * chans + c] : 0.0;
          return x[(b * rows + i - hist) * chans + c];
        };
        for (int64_t t = 0; t < rows; ++t)
          for (int64_t c = 0; c < chans; ++c) {
            double acc = 0;
            for (int64_t j = 0; j < kernel; ++j) acc += double(w[c * kernel + j]) * win(t + j, c);
            want[(b * rows + t) * chans + c] = act == ir::ActKind::Silu ? acc / (1 + std::exp(-acc)) : acc;
          }
        for (int64_t i = 0; i < hist; ++i)
          for (int64_t c = 0; c < chans; ++c) want_state[(b * hist + i) * chans + c] = win(seq[b].len + i, c);
      }
      for (const Device& dev : devices()) {
        SCOPED_TRACE(dev.to_string());
        auto got = run_conv(dev, batch, rows, chans, kernel, x, w, state, seq, act);
        ASSERT_TRUE(got) << got.error().to_string();
        EXPECT_LE(max_abs_diff(got->out, want), 1e-5);
        EXPECT_LE(max_abs_diff(got->state, want_state), 0.0);
        // No real rows: the state is left as bound.
        auto idle = run_conv(dev, 1, rows, chans, kernel, std::vector<float>(x.begin(), x.begin() + rows * chans), w,
                             std::vector<float>(state.begin(), state.begin() + hist * chans), {{5, 0}}, act);
        ASSERT_TRUE(idle) << idle.error().to_string();
        EXPECT_EQ(idle->state, std::vector<float>(state.begin(), state.begin() + hist * chans));
      }
    }
  }
}

// ---- errors -----------------------------------------------------------------------------

TEST(RecurrentOps, StateMustBeAHandle) {
  GraphBuilder b;
  const ValueId st = b.input("state", DType::F32, ir::Shape::of({1, 3, 4}));
  const ValueId x = b.input("x", DType::F32, ir::Shape::of({5, 4}));
  const ValueId w = b.input("w", DType::F32, ir::Shape::of({4, 4}));
  const ValueId sq = b.input("seq", DType::I32, ir::Shape::of({1, 2}));
  b.output(b.causal_conv1d(st, x, w, sq), "y");
  auto g = b.build();
  ASSERT_FALSE(g);
  EXPECT_NE(g.error().message().find("must be a handle"), std::string::npos) << g.error().to_string();
}

TEST(RecurrentOps, ShapeErrorsNameWhatIsWrong) {
  GraphBuilder b;
  const ValueId st = b.handle("ssm", DType::F32, ir::Shape::of({2, 4, 5, 3}));
  const ValueId q = b.input("q", DType::F32, ir::Shape::of({6, 10}));
  const ValueId v = b.input("v", DType::F32, ir::Shape::of({6, 12}));
  const ValueId g = b.input("g", DType::F32, ir::Shape::of({6, 3}));  // 3 heads, not 4
  const ValueId sq = b.input("seq", DType::I32, ir::Shape::of({2, 2}));
  ir::DeltaRuleAttrs a;
  a.head_k_dim = 5;
  a.head_v_dim = 3;
  b.output(b.gated_delta_rule(st, q, q, v, g, g, sq, a), "o");
  auto built = b.build();
  ASSERT_FALSE(built);
  EXPECT_NE(built.error().message().find("g"), std::string::npos) << built.error().to_string();
}

TEST(RecurrentOps, SeqBeyondTheRowsIsARunError) {
  DeltaShape s;
  s.batch = 1;
  const DeltaData d = delta_data(s, 61);
  for (const Device& dev : devices()) {
    auto r = run_delta(dev, s, d, {{0, 14}}, 4);  // 14 real rows of 13
    ASSERT_FALSE(r) << dev.to_string();
    EXPECT_NE(r.error().message().find("gated_delta_rule"), std::string::npos) << r.error().to_string();
  }
}

}  // namespace
}  // namespace rlx
