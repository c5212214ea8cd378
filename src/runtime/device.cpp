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
    // "N" or a group of consecutive ordinals "N,N+1,...".
    constexpr int kMaxGroup = 64;
    int count = 0;
    while (true) {
      const size_t comma = ord.find(',');
      const std::string_view one = ord.substr(0, comma);
      int n = -1;
      auto [p, ec] = std::from_chars(one.data(), one.data() + one.size(), n);
      if (one.empty() || ec != std::errc() || p != one.data() + one.size() || n < 0)
        return Error::invalid_argument("device '{}': ordinal '{}' is not a non-negative integer", text, one);
      if (count == 0) d.ordinal = n;
      else if (n != d.ordinal + count)
        return Error::invalid_argument(
            "device '{}': a tensor-parallel group takes consecutive ordinals ({} after {}), e.g. cuda:0,1", text, n,
            d.ordinal + count - 1);
      if (++count > kMaxGroup) return Error::invalid_argument("device '{}': more than {} devices", text, kMaxGroup);
      if (comma == std::string_view::npos) break;
      ord = ord.substr(comma + 1);
    }
    if (count > 1 && d.kind != DeviceKind::kCpu && d.kind != DeviceKind::kCuda)
      return Error::invalid_argument("device '{}': tensor-parallel groups are cpu or cuda devices", text);
    d.count = count;
  }
  return d;
}

std::string Device::to_string() const {
  if ((kind == DeviceKind::kCpu || kind == DeviceKind::kReference) && ordinal == 0 && count == 1)
    return std::string(device_kind_name(kind));
  std::string s = fmt::format("{}:{}", device_kind_name(kind), ordinal);
  for (int r = 1; r < count; ++r) s += fmt::format(",{}", ordinal + r);
  return s;
}

}  // namespace rlx
