// Op and enum name tables generated from ops.def, and generic attrs helpers
// (defaults per op, type check per op, structural equality).
#include "rlx/ir/op.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>

namespace rlx::ir {
namespace {

constexpr std::array<OpInfo, kNumOpKinds> kOpInfos = {{
#define OP(name, text, min_in, max_in, category, attrs) {text, min_in, max_in, OpCategory::category},
#include "rlx/ir/ops.def"
#undef OP
}};

template <typename A>
bool attrs_struct_equal(const A& a, const A& b) {
  // Walk both structs in lockstep: collect pointers of b's fields, then compare.
  std::vector<const void*> b_fields;
  const_cast<A&>(b).fields([&](const char*, auto& f) { b_fields.push_back(&f); });
  size_t i = 0;
  bool equal = true;
  const_cast<A&>(a).fields([&](const char*, auto& f) {
    using F = std::remove_reference_t<decltype(f)>;
    if (!(f == *static_cast<const F*>(b_fields[i++]))) equal = false;
  });
  return equal;
}

}  // namespace

bool operator==(const ConstantData& a, const ConstantData& b) {
  if (a.bytes == b.bytes) return true;
  if (!a.bytes || !b.bytes) return false;
  return *a.bytes == *b.bytes;
}

const OpInfo& op_info(OpKind k) { return kOpInfos[static_cast<size_t>(k)]; }

std::optional<OpKind> parse_op_kind(std::string_view text) {
  for (size_t i = 0; i < kOpInfos.size(); ++i)
    if (kOpInfos[i].name == text) return static_cast<OpKind>(i);
  return std::nullopt;
}

#define RLX_ENUM_TEXT(name, text) text,
const std::vector<std::string_view>& enum_names(ActKind) {
  static const std::vector<std::string_view> n = {RLX_ACT_KINDS(RLX_ENUM_TEXT)};
  return n;
}
const std::vector<std::string_view>& enum_names(BinaryKind) {
  static const std::vector<std::string_view> n = {RLX_BINARY_KINDS(RLX_ENUM_TEXT)};
  return n;
}
const std::vector<std::string_view>& enum_names(CompareKind) {
  static const std::vector<std::string_view> n = {RLX_COMPARE_KINDS(RLX_ENUM_TEXT)};
  return n;
}
const std::vector<std::string_view>& enum_names(ReduceKind) {
  static const std::vector<std::string_view> n = {RLX_REDUCE_KINDS(RLX_ENUM_TEXT)};
  return n;
}
const std::vector<std::string_view>& enum_names(MaskKind) {
  static const std::vector<std::string_view> n = {RLX_MASK_KINDS(RLX_ENUM_TEXT)};
  return n;
}
const std::vector<std::string_view>& enum_names(RopeLayout) {
  static const std::vector<std::string_view> n = {RLX_ROPE_LAYOUTS(RLX_ENUM_TEXT)};
  return n;
}
const std::vector<std::string_view>& enum_names(RopeScaling) {
  static const std::vector<std::string_view> n = {RLX_ROPE_SCALINGS(RLX_ENUM_TEXT)};
  return n;
}
const std::vector<std::string_view>& enum_names(MoeGating) {
  static const std::vector<std::string_view> n = {RLX_MOE_GATINGS(RLX_ENUM_TEXT)};
  return n;
}
const std::vector<std::string_view>& enum_names(InterpMode) {
  static const std::vector<std::string_view> n = {RLX_INTERP_MODES(RLX_ENUM_TEXT)};
  return n;
}
#undef RLX_ENUM_TEXT

std::pair<double, double> rope_yarn_range(const RopeAttrs& r) {
  constexpr double kPi = 3.14159265358979323846;
  const double n = static_cast<double>(r.n_rot), ctx = static_cast<double>(r.original_context);
  // The pair index at which a frequency turns `rotations` times over the original context.
  auto pair_at = [&](double rotations) { return n * std::log(ctx / (rotations * 2 * kPi)) / (2 * std::log(r.theta)); };
  const double low = std::max(0.0, std::floor(pair_at(r.beta_fast)));
  const double high = std::min(n - 1, std::ceil(pair_at(r.beta_slow)));
  return {low, high};
}

std::vector<double> rope_inv_freq(const RopeAttrs& r) {
  constexpr double kPi = 3.14159265358979323846;
  std::vector<double> f(static_cast<size_t>(std::max<int64_t>(r.n_rot / 2, 0)));
  const auto [yarn_low, yarn_high] = r.scaling == RopeScaling::Yarn ? rope_yarn_range(r) : std::pair{0.0, 0.0};
  for (size_t i = 0; i < f.size(); ++i) {
    double inv = std::pow(r.theta, -2.0 * static_cast<double>(i) / static_cast<double>(r.n_rot));
    if (r.scaling == RopeScaling::Linear) {
      inv /= r.factor;
    } else if (r.scaling == RopeScaling::Llama3) {
      const double wavelen = 2 * kPi / inv;
      const double ctx = static_cast<double>(r.original_context);
      const double low_wl = ctx / r.low_freq_factor, high_wl = ctx / r.high_freq_factor;
      if (wavelen > low_wl) {
        inv /= r.factor;
      } else if (wavelen >= high_wl) {
        const double smooth = (ctx / wavelen - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
        inv = (1 - smooth) * inv / r.factor + smooth * inv;
      }
    } else if (r.scaling == RopeScaling::Yarn) {
      // 1 below the correction range (keep the frequency), 0 above it (interpolate).
      const double t = (static_cast<double>(i) - yarn_low) / std::max(0.001, yarn_high - yarn_low);
      const double keep = (1 - std::clamp(t, 0.0, 1.0)) * r.ext_factor;
      inv = inv / r.factor * (1 - keep) + inv * keep;
    }
    if (!r.freq_factors.empty()) inv /= r.freq_factors[i];
    f[i] = inv;
  }
  return f;
}

Status check_rope_attrs(const RopeAttrs& r) {
  auto positive = [](double v) { return std::isfinite(v) && v > 0; };
  if (!positive(r.theta)) return Error::verify("rope theta must be positive and finite, got {}", r.theta);
  if (!positive(r.attn_factor))
    return Error::verify("rope attn_factor must be positive and finite, got {}", r.attn_factor);
  if (r.scaling != RopeScaling::None && !positive(r.factor))
    return Error::verify("rope {} scaling needs a positive factor, got {}", enum_name(r.scaling), r.factor);
  if (r.scaling == RopeScaling::Llama3 || r.scaling == RopeScaling::Yarn) {
    if (r.original_context <= 0)
      return Error::verify("rope {} scaling needs a positive original_context, got {}", enum_name(r.scaling),
                           r.original_context);
  }
  if (r.scaling == RopeScaling::Llama3 &&
      !(positive(r.low_freq_factor) && positive(r.high_freq_factor) && r.high_freq_factor > r.low_freq_factor))
    return Error::verify("rope llama3 scaling needs 0 < low_freq_factor < high_freq_factor, got {} and {}",
                         r.low_freq_factor, r.high_freq_factor);
  if (r.scaling == RopeScaling::Yarn &&
      !(positive(r.beta_fast) && positive(r.beta_slow) && std::isfinite(r.ext_factor) && r.ext_factor >= 0))
    return Error::verify("rope yarn scaling needs positive beta_fast / beta_slow and ext_factor >= 0, got {}, {}, {}",
                         r.beta_fast, r.beta_slow, r.ext_factor);
  if (!r.freq_factors.empty()) {
    if (static_cast<int64_t>(r.freq_factors.size()) != r.n_rot / 2)
      return Error::verify("rope freq_factors has {} entries, n_rot {} needs {}", r.freq_factors.size(), r.n_rot,
                           r.n_rot / 2);
    for (size_t i = 0; i < r.freq_factors.size(); ++i)
      if (!positive(r.freq_factors[i]))
        return Error::verify("rope freq_factors[{}] must be positive and finite, got {}", i, r.freq_factors[i]);
  }
  return {};
}

Attrs default_attrs(OpKind kind) {
  switch (kind) {
#define OP(name, text, min_in, max_in, category, attrs) \
  case OpKind::name: return attrs{};
#include "rlx/ir/ops.def"
#undef OP
  }
  return NoAttrs{};
}

bool attrs_match(OpKind kind, const Attrs& attrs) {
  switch (kind) {
#define OP(name, text, min_in, max_in, category, attrs_type) \
  case OpKind::name: return std::holds_alternative<attrs_type>(attrs);
#include "rlx/ir/ops.def"
#undef OP
  }
  return false;
}

bool attrs_equal(const Attrs& a, const Attrs& b) {
  if (a.index() != b.index()) return false;
  return std::visit(
      [&](const auto& av) {
        using A = std::decay_t<decltype(av)>;
        return attrs_struct_equal(av, std::get<A>(b));
      },
      a);
}

}  // namespace rlx::ir
