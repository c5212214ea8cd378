// CompileOptions: every knob of the compiler in one plain struct (no environment reads).
// CompileProfile (profile.h) maps `*.rlx.toml` files and presets onto these fields; the
// pipeline (pipeline.h) reads nothing else.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "rlx/compile/op_set.h"
#include "rlx/ir/module.h"

namespace rlx::compile {

/// Whose fusion limits apply: Auto, the limits the target backend declares (Target);
/// Cpu or Gpu, those of that class of backend whatever the target (for tests and tuning).
enum class FusionTarget : uint8_t { Auto, Cpu, Gpu };

/// Bounds on one ElementwiseRegion; 0 = unbounded.
struct FusionLimits {
  int32_t max_inputs = 0;
  int32_t max_steps = 0;
  static FusionLimits cpu() { return {0, 0}; }    ///< unbounded
  static FusionLimits gpu() { return {16, 32}; }  ///< a GPU kernel's argument and register budget
  friend bool operator==(const FusionLimits&, const FusionLimits&) = default;
};

/// A fused_linear the fuse_linear pass would make, put to the backend: the flags, the
/// weight dtype, the product's rows (x's leading dims), K and N, the cache's dtype
/// (cache_write), and for a norm prologue the output columns of all the products that
/// read that norm (each recomputes it).
struct FusedLinearQuery {
  ir::FusedLinearAttrs attrs;
  ir::DType w_dtype = ir::DType::F32;
  int64_t rows = 0, k = 0, n = 0;
  ir::DType cache_dtype = ir::DType::F32;
  int64_t norm_readers_n = 0;
};
/// Null when the backend's kernel runs the query's form, else why not (for the fusion
/// report). An empty function: the backend makes no fused_linear.
using FusedLinearCheck = std::function<const char*(const FusedLinearQuery&)>;
/// Null when the backend runs these fused_linears (same x) as one launch, else why not.
using FusedLinearGroupCheck = std::function<const char*(const std::vector<FusedLinearQuery>&)>;

/// What a backend declares about itself for the compiler (Backend::target()): its name
/// (reports, profile sections), the fusion limits its kernels take and the fused linear
/// forms its kernel runs. The compiler reads these fields and never decides anything
/// from the name.
struct Target {
  std::string name = "cpu";
  FusionLimits fusion_limits = FusionLimits::cpu();
  /// Which products (and prologue / epilogues) fuse_linear folds into fused_linear for
  /// this backend, and which of them share a launch; see FusedLinearCheck.
  FusedLinearCheck fused_linear;
  FusedLinearGroupCheck fused_linear_group;
  /// What, besides the name, changes what the compiler makes for this backend (the
  /// switches behind the checks above): part of every compile cache key.
  std::string options_key;
  /// Ranks of a tensor-parallel group (one per device); > 1: shard_tensor_parallel
  /// splits the model's heads and FFN columns across them and inserts the collectives.
  /// Part of every compile cache key (through options_key, set by the group backend).
  int tensor_parallel = 1;

  Target() = default;
  /// A target by name only (unbounded fusion, no fused linear kernel): tests and tools
  /// that compile for no particular backend.
  Target(std::string n, FusionLimits limits = FusionLimits::cpu())  // NOLINT: implicit by design
      : name(std::move(n)), fusion_limits(limits) {}
  Target(const char* n) : Target(std::string(n)) {}  // NOLINT: implicit by design
  /// This target as each rank of a tensor-parallel group of `world` sees it: the same
  /// checks, `tensor_parallel` = world, and the group size in options_key.
  Target for_tensor_parallel(int world) const;
};

struct FusionOptions {
  bool skip = false;                     ///< run no fusion pass at all
  bool unfuse_regions = false;           ///< do not form ElementwiseRegions (and split given ones)
  FusionTarget target = FusionTarget::Auto;
  std::optional<FusionLimits> limits;    ///< overrides the target's limits
  /// Pattern names to leave unfused: "matmul_bias_act", "swiglu", "residual_norm",
  /// "narrow_rope", "attention", "elementwise_region".
  std::vector<std::string> disabled_patterns;
  friend bool operator==(const FusionOptions&, const FusionOptions&) = default;
};

/// Compute precision chosen at compile time.
enum class Precision : uint8_t { F32, F16, BF16 };
/// None: everything in `precision`. Auto: matmuls and attention in `precision` (f16/bf16),
/// norms, softmax and reductions in f32, Casts inserted between.
enum class MixedPrecision : uint8_t { None, Auto };

/// PreferNative: keep every kind the backend claims. ForceCommon: rewrite every kind that
/// has a common-IR rewrite even when claimed (kinds in force_native excepted).
enum class KernelDispatchPolicy : uint8_t { PreferNative, ForceCommon };

struct KernelDispatchConfig {
  KernelDispatchPolicy policy = KernelDispatchPolicy::PreferNative;
  OpSet force_common;  ///< always rewritten to primitives (when a rewrite exists)
  OpSet force_native;  ///< never rewritten; a compile error when the backend lacks them
  friend bool operator==(const KernelDispatchConfig&, const KernelDispatchConfig&) = default;
};

struct CompileOptions {
  bool dce = true;
  bool constant_folding = true;
  bool cse = true;
  bool verbose = false;              ///< log each pass and verify after it
  bool assert_fusion_clean = false;  ///< a missed fusion fails the compile
  FusionOptions fusion;
  Precision precision = Precision::F32;
  MixedPrecision mixed = MixedPrecision::None;
  KernelDispatchConfig dispatch;
  ir::DimBinding binding;            ///< applied after lowering (empty: keep symbols)
  int64_t arena_alignment = 64;      ///< bytes, a power of two
  bool in_place = true;              ///< let elementwise ops reuse a dying input's slot
  std::string ir_dump_dir;           ///< non-empty: write the IR of every stage there
};

/// The limits that apply for `options` on `target`.
FusionLimits effective_fusion_limits(const FusionOptions& options, const Target& target);

std::string_view to_string(FusionTarget t);
std::string_view to_string(Precision p);
std::string_view to_string(MixedPrecision m);
std::string_view to_string(KernelDispatchPolicy p);
std::optional<FusionTarget> parse_fusion_target(std::string_view s);   ///< auto|cpu|gpu
std::optional<Precision> parse_precision(std::string_view s);          ///< f32|f16|bf16
std::optional<MixedPrecision> parse_mixed_precision(std::string_view s);  ///< none|auto
/// The dtype a Precision computes in.
ir::DType precision_dtype(Precision p);

}  // namespace rlx::compile
