// Images per second of a ViT-B/14-shaped DINOv2 (dim 768, 12 layers, 12 heads, MLP 3072,
// patch 14) at 224x224 (257 tokens) with random weights, built by build_media_encoder and
// compiled like `rlx forward` does (profile "encoder"). Printed next to its limit measured
// in the same run: the model's matmul FLOPs per image over the machine's peak f32 FMA
// FLOP/s (bench_limits.h) on the CPU; on CUDA the achieved FLOP/s is printed alone.
// Usage: rlx_media_encoder_bench [--device cpu|cuda] [--batch N] [--size PIXELS] [--reps N]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "bench_limits.h"
#include "rlx/compile/profile.h"
#include "rlx/models/media_encoder.h"
#include "rlx/runtime/session.h"

namespace {
using namespace rlx;

// Every tensor a ViT-B/14 DINOv2 reads, f32, N(0, 0.02) (norms and layer scales near 1
// and 0.1), made on first request.
class RandomWeights : public models::WeightSource {
 public:
  explicit RandomWeights(const models::MediaConfig& c) : c_(c) {}
  bool has(std::string_view) const override { return true; }
  std::string describe() const override { return "random ViT-B/14 weights"; }
  std::vector<std::pair<std::string, std::string>> stored_tensors() const override { return {}; }
  Expected<models::WeightView> take(std::string_view name) const override {
    auto it = made_.find(std::string(name));
    if (it == made_.end()) it = made_.emplace(std::string(name), make(name)).first;
    return it->second;
  }

 private:
  std::vector<int64_t> shape_of(std::string_view n) const {
    const int64_t d = c_.n_embd, f = c_.n_ff, p = c_.patch_size, side = c_.image_size / c_.patch_size;
    auto ends = [&](std::string_view s) { return n.size() >= s.size() && n.substr(n.size() - s.size()) == s; };
    if (ends("projection.weight")) return {d, c_.n_channels, p, p};
    if (ends("position_embeddings")) return {1, 1 + side * side, d};
    if (ends("cls_token")) return {1, 1, d};
    if (ends("fc1.weight")) return {f, d};
    if (ends("fc1.bias")) return {f};
    if (ends("fc2.weight")) return {d, f};
    if (ends(".weight") && n.find("norm") == std::string_view::npos) return {d, d};
    return {d};
  }
  models::WeightView make(std::string_view name) const {
    models::WeightView w;
    w.name = std::string(name);
    w.shape = shape_of(name);
    int64_t count = 1;
    for (int64_t x : w.shape) count *= x;
    auto v = std::make_shared<std::vector<float>>(static_cast<size_t>(count));
    std::mt19937 rng(static_cast<uint32_t>(std::hash<std::string_view>{}(name)));
    std::normal_distribution<float> nd(0.0f, 0.02f);
    const bool norm = name.find("norm") != std::string_view::npos, scale = name.find("lambda1") != std::string_view::npos;
    for (float& x : *v) x = norm && name.find(".weight") != std::string_view::npos ? 1.0f + nd(rng) : scale ? 0.1f : nd(rng);
    w.bytes = std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(v->data()), v->size() * sizeof(float));
    w.owner = v;
    return w;
  }
  models::MediaConfig c_;
  mutable std::map<std::string, models::WeightView> made_;
};

}  // namespace

int main(int argc, char** argv) {
  std::string device_name = "cpu";
  int64_t batch = 1, size = 224, reps = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--device") device_name = argv[i + 1];
    else if (flag == "--batch") batch = std::atoll(argv[i + 1]);
    else if (flag == "--size") size = std::atoll(argv[i + 1]);
    else if (flag == "--reps") reps = std::atoll(argv[i + 1]);
    else {
      std::fprintf(stderr, "unknown flag %s (--device, --batch, --size, --reps)\n", flag.c_str());
      return 2;
    }
  }
  if (batch < 1 || size < 14 || reps < 1) {
    std::fprintf(stderr, "--batch and --reps must be >= 1, --size >= 14\n");
    return 2;
  }
  models::MediaConfig c;
  c.arch = models::MediaArch::Dinov2;
  c.n_embd = 768;
  c.n_layer = 12;
  c.n_head = 12;
  c.head_dim = 64;
  c.n_ff = 3072;
  c.norm_eps = 1e-6;
  c.image_size = 518;  // the released checkpoints' 37x37 position grid: 224 resamples it
  c.patch_size = 14;
  RandomWeights weights(c);
  models::MediaBuildOptions o;
  o.batch = batch;
  o.height = o.width = size;
  auto built = models::build_media_encoder(c, weights, o);
  if (!built) {
    std::fprintf(stderr, "%s\n", built.error().to_string().c_str());
    return 1;
  }
  auto device = Device::parse(device_name);
  if (!device) {
    std::fprintf(stderr, "%s\n", device.error().to_string().c_str());
    return 1;
  }
  auto session = Session::create(*device);
  if (!session) {
    std::fprintf(stderr, "%s\n", session.error().to_string().c_str());
    return 1;
  }
  const auto profile = compile::CompileProfile::preset("encoder");
  auto graph = session->compile_hir_with(built->hir, profile->to_compile_options(session->backend()->target()));
  if (!graph) {
    std::fprintf(stderr, "%s\n", graph.error().to_string().c_str());
    return 1;
  }
  for (const std::string& name : built->param_names) {
    auto w = weights.take(name).value();
    const std::span<const float> f(reinterpret_cast<const float*>(w.bytes.data()), w.bytes.size() / sizeof(float));
    if (Status s = graph->set_param(name, f); !s.ok()) {
      std::fprintf(stderr, "%s\n", s.error().to_string().c_str());
      return 1;
    }
  }
  const int64_t grid = size / 14, tokens = 1 + grid * grid;
  std::vector<float> pixels(static_cast<size_t>(batch * 3 * size * size));
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<float>((i * 7919) % 255) / 255.0f - 0.5f;
  std::vector<int32_t> pos(static_cast<size_t>(tokens)), kv_len(static_cast<size_t>(batch), static_cast<int32_t>(tokens));
  for (int64_t i = 0; i < tokens; ++i) pos[static_cast<size_t>(i)] = static_cast<int32_t>(i);
  const std::vector<int64_t> px_shape{batch, 3, size, size}, pos_shape{tokens}, len_shape{batch};
  const std::vector<NamedTensorView> inputs{{"pixel_values", TensorView{ir::DType::F32, px_shape, pixels.data()}},
                                            {"pos", TensorView{ir::DType::I32, pos_shape, pos.data()}},
                                            {"kv_len", TensorView{ir::DType::I32, len_shape, kv_len.data()}}};
  if (auto warm = graph->run(inputs); !warm) {  // warm-up (packs weights)
    std::fprintf(stderr, "%s\n", warm.error().to_string().c_str());
    return 1;
  }
  std::vector<double> secs;
  for (int64_t r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    auto out = graph->run(inputs);
    const auto t1 = std::chrono::steady_clock::now();
    if (!out) {
      std::fprintf(stderr, "%s\n", out.error().to_string().c_str());
      return 1;
    }
    secs.push_back(std::chrono::duration<double>(t1 - t0).count());
  }
  std::sort(secs.begin(), secs.end());
  const double median = secs[secs.size() / 2];
  // Matmul FLOPs per image: patch conv, q/k/v/o and the MLP per token, attention's two products.
  const double d = 768, f = 3072, t = static_cast<double>(tokens), l = 12;
  const double flops = 2 * (t - 1) * d * 3 * 14 * 14 + l * (2 * t * d * (4 * d + 2 * f) + 2 * 2 * t * t * d);
  const double achieved = flops * static_cast<double>(batch) / median;
  std::printf("dinov2 ViT-B/14 %lldx%lld (%lld tokens), batch %lld on %s: %.2f images/s (median of %lld, %.1f ms a run), "
              "%.1f GFLOP/s of matmul\n",
              static_cast<long long>(size), static_cast<long long>(size), static_cast<long long>(tokens),
              static_cast<long long>(batch), device_name.c_str(), static_cast<double>(batch) / median,
              static_cast<long long>(reps), median * 1e3, achieved / 1e9);
  if (device->kind == DeviceKind::kCpu) {
    const int threads = env_config().threads > 0 ? env_config().threads : static_cast<int>(std::thread::hardware_concurrency());
    cpu::ThreadPool pool(std::max(threads, 1));
    const bench::Limits& lim = bench::limits(pool);
    std::printf("limit: peak f32 FMA %.1f GFLOP/s -> %.1f%% of peak; at peak %.2f images/s\n", lim.peak_flops / 1e9,
                100.0 * achieved / lim.peak_flops, lim.peak_flops / flops);
  }
  return 0;
}
