// Devices a compiled graph can run on: a kind (cpu, cuda, ...) plus an ordinal
// for machines with several of one kind. Parsed from text such as "cpu" or "cuda:1".
// "reference" is the scalar double-precision interpreter that backend tests compare
// against (src/backends/reference), always built like the CPU.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "rlx/base/status.h"

namespace rlx {

enum class DeviceKind : uint8_t { kCpu, kCuda, kMetal, kMlx, kRocm, kVulkan, kTpu, kReference };

/// A device: kind + ordinal (0 for the first of its kind). `count` > 1 makes it a
/// tensor-parallel group of the devices ordinal .. ordinal + count - 1 of its kind (one
/// rank each), which a Session compiles for as one device.
struct Device {
  DeviceKind kind = DeviceKind::kCpu;
  int ordinal = 0;
  int count = 1;

  static Device cpu() { return {DeviceKind::kCpu, 0}; }
  static Device cuda(int ordinal = 0) { return {DeviceKind::kCuda, ordinal}; }
  /// The reference backend: slow, scalar, double precision; the oracle of backend tests.
  static Device reference() { return {DeviceKind::kReference, 0}; }

  /// The device of rank `r` of a group (count 1).
  Device rank(int r) const { return {kind, ordinal + r, 1}; }
  /// Parses "cpu", "cuda", "cuda:0", a group of consecutive ordinals "cuda:0,1" (or
  /// "cpu:0,1": ranks on one host's cores), "metal", "mlx", "rocm", "vulkan" (alias "wgpu"), "tpu",
  /// "reference" (alias "ref").
  static Expected<Device> parse(std::string_view text);
  /// "cpu" for cpu:0 and "reference" for reference:0, otherwise "kind:ordinal" (e.g.
  /// "cuda:1"); a group lists its ordinals ("cuda:0,1").
  std::string to_string() const;

  friend bool operator==(const Device&, const Device&) = default;
};

/// "cpu", "cuda", "metal", "mlx", "rocm", "vulkan", "tpu", "reference".
std::string_view device_kind_name(DeviceKind kind);

}  // namespace rlx
