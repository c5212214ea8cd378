// Segment Anything conformance against transformers (float64 references): the sam folder
// of ../shared/conformance/hf/ (pixels [1, 3, 128, 128] and one point (40, 60)) is loaded
// from config.json + safetensors; image_embeddings, pred_masks (multimask, low
// resolution) and iou_scores must match with relative L2 <= 1e-4 — alone, with the image
// twice in a batch, and with the point given as two prompts. One encoding serves many
// prompts. Runs on RLX_TEST_DEVICE (default cpu) and on cuda when built and a device
// opens. Skipped without the data. Also the prompt errors, which need no data.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "reference_arrays.h"
#include "rlx/models/sam.h"
#include "rlx/runtime/session.h"

namespace rlx {
namespace {

namespace fs = std::filesystem;

fs::path sam_dir() { return testing_env::conformance_dir() / "hf" / "sam"; }

using testing_env::read_f32;
using testing_env::relative_l2;

// Item `i` of `n` equal-sized items in `all`.
std::span<const float> item(const std::vector<float>& all, size_t i, size_t n) {
  const size_t size = all.size() / n;
  return {all.data() + i * size, size};
}

TEST(SamConformance, MatchesTransformersAloneBatchedAndPromptedTwice) {
  const fs::path dir = sam_dir();
  if (!fs::exists(dir / "manifest.json")) GTEST_SKIP() << dir << " not found (skipped)";
  const std::vector<float> pixels = read_f32(dir / "pixels.f32"), embeddings = read_f32(dir / "image_embeddings.f32");
  const std::vector<float> masks = read_f32(dir / "pred_masks.f32"), iou = read_f32(dir / "iou_scores.f32");
  for (const Device& device : testing_env::conformance_devices()) {
    const std::string on = device.to_string();
    models::MediaLoadOptions lo;
    lo.device = device;
    lo.threads = 2;
    lo.compile_cache = false;
    auto model = models::SamModel::load(dir.string(), lo);
    ASSERT_TRUE(model) << model.error().to_string();
    const std::vector<int64_t> one{1, 3, 128, 128};
    auto image = (*model)->encode(one, pixels);
    ASSERT_TRUE(image) << image.error().to_string();
    const double e = relative_l2(image->values, embeddings);
    models::SamPrompts point;
    point.points = 1;
    point.coords = {40.0f, 60.0f};
    auto out = (*model)->decode(*image, point);
    ASSERT_TRUE(out) << out.error().to_string();
    const double m = relative_l2(out->pred_masks, masks), s = relative_l2(out->iou_scores, iou);
    std::printf("sam on %s: image_embeddings %.2e, pred_masks %.2e, iou_scores %.2e (relative L2)\n", on.c_str(), e, m,
                s);
    EXPECT_LE(e, 1e-4) << on;
    EXPECT_LE(m, 1e-4) << on;
    EXPECT_LE(s, 1e-4) << on;
    EXPECT_EQ(out->masks, 3);
    EXPECT_EQ(out->side, 32);

    // The same embedding prompted again: no new encoder run, the same masks.
    const int64_t compiles = (*model)->pipeline().stats().backend_compiles;
    auto again = (*model)->decode(*image, point);
    ASSERT_TRUE(again) << again.error().to_string();
    EXPECT_EQ(again->pred_masks, out->pred_masks) << on;
    EXPECT_EQ((*model)->pipeline().stats().backend_compiles, compiles) << on;

    // Two images in a batch, each prompted twice with the point (explicit label 1).
    std::vector<float> two = pixels;
    two.insert(two.end(), pixels.begin(), pixels.end());
    const std::vector<int64_t> batch2{2, 3, 128, 128};
    auto images = (*model)->encode(batch2, two);
    ASSERT_TRUE(images) << images.error().to_string();
    models::SamPrompts twice;
    twice.prompts = 2;
    twice.points = 1;
    twice.coords = {40.0f, 60.0f, 40.0f, 60.0f, 40.0f, 60.0f, 40.0f, 60.0f};
    twice.labels = {1, 1, 1, 1};
    auto many = (*model)->decode(*images, twice);
    ASSERT_TRUE(many) << many.error().to_string();
    for (size_t i = 0; i < 2; ++i)
      EXPECT_LE(relative_l2(item(images->values, i, 2), embeddings), 1e-4) << on << " image " << i;
    for (size_t i = 0; i < 4; ++i) {
      EXPECT_LE(relative_l2(item(many->pred_masks, i, 4), masks), 1e-4) << on << " prompt " << i;
      EXPECT_LE(relative_l2(item(many->iou_scores, i, 4), iou), 1e-4) << on << " prompt " << i;
    }

    // A box, and a box with a negative point: finite masks of the documented shapes.
    models::SamPrompts box;
    box.boxes = {20.0f, 30.0f, 90.0f, 100.0f};
    auto boxed = (*model)->decode(*image, box, /*multimask=*/false);
    ASSERT_TRUE(boxed) << boxed.error().to_string();
    EXPECT_EQ(boxed->masks, 1);
    EXPECT_EQ(boxed->pred_masks.size(), 32u * 32u);
    box.points = 1;
    box.coords = {5.0f, 5.0f};
    box.labels = {0};
    auto both = (*model)->decode(*image, box);
    ASSERT_TRUE(both) << both.error().to_string();
    for (float v : both->pred_masks) ASSERT_TRUE(std::isfinite(v)) << on;
    EXPECT_GT(relative_l2(both->pred_masks, out->pred_masks), 1e-3) << on << ": the box changed nothing";
  }
}

TEST(SamConformance, BadInputsAreErrorsThatSayWhy) {
  const fs::path dir = sam_dir();
  if (!fs::exists(dir / "manifest.json")) GTEST_SKIP() << dir << " not found (skipped)";
  models::MediaLoadOptions lo;
  lo.threads = 1;
  lo.compile_cache = false;
  auto model = models::SamModel::load(dir.string(), lo);
  ASSERT_TRUE(model) << model.error().to_string();
  auto fails = [](const auto& r, const std::string& want) {
    ASSERT_FALSE(r.has_value());
    EXPECT_NE(r.error().message().find(want), std::string::npos) << r.error().message();
  };
  const std::vector<float> small(3 * 64 * 64, 0.0f);
  fails((*model)->encode(std::vector<int64_t>{1, 3, 64, 64}, small), "pixel_values must be [batch, 3, 128, 128]");
  models::SamImageEmbeddings image{1, 32, 8, std::vector<float>(32 * 64, 0.0f)};
  models::SamPrompts none;
  fails((*model)->decode(image, none), "a prompt needs points or a box");
  models::SamPrompts bad_label;
  bad_label.points = 1;
  bad_label.coords = {1.0f, 2.0f};
  bad_label.labels = {7};
  fails((*model)->decode(image, bad_label), "input_labels value 7");
  models::SamPrompts short_coords;
  short_coords.points = 2;
  short_coords.coords = {1.0f, 2.0f};
  fails((*model)->decode(image, short_coords), "input_points must be [1, 1, 2, 2]");
  models::SamPrompts nan_point;
  nan_point.points = 1;
  nan_point.coords = {NAN, 2.0f};
  fails((*model)->decode(image, nan_point), "not finite");
  models::SamImageEmbeddings wrong{1, 16, 8, std::vector<float>(16 * 64, 0.0f)};
  models::SamPrompts point;
  point.points = 1;
  point.coords = {1.0f, 2.0f};
  fails((*model)->decode(wrong, point), "image embeddings must be [batch, 32, 8, 8]");
}

}  // namespace
}  // namespace rlx
