// What the suites that compare against float32 reference files share (media and SAM
// conformance): reading a raw little-endian float32 file, the relative L2 distance, and
// the devices to run on (RLX_TEST_DEVICE, plus cuda when the build has it and a device
// opens).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <span>
#include <vector>

#include "conformance_env.h"
#include "rlx/runtime/session.h"

namespace rlx::testing_env {

inline std::vector<float> read_f32(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary | std::ios::ate);
  EXPECT_TRUE(f) << "cannot read " << p;
  const auto bytes = static_cast<size_t>(f.tellg());
  std::vector<float> v(bytes / sizeof(float));
  f.seekg(0);
  f.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(float)));
  return v;
}

/// |got - ref| / |ref| in double; infinite when the sizes differ or ref is empty.
inline double relative_l2(std::span<const float> got, std::span<const float> ref) {
  EXPECT_EQ(got.size(), ref.size());
  if (got.size() != ref.size() || ref.empty()) return INFINITY;
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double d = double(got[i]) - ref[i];
    num += d * d;
    den += double(ref[i]) * ref[i];
  }
  return std::sqrt(num / den);
}

/// RLX_TEST_DEVICE, plus cuda when built and present.
inline std::vector<Device> conformance_devices() {
  std::vector<Device> out{test_device()};
#ifdef RLX_HAVE_CUDA
  if (out[0].kind != DeviceKind::kCuda) {
    const Device cuda = Device::parse("cuda").value();
    if (Session::create(cuda)) out.push_back(cuda);
  }
#endif
  return out;
}

}  // namespace rlx::testing_env
