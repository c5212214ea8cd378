// What the CUDA backend offers the compiler and how its options are read: the device
// count, the compile target (which fusions the CUDA steps take, RLX_CUDA_FUSE), the op
// kinds its steps cover, and the defaults from the environment.
#include <algorithm>
#include <string>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_step.h"
#include "backends/cuda/cuda_util.h"
#include "rlx/base/env.h"

namespace rlx::cuda_backend {

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" state
    return 0;
  }
  return n;
}

compile::Target cuda_compile_target(const CudaOptions& o) {
  compile::Target t("cuda", compile::FusionLimits::gpu());
  t.options_key =
      fmt::format("fuse swiglu {} rope_kv {} gemv_rope_kv {} norm_gemv {} group {} int8_x {} int8_prefill {} "
                  "half_rows {}",
                  o.fuse_swiglu, o.fuse_rope_kv, o.fuse_gemv_rope_kv, o.fuse_norm_gemv, o.group_gemvs, o.gemv_int8_x,
                  o.int8_prefill, o.half_rows);
  t.fused_linear = [o](const compile::FusedLinearQuery& q) -> const char* {
    const ir::FusedLinearAttrs& a = q.attrs;
    if (a.swiglu && !o.fuse_swiglu) return "RLX_CUDA_FUSE leaves swiglu out";
    if ((a.norm || a.residual) && !o.fuse_norm_gemv)  // (the residual add in the product replaces the norm's)
      return "RLX_CUDA_FUSE leaves norm_gemv (the norm prologue and the residual epilogue) out";
    if ((a.rope || a.cache_write) && !(o.fuse_rope_kv && o.fuse_gemv_rope_kv))
      return "RLX_CUDA_FUSE leaves gemv_rope_kv out";
    return fused_linear_kernel_check(q, o.gemv_int8_x, o.int8_prefill, o.half_rows);
  };
  t.fused_linear_group = [o](const std::vector<compile::FusedLinearQuery>& qs) -> const char* {
    if (!o.group_gemvs) return "RLX_CUDA_GROUP_GEMV=0";
    return fused_linear_group_kernel_check(qs);
  };
  return t;
}

compile::OpSet cuda_supported_ops() {
  compile::OpSet ops;
  for (int k = 0; k < ir::kNumOpKinds; ++k) {
    const auto kind = static_cast<ir::OpKind>(k);
    if (cuda_builder(kind) != nullptr) ops.add(kind);
  }
  return ops;
}

Status apply_fusion_list(const std::string& list, CudaOptions& o) {
  if (list == "all") return {};
  o.fuse_swiglu = o.fuse_rope_kv = o.fuse_gemv_rope_kv = o.fuse_norm_gemv = false;
  if (list == "0" || list == "off" || list == "none") return {};
  size_t at = 0;
  while (at <= list.size()) {
    const size_t end = std::min(list.find(',', at), list.size());
    const std::string name = list.substr(at, end - at);
    if (name == "swiglu") o.fuse_swiglu = true;
    else if (name == "rope_kv") o.fuse_rope_kv = true;
    else if (name == "gemv_rope_kv") o.fuse_rope_kv = o.fuse_gemv_rope_kv = true;
    else if (name == "norm_gemv") o.fuse_norm_gemv = true;
    else
      return Error::invalid_argument(
          "RLX_CUDA_FUSE='{}': unknown fusion '{}' (known: swiglu, rope_kv, gemv_rope_kv, norm_gemv; or all, none)", list, name);
    at = end + 1;
  }
  return {};
}

CudaOptions default_cuda_options() {
  static const CudaOptions defaults = [] {
    const EnvConfig& env = env_config();
    CudaOptions o;
    o.graphs = env.cuda_graphs;
    o.profile = env.cuda_profile;
    o.programmatic_launch = env.cuda_programmatic_launch;
    o.group_gemvs = env.cuda_group_gemvs;
    (void)apply_fusion_list(env.cuda_fuse, o);  // a bad list is reported by create(ordinal)
    o.attention_tensor_cores = env.cuda_attention_tensor_cores;
    o.attention_flash = env.cuda_attention_flash;
    o.attention_rows = env.cuda_attention_rows;
    o.gemv_int8_x = env.cuda_gemv_int8;
    o.int8_prefill = env.cuda_int8_prefill;
    o.half_rows = env.cuda_half_rows;
    o.check_finite = env.check_finite;
    return o;
  }();
  return defaults;
}

}  // namespace rlx::cuda_backend
