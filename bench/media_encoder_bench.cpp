// Images per second of a ViT-B/14-shaped DINOv2 (dim 768, 12 layers, 12 heads, MLP 3072,
// patch 14) at 224x224 (257 tokens), or (--model sam) of a SAM ViT-B image encoder at
// 1024x1024 (64x64 patches of 16, windows of 14, global attention in layers 2, 5, 8, 11,
// a 256-channel neck), with random weights, built by build_media_encoder /
// build_sam_image_encoder and compiled like `rlx forward` does (profile "encoder").
// Printed next to its limit measured in the same run: the model's matmul FLOPs per image
// over the machine's peak f32 FMA FLOP/s (bench_limits.h) on the CPU, over the rate of
// one large f32 matmul (4096^3, compiled and run on the same device) on CUDA.
// Usage: rlx_media_encoder_bench [--model dinov2|sam] [--device cpu|cuda] [--batch N]
//        [--size PIXELS (dinov2)] [--reps N]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "bench_limits.h"
#include "rlx/compile/profile.h"
#include "rlx/ir/builder.h"
#include "rlx/models/media_encoder.h"
#include "rlx/models/sam.h"
#include "rlx/runtime/session.h"

namespace {
using namespace rlx;

// Every tensor a model reads, f32, N(0, 0.02) (norm weights near 1, layer scales 0.1),
// made on first request with the shape `shape_of` gives its name.
class RandomWeights : public models::WeightSource {
 public:
  using ShapeOf = std::function<std::vector<int64_t>(std::string_view)>;
  explicit RandomWeights(ShapeOf shape_of) : shape_of_(std::move(shape_of)) {}
  bool has(std::string_view) const override { return true; }
  std::string describe() const override { return "random weights"; }
  std::vector<std::pair<std::string, std::string>> stored_tensors() const override { return {}; }
  Expected<models::WeightView> take(std::string_view name) const override {
    auto it = made_.find(std::string(name));
    if (it == made_.end()) it = made_.emplace(std::string(name), make(name)).first;
    return it->second;
  }

 private:
  models::WeightView make(std::string_view name) const {
    models::WeightView w;
    w.name = std::string(name);
    w.shape = shape_of_(name);
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
  ShapeOf shape_of_;
  mutable std::map<std::string, models::WeightView> made_;
};

bool ends_with(std::string_view n, std::string_view s) { return n.size() >= s.size() && n.substr(n.size() - s.size()) == s; }

// The tensor shapes of a ViT-B/14 DINOv2.
std::vector<int64_t> dinov2_shape(const models::MediaConfig& c, std::string_view n) {
  const int64_t d = c.n_embd, f = c.n_ff, p = c.patch_size, side = c.image_size / c.patch_size;
  if (ends_with(n, "projection.weight")) return {d, c.n_channels, p, p};
  if (ends_with(n, "position_embeddings")) return {1, 1 + side * side, d};
  if (ends_with(n, "cls_token")) return {1, 1, d};
  if (ends_with(n, "fc1.weight")) return {f, d};
  if (ends_with(n, "fc1.bias")) return {f};
  if (ends_with(n, "fc2.weight")) return {d, f};
  if (ends_with(n, ".weight") && n.find("norm") == std::string_view::npos) return {d, d};
  return {d};
}

// The tensor shapes of SAM ViT-B's image encoder.
std::vector<int64_t> sam_shape(const models::SamConfig& c, std::string_view n) {
  const int64_t d = c.n_embd, f = c.n_ff, o = c.out_channels, g = c.grid(), hd = d / c.n_head;
  if (ends_with(n, "projection.weight")) return {d, c.n_channels, c.patch_size, c.patch_size};
  if (ends_with(n, "pos_embed")) return {1, g, g, d};
  if (ends_with(n, "qkv.weight")) return {3 * d, d};
  if (ends_with(n, "qkv.bias")) return {3 * d};
  if (ends_with(n, "proj.weight")) return {d, d};
  if (ends_with(n, "lin1.weight")) return {f, d};
  if (ends_with(n, "lin1.bias")) return {f};
  if (ends_with(n, "lin2.weight")) return {d, f};
  if (ends_with(n, "neck.conv1.weight")) return {o, d, 1, 1};
  if (ends_with(n, "neck.conv2.weight")) return {o, o, 3, 3};
  if (n.find("neck.layer_norm") != std::string_view::npos) return {o};
  if (n.find("rel_pos") != std::string_view::npos) {
    const int64_t layer = std::atoll(std::string(n.substr(n.find("layers.") + 7)).c_str());
    bool global = false;
    for (int64_t l : c.global_layers) global = global || l == layer;
    return {2 * (global ? g : c.window) - 1, hd};
  }
  return {d};
}

}  // namespace

// FLOP/s of a 4096 x 4096 x 4096 f32 matmul compiled for `session`'s device (median of
// 5): its operands are parameters (resident on the device) and only its first row is
// copied out, so the run is the product.
double matmul_rate(Session& session) {
  constexpr int64_t n = 4096;
  ir::GraphBuilder b;
  const ir::ValueId prod = b.matmul(b.param("a", ir::DType::F32, ir::Shape{n, n}), b.param("b", ir::DType::F32, ir::Shape{n, n}));
  b.output(b.narrow(prod, 0, 0, ir::Dim(1)), "row");
  auto g = b.build();
  if (!g) return 0;
  auto c = session.compile(*g);
  if (!c) return 0;
  const std::vector<float> a(static_cast<size_t>(n * n), 0.5f);
  if (!c->set_param("a", a).ok() || !c->set_param("b", a).ok()) return 0;
  std::vector<double> secs;
  for (int r = 0; r < 6; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    if (!c->run(std::vector<NamedTensorView>{})) return 0;
    if (r > 0) secs.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(secs.begin(), secs.end());
  return 2.0 * n * n * n / secs[secs.size() / 2];
}

int fail(const Error& e) {
  std::fprintf(stderr, "%s\n", e.to_string().c_str());
  return 1;
}

int main(int argc, char** argv) {
  std::string device_name = "cpu", model = "dinov2";
  int64_t batch = 1, size = 224, reps = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--device") device_name = argv[i + 1];
    else if (flag == "--model") model = argv[i + 1];
    else if (flag == "--batch") batch = std::atoll(argv[i + 1]);
    else if (flag == "--size") size = std::atoll(argv[i + 1]);
    else if (flag == "--reps") reps = std::atoll(argv[i + 1]);
    else {
      std::fprintf(stderr, "unknown flag %s (--model, --device, --batch, --size, --reps)\n", flag.c_str());
      return 2;
    }
  }
  if (batch < 1 || size < 14 || reps < 1 || (model != "dinov2" && model != "sam")) {
    std::fprintf(stderr, "--model is dinov2 or sam, --batch and --reps must be >= 1, --size >= 14\n");
    return 2;
  }
  const bool sam = model == "sam";
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
  models::SamConfig sc;
  sc.image_size = 1024;
  sc.patch_size = 16;
  sc.n_embd = 768;
  sc.n_layer = 12;
  sc.n_head = 12;
  sc.n_ff = 3072;
  sc.out_channels = sc.prompt_dim = 256;
  sc.pos_feats = 128;
  sc.embed_side = 64;
  sc.window = 14;
  sc.global_layers = {2, 5, 8, 11};
  sc.dec_layers = 2;
  sc.dec_heads = 8;
  sc.dec_ff = 2048;
  sc.iou_hidden = 256;
  RandomWeights weights(sam ? RandomWeights::ShapeOf([&](std::string_view n) { return sam_shape(sc, n); })
                            : RandomWeights::ShapeOf([&](std::string_view n) { return dinov2_shape(c, n); }));
  if (sam) size = sc.image_size;
  Expected<models::BuiltModel> built = Error::internal("not built");
  if (sam) {
    built = models::build_sam_image_encoder(sc, weights, batch);
  } else {
    models::MediaBuildOptions o;
    o.batch = batch;
    o.height = o.width = size;
    built = models::build_media_encoder(c, weights, o);
  }
  if (!built) return fail(built.error());
  auto device = Device::parse(device_name);
  if (!device) return fail(device.error());
  auto session = Session::create(*device);
  if (!session) return fail(session.error());
  const auto profile = compile::CompileProfile::preset("encoder");
  auto graph = session->compile_hir_with(built->hir, profile->to_compile_options(session->backend()->target()));
  if (!graph) return fail(graph.error());
  for (const std::string& name : built->param_names) {
    auto w = weights.take(name).value();
    const std::span<const float> f(reinterpret_cast<const float*>(w.bytes.data()), w.bytes.size() / sizeof(float));
    if (Status s = graph->set_param(name, f); !s.ok()) return fail(s.error());
  }
  const int64_t grid = sam ? sc.grid() : size / 14, tokens = sam ? grid * grid : 1 + grid * grid;
  std::vector<float> pixels(static_cast<size_t>(batch * 3 * size * size));
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<float>((i * 7919) % 255) / 255.0f - 0.5f;
  std::vector<int32_t> pos(static_cast<size_t>(tokens)), kv_len(static_cast<size_t>(batch), static_cast<int32_t>(tokens));
  for (int64_t i = 0; i < tokens; ++i) pos[static_cast<size_t>(i)] = static_cast<int32_t>(i);
  const std::vector<int64_t> px_shape{batch, 3, size, size}, pos_shape{tokens}, len_shape{batch};
  std::vector<NamedTensorView> inputs{{"pixel_values", TensorView{ir::DType::F32, px_shape, pixels.data()}}};
  if (!sam) {
    inputs.push_back({"pos", TensorView{ir::DType::I32, pos_shape, pos.data()}});
    inputs.push_back({"kv_len", TensorView{ir::DType::I32, len_shape, kv_len.data()}});
  }
  if (auto warm = graph->run(inputs); !warm) return fail(warm.error());  // warm-up (packs weights)
  std::vector<double> secs;
  for (int64_t r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    auto out = graph->run(inputs);
    const auto t1 = std::chrono::steady_clock::now();
    if (!out) return fail(out.error());
    secs.push_back(std::chrono::duration<double>(t1 - t0).count());
  }
  std::sort(secs.begin(), secs.end());
  const double median = secs[secs.size() / 2];
  // Matmul FLOPs per image: the patch conv, q/k/v/o and the MLP per token, attention's
  // two products (SAM: per window of the padded grid, its bias products, the neck).
  const double d = 768, f = 3072, t = static_cast<double>(tokens), l = 12;
  double flops = 2 * (t - 1) * d * 3 * 14 * 14 + l * (2 * t * d * (4 * d + 2 * f) + 2 * 2 * t * t * d);
  if (sam) {
    const double g = static_cast<double>(grid), w = static_cast<double>(sc.window), p = 16;
    const double windows = std::ceil(g / w) * std::ceil(g / w), padded = windows * w * w;
    flops = 2 * t * d * 3 * p * p + 2 * t * 256 * d + 2 * t * 256 * 256 * 9;
    for (int64_t il = 0; il < 12; ++il) {
      bool global = false;
      for (int64_t gl : sc.global_layers) global = global || gl == il;
      const double rows = global ? t : padded, span = global ? t : w * w, side = global ? g : w;
      flops += 2 * rows * d * 4 * d + 2 * t * d * 2 * f + 2 * 2 * rows * span * d + 2 * rows * 2 * (2 * side - 1) * d;
    }
  }
  const double achieved = flops * static_cast<double>(batch) / median;
  std::printf("%s %lldx%lld (%lld tokens), batch %lld on %s: %.2f images/s (median of %lld, %.1f ms a run), "
              "%.1f GFLOP/s of matmul (%.1f GFLOP an image)\n",
              sam ? "sam ViT-B/16 image encoder" : "dinov2 ViT-B/14", static_cast<long long>(size),
              static_cast<long long>(size), static_cast<long long>(tokens), static_cast<long long>(batch),
              device_name.c_str(), static_cast<double>(batch) / median, static_cast<long long>(reps), median * 1e3,
              achieved / 1e9, flops / 1e9);
  if (device->kind == DeviceKind::kCpu) {
    const int threads = env_config().threads > 0 ? env_config().threads : static_cast<int>(std::thread::hardware_concurrency());
    cpu::ThreadPool pool(std::max(threads, 1));
    const bench::Limits& lim = bench::limits(pool);
    std::printf("limit: peak f32 FMA %.1f GFLOP/s -> %.1f%% of peak; at peak %.2f images/s\n", lim.peak_flops / 1e9,
                100.0 * achieved / lim.peak_flops, lim.peak_flops / flops);
  } else {
    const double rate = matmul_rate(*session);
    std::printf("limit: a 4096^3 f32 matmul on this device %.1f GFLOP/s -> %.1f%% of it\n", rate / 1e9,
                rate > 0 ? 100.0 * achieved / rate : 0.0);
  }
  return 0;
}
