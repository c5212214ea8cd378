// The backends compiled into this build, registered with the runtime's registry on
// first use (runtime/ declares detail::register_builtin_backends; this layer defines it).
#include "backends/cpu/cpu_backend.h"
#include "backends/reference/reference_backend.h"
#include "rlx/runtime/backend.h"
#ifdef RLX_HAVE_CUDA
#include "backends/cuda/cuda_backend.h"
#endif

namespace rlx::detail {

void register_builtin_backends(BackendRegistry& registry) {
  registry.register_backend(DeviceKind::kCpu,
                            [](const Device& device, const BackendOptions& options) -> Expected<std::shared_ptr<Backend>> {
                              // cpu:N (N > 0): another CPU backend on the same cores, with
                              // threads of its own (a rank of a CPU tensor-parallel group).
                              if (device.ordinal < 0 || device.ordinal >= 64)
                                return Error::not_found("device {} does not exist (the CPU is cpu:0; cpu:1 .. cpu:63 are "
                                                        "further instances of it for tensor-parallel ranks)",
                                                        device.to_string());
                              return std::shared_ptr<Backend>(std::make_shared<cpu_backend::CpuBackend>(
                                  options.threads, options.prepack_weights, options.packed_cache_dir, options.check_finite));
                            });
  registry.register_backend(DeviceKind::kReference,
                            [](const Device& device, const BackendOptions&) -> Expected<std::shared_ptr<Backend>> {
                              if (device.ordinal != 0)
                                return Error::not_found("device {} does not exist (the reference backend is reference:0)",
                                                        device.to_string());
                              return std::shared_ptr<Backend>(std::make_shared<reference_backend::ReferenceBackend>());
                            });
  registry.register_compile_target(DeviceKind::kCpu, [] {
    return BackendCompileTarget{compile::Target("cpu"), cpu_backend::cpu_supported_ops()};
  });
  registry.register_compile_target(DeviceKind::kReference, [] {
    return BackendCompileTarget{compile::Target("reference"), reference_backend::reference_supported_ops()};
  });
#ifdef RLX_HAVE_CUDA
  registry.register_backend(DeviceKind::kCuda,
                            [](const Device& device, const BackendOptions& options) -> Expected<std::shared_ptr<Backend>> {
                              ASSIGN_OR_RETURN(std::shared_ptr<cuda_backend::CudaBackend> b,
                                               cuda_backend::CudaBackend::create(device.ordinal, options.check_finite));
                              return std::shared_ptr<Backend>(std::move(b));
                            });
  registry.register_compile_target(DeviceKind::kCuda, [] {
    return BackendCompileTarget{cuda_backend::cuda_compile_target(cuda_backend::default_cuda_options()), cuda_backend::cuda_supported_ops()};
  });
#endif
}

}  // namespace rlx::detail
