// PNG files for `rlx segment`, through libpng's simplified API: read any PNG as 8-bit
// RGB, write an 8-bit grayscale image. Errors name the file and libpng's reason.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "rlx/base/status.h"

namespace rlx::cli {

struct RgbImage {
  int64_t width = 0, height = 0;
  std::vector<uint8_t> rgb;  ///< height x width pixels, 3 bytes each, row-major
};

/// Reads `path` as RGB (alpha dropped, gray expanded, 16-bit reduced). Images over
/// `max_pixels` pixels are refused before their data is decoded.
Expected<RgbImage> read_png_rgb(const std::string& path, int64_t max_pixels);

/// Writes `gray` (height x width bytes) to `path` ("-": standard output) as an 8-bit
/// grayscale PNG.
Status write_png_gray(const std::string& path, std::span<const uint8_t> gray, int64_t width, int64_t height);

}  // namespace rlx::cli
