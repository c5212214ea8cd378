// Backend interface and the process-wide backend registry. A backend is a
// capability table (`supported_ops`, what legalization may leave in place) plus a
// compiler from LIR to an Executable. Built-in backends (CPU, the reference backend,
// and CUDA when built) are registered on first use of the registry.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "rlx/base/status.h"
#include "rlx/compile/op_set.h"
#include "rlx/compile/options.h"
#include "rlx/compile/profile.h"
#include "rlx/ir/module.h"
#include "rlx/runtime/device.h"
#include "rlx/runtime/executable.h"

namespace rlx {

/// Which dim of every LIR value follows the graph's bucket symbol, for
/// set_active_extent. `axis[v]`: that dim's index, -1 when the value has no such dim,
/// -2 when the symbol appears only inside a combined dim (e.g. 2*SEQ).
struct ExtentInfo {
  ir::SymbolId symbol = 0;
  int64_t upper = 0;  ///< the size the symbol was bound to
  std::vector<int> axis;
  bool empty() const { return symbol == 0; }
};

/// Knobs a backend is created with (per registry instance).
struct BackendOptions {
  int threads = 0;  ///< CPU worker threads; 0 = RLX_THREADS, else all cores
  /// CPU: f32/f16/bf16 matmul weights that are params are packed into the GEMM panel
  /// layout once (when set or bound; one copy per weight for all executables of the
  /// backend) instead of on every run. RLX_CPU_PREPACK=0 turns it off as well.
  bool prepack_weights = true;
  /// CPU: a folder where packed copies of file-mapped weights are kept across runs (a
  /// second start maps them instead of packing again); empty: none.
  std::string packed_cache_dir{};
  /// CPU and CUDA: check every step's floating-point result (CPU: f32) and warn, once
  /// per executable, naming the first op whose result holds a NaN or an infinity (a
  /// debug mode; RLX_CHECK_FINITE=1 turns it on as well).
  bool check_finite = false;
  friend bool operator==(const BackendOptions&, const BackendOptions&) = default;
};

/// What a benchmark holds a device's figures against, measured on it when asked.
struct DeviceLimits {
  std::string device_name;          ///< e.g. "NVIDIA H200"
  int64_t memory_bytes = 0;         ///< the device's memory in all
  /// A device-to-device copy of 1 GiB: bytes read + written per second (median of 20
  /// copies after 3 warm-up ones) -- the roofline of a decode step that reads weights.
  double copy_bytes_per_s = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  /// "cpu", "cuda", ... (reports, compile profile sections).
  virtual std::string name() const = 0;
  /// What the compiler needs to know of this backend: name, fusion limits, planner
  /// needs. The default: unbounded fusion, nothing kept for fused prologues.
  virtual compile::Target target() const {
    compile::Target t;
    t.name = name();
    return t;
  }
  /// The op kinds this backend runs natively.
  virtual const compile::OpSet& supported_ops() const = 0;
  /// Builds an executable for a fully bound LIR module (no dynamic symbols).
  virtual Expected<std::unique_ptr<Executable>> compile(const ir::LirModule& lir,
                                                        const compile::CompileOptions& options) = 0;
  /// The same, told which dims follow the bucket symbol so that the executable can
  /// honour set_active_extent. Backends without extent support ignore `extent`.
  virtual Expected<std::unique_ptr<Executable>> compile_with_extent(const ir::LirModule& lir,
                                                                    const compile::CompileOptions& options,
                                                                    const ExtentInfo& extent) {
    (void)extent;
    return compile(lir, options);
  }
  /// The communicators of a tensor-parallel group whose rank r runs on `ranks[r]`
  /// (backends of this kind, this one among them), one per rank. Backends without
  /// collectives keep the default (kUnsupported).
  virtual Expected<std::vector<std::shared_ptr<Communicator>>> create_communicators(
      const std::vector<std::shared_ptr<Backend>>& ranks) {
    (void)ranks;
    return Error::unsupported("backend '{}' has no collectives (tensor parallelism)", name());
  }
  /// Measures the limits of this backend's device (about a second of device time).
  /// Backends that run on the host CPU keep the default (kUnsupported): the CPU's own
  /// limits are measured by the tools that need them.
  virtual Expected<DeviceLimits> measure_device_limits() {
    return Error::unsupported("backend '{}' does not measure device limits", name());
  }
  /// The vendor library's time, in ms, for C[m, n] = X[m, k] . W[n, k]^T with f16
  /// operands and f32 accumulation, writing `out` (f32 or f16) -- the bound prefill
  /// products are held against. Random data; the weights rotate over enough copies that
  /// they come from device memory; the median of 30 calls after 5 warm-up ones.
  virtual Expected<double> measure_gemm_ms(int64_t m, int64_t n, int64_t k, ir::DType out) {
    (void)m, (void)n, (void)k, (void)out;
    return Error::unsupported("backend '{}' has no vendor GEMM to measure", name());
  }
  /// The most device memory this process's backends of this kind held at once since
  /// the process started, in bytes (their own allocations: weights, caches, arenas,
  /// workspaces, and the probes above: read it before measuring limits); -1 for a
  /// backend whose memory is the host's.
  virtual int64_t peak_device_bytes() const { return -1; }
};

/// Creates the backend for a device, or an error saying why it is unavailable.
using BackendFactory = std::function<Expected<std::shared_ptr<Backend>>(const Device&, const BackendOptions&)>;

/// What the compiler needs of a backend, known without its device: the target (fusion
/// limits, fused-kernel support) and the op kinds it runs. `rlx compile --device cuda`
/// on a machine without a GPU compiles against this.
struct BackendCompileTarget {
  compile::Target target;
  compile::OpSet ops;
};
using BackendCompileTargetFn = std::function<BackendCompileTarget()>;

/// Process-wide map DeviceKind -> factory; backend instances are created once per
/// device and shared. Thread-safe.
class BackendRegistry {
 public:
  /// The registry with the built-in backends registered.
  static BackendRegistry& global();

  /// Registers (or replaces) the factory for `kind`; drops cached instances of that kind.
  void register_backend(DeviceKind kind, BackendFactory factory);
  /// The backend for `device` (created on first request per device and options).
  Expected<std::shared_ptr<Backend>> get(const Device& device, const BackendOptions& options = {});
  /// True when a factory exists and creates a backend for `device`.
  bool is_available(const Device& device);
  /// Kinds with a registered factory.
  std::vector<DeviceKind> registered_kinds() const;
  /// Registers what the compiler needs of `kind`'s backend without creating it.
  void register_compile_target(DeviceKind kind, BackendCompileTargetFn describe);
  /// The compile target registered for `kind`; an error when this build has none.
  Expected<BackendCompileTarget> compile_target(DeviceKind kind) const;

 private:
  mutable std::mutex mu_;
  std::vector<std::pair<DeviceKind, BackendFactory>> factories_;
  std::vector<std::pair<DeviceKind, BackendCompileTargetFn>> targets_;
  struct Instance {
    Device device;
    BackendOptions options;
    std::shared_ptr<Backend> backend;
  };
  std::vector<Instance> instances_;
};

/// True when `device` has a backend in this build and on this machine.
bool is_available(const Device& device);

namespace detail {
/// Registers the backends compiled into this build (defined by the backends layer).
void register_builtin_backends(BackendRegistry& registry);
}  // namespace detail

/// An error naming the first [backend.<name>] section of `profile` whose name is no
/// device kind (cpu, cuda, reference, ...): a misspelt section would otherwise never
/// apply. `where` names the profile (a file) in the message.
Status check_profile_backends(const compile::CompileProfile& profile, std::string_view where);

}  // namespace rlx
