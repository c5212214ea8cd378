// HostCommunicator: the collectives of a tensor-parallel group whose ranks are threads
// of this process (the CPU backend's ranks). Each collective is a few barrier phases:
// publish the ranks' buffers, combine, and wait until everyone has read what it needs.
#include "rlx/runtime/communicator.h"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <mutex>

#include "rlx/base/half.h"

namespace rlx {

struct HostCommunicator::Group {
  explicit Group(int w) : world(w), ptrs(static_cast<size_t>(w)) {}
  const int world;
  std::mutex mu;
  std::condition_variable cv;
  bool aborted = false;
  int64_t generation = 0;  // completed barrier phases
  int arrived = 0;
  std::vector<const void*> ptrs;  // what each rank published for the collective in flight
  std::vector<float> sum;         // all_reduce's f32 sums

  // Returns when every rank arrived at this phase, or with an error once aborted.
  Status barrier() {
    std::unique_lock<std::mutex> lock(mu);
    if (aborted) return Error::internal("tensor-parallel group: a rank failed; the collective was abandoned");
    const int64_t phase = generation;
    if (++arrived == world) {
      arrived = 0;
      ++generation;
      cv.notify_all();
      return {};
    }
    cv.wait(lock, [&] { return generation != phase || aborted; });
    if (generation == phase)
      return Error::internal("tensor-parallel group: a rank failed; the collective was abandoned");
    return {};
  }
};

std::vector<std::shared_ptr<HostCommunicator>> HostCommunicator::create_group(int world) {
  auto g = std::make_shared<Group>(std::max(world, 1));
  std::vector<std::shared_ptr<HostCommunicator>> out;
  for (int r = 0; r < g->world; ++r) out.push_back(std::shared_ptr<HostCommunicator>(new HostCommunicator(g, r)));
  return out;
}

int HostCommunicator::world() const { return group_->world; }

void HostCommunicator::abort() {
  std::lock_guard<std::mutex> lock(group_->mu);
  group_->aborted = true;
  group_->cv.notify_all();
}

bool HostCommunicator::recover() {
  // Every rank has left its collectives: start the barrier afresh.
  std::lock_guard<std::mutex> lock(group_->mu);
  group_->aborted = false;
  group_->arrived = 0;
  ++group_->generation;
  return true;
}

namespace {

float load(const void* p, int64_t i, ir::DType t) {
  switch (t) {
    case ir::DType::F16:
      return f16_bits_to_f32(static_cast<const uint16_t*>(p)[i]);
    case ir::DType::BF16:
      return bf16_bits_to_f32(static_cast<const uint16_t*>(p)[i]);
    default:
      return static_cast<const float*>(p)[i];
  }
}

void store(void* p, int64_t i, float v, ir::DType t) {
  switch (t) {
    case ir::DType::F16:
      static_cast<uint16_t*>(p)[i] = f32_to_f16_bits(v);
      break;
    case ir::DType::BF16:
      static_cast<uint16_t*>(p)[i] = f32_to_bf16_bits(v);
      break;
    default:
      static_cast<float*>(p)[i] = v;
      break;
  }
}

}  // namespace

Status HostCommunicator::all_reduce_sum(void* buf, int64_t count, ir::DType dtype) {
  if (dtype != ir::DType::F32 && dtype != ir::DType::F16 && dtype != ir::DType::BF16)
    return Error::unsupported("all_reduce: {} is not summed (f32, f16, bf16)", ir::dtype_name(dtype));
  if (count < 0) return Error::internal("all_reduce: {} elements", count);
  Group& g = *group_;
  if (g.world == 1) return {};
  g.ptrs[static_cast<size_t>(rank_)] = buf;
  if (rank_ == 0) g.sum.resize(static_cast<size_t>(count));  // the others wait at the barrier
  TRY(g.barrier());
  // Each rank sums its share of the elements over all ranks, in rank order.
  const int64_t lo = count * rank_ / g.world, hi = count * (rank_ + 1) / g.world;
  for (int64_t i = lo; i < hi; ++i) {
    float s = 0.0f;
    for (int r = 0; r < g.world; ++r) s += load(g.ptrs[static_cast<size_t>(r)], i, dtype);
    g.sum[static_cast<size_t>(i)] = s;
  }
  TRY(g.barrier());
  for (int64_t i = 0; i < count; ++i) store(buf, i, g.sum[static_cast<size_t>(i)], dtype);
  return g.barrier();  // nobody reuses `sum` before every rank has copied it
}

Status HostCommunicator::all_gather(const void* in, void* out, int64_t bytes) {
  if (bytes < 0) return Error::internal("all_gather: {} bytes", bytes);
  Group& g = *group_;
  g.ptrs[static_cast<size_t>(rank_)] = in;
  TRY(g.barrier());
  for (int r = 0; r < g.world; ++r)
    std::memcpy(static_cast<uint8_t*>(out) + r * bytes, g.ptrs[static_cast<size_t>(r)], static_cast<size_t>(bytes));
  return g.barrier();  // every `in` stays valid until all ranks have copied it
}

}  // namespace rlx
