// SAM's image pre- and post-processing (see rlx/models/sam.h): SamProcessor's resize to
// the longest side, normalization and padding, and post_process_masks' upscaling of a
// low-resolution mask to the original image. Resampling is separable: PIL's bilinear
// (triangle) filter, its support widened by the scale when shrinking, for the input;
// torch's bilinear interpolation (align_corners false) for the masks.
#include <algorithm>
#include <cmath>

#include "rlx/models/sam.h"

namespace rlx::models {
namespace {

constexpr int64_t kMaxSide = 16384;
constexpr float kMean[3] = {0.485f, 0.456f, 0.406f};
constexpr float kStd[3] = {0.229f, 0.224f, 0.225f};

// One output index's input taps and normalized weights.
struct Taps {
  int64_t first = 0;
  std::vector<float> w;
};

// PIL's bilinear resampling weights from `in` samples to `out` samples.
std::vector<Taps> pil_bilinear(int64_t in, int64_t out) {
  const double scale = static_cast<double>(in) / static_cast<double>(out), support = std::max(scale, 1.0);
  std::vector<Taps> taps(static_cast<size_t>(out));
  for (int64_t i = 0; i < out; ++i) {
    const double centre = (static_cast<double>(i) + 0.5) * scale;
    const auto lo = static_cast<int64_t>(std::max(0.0, std::floor(centre - support)));
    const auto hi = static_cast<int64_t>(std::min(static_cast<double>(in), std::ceil(centre + support)));
    Taps& t = taps[static_cast<size_t>(i)];
    t.first = lo;
    double sum = 0;
    for (int64_t j = lo; j < hi; ++j) {
      const double d = std::fabs((static_cast<double>(j) + 0.5 - centre) / support);
      const double w = d < 1.0 ? 1.0 - d : 0.0;
      t.w.push_back(static_cast<float>(w));
      sum += w;
    }
    for (float& w : t.w) w = sum > 0 ? static_cast<float>(w / sum) : 0.0f;
  }
  return taps;
}

// torch's bilinear interpolation (align_corners false) weights from `in` to `out`.
std::vector<Taps> torch_bilinear(int64_t in, int64_t out) {
  std::vector<Taps> taps(static_cast<size_t>(out));
  for (int64_t i = 0; i < out; ++i) {
    const double s =
        std::max(0.0, (static_cast<double>(i) + 0.5) * static_cast<double>(in) / static_cast<double>(out) - 0.5);
    const auto j = std::min(static_cast<int64_t>(s), in - 1);
    const int64_t j1 = std::min(j + 1, in - 1);
    const auto f = static_cast<float>(s - static_cast<double>(j));
    Taps& t = taps[static_cast<size_t>(i)];
    t.first = j;
    t.w = j1 == j ? std::vector<float>{1.0f} : std::vector<float>{1.0f - f, f};
  }
  return taps;
}

// Separable resampling of `planes` planes [h, w] to [oh, ow].
std::vector<float> resample(const std::vector<float>& x, int64_t planes, int64_t h, int64_t w,
                            const std::vector<Taps>& ty, const std::vector<Taps>& tx) {
  const auto oh = static_cast<int64_t>(ty.size()), ow = static_cast<int64_t>(tx.size());
  std::vector<float> mid(static_cast<size_t>(planes * h * ow)), y(static_cast<size_t>(planes * oh * ow));
  for (int64_t p = 0; p < planes; ++p)
    for (int64_t r = 0; r < h; ++r)
      for (int64_t c = 0; c < ow; ++c) {
        const Taps& t = tx[static_cast<size_t>(c)];
        float acc = 0;
        for (size_t k = 0; k < t.w.size(); ++k) acc += t.w[k] * x[static_cast<size_t>((p * h + r) * w + t.first) + k];
        mid[static_cast<size_t>((p * h + r) * ow + c)] = acc;
      }
  for (int64_t p = 0; p < planes; ++p)
    for (int64_t r = 0; r < oh; ++r) {
      const Taps& t = ty[static_cast<size_t>(r)];
      for (int64_t c = 0; c < ow; ++c) {
        float acc = 0;
        for (size_t k = 0; k < t.w.size(); ++k)
          acc += t.w[k] * mid[static_cast<size_t>((p * h + t.first + static_cast<int64_t>(k)) * ow + c)];
        y[static_cast<size_t>((p * oh + r) * ow + c)] = acc;
      }
    }
  return y;
}

}  // namespace

std::pair<float, float> SamPreprocessed::to_resized(float x, float y) const {
  return {x * static_cast<float>(resized_width) / static_cast<float>(width),
          y * static_cast<float>(resized_height) / static_cast<float>(height)};
}

Expected<SamPreprocessed> sam_preprocess(const SamConfig& c, std::span<const uint8_t> rgb, int64_t height,
                                         int64_t width) {
  if (height < 1 || width < 1 || height > kMaxSide || width > kMaxSide)
    return Error::invalid_argument("sam: a {}x{} image is out of range (1..{} pixels a side)", width, height, kMaxSide);
  if (static_cast<int64_t>(rgb.size()) != height * width * 3)
    return Error::invalid_argument("sam: {} bytes given for a {}x{} RGB image", rgb.size(), width, height);
  SamPreprocessed out;
  out.height = height;
  out.width = width;
  const double scale = static_cast<double>(c.image_size) / static_cast<double>(std::max(height, width));
  out.resized_height = std::max<int64_t>(1, static_cast<int64_t>(static_cast<double>(height) * scale + 0.5));
  out.resized_width = std::max<int64_t>(1, static_cast<int64_t>(static_cast<double>(width) * scale + 0.5));
  std::vector<float> planes(static_cast<size_t>(3 * height * width));
  for (int64_t i = 0; i < height * width; ++i)
    for (int64_t ch = 0; ch < 3; ++ch)
      planes[static_cast<size_t>(ch * height * width + i)] = rgb[static_cast<size_t>(3 * i + ch)];
  std::vector<float> resized = resample(planes, 3, height, width, pil_bilinear(height, out.resized_height),
                                        pil_bilinear(width, out.resized_width));
  const int64_t S = c.image_size, rh = out.resized_height, rw = out.resized_width;
  out.pixels.assign(static_cast<size_t>(3 * S * S), 0.0f);
  for (int64_t ch = 0; ch < 3; ++ch)
    for (int64_t r = 0; r < rh; ++r)
      for (int64_t col = 0; col < rw; ++col) {
        // PIL hands back 8-bit pixels: round and clamp before rescaling.
        const float v = std::clamp(std::round(resized[static_cast<size_t>((ch * rh + r) * rw + col)]), 0.0f, 255.0f);
        out.pixels[static_cast<size_t>((ch * S + r) * S + col)] = (v / 255.0f - kMean[ch]) / kStd[ch];
      }
  return out;
}

std::vector<uint8_t> sam_mask_image(const SamConfig& c, std::span<const float> low_res, const SamPreprocessed& image) {
  const int64_t side = c.mask_side(), S = c.image_size;
  const std::vector<float> mask(low_res.begin(), low_res.end());
  std::vector<float> full = resample(mask, 1, side, side, torch_bilinear(side, S), torch_bilinear(side, S));
  std::vector<float> crop(static_cast<size_t>(image.resized_height * image.resized_width));
  for (int64_t r = 0; r < image.resized_height; ++r)
    std::copy_n(full.begin() + r * S, image.resized_width, crop.begin() + r * image.resized_width);
  const std::vector<float> back =
      resample(crop, 1, image.resized_height, image.resized_width, torch_bilinear(image.resized_height, image.height),
               torch_bilinear(image.resized_width, image.width));
  std::vector<uint8_t> out(back.size());
  for (size_t i = 0; i < back.size(); ++i) out[i] = back[i] > 0.0f ? 255 : 0;
  return out;
}

}  // namespace rlx::models
