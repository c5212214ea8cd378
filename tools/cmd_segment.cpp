// `rlx segment --model SAM_DIR --image F.png (--point X,Y [--label 1|0] ... | --box
// x0,y0,x1,y1) -o mask.png`: one Segment Anything prompt on one image. The image is
// prepared as SamProcessor does (longest side resized, normalized, padded), encoded once,
// prompted (points in the image's own pixel coordinates; labels 1 = object, 0 =
// background), and the best of the multimask outputs by predicted IoU (or the single
// mask with --single-mask) is written as a grayscale PNG of the image's size (255 inside).
#include <chrono>
#include <cmath>
#include <cstdio>

#include "cli_io.h"
#include "commands.h"
#include "model_path.h"
#include "png_io.h"
#include "rlx/models/sam.h"

namespace rlx::cli {
namespace {

constexpr int64_t kMaxImagePixels = int64_t{8192} * 8192;

struct SegmentArgs {
  std::string model, image, out, device = "cpu";
  std::vector<std::string> points;
  std::vector<int> labels;
  std::string box;
  bool single_mask = false, no_cache = false;
  int threads = 0;
};

// "a,b[,c,d]": exactly `count` comma-separated finite numbers.
Expected<std::vector<float>> parse_numbers(const std::string& text, size_t count, const char* flag) {
  std::vector<float> out;
  size_t at = 0;
  bool ok = true;
  while (ok) {
    const size_t comma = text.find(',', at);
    const std::string part = text.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    char* end = nullptr;
    const float v = std::strtof(part.c_str(), &end);
    ok = !part.empty() && end == part.c_str() + part.size() && std::isfinite(v);
    if (ok) out.push_back(v);
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  if (!ok || out.size() != count)
    return Error::invalid_argument("{} '{}': expected {} comma-separated numbers", flag, text, count);
  return out;
}

int run_segment(const SegmentArgs& a) {
  using clock = std::chrono::steady_clock;
  auto device = Device::parse(a.device);
  if (!device) return report(device.error());
  if (a.points.empty() && a.box.empty())
    return report(Error::invalid_argument("give --point X,Y or --box x0,y0,x1,y1"));
  if (!a.labels.empty() && a.labels.size() != a.points.size())
    return report(Error::invalid_argument("--label is given {} times for {} points", a.labels.size(), a.points.size()));
  std::vector<std::vector<float>> points;
  for (const std::string& p : a.points) {
    auto xy = parse_numbers(p, 2, "--point");
    if (!xy) return report(xy.error());
    points.push_back(*xy);
  }
  std::vector<float> box;
  if (!a.box.empty()) {
    auto b = parse_numbers(a.box, 4, "--box");
    if (!b) return report(b.error());
    box = *b;
  }
  auto where = resolve_model_path(a.model);
  if (!where) return report(where.error());
  auto image = read_png_rgb(a.image, kMaxImagePixels);
  if (!image) return report(image.error());
  models::MediaLoadOptions lo;
  lo.device = *device;
  lo.threads = a.threads;
  lo.compile_cache = !a.no_cache;
  auto model = models::SamModel::load(where->path, lo);
  if (!model) return report(model.error());
  const models::SamConfig& c = (*model)->config();
  auto prepared = models::sam_preprocess(c, image->rgb, image->height, image->width);
  if (!prepared) return report(prepared.error().with_context(a.image));
  const auto t0 = clock::now();
  const std::vector<int64_t> shape{1, 3, c.image_size, c.image_size};
  auto embedded = (*model)->encode(shape, prepared->pixels);
  if (!embedded) return report(embedded.error());
  const auto t1 = clock::now();
  models::SamPrompts prompt;
  prompt.points = static_cast<int64_t>(points.size());
  for (size_t i = 0; i < points.size(); ++i) {
    const auto [x, y] = prepared->to_resized(points[i][0], points[i][1]);
    prompt.coords.insert(prompt.coords.end(), {x, y});
    prompt.labels.push_back(a.labels.empty() ? 1 : a.labels[i]);
  }
  if (!box.empty()) {
    const auto [x0, y0] = prepared->to_resized(box[0], box[1]);
    const auto [x1, y1] = prepared->to_resized(box[2], box[3]);
    prompt.boxes = {x0, y0, x1, y1};
  }
  auto masks = (*model)->decode(*embedded, prompt, !a.single_mask);
  if (!masks) return report(masks.error());
  const auto t2 = clock::now();
  size_t best = 0;
  for (size_t m = 1; m < masks->iou_scores.size(); ++m)
    if (masks->iou_scores[m] > masks->iou_scores[best]) best = m;
  const size_t plane = static_cast<size_t>(masks->side * masks->side);
  const std::span<const float> low(masks->pred_masks.data() + best * plane, plane);
  const std::vector<uint8_t> mask = models::sam_mask_image(c, low, *prepared);
  if (Status s = write_png_gray(a.out, mask, image->width, image->height); !s.ok()) return report(s.error());
  int64_t inside = 0;
  for (uint8_t v : mask) inside += v != 0;
  auto ms = [](auto d) { return std::chrono::duration<double, std::milli>(d).count(); };
  std::fprintf(stderr, "rlx: mask %zu of %lld (predicted IoU %.3f): %lld of %lldx%lld pixels inside, written to %s\n",
               best + 1, static_cast<long long>(masks->masks), masks->iou_scores[best], static_cast<long long>(inside),
               static_cast<long long>(image->width), static_cast<long long>(image->height), a.out.c_str());
  std::fprintf(stderr, "rlx: image encoder %.1f ms, prompt + mask decoder %.1f ms (%s)\n", ms(t1 - t0), ms(t2 - t1),
               device->to_string().c_str());
  return 0;
}

}  // namespace

void add_segment_command(CLI::App& app, Runner* run) {
  auto* cmd = app.add_subcommand("segment", "Segment an object of a PNG image with a Segment Anything model");
  auto a = std::make_shared<SegmentArgs>();
  cmd->add_option("-m,--model", a->model, "Hugging Face folder of a sam model")->required()->check(model_path_check());
  cmd->add_option("--image", a->image, "PNG image")->required()->check(CLI::ExistingFile);
  cmd->add_option("--point", a->points, "X,Y: a prompt point in image pixels (repeatable)")->default_str("");
  cmd->add_option("--label", a->labels, "label of each --point in order: 1 object (default), 0 background")
      ->default_str("")
      ->check(CLI::IsMember({0, 1}));
  cmd->add_option("--box", a->box, "x0,y0,x1,y1: a prompt box in image pixels");
  cmd->add_option("-o,--out", a->out, "the mask as a grayscale PNG (255 inside; - for standard output)")
      ->required()
      ->check(output_path_check());
  cmd->add_flag("--single-mask", a->single_mask, "the single-mask output instead of the best of three");
  cmd->add_option("--device", a->device, device_help(false));
  cmd->add_option("-t,--threads", a->threads, "CPU threads")->check(kThreadCount);
  cmd->add_flag("--no-cache", a->no_cache, "compile everything (no AOT disk cache of compiled executables)");
  cmd->callback([run, a] { *run = [a] { return run_segment(*a); }; });
}

}  // namespace rlx::cli
