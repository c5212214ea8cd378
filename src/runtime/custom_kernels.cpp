// The process-wide registry of CPU kernels for Custom ops.
#include "rlx/runtime/custom_kernels.h"

#include <map>
#include <mutex>

namespace rlx {
namespace {

struct Registry {
  std::mutex mu;
  std::map<std::string, std::shared_ptr<const CpuCustomKernel>, std::less<>> kernels;
};
Registry& registry() {
  static Registry r;
  return r;
}

}  // namespace

void register_cpu_custom_kernel(const std::string& name, CpuCustomKernel kernel) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.kernels[name] = std::make_shared<const CpuCustomKernel>(std::move(kernel));
}

std::shared_ptr<const CpuCustomKernel> find_cpu_custom_kernel(const std::string& name) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.kernels.find(name);
  return it == r.kernels.end() ? nullptr : it->second;
}

}  // namespace rlx
