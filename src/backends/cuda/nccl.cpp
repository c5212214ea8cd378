// NCCL through dlopen (see nccl.h). The declarations below follow NCCL's C API (2.x):
// ncclResult_t is an int enum with 0 = success, ncclComm_t an opaque pointer, and the
// data type / reduction enums keep their documented values.
#include "backends/cuda/nccl.h"

#include <dlfcn.h>
#include <fmt/format.h>

#include <mutex>

namespace rlx::cuda_backend {

namespace {
using ncclResult = int;
using ncclCommPtr = void*;
constexpr int kNcclInt8 = 0, kNcclFloat16 = 6, kNcclFloat32 = 7, kNcclBfloat16 = 9;
constexpr int kNcclSum = 0;
}  // namespace

struct NcclApi {
  void* handle = nullptr;
  int version = 0;
  ncclResult (*get_version)(int*) = nullptr;
  ncclResult (*comm_init_all)(ncclCommPtr*, int, const int*) = nullptr;
  ncclResult (*comm_destroy)(ncclCommPtr) = nullptr;
  ncclResult (*comm_abort)(ncclCommPtr) = nullptr;
  ncclResult (*all_reduce)(const void*, void*, size_t, int, int, ncclCommPtr, cudaStream_t) = nullptr;
  ncclResult (*all_gather)(const void*, void*, size_t, int, ncclCommPtr, cudaStream_t) = nullptr;
  const char* (*error_string)(ncclResult) = nullptr;

  std::string error(ncclResult r) const { return error_string ? error_string(r) : fmt::format("NCCL error {}", r); }
};

namespace {

template <typename F>
bool bind(void* h, const char* name, F& f) {
  f = reinterpret_cast<F>(dlsym(h, name));
  return f != nullptr;
}

Expected<std::shared_ptr<const NcclApi>> load(const std::string& library) {
  // One load per library name for the process (the handle is never closed: NCCL keeps
  // threads of its own while communicators live).
  static std::mutex mu;
  static std::vector<std::pair<std::string, std::shared_ptr<const NcclApi>>> loaded;
  std::lock_guard<std::mutex> lock(mu);
  for (const auto& [name, api] : loaded)
    if (name == library) return api;
  void* h = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    const char* why = dlerror();
    return Error::not_found(
        "NCCL is not available: cannot load '{}' ({}). A CUDA tensor-parallel group needs NCCL 2.x; install it "
        "with the CUDA stack or point RLX_NCCL_LIBRARY at libnccl.so.2",
        library, why ? why : "unknown reason");
  }
  auto api = std::make_shared<NcclApi>();
  api->handle = h;
  const char* missing = nullptr;  // the first entry point the library lacks
  auto need = [&](const char* name, auto& f) {
    if (missing == nullptr && !bind(h, name, f)) missing = name;
  };
  need("ncclGetVersion", api->get_version);
  need("ncclCommInitAll", api->comm_init_all);
  need("ncclCommDestroy", api->comm_destroy);
  need("ncclCommAbort", api->comm_abort);
  need("ncclAllReduce", api->all_reduce);
  need("ncclAllGather", api->all_gather);
  need("ncclGetErrorString", api->error_string);
  if (missing != nullptr) {
    dlclose(h);
    return Error::not_found("NCCL library '{}' has no {}: not an NCCL 2.x library", library, missing);
  }
  if (api->get_version(&api->version) != 0 || api->version < 20900) {
    dlclose(h);
    return Error::unsupported("NCCL library '{}' is version {}; RLX needs 2.9 or later (CUDA graph capture)", library,
                              api->version);
  }
  loaded.emplace_back(library, api);
  return std::shared_ptr<const NcclApi>(api);
}

int nccl_type(ir::DType t) {
  switch (t) {
    case ir::DType::F16:
      return kNcclFloat16;
    case ir::DType::BF16:
      return kNcclBfloat16;
    case ir::DType::F32:
      return kNcclFloat32;
    default:
      return -1;
  }
}

}  // namespace

Expected<std::vector<std::shared_ptr<Communicator>>> create_nccl_group(const std::vector<int>& ordinals,
                                                                       const std::string& library) {
  ASSIGN_OR_RETURN(std::shared_ptr<const NcclApi> api, load(library));
  std::vector<ncclCommPtr> comms(ordinals.size(), nullptr);
  const ncclResult r = api->comm_init_all(comms.data(), static_cast<int>(ordinals.size()), ordinals.data());
  if (r != 0)
    return Error::unsupported("NCCL: setting up a group of {} GPUs failed: {}", ordinals.size(), api->error(r));
  std::vector<std::shared_ptr<Communicator>> out;
  for (size_t i = 0; i < ordinals.size(); ++i)
    out.push_back(std::make_shared<NcclCommunicator>(api, comms[i], static_cast<int>(i),
                                                     static_cast<int>(ordinals.size()), ordinals[i]));
  return out;
}

NcclCommunicator::~NcclCommunicator() {
  if (comm_ != nullptr && !aborted_) api_->comm_destroy(comm_);
}

void NcclCommunicator::abort() {
  // (From another rank's thread while this rank may be inside a collective: NCCL's abort
  // is made for that — it ends the kernels waiting for a peer that will not come.)
  if (comm_ == nullptr || aborted_.exchange(true)) return;
  api_->comm_abort(comm_);
}

Status NcclCommunicator::all_reduce(const void* send, void* recv, int64_t count, ir::DType dtype,
                                    cudaStream_t stream) const {
  const int t = nccl_type(dtype);
  if (t < 0) return Error::unsupported("NCCL all_reduce of {} (f32, f16, bf16 are summed)", ir::dtype_name(dtype));
  if (aborted_) return Error::internal("NCCL: the group was aborted after a rank failed");
  const ncclResult r = api_->all_reduce(send, recv, static_cast<size_t>(count), t, kNcclSum, comm_, stream);
  if (r != 0) return Error::internal("NCCL all_reduce on cuda:{}: {}", ordinal_, api_->error(r));
  return {};
}

Status NcclCommunicator::all_gather(const void* send, void* recv, int64_t bytes, cudaStream_t stream) const {
  if (aborted_) return Error::internal("NCCL: the group was aborted after a rank failed");
  const ncclResult r = api_->all_gather(send, recv, static_cast<size_t>(bytes), kNcclInt8, comm_, stream);
  if (r != 0) return Error::internal("NCCL all_gather on cuda:{}: {}", ordinal_, api_->error(r));
  return {};
}

}  // namespace rlx::cuda_backend
