// CompileOptions helpers: enum names/parsing, the effective fusion limits, a group's target.
#include "rlx/compile/options.h"

namespace rlx::compile {

Target Target::for_tensor_parallel(int world) const {
  Target t = *this;
  t.tensor_parallel = world;
  t.options_key += fmt::format(" tp={}", world);
  return t;
}

FusionLimits effective_fusion_limits(const FusionOptions& o, const Target& target) {
  if (o.limits) return *o.limits;
  switch (o.target) {
    case FusionTarget::Auto: return target.fusion_limits;
    case FusionTarget::Cpu: return FusionLimits::cpu();
    case FusionTarget::Gpu: return FusionLimits::gpu();
  }
  return target.fusion_limits;
}

std::string_view to_string(FusionTarget t) {
  switch (t) {
    case FusionTarget::Auto: return "auto";
    case FusionTarget::Cpu: return "cpu";
    case FusionTarget::Gpu: return "gpu";
  }
  return "?";
}
std::string_view to_string(Precision p) {
  switch (p) {
    case Precision::F32: return "f32";
    case Precision::F16: return "f16";
    case Precision::BF16: return "bf16";
  }
  return "?";
}
std::string_view to_string(MixedPrecision m) { return m == MixedPrecision::Auto ? "auto" : "none"; }
std::string_view to_string(KernelDispatchPolicy p) {
  return p == KernelDispatchPolicy::ForceCommon ? "force_common" : "prefer_native";
}

std::optional<FusionTarget> parse_fusion_target(std::string_view s) {
  for (FusionTarget t : {FusionTarget::Auto, FusionTarget::Cpu, FusionTarget::Gpu})
    if (to_string(t) == s) return t;
  return std::nullopt;
}
std::optional<Precision> parse_precision(std::string_view s) {
  for (Precision p : {Precision::F32, Precision::F16, Precision::BF16})
    if (to_string(p) == s) return p;
  return std::nullopt;
}
std::optional<MixedPrecision> parse_mixed_precision(std::string_view s) {
  for (MixedPrecision m : {MixedPrecision::None, MixedPrecision::Auto})
    if (to_string(m) == s) return m;
  return std::nullopt;
}

ir::DType precision_dtype(Precision p) {
  switch (p) {
    case Precision::F16: return ir::DType::F16;
    case Precision::BF16: return ir::DType::BF16;
    case Precision::F32: break;
  }
  return ir::DType::F32;
}

}  // namespace rlx::compile
