// The process-wide backend registry; built-in backends are registered on first use.
#include "rlx/runtime/backend.h"

#include <algorithm>
#include <thread>

#include "rlx/base/env.h"
#include "runtime/tensor_parallel.h"

namespace rlx {

BackendRegistry& BackendRegistry::global() {
  static BackendRegistry* r = [] {
    auto* reg = new BackendRegistry();  // leaked on purpose: usable during static destruction
    detail::register_builtin_backends(*reg);
    return reg;
  }();
  return *r;
}

void BackendRegistry::register_backend(DeviceKind kind, BackendFactory factory) {
  std::lock_guard<std::mutex> lock(mu_);
  std::erase_if(instances_, [&](const Instance& i) { return i.device.kind == kind; });
  for (auto& [k, f] : factories_) {
    if (k == kind) {
      f = std::move(factory);
      return;
    }
  }
  factories_.emplace_back(kind, std::move(factory));
}

Expected<std::shared_ptr<Backend>> BackendRegistry::get(const Device& device, const BackendOptions& options) {
  if (device.count > 1) {  // a tensor-parallel group over the backends of its ranks
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (const Instance& i : instances_)
        if (i.device == device && i.options == options) return i.backend;
    }
    // CPU ranks share the host's cores: each takes its share instead of all of them.
    BackendOptions rank_options = options;
    if (device.kind == DeviceKind::kCpu && rank_options.threads == 0) {
      const int total = env_config().threads > 0 ? env_config().threads
                                                 : static_cast<int>(std::thread::hardware_concurrency());
      rank_options.threads = std::max(1, total / device.count);
    }
    std::vector<std::shared_ptr<Backend>> ranks;
    for (int r = 0; r < device.count; ++r) {
      ASSIGN_OR_RETURN(std::shared_ptr<Backend> b, get(device.rank(r), rank_options));
      ranks.push_back(std::move(b));
    }
    ASSIGN_OR_RETURN(std::shared_ptr<Backend> group, runtime::make_tensor_parallel_backend(device, std::move(ranks)));
    std::lock_guard<std::mutex> lock(mu_);
    for (const Instance& i : instances_)
      if (i.device == device && i.options == options) return i.backend;
    instances_.push_back({device, options, group});
    return group;
  }
  std::lock_guard<std::mutex> lock(mu_);
  for (const Instance& i : instances_)
    if (i.device == device && i.options == options) return i.backend;
  for (const auto& [k, f] : factories_) {
    if (k != device.kind) continue;
    ASSIGN_OR_RETURN(std::shared_ptr<Backend> b, f(device, options));
    instances_.push_back({device, options, b});
    return b;
  }
  return Error::unsupported("device '{}' is not available: this build has no {} backend", device.to_string(),
                            device_kind_name(device.kind));
}

bool BackendRegistry::is_available(const Device& device) { return get(device).has_value(); }

std::vector<DeviceKind> BackendRegistry::registered_kinds() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<DeviceKind> out;
  for (const auto& [k, f] : factories_) out.push_back(k);
  return out;
}

void BackendRegistry::register_compile_target(DeviceKind kind, BackendCompileTargetFn describe) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [k, f] : targets_) {
    if (k == kind) {
      f = std::move(describe);
      return;
    }
  }
  targets_.emplace_back(kind, std::move(describe));
}

Expected<BackendCompileTarget> BackendRegistry::compile_target(DeviceKind kind) const {
  BackendCompileTargetFn describe;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [k, f] : targets_)
      if (k == kind) describe = f;
  }
  if (!describe) return Error::unsupported("this build has no {} backend to compile for", device_kind_name(kind));
  return describe();
}

bool is_available(const Device& device) { return BackendRegistry::global().is_available(device); }

Status check_profile_backends(const compile::CompileProfile& profile, std::string_view where) {
  for (const auto& [name, section] : profile.backends)
    if (!Device::parse(name))
      return Error::invalid_argument("{}: [backend.{}] names no device kind (cpu, cuda, reference, ...)", where, name);
  return {};
}

}  // namespace rlx
