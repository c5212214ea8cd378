// PNG reading and writing through libpng's simplified API (see png_io.h).
#include "png_io.h"

#include <png.h>

#include <cstdio>
#include <cstring>

namespace rlx::cli {

Expected<RgbImage> read_png_rgb(const std::string& path, int64_t max_pixels) {
  png_image image;
  std::memset(&image, 0, sizeof(image));
  image.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_file(&image, path.c_str()))
    return Error::invalid_file("{}: not a readable PNG ({})", path, image.message);
  const int64_t pixels = static_cast<int64_t>(image.width) * image.height;
  if (image.width == 0 || image.height == 0 || pixels > max_pixels) {
    png_image_free(&image);
    return Error::invalid_file("{}: a {}x{} image is out of range (at most {} pixels)", path, image.width, image.height,
                               max_pixels);
  }
  image.format = PNG_FORMAT_RGB;
  RgbImage out;
  out.width = image.width;
  out.height = image.height;
  out.rgb.resize(PNG_IMAGE_SIZE(image));
  if (!png_image_finish_read(&image, nullptr, out.rgb.data(), 0, nullptr)) {
    png_image_free(&image);
    return Error::invalid_file("{}: decoding failed ({})", path, image.message);
  }
  return out;
}

Status write_png_gray(const std::string& path, std::span<const uint8_t> gray, int64_t width, int64_t height) {
  png_image image;
  std::memset(&image, 0, sizeof(image));
  image.version = PNG_IMAGE_VERSION;
  image.width = static_cast<png_uint_32>(width);
  image.height = static_cast<png_uint_32>(height);
  image.format = PNG_FORMAT_GRAY;
  if (static_cast<int64_t>(gray.size()) != width * height)
    return Error::internal("{}: {} bytes for a {}x{} mask", path, gray.size(), width, height);
  const bool ok = path == "-" ? png_image_write_to_stdio(&image, stdout, 0, gray.data(), 0, nullptr) != 0
                              : png_image_write_to_file(&image, path.c_str(), 0, gray.data(), 0, nullptr) != 0;
  if (!ok) return Error::io("{}: cannot write the PNG ({})", path == "-" ? "standard output" : path, image.message);
  if (path == "-" && std::fflush(stdout) != 0) return Error::io("writing to standard output failed");
  return {};
}

}  // namespace rlx::cli
