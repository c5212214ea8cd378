// The backends compiled into this build, registered with the runtime's registry on
// first use (runtime/ declares detail::register_builtin_backends; this layer defines it).
#include "backends/cpu/cpu_backend.h"
#include "rlx/runtime/backend.h"

namespace rlx::detail {

void register_builtin_backends(BackendRegistry& registry) {
  registry.register_backend(DeviceKind::kCpu,
                            [](const Device& device, const BackendOptions& options) -> Expected<std::shared_ptr<Backend>> {
                              if (device.ordinal != 0)
                                return Error::not_found("device {} does not exist (the CPU is cpu:0)", device.to_string());
                              return std::shared_ptr<Backend>(std::make_shared<cpu_backend::CpuBackend>(options.threads));
                            });
}

}  // namespace rlx::detail
