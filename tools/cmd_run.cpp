// `rlx run`: with no model, the demo — build a transformer block in HIR, compile it
// for the device, run it on random data and print the compile report and timings.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>

#include "commands.h"
#include "demo_graph.h"
#include "rlx/runtime/session.h"

namespace rlx::cli {
namespace {

struct RunArgs {
  std::string device = "cpu";
  int64_t seq = 16;
  int threads = 0;
};

int run_demo(const RunArgs& a) {
  auto device = Device::parse(a.device);
  if (!device) return report(device.error());
  BackendOptions backend_options;
  backend_options.threads = a.threads;
  auto session = Session::create(*device, backend_options);
  if (!session) return report(session.error());

  const DemoShape shape;
  std::printf("rlx demo: one transformer block (dim %lld, %lld/%lld heads, ffn %lld), SEQ=%lld, device %s\n",
              static_cast<long long>(shape.dim), static_cast<long long>(shape.n_heads),
              static_cast<long long>(shape.n_kv_heads), static_cast<long long>(shape.ffn),
              static_cast<long long>(a.seq), a.device.c_str());
  auto hir = demo_block(shape, ir::FusionPolicy::Fusable);
  if (!hir) return report(hir.error());
  compile::CompileOptions options;
  options.binding.set(ir::SEQ, a.seq);
  const auto t0 = std::chrono::steady_clock::now();
  auto graph = session->compile_hir_with(*hir, options);
  if (!graph) return report(graph.error());
  const double compile_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();

  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 0.05f);
  for (const auto& p : graph->manifest().params) {
    std::vector<float> values(static_cast<size_t>(*p.type.shape.num_elements()));
    const bool is_norm = p.name.find("norm") != std::string::npos;
    for (float& v : values) v = is_norm ? 1.0f + normal(rng) : normal(rng);
    if (Status s = graph->set_param(p.name, values); !s.ok()) return report(s.error());
  }
  std::vector<float> x(static_cast<size_t>(a.seq * shape.dim));
  for (float& v : x) v = normal(rng) * 20.0f;
  std::vector<float> pos(static_cast<size_t>(a.seq));
  for (size_t i = 0; i < pos.size(); ++i) pos[i] = static_cast<float>(i);
  const std::vector<int64_t> x_shape{a.seq, shape.dim}, pos_shape{a.seq};

  Expected<std::vector<Tensor>> out = Error::internal("not run");
  const int runs = 20;
  const auto t1 = std::chrono::steady_clock::now();
  for (int i = 0; i < runs; ++i) out = graph->run({{"x", x, x_shape}, {"pos", pos, pos_shape}});
  const double run_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t1).count() / runs;
  if (!out) return report(out.error());

  const auto y = (*out)[0].as<float>();
  double sum = 0, sq = 0;
  for (float v : y) {
    sum += v;
    sq += double(v) * v;
  }
  std::printf("\nfusion report:\n%s\n", graph->fusion_report().to_string().c_str());
  std::printf("dispatch report:\n%s\n", graph->dispatch_report().to_string().c_str());
  std::printf("output y: [%lld, %lld], mean %.6f, rms %.6f\n", static_cast<long long>(a.seq),
              static_cast<long long>(shape.dim), sum / double(y.size()), std::sqrt(sq / double(y.size())));
  std::printf("compile %.2f ms, run %.3f ms (mean of %d)\n", compile_ms, run_ms, runs);
  return 0;
}

}  // namespace

void add_run_command(CLI::App& app, Runner* run) {
  auto* cmd = app.add_subcommand("run", "Run a model (no --model: the built-in demo block)");
  auto a = std::make_shared<RunArgs>();
  cmd->add_option("--device", a->device, "cpu | cuda[:N]");
  cmd->add_option("--seq", a->seq, "rows to run")->check(CLI::PositiveNumber);
  cmd->add_option("--threads", a->threads, "CPU threads (0: RLX_THREADS or all cores)")->check(CLI::NonNegativeNumber);
  cmd->callback([run, a] { *run = [a] { return run_demo(*a); }; });
}

}  // namespace rlx::cli
