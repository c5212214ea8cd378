// NCCL, loaded at run time: the few C functions of libnccl.so.2 the CUDA backend calls
// (declared here; no NCCL header or link dependency), and NcclCommunicator, one rank's
// end of a CUDA tensor-parallel group. Without the library a group is refused with an
// error naming what was looked for; single-GPU work never loads it.
#pragma once

#include <cuda_runtime_api.h>

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "rlx/base/status.h"
#include "rlx/ir/dtype.h"
#include "rlx/runtime/communicator.h"

namespace rlx::cuda_backend {

struct NcclApi;  // the loaded library's entry points (nccl.cpp)

/// The communicators of one group over the CUDA devices `ordinals` (rank r on
/// ordinals[r]), made with ncclCommInitAll through `library` (a file name the dynamic
/// loader searches for, or a path). Errors: the library or an entry point is missing,
/// or NCCL fails to set the group up (its message included).
Expected<std::vector<std::shared_ptr<Communicator>>> create_nccl_group(const std::vector<int>& ordinals,
                                                                       const std::string& library);

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(std::shared_ptr<const NcclApi> api, void* comm, int rank, int world, int ordinal)
      : api_(std::move(api)), comm_(comm), rank_(rank), world_(world), ordinal_(ordinal) {}
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return rank_; }
  int world() const override { return world_; }
  int ordinal() const { return ordinal_; }
  std::string kind() const override { return "nccl"; }
  void abort() override;
  /// An aborted NCCL communicator is gone: false.
  bool recover() override { return !aborted_; }
  bool aborted() const { return aborted_; }

  /// Enqueues on `stream`: recv[0, count) = the sum over the ranks of send (f32, f16,
  /// bf16; send == recv sums in place).
  Status all_reduce(const void* send, void* recv, int64_t count, ir::DType dtype, cudaStream_t stream) const;
  /// Enqueues on `stream`: recv[r * bytes, (r + 1) * bytes) = rank r's send.
  Status all_gather(const void* send, void* recv, int64_t bytes, cudaStream_t stream) const;

 private:
  std::shared_ptr<const NcclApi> api_;
  void* comm_ = nullptr;  // ncclComm_t
  int rank_ = 0, world_ = 1, ordinal_ = 0;
  std::atomic<bool> aborted_{false};
};

}  // namespace rlx::cuda_backend
