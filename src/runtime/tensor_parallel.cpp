// Tensor-parallel groups: the group backend and executable (see tensor_parallel.h).
#include "runtime/tensor_parallel.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <system_error>
#include <thread>
#include <tuple>

namespace rlx::runtime {
namespace {

/// Threads that run one job per rank at once: rank 0 on the caller's thread, the
/// others on their own threads (a device's work is issued by one thread, and a rank
/// that waits in a collective must not keep the others from reaching it).
class RankThreads {
 public:
  explicit RankThreads(int world) : status_(static_cast<size_t>(world)) {
    try {
      for (int r = 1; r < world; ++r) threads_.emplace_back([this, r] { loop(r); });
    } catch (...) {  // (no thread left joinable when a later one cannot start)
      stop();
      throw;
    }
  }
  ~RankThreads() { stop(); }
  RankThreads(const RankThreads&) = delete;
  RankThreads& operator=(const RankThreads&) = delete;

  /// Runs job(r) for every rank; returns every rank's status (rank order), valid until
  /// the next run. Allocates nothing: the job is called through a pointer to it.
  template <typename Job>
  const std::vector<Status>& run(const Job& job) {
    std::lock_guard<std::mutex> one(run_mu_);  // one group-wide job at a time
    {
      std::lock_guard<std::mutex> lock(mu_);
      job_ = &job;
      call_ = [](const void* j, int rank) { return (*static_cast<const Job*>(j))(rank); };
      pending_ = static_cast<int>(threads_.size());
      ++generation_;
    }
    cv_.notify_all();
    status_[0] = job(0);
    std::unique_lock<std::mutex> lock(mu_);
    done_.wait(lock, [&] { return pending_ == 0; });
    job_ = nullptr;
    return status_;
  }

 private:
  void stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (std::thread& t : threads_) t.join();
    threads_.clear();
  }

  void loop(int rank) {
    int64_t seen = 0;
    while (true) {
      const void* job = nullptr;
      Status (*call)(const void*, int) = nullptr;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = generation_;
        job = job_;
        call = call_;
      }
      Status s = call(job, rank);
      std::lock_guard<std::mutex> lock(mu_);
      status_[static_cast<size_t>(rank)] = std::move(s);
      if (--pending_ == 0) done_.notify_one();
    }
  }

  std::mutex run_mu_, mu_;
  std::condition_variable cv_, done_;
  std::vector<std::thread> threads_;
  const void* job_ = nullptr;                   // the running job ...
  Status (*call_)(const void*, int) = nullptr;  // ... and how to call it
  std::vector<Status> status_;
  int64_t generation_ = 0;
  int pending_ = 0;
  bool stop_ = false;
};

/// A part of a whole weight copied for one rank, shared by the group's executables
/// while its source lives.
struct PartEntry {
  std::weak_ptr<const void> source;  // the whole weight's owner: the entry is valid while it is the same
  std::weak_ptr<const AlignedBuffer> part;
};
/// (source bytes, size, dtype, whole dims, axis, parts, rank).
using PartKey = std::tuple<const void*, size_t, int, std::vector<int64_t>, int64_t, int64_t, int>;

/// What the executables of one group share: its ranks' communicators and threads.
struct GroupState {
  Device device;
  std::vector<std::shared_ptr<Communicator>> comms;
  std::unique_ptr<RankThreads> threads;
  // Set when a failed run aborted communicators that cannot recover (NCCL's).
  std::atomic<bool> broken{false};
  std::mutex runs_mu;  // one run of the group's executables (clones included) at a time
  std::mutex parts_mu;
  std::map<PartKey, PartEntry> parts;

  int world() const { return static_cast<int>(comms.size()); }

  /// Runs job(r) on every rank. The first rank to fail aborts the group's collectives
  /// so that no other rank waits for it forever; its error is the one returned, and the
  /// communicators recover afterwards when they can (else the group stays broken).
  template <typename Job>
  Status on_ranks(const Job& job) {
    std::lock_guard<std::mutex> one(runs_mu);  // (the threads' statuses are read below)
    if (broken)
      return Error::unsupported(
          "tensor-parallel group {}: an earlier run failed and aborted its NCCL "
          "communicators; the group cannot run again in this process",
          device.to_string());
    std::atomic<int> first{-1};
    auto guarded = [&](int r) {
      Status s = job(r);
      int none = -1;
      if (!s.ok() && first.compare_exchange_strong(none, r))
        for (const auto& c : comms) c->abort();
      return s;
    };
    const std::vector<Status>& status = threads->run(guarded);
    const int failed = first.load();
    if (failed < 0) return {};
    for (const auto& c : comms)
      if (!c->recover()) broken = true;
    return status[static_cast<size_t>(failed)].error().with_context(
        fmt::format("tensor-parallel group {}, rank {}", device.to_string(), failed));
  }
};

/// The handles of one group executable: one storage per rank.
class GroupHandle final : public HandleStorage {
 public:
  explicit GroupHandle(std::vector<std::shared_ptr<HandleStorage>> ranks, std::string where)
      : ranks_(std::move(ranks)), where_(std::move(where)) {}
  int64_t bytes() const override {
    int64_t b = 0;
    for (const auto& r : ranks_) b += r->bytes();
    return b;
  }
  std::string where() const override { return where_; }
  // Each rank holds its part of every row (a KV cache sharded by KV head): the same rows.
  Status copy_sequence_rows(int64_t batch, int64_t rows, int64_t src, int64_t dst, int64_t n) override {
    for (const auto& r : ranks_) TRY(r->copy_sequence_rows(batch, rows, src, dst, n));
    return {};
  }
  // Paged: every rank backs and releases the same rows of its part.
  int64_t page_bytes() const override {
    int64_t p = 0;
    for (const auto& r : ranks_) p = std::max(p, r->page_bytes());
    return p * static_cast<int64_t>(ranks_.size());
  }
  Status back_rows(int64_t batch, int64_t rows, int64_t seq, int64_t first, int64_t n) override {
    for (const auto& r : ranks_) TRY(r->back_rows(batch, rows, seq, first, n));
    return {};
  }
  Status release_rows(int64_t batch, int64_t rows, int64_t seq, int64_t first, int64_t n) override {
    for (const auto& r : ranks_) TRY(r->release_rows(batch, rows, seq, first, n));
    return {};
  }
  int64_t resident_bytes() const override {
    int64_t b = 0;
    for (const auto& r : ranks_) b += r->resident_bytes();
    return b;
  }
  const std::vector<std::shared_ptr<HandleStorage>>& ranks() const { return ranks_; }

 private:
  std::vector<std::shared_ptr<HandleStorage>> ranks_;
  std::string where_;
};

/// The run memory of one group executable: one block per rank, each rank's executables
/// sharing theirs (a group's runs are serialized, so its executables never overlap).
class GroupRunMemory final : public RunMemory {
 public:
  explicit GroupRunMemory(std::vector<std::shared_ptr<RunMemory>> ranks) : ranks_(std::move(ranks)) {}
  int64_t bytes() const override {
    int64_t b = 0;
    for (const auto& r : ranks_) b += r->bytes();
    return b;
  }
  const std::vector<std::shared_ptr<RunMemory>>& ranks() const { return ranks_; }

 private:
  std::vector<std::shared_ptr<RunMemory>> ranks_;
};

/// How one param of the group splits: parts along axis (parts 1: every rank takes all).
struct ParamSplit {
  int64_t axis = -1, parts = 1;
  std::vector<int64_t> full;  // the whole weight's dims
};

class GroupExecutable final : public Executable {
 public:
  GroupExecutable(std::shared_ptr<GroupState> group, std::vector<std::unique_ptr<Executable>> ranks,
                  std::shared_ptr<const ir::IoManifest> manifest, std::shared_ptr<const std::vector<ParamSplit>> splits)
      : group_(std::move(group)),
        ranks_(std::move(ranks)),
        manifest_(std::move(manifest)),
        splits_(std::move(splits)),
        set_(manifest_->params.size(), false),
        kept_parts_(manifest_->params.size() * ranks_.size()) {
    for (size_t i = 0; i < set_.size(); ++i)  // (a clone's ranks hold their params already)
      set_[i] = std::all_of(ranks_.begin(), ranks_.end(), [&](const auto& r) { return r->param_is_set(i); });
    unset_ = static_cast<size_t>(std::count(set_.begin(), set_.end(), false));
  }

  const ir::IoManifest& manifest() const override { return *manifest_; }

  Status set_param(size_t index, const void* data, int64_t bytes, ir::DType dtype) override {
    return set_parts(index, ByteView(data, static_cast<size_t>(bytes), nullptr), dtype, /*shared=*/false);
  }
  bool param_is_set(size_t index) const override { return set_[index]; }
  Status set_param_shared(size_t index, ByteView bytes) override {
    return set_parts(index, std::move(bytes), manifest_->params[index].type.dtype, /*shared=*/true);
  }

  Status write_handle(size_t index, const void*, int64_t) override {
    return Error::unsupported(
        "handle '{}': a tensor-parallel group keeps its handles split across {}; they are not "
        "written whole",
        manifest_->handles[index].name, group_->device.to_string());
  }
  const void* handle_data(size_t) const override { return nullptr; }
  std::shared_ptr<HandleStorage> handle_storage(size_t index) override {
    std::vector<std::shared_ptr<HandleStorage>> parts;
    for (const auto& r : ranks_) {
      std::shared_ptr<HandleStorage> h = r->handle_storage(index);
      if (!h) return nullptr;
      parts.push_back(std::move(h));
    }
    return std::make_shared<GroupHandle>(std::move(parts), group_->device.to_string());
  }
  Status share_handle(size_t index, std::shared_ptr<HandleStorage> storage) override {
    auto g = std::dynamic_pointer_cast<GroupHandle>(storage);
    if (!g || g->ranks().size() != ranks_.size())
      return Error::invalid_argument("handle '{}': storage from {} cannot be bound by the group {}",
                                     manifest_->handles[index].name, storage ? storage->where() : "nowhere",
                                     group_->device.to_string());
    for (size_t r = 0; r < ranks_.size(); ++r) TRY(ranks_[r]->share_handle(index, g->ranks()[r]));
    return {};
  }
  std::shared_ptr<RunMemory> run_memory() override {
    if (run_) return run_;
    std::vector<std::shared_ptr<RunMemory>> parts;
    for (const auto& r : ranks_) {
      std::shared_ptr<RunMemory> m = r->run_memory();
      if (!m) return nullptr;
      parts.push_back(std::move(m));
    }
    run_ = std::make_shared<GroupRunMemory>(std::move(parts));
    return run_;
  }
  Status share_run_memory(std::shared_ptr<RunMemory> memory) override {
    auto g = std::dynamic_pointer_cast<GroupRunMemory>(memory);
    if (!g || g->ranks().size() != ranks_.size())
      return Error::invalid_argument("run memory of another kind cannot be bound by the group {}",
                                     group_->device.to_string());
    for (size_t r = 0; r < ranks_.size(); ++r)
      if (Status st = ranks_[r]->share_run_memory(g->ranks()[r]); !st.ok())
        return st.error().with_context(fmt::format("rank {} of {}", r, group_->device.to_string()));
    run_ = std::move(g);
    return {};
  }
  TransferStats transfer_stats() const override {
    TransferStats t;
    for (const auto& r : ranks_) {
      const TransferStats s = r->transfer_stats();
      t.host_to_device += s.host_to_device;
      t.device_to_host += s.device_to_host;
    }
    t.runs = ranks_[0]->transfer_stats().runs;
    return t;
  }

  Status run(std::span<const void* const> inputs) override {
    // Checked here, before the ranks start: every rank would fail alike, which must not
    // read as one rank failing the group.
    if (unset_ != 0)
      for (size_t i = 0; i < set_.size(); ++i)
        if (!set_[i]) return Error::invalid_argument("param '{}' was never set", manifest_->params[i].name);
    return group_->on_ranks([&](int r) { return ranks_[static_cast<size_t>(r)]->run(inputs); });
  }
  const uint8_t* arena_ptr() const override { return ranks_[0]->arena_ptr(); }
  std::span<const OutputSlot> output_slots() const override { return ranks_[0]->output_slots(); }
  Status set_active_extent(int64_t actual, int64_t upper) override {
    for (const auto& r : ranks_) TRY(r->set_active_extent(actual, upper));
    return {};
  }
  Expected<std::unique_ptr<Executable>> clone() const override {
    std::vector<std::unique_ptr<Executable>> copies;
    for (size_t r = 0; r < ranks_.size(); ++r) {
      ASSIGN_OR_RETURN(std::unique_ptr<Executable> c, ranks_[r]->clone());
      TRY(c->bind_communicator(group_->comms[r]));
      copies.push_back(std::move(c));
    }
    auto copy = std::make_unique<GroupExecutable>(group_, std::move(copies), manifest_, splits_);
    copy->kept_parts_ = kept_parts_;
    return std::unique_ptr<Executable>(std::move(copy));
  }
  std::string describe() const override {
    return fmt::format("tensor parallel over {} ({} ranks); rank 0: {}", group_->device.to_string(), ranks_.size(),
                       ranks_[0]->describe());
  }

 private:
  // Rank r's part of a whole weight (bytes of `dtype`, the full shape): a sub-range of
  // `whole` when the part is contiguous, else a copy (one per source weight for all the
  // group's executables, while that weight lives).
  Expected<ByteView> part(size_t index, const ByteView& whole, ir::DType dtype, int r) {
    const ParamSplit& s = (*splits_)[index];
    if (s.parts == 1) return whole;
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < s.axis; ++d) outer *= s.full[static_cast<size_t>(d)];
    for (size_t d = static_cast<size_t>(s.axis) + 1; d < s.full.size(); ++d) inner *= s.full[d];
    const int64_t len = s.full[static_cast<size_t>(s.axis)], plen = len / s.parts;
    const auto row = ir::dtype_bytes(dtype, len * inner), seg = ir::dtype_bytes(dtype, plen * inner),
               skip = ir::dtype_bytes(dtype, r * plen * inner);
    if (!row || !seg || !skip || static_cast<int64_t>(whole.size()) != outer * *row)
      return Error::invalid_argument("param '{}': {} bytes of {} do not split into {} parts along dim {}",
                                     manifest_->params[index].name, whole.size(), ir::dtype_name(dtype), s.parts,
                                     s.axis);
    if (outer == 1) return ByteView(whole.data() + *skip, static_cast<size_t>(*seg), whole.owner());
    const PartKey key{whole.data(), whole.size(), static_cast<int>(dtype), s.full, s.axis, s.parts, r};
    auto same_source = [&](const PartEntry& e) {
      return !e.source.owner_before(whole.owner()) && !whole.owner().owner_before(e.source) && !e.source.expired();
    };
    if (whole.owner()) {
      std::lock_guard<std::mutex> lock(group_->parts_mu);
      if (auto it = group_->parts.find(key); it != group_->parts.end() && same_source(it->second))
        if (std::shared_ptr<const AlignedBuffer> b = it->second.part.lock()) return ByteView::of(b);
    }
    auto buf = std::make_shared<AlignedBuffer>(static_cast<size_t>(outer * *seg), 64);
    for (int64_t o = 0; o < outer; ++o)
      std::memcpy(buf->data() + o * *seg, whole.data() + o * *row + *skip, static_cast<size_t>(*seg));
    std::shared_ptr<const AlignedBuffer> done = std::move(buf);
    if (whole.owner()) {
      std::lock_guard<std::mutex> lock(group_->parts_mu);
      std::erase_if(group_->parts,
                    [](const auto& kv) { return kv.second.part.expired() || kv.second.source.expired(); });
      group_->parts[key] = PartEntry{whole.owner(), done};
    }
    return ByteView::of(std::move(done));
  }

  Status set_parts(size_t index, ByteView whole, ir::DType dtype, bool shared) {
    const ir::DType declared = manifest_->params[index].type.dtype;
    for (size_t r = 0; r < ranks_.size(); ++r) {
      ASSIGN_OR_RETURN(ByteView p, part(index, whole, dtype, static_cast<int>(r)));
      // A part copied out of the whole weight lives while this executable does: the
      // group's other executables (a model's variants, clones) then get the same part,
      // which a backend that uploads shared weights once (CUDA) finds as already there.
      kept_parts_[index * ranks_.size() + r] = whole.owner() && p.owner() != whole.owner() ? p : ByteView();
      if (shared && dtype == declared && p.owner()) {
        Status s = ranks_[r]->set_param_shared(index, p);
        if (s.ok()) continue;
        if (s.error().code() != ErrorCode::kUnsupported) return s;
      }
      TRY(ranks_[r]->set_param(index, p.data(), static_cast<int64_t>(p.size()), dtype));
    }
    if (!set_[index]) {
      set_[index] = true;
      --unset_;
    }
    return {};
  }

  std::shared_ptr<GroupState> group_;
  std::vector<std::unique_ptr<Executable>> ranks_;
  std::shared_ptr<const ir::IoManifest> manifest_;  // params with their whole shapes
  std::shared_ptr<const std::vector<ParamSplit>> splits_;
  std::vector<bool> set_;  // per param: set on every rank
  size_t unset_ = 0;
  std::shared_ptr<GroupRunMemory> run_;  // the ranks' run memory, once asked for or shared
  std::vector<ByteView> kept_parts_;     // [param][rank]: the copied parts this executable set
};

class GroupBackend final : public Backend {
 public:
  GroupBackend(std::vector<std::shared_ptr<Backend>> ranks, std::shared_ptr<GroupState> group)
      : ranks_(std::move(ranks)), group_(std::move(group)) {}

  std::string name() const override { return ranks_[0]->name(); }
  compile::Target target() const override { return ranks_[0]->target().for_tensor_parallel(group_->world()); }
  const compile::OpSet& supported_ops() const override { return ranks_[0]->supported_ops(); }
  /// The first rank's device (a group is of one kind of device).
  Expected<DeviceLimits> measure_device_limits() override { return ranks_[0]->measure_device_limits(); }
  Expected<double> measure_gemm_ms(int64_t m, int64_t n, int64_t k, ir::DType out) override {
    return ranks_[0]->measure_gemm_ms(m, n, k, out);
  }
  int64_t peak_device_bytes() const override { return ranks_[0]->peak_device_bytes(); }
  Expected<std::unique_ptr<Executable>> compile(const ir::LirModule& lir, const compile::CompileOptions& o) override {
    return compile_with_extent(lir, o, ExtentInfo{});
  }
  Expected<std::unique_ptr<Executable>> compile_with_extent(const ir::LirModule& lir, const compile::CompileOptions& o,
                                                            const ExtentInfo& extent) override {
    auto manifest = std::make_shared<ir::IoManifest>(lir.manifest);
    auto splits = std::make_shared<std::vector<ParamSplit>>();
    for (ir::ManifestEntry& e : manifest->params) {
      ParamSplit s;
      s.full = e.type.shape.static_dims();
      if (const auto* pa = std::get_if<ir::ParamAttrs>(&lir.graph.node(e.value).attrs); pa && pa->shard_parts > 1) {
        if (pa->shard_parts != group_->world())
          return Error::invalid_argument("param '{}' is split {} ways; the group {} has {} ranks", e.name,
                                         pa->shard_parts, group_->device.to_string(), group_->world());
        s.axis = pa->shard_axis;
        s.parts = pa->shard_parts;
        s.full[static_cast<size_t>(s.axis)] *= s.parts;
        e.type.shape = ir::Shape::of(s.full);
        const auto bytes = ir::dtype_bytes(e.type.dtype, ir::Shape::of(s.full).num_elements().value_or(-1));
        if (!bytes)
          return Error::invalid_argument("param '{}': whole shape {} has no byte size", e.name, e.type.to_string());
        e.bytes = *bytes;
      }
      splits->push_back(std::move(s));
    }
    std::vector<std::unique_ptr<Executable>> exes;
    for (int r = 0; r < group_->world(); ++r) {
      ASSIGN_OR_RETURN(std::unique_ptr<Executable> x,
                       ranks_[static_cast<size_t>(r)]->compile_with_extent(lir, o, extent));
      TRY(x->bind_communicator(group_->comms[static_cast<size_t>(r)]));
      exes.push_back(std::move(x));
    }
    return std::unique_ptr<Executable>(
        std::make_unique<GroupExecutable>(group_, std::move(exes), std::move(manifest), std::move(splits)));
  }

 private:
  std::vector<std::shared_ptr<Backend>> ranks_;
  std::shared_ptr<GroupState> group_;
};

}  // namespace

Expected<std::shared_ptr<Backend>> make_tensor_parallel_backend(const Device& group,
                                                                std::vector<std::shared_ptr<Backend>> ranks) {
  if (ranks.size() < 2 || static_cast<int>(ranks.size()) != group.count)
    return Error::invalid_argument("tensor-parallel group {}: {} rank backends", group.to_string(), ranks.size());
  auto state = std::make_shared<GroupState>();
  state->device = group;
  ASSIGN_OR_RETURN(state->comms, ranks[0]->create_communicators(ranks));
  if (state->comms.size() != ranks.size())
    return Error::internal("tensor-parallel group {}: {} communicators for {} ranks", group.to_string(),
                           state->comms.size(), ranks.size());
  try {
    state->threads = std::make_unique<RankThreads>(static_cast<int>(ranks.size()));
  } catch (const std::system_error& e) {
    return Error::unsupported("tensor-parallel group {}: cannot start a thread per rank: {}", group.to_string(),
                              e.what());
  }
  return std::shared_ptr<Backend>(std::make_shared<GroupBackend>(std::move(ranks), std::move(state)));
}

}  // namespace rlx::runtime
