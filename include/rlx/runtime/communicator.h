// Communicator: one rank's end of the collectives of a tensor-parallel group (one rank
// per device, all driven by one process). A backend makes the communicators of its
// group (Backend::create_communicators) and its executables bind their rank's
// (Executable::bind_communicator); the all_reduce / all_gather steps call through it.
// HostCommunicator is the in-process implementation the CPU backend uses: ranks are
// threads that meet at each collective.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "rlx/base/status.h"
#include "rlx/ir/dtype.h"

namespace rlx {

/// One rank's end of a group. The collectives themselves are the implementation's (a
/// backend calls them on its own kind); this is what the runtime's group needs.
class Communicator {
 public:
  virtual ~Communicator() = default;
  /// This end's rank, 0 .. world() - 1 (rank r holds part r of every split weight).
  virtual int rank() const = 0;
  /// Ranks in the group.
  virtual int world() const = 0;
  /// "host", "nccl": which backends can bind it.
  virtual std::string kind() const = 0;
  /// Stops every collective of the group now and from now on with an error (a rank
  /// failed; its peers must not wait for it forever). Idempotent; callable from any
  /// thread while other ranks are inside a collective.
  virtual void abort() = 0;
  /// Called once every rank has returned from the run that aborted the group: makes
  /// the group usable again and returns true, or returns false when it cannot be (an
  /// aborted NCCL communicator is gone for good).
  virtual bool recover() = 0;
};

/// The ranks of one process meeting in host memory. Every rank calls the same
/// collectives in the same order (they run one graph); a call returns when all ranks
/// made it, or with an error once any rank aborted the group.
class HostCommunicator final : public Communicator {
 public:
  /// The `world` communicators of one new group (world >= 1).
  static std::vector<std::shared_ptr<HostCommunicator>> create_group(int world);

  int rank() const override { return rank_; }
  int world() const override;
  std::string kind() const override { return "host"; }
  void abort() override;
  bool recover() override;

  /// buf[0, count) of `dtype` (f32, f16 or bf16) becomes the sum over the ranks (summed
  /// in f32, in rank order, so every rank gets the same bits).
  Status all_reduce_sum(void* buf, int64_t count, ir::DType dtype);
  /// out[r * bytes, (r + 1) * bytes) becomes rank r's `in` (bytes each).
  Status all_gather(const void* in, void* out, int64_t bytes);

 private:
  struct Group;
  HostCommunicator(std::shared_ptr<Group> group, int rank) : group_(std::move(group)), rank_(rank) {}
  std::shared_ptr<Group> group_;
  int rank_ = 0;
};

}  // namespace rlx
