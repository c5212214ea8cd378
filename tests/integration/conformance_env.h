// Where the conformance suites run and read from: the device (RLX_TEST_DEVICE: cpu, cuda;
// CI runs on the CPU, a GPU machine checks the CUDA backend with the same suite) and the
// data folder (RLX_CONFORMANCE_DIR, else ../shared/conformance beside the checkout).
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

#include "rlx/runtime/device.h"

namespace rlx::testing_env {

inline Device test_device() {
  const char* env = std::getenv("RLX_TEST_DEVICE");
  if (env == nullptr) return Device::cpu();
  auto d = Device::parse(env);
  if (!d) {
    ADD_FAILURE() << "RLX_TEST_DEVICE: " << d.error().to_string();
    return Device::cpu();
  }
  return *d;
}

inline std::filesystem::path conformance_dir() {
  if (const char* env = std::getenv("RLX_CONFORMANCE_DIR")) return env;
  return std::filesystem::path(RLX_SOURCE_DIR) / ".." / "shared" / "conformance";
}

}  // namespace rlx::testing_env
