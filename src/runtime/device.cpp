// Device parsing and printing.
#include "rlx/runtime/device.h"

#include <array>
#include <charconv>

namespace rlx {
namespace {

struct KindName {
  DeviceKind kind;
  std::string_view name;
};
constexpr std::array<KindName, 10> kKinds = {{{DeviceKind::kCpu, "cpu"},
                                             {DeviceKind::kCuda, "cuda"},
                                             {DeviceKind::kMetal, "metal"},
                                             {DeviceKind::kMlx, "mlx"},
                                             {DeviceKind::kRocm, "rocm"},
                                             {DeviceKind::kVulkan, "vulkan"},
                                             {DeviceKind::kVulkan, "wgpu"},
                                             {DeviceKind::kTpu, "tpu"},
                                             {DeviceKind::kReference, "reference"},
                                             {DeviceKind::kReference, "ref"}}};

}  // namespace

std::string_view device_kind_name(DeviceKind kind) {
  for (const auto& k : kKinds)
    if (k.kind == kind) return k.name;
  return "unknown";
}

Expected<Device> Device::parse(std::string_view text) {
  std::string_view kind = text, ord;
  if (auto colon = text.find(':'); colon != std::string_view::npos) {
    kind = text.substr(0, colon);
    ord = text.substr(colon + 1);
  }
  Device d;
  bool found = false;
  for (const auto& k : kKinds) {
    if (k.name == kind) {
      d.kind = k.kind;
      found = true;
      break;
    }
  }
  if (!found)
    return Error::invalid_argument(
        "unknown device '{}' (expected cpu, cuda[:N], metal, mlx, rocm, vulkan, wgpu, tpu, reference)", text);
  if (!ord.empty()) {
    int n = -1;
    auto [p, ec] = std::from_chars(ord.data(), ord.data() + ord.size(), n);
    if (ec != std::errc() || p != ord.data() + ord.size() || n < 0)
      return Error::invalid_argument("device '{}': ordinal '{}' is not a non-negative integer", text, ord);
    d.ordinal = n;
  }
  return d;
}

std::string Device::to_string() const {
  if ((kind == DeviceKind::kCpu || kind == DeviceKind::kReference) && ordinal == 0)
    return std::string(device_kind_name(kind));
  return fmt::format("{}:{}", device_kind_name(kind), ordinal);
}

}  // namespace rlx
