// `rlx embed --bench`: encoder throughput next to the measured compute limit (see embed_bench.h).
#include "embed_bench.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "machine_limits.h"
#include "rlx/ir/builder.h"

namespace rlx::cli {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// f32 FLOP/s of n x n x n matmuls through `device`'s backend (its GEMM: cuBLAS on
// CUDA). The operands live on the device (params); the run's input is one row, added
// to them, and a chain of four products is summed per row, so that neither the upload
// nor the copy back nor the launch counts.
Expected<double> measure_backend_matmul(const Device& device, int threads, int64_t n) {
  BackendOptions bo;
  bo.threads = threads;
  ASSIGN_OR_RETURN(Session session, Session::create(device, bo));
  constexpr int kChain = 4;
  ir::GraphBuilder b;
  const ir::ValueId x = b.input("x", ir::DType::F32, {1, n});
  const ir::ValueId w = b.param("w", ir::DType::F32, {n, n});
  ir::ValueId h = b.add(b.param("a", ir::DType::F32, {n, n}), x);
  for (int i = 0; i < kChain; ++i) h = b.linear(h, w);
  b.output(b.reduce(ir::ReduceKind::Sum, h, {1}), "sum");
  ASSIGN_OR_RETURN(ir::Graph graph, b.build());
  ASSIGN_OR_RETURN(CompiledGraph g, session.compile(graph));
  // 1/n keeps every product's magnitude where it started.
  std::vector<float> wv(static_cast<size_t>(n * n), 1.0f / static_cast<float>(n)), av(wv.size(), 0.5f);
  TRY(g.set_param("w", wv));
  TRY(g.set_param("a", av));
  std::vector<float> row(static_cast<size_t>(n), 0.25f);
  const std::vector<int64_t> shape{1, n};
  const NamedTensorView in[] = {{"x", TensorView{ir::DType::F32, shape, row.data()}}};
  TRY(g.run(in));  // warm-up
  double best = 0;
  for (int rep = 0; rep < 5; ++rep) {
    const auto t0 = Clock::now();
    constexpr int kRuns = 4;
    for (int r = 0; r < kRuns; ++r) TRY(g.run(in));
    best = std::max(best, kRuns * kChain * 2.0 * static_cast<double>(n) * n * n / seconds_since(t0));
  }
  return best;
}

}  // namespace

double encoder_flops(const models::ModelConfig& c, int64_t len) {
  const double D = static_cast<double>(c.n_embd), F = static_cast<double>(c.n_ff), L = static_cast<double>(len);
  const double ffn_mats = c.ffn == models::FfnKind::Gelu ? 2.0 : 3.0;
  const double per_token = 2.0 * (4.0 * D * D + ffn_mats * D * F) + 4.0 * L * D;  // + q.k and p.v over L keys
  return static_cast<double>(c.n_layer) * per_token * L;
}

int run_embed_bench(models::EncoderModel& model, const EmbedBenchOptions& o) {
  const models::ModelConfig& c = model.config();
  const int threads = o.threads > 0 ? o.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const bool cuda = o.device.kind == DeviceKind::kCuda;
  nlohmann::json out;
  out["model"] = c.summary();
  out["device"] = o.device.to_string();
  out["threads"] = threads;
  out["cases"] = nlohmann::json::array();
  uint64_t state = 0x9e3779b97f4a7c15ull;
  auto next_id = [&] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<int32_t>(5 + (state >> 33) % static_cast<uint64_t>(std::max<int64_t>(c.n_vocab - 5, 1)));
  };
  struct Row {
    int64_t seq, batch;
    double texts_per_s, flops_per_s;
  };
  std::vector<Row> rows;
  for (int64_t seq : o.seqs) {
    const int64_t L = std::min(seq, model.max_tokens());
    for (int64_t batch : o.batches) {
      std::vector<std::vector<int32_t>> texts(static_cast<size_t>(batch));
      for (auto& t : texts)
        for (int64_t i = 0; i < L; ++i) t.push_back(next_id());
      if (auto w = model.forward(texts); !w) return report(w.error());  // compiles the variant
      int64_t runs = 0;
      const auto t0 = Clock::now();
      do {
        if (auto r = model.forward(texts); !r) return report(r.error());
        ++runs;
      } while (runs < 2 || seconds_since(t0) < o.min_seconds);
      const double s = seconds_since(t0);
      const double tps = static_cast<double>(runs * batch) / s;
      rows.push_back({L, batch, tps, tps * encoder_flops(c, L)});
      std::fprintf(stderr, "rlx embed --bench: seq %lld batch %lld: %.1f texts/s\n", static_cast<long long>(L),
                   static_cast<long long>(batch), tps);
    }
  }
  // The limit, measured after the model runs (the same threads / the same device).
  std::fprintf(stderr, "rlx embed --bench: measuring the %s limit...\n", cuda ? "CUDA f32 matmul" : "CPU f32 FMA");
  double limit = 0, amx = 0;
  std::string limit_name;
  if (cuda) {
    auto m = measure_backend_matmul(o.device, threads, 4096);
    if (!m) return report(m.error());
    limit = *m;
    limit_name = "f32 matmul 4096^3 through the CUDA backend (cuBLAS, no TF32)";
  } else {
    limit = measure_peak_flops(threads);
    amx = measure_peak_amx_bf16_flops(threads);
    limit_name = "f32 FMA peak";
  }
  out["limit"] = {{"name", limit_name}, {"flops_per_s", limit}};
  if (amx > 0) out["limit"]["amx_bf16_flops_per_s"] = amx;
  if (!o.json) {
    std::printf("model   %s\n", c.summary().c_str());
    std::printf("machine %s, %s, %d threads\n", cuda ? o.device.to_string().c_str() : cpu_description(),
                cuda ? "CUDA backend" : kernel_isa_description(), threads);
    std::printf("limit   %s: %.1f GFLOP/s", limit_name.c_str(), limit / 1e9);
    if (amx > 0) std::printf(" (AMX-BF16 tiles %.1f GFLOP/s)", amx / 1e9);
    std::printf("\n%6s %6s %12s %12s %12s %10s\n", "seq", "batch", "texts/s", "tokens/s", "GFLOP/s", "% limit");
  }
  for (const Row& r : rows) {
    const double pct = limit > 0 ? 100.0 * r.flops_per_s / limit : 0.0;
    out["cases"].push_back({{"seq", r.seq},
                            {"batch", r.batch},
                            {"texts_per_s", r.texts_per_s},
                            {"tokens_per_s", r.texts_per_s * static_cast<double>(r.seq)},
                            {"flops_per_s", r.flops_per_s},
                            {"pct_of_limit", pct}});
    if (!o.json)
      std::printf("%6lld %6lld %12.1f %12.0f %12.1f %9.1f%%\n", static_cast<long long>(r.seq),
                  static_cast<long long>(r.batch), r.texts_per_s, r.texts_per_s * static_cast<double>(r.seq),
                  r.flops_per_s / 1e9, pct);
  }
  if (o.json) std::printf("%s\n", out.dump(2).c_str());
  return 0;
}

}  // namespace rlx::cli
