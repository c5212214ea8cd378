// CompileProfile: the data form of a compile configuration, read from `*.rlx.toml` files
// or built-in presets, mapped onto CompileOptions for a device. File format:
//
//   name = "llama32_decode"
//   [fusion]     policy = "direct"|"fusable", target = "auto"|"cpu"|"gpu",
//                assert_clean = bool, skip = bool
//   [passes]     dce = bool, constant_folding = bool, verbose = bool
//   [precision]  compute = "f32"|"f16"|"bf16", mixed = "none"|"auto"
//   [backend.<name>]  (the name a backend declares: cpu, cuda, ...) skip_fusion = bool,
//                unfuse_regions = bool, max_region_inputs = int, max_region_steps = int
//
// Unknown keys and bad values are errors naming the key, the file and the line.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "rlx/base/status.h"
#include "rlx/compile/options.h"

namespace rlx::compile {

/// Per-backend adjustments; unset fields leave the profile's value.
struct BackendOverride {
  std::optional<bool> skip_fusion;
  std::optional<bool> unfuse_regions;
  std::optional<int32_t> max_region_inputs;
  std::optional<int32_t> max_region_steps;
  friend bool operator==(const BackendOverride&, const BackendOverride&) = default;
};

struct CompileProfile {
  std::string name;
  struct Fusion {
    ir::FusionPolicy policy = ir::FusionPolicy::Direct;  ///< applied by model builders to their HirModule
    FusionTarget target = FusionTarget::Auto;
    bool assert_clean = false;
    bool skip = false;
    friend bool operator==(const Fusion&, const Fusion&) = default;
  } fusion;
  struct Passes {
    bool dce = true;
    bool constant_folding = true;
    bool verbose = false;
    friend bool operator==(const Passes&, const Passes&) = default;
  } passes;
  struct PrecisionSection {
    Precision compute = Precision::F32;
    MixedPrecision mixed = MixedPrecision::None;
    friend bool operator==(const PrecisionSection&, const PrecisionSection&) = default;
  } precision;
  /// [backend.<name>] sections, by the backend name they apply to (Target::name).
  std::map<std::string, BackendOverride> backends;

  friend bool operator==(const CompileProfile&, const CompileProfile&) = default;

  /// Built-in presets: llama32_prefill/decode, qwen3_prefill/decode, qwen35_prefill/decode,
  /// gemma_prefill/decode, encoder, sam_encoder, sam2_memory_attention, sam3, flux2,
  /// llada2_diffusion. Prefill presets lower Direct, decode presets Fusable;
  /// sam2_memory_attention and llada2_diffusion run no fusion.
  static Expected<CompileProfile> preset(std::string_view name);
  static std::vector<std::string> preset_names();

  /// Parses TOML text; `source` names the file in errors.
  static Expected<CompileProfile> parse(std::string_view toml_text, const std::string& source = "<string>");
  /// Reads and parses a file.
  static Expected<CompileProfile> load(const std::string& path);
  /// load(path), or `fallback` when the file does not exist (other errors still fail).
  static Expected<CompileProfile> load_or(const std::string& path, const CompileProfile& fallback);

  /// The TOML text of this profile (parse(to_toml()) == *this).
  std::string to_toml() const;

  /// CompileOptions for `target` (what its backend declares): the [backend.<name>]
  /// section of target.name applied; a fusion target of Auto uses the target's limits.
  CompileOptions to_compile_options(const Target& target) const;
};

}  // namespace rlx::compile
