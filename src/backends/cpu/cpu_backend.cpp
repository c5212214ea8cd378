// CpuExecutable: walks the precompiled steps of one LIR module over a single
// 64-byte-aligned arena allocated at compile time. Weights live outside the arena
// (shared by clones, copy-on-write on set_param); matmul weights are packed into the
// GEMM panel layout when they are set (shared ones once per backend, through
// PackedWeightCache); handles persist across runs, and the run loop does no lookups
// and no allocation. With RLX_CPU_PROFILE=1 each step is timed and the sums per op
// (and weight dtype) go to stderr when the executable goes away; with
// BackendOptions::check_finite (RLX_CHECK_FINITE=1) every f32 result is checked and the
// first op that produces a NaN or an infinity is named in a warning.
#include "backends/cpu/cpu_backend.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "backends/cpu/cpu_step.h"
#include "rlx/base/aligned_buffer.h"
#include "rlx/base/byte_view.h"
#include "rlx/base/env.h"
#include "rlx/base/half.h"
#include "rlx/base/log.h"
#include "rlx/ir/text.h"
#include "runtime/step_profile.h"

namespace rlx::cpu_backend {
namespace {

using ir::DType;
using ir::SlotKind;
using ir::ValueId;

struct StagedOutput {
  ValueRef src;
  int64_t dst_offset = 0;
};

// A step operand that is (a view of) a param and is read pre-packed: steps_[step].pack[slot].
struct PackSite {
  size_t step = 0;
  size_t slot = 0;
  size_t param = 0;
  int64_t offset = 0;  // byte offset of the operand in the param
};

// A handle's host memory, shared by the executables of one model (share_handle).
class HostHandle final : public HandleStorage {
 public:
  // A mapped handle (a large KV cache) takes base pages: memory follows the rows written
  // in 4 KiB steps rather than 2 MiB ones.
  explicit HostHandle(size_t bytes) : buf(AlignedBuffer::reserve(bytes)) {}
  int64_t bytes() const override { return static_cast<int64_t>(buf.size()); }
  std::string where() const override { return "cpu"; }
  Status copy_sequence_rows(int64_t batch, int64_t rows, int64_t src, int64_t dst, int64_t n) override {
    ASSIGN_OR_RETURN(const SequenceRowsSpan span, sequence_rows_span(bytes(), batch, rows, src, dst, n));
    std::memcpy(buf.data() + span.dst_offset, buf.data() + span.src_offset, static_cast<size_t>(span.length));
    return {};
  }
  // A large handle is an anonymous mapping: the kernel backs a page when it is first
  // touched, so back() only checks the range, and release() hands pages back.
  int64_t page_bytes() const override {
    return buf.mapped() ? static_cast<int64_t>(buf.page_bytes()) : 0;
  }
  Status back_rows(int64_t batch, int64_t rows, int64_t seq, int64_t first, int64_t n) override {
    ASSIGN_OR_RETURN(const ByteRange r, sequence_row_range(bytes(), batch, rows, seq, first, n));
    (void)r;
    return {};
  }
  Status release_rows(int64_t batch, int64_t rows, int64_t seq, int64_t first, int64_t n) override {
    ASSIGN_OR_RETURN(const ByteRange r, sequence_row_range(bytes(), batch, rows, seq, first, n));
    buf.release_pages(static_cast<size_t>(r.offset), static_cast<size_t>(r.length));
    return {};
  }
  int64_t resident_bytes() const override { return static_cast<int64_t>(buf.resident_bytes()); }
  AlignedBuffer buf;

};

// The arena and step scratch of one or more executables (a model's variants, run in
// turn, share one block as large as the largest: run_memory / share_run_memory). When a
// sharer needs more, the buffers are replaced and `generation` moves on: each executable
// points its steps at the new memory before its next run. Mapped buffers take memory only
// where runs touch them.
struct HostRunBlock final : RunMemory {
  AlignedBuffer arena, scratch;
  uint64_t generation = 0;
  int64_t bytes() const override { return static_cast<int64_t>(arena.size() + scratch.size()); }
  // Grows either buffer to at least the given sizes (contents are not kept).
  void grow(size_t arena_bytes, size_t scratch_bytes) {
    if (arena.size() >= arena_bytes && scratch.size() >= scratch_bytes) return;
    ++generation;
    if (arena.size() < arena_bytes) arena = AlignedBuffer(arena_bytes, 64);
    if (scratch.size() < scratch_bytes) scratch = AlignedBuffer(scratch_bytes, 64);
  }
};

class CpuExecutable final : public Executable {
 public:
  CpuExecutable() = default;
  CpuExecutable(const CpuExecutable&) = delete;
  CpuExecutable& operator=(const CpuExecutable&) = delete;
  ~CpuExecutable() override { report_profile(); }

  Status init(const ir::LirModule& lir, const ExtentInfo& extent, std::shared_ptr<cpu::ThreadPool> pool,
              std::shared_ptr<PackedWeightCache> packed, bool check_finite);

  const ir::IoManifest& manifest() const override { return *manifest_; }
  Status set_param(size_t index, const void* data, int64_t bytes, DType dtype) override;
  bool param_is_set(size_t index) const override { return param_set_[index]; }
  Status set_param_shared(size_t index, ByteView bytes) override;
  const void* param_data(size_t index) const override { return params_[index].data(); }
  Status write_handle(size_t index, const void* data, int64_t bytes) override;
  const void* handle_data(size_t index) const override { return handles_[index]->buf.data(); }
  std::shared_ptr<HandleStorage> handle_storage(size_t index) override { return handles_[index]; }
  Status share_handle(size_t index, std::shared_ptr<HandleStorage> storage) override;
  Status bind_communicator(std::shared_ptr<Communicator> comm) override {
    auto host = std::dynamic_pointer_cast<HostCommunicator>(comm);
    if (!host)
      return Error::invalid_argument("cpu backend: a {} communicator cannot be bound (the cpu ranks meet in host memory)",
                                     comm ? comm->kind() : std::string("null"));
    comm_ = std::move(host);
    ctx_.comm = comm_.get();
    return {};
  }
  Status run(std::span<const void* const> inputs) override;
  const uint8_t* arena_ptr() const override { return run_->arena.data(); }
  std::shared_ptr<RunMemory> run_memory() override { return run_; }
  Status share_run_memory(std::shared_ptr<RunMemory> memory) override {
    if (check_)  // rows past a run's extent would hold another executable's values
      return Error::unsupported("cpu backend: run memory is not shared in check mode");
    auto block = std::dynamic_pointer_cast<HostRunBlock>(memory);
    if (!block) return Error::invalid_argument("cpu backend: run memory of another backend cannot be shared");
    block->grow(arena_bytes_, scratch_bytes_);
    run_ = std::move(block);
    resolve();
    return {};
  }
  std::span<const OutputSlot> output_slots() const override { return out_slots_; }
  Status set_active_extent(int64_t actual, int64_t upper) override;
  Expected<std::unique_ptr<Executable>> clone() const override;
  std::string describe() const override {
    const auto packed = std::count_if(packed_.begin(), packed_.end(), [](const auto& p) { return p != nullptr; });
    return fmt::format("cpu executable: {} steps, arena {} bytes, {} threads, {} weights pre-packed", n_live_steps_,
                       arena_bytes_, pool_ ? pool_->size() : 1, packed);
  }

 private:
  uint8_t* base(StorageKind k, int32_t index) const;
  void resolve();
  // Packs (or takes from the cache) the operands of param `index`.
  void pack_param(size_t index);

  std::shared_ptr<const ir::IoManifest> manifest_;
  std::shared_ptr<const std::vector<int64_t>> param_bytes_;  // declared bytes per param
  std::vector<Step> steps_;
  int n_live_steps_ = 0;
  std::shared_ptr<HostRunBlock> run_;  // arena and scratch; may be shared (share_run_memory)
  size_t arena_bytes_ = 0, scratch_bytes_ = 0;  // what this executable needs of them
  uint64_t run_generation_ = 0;                 // the block generation the steps point into
  // Every param's bytes, empty until set: a caller's shared bytes (set_param_shared,
  // never written), or a view of owned_[i] (set_param).
  std::vector<ByteView> params_;
  // The buffers set_param copies into; null for unset and shared params. Shared with
  // clones until one side sets the param again (copy on write).
  std::vector<std::shared_ptr<AlignedBuffer>> owned_;
  std::vector<bool> param_set_;
  size_t n_params_unset_ = 0;
  std::vector<std::shared_ptr<HostHandle>> handles_;  // may be shared with other executables
  std::vector<std::shared_ptr<const std::vector<uint8_t>>> constants_;
  std::vector<int64_t> input_offsets_, input_bytes_;
  std::vector<OutputSlot> out_slots_;
  std::vector<StagedOutput> staged_;
  std::shared_ptr<cpu::ThreadPool> pool_;
  std::shared_ptr<PackedWeightCache> pack_cache_;  // null: no pre-packing
  std::vector<PackSite> pack_sites_;
  std::vector<std::shared_ptr<const cpu::PackedB>> packed_;  // per pack site; null until its param is set
  ExtentInfo extent_;
  StepCtx ctx_;
  std::shared_ptr<HostCommunicator> comm_;  // bind_communicator's (ctx_.comm points at it)

  // RLX_CPU_PROFILE: every step's wall time, summed over runs.
  struct Profile {
    std::shared_ptr<const std::vector<std::string>> groups;  // per step (runtime::profile_group)
    std::vector<double> step_ms;
    int64_t runs = 0;
    double run_ms = 0;
  };
  std::unique_ptr<Profile> prof_;
  void report_profile() const;

  // Check mode (BackendOptions::check_finite): per step, the f32 elements of its result
  // (0: not checked) and what it is; one warning per executable.
  struct FiniteCheck {
    std::vector<int64_t> floats;
    std::shared_ptr<const std::vector<std::string>> names;
    bool warned = false;
  };
  std::unique_ptr<FiniteCheck> check_;
  void check_step(size_t i);
};

void CpuExecutable::check_step(size_t i) {
  const int64_t n = check_->floats[i];
  if (n == 0 || check_->warned) return;
  const float* v = reinterpret_cast<const float*>(steps_[i].out_ptr);
  for (int64_t k = 0; k < n; ++k) {
    if (std::isfinite(v[k])) continue;
    check_->warned = true;
    RLX_LOG_WARN("check_finite: step {} of {} produced {} at element {} of {} (the first non-finite result this "
                 "executable computed): {}",
                 i, steps_.size(), v[k], k, n, (*check_->names)[i]);
    return;
  }
}

void CpuExecutable::report_profile() const {
  if (!prof_ || prof_->runs == 0) return;
  const std::string header = fmt::format("rlx cpu profile: {} steps, {} runs, {} threads: {:.3f} ms/run", steps_.size(),
                                         prof_->runs, ctx_.n_threads, prof_->run_ms / static_cast<double>(prof_->runs));
  std::fputs(runtime::format_profile(header, *prof_->groups, prof_->step_ms, prof_->runs).c_str(), stderr);
}

uint8_t* CpuExecutable::base(StorageKind k, int32_t index) const {
  switch (k) {
    case StorageKind::kArena: return const_cast<uint8_t*>(run_->arena.data());
    case StorageKind::kParam: {
      return const_cast<uint8_t*>(params_[static_cast<size_t>(index)].data());
    }
    case StorageKind::kHandle: return handles_[static_cast<size_t>(index)]->buf.data();
    case StorageKind::kConstant:
      return const_cast<uint8_t*>(constants_[static_cast<size_t>(index)]->data());
    case StorageKind::kScratch: return const_cast<uint8_t*>(run_->scratch.data());
    case StorageKind::kNone: return nullptr;
  }
  return nullptr;
}

void CpuExecutable::resolve() {
  for (Step& s : steps_) {
    s.in_ptr.resize(s.in.size());
    for (size_t i = 0; i < s.in.size(); ++i) {
      uint8_t* b = base(s.in[i].kind, s.in[i].index);
      s.in_ptr[i] = b ? b + s.in[i].offset : nullptr;
    }
    uint8_t* b = base(s.out.kind, s.out.index);
    s.out_ptr = b ? b + s.out.offset : nullptr;
  }
  for (size_t i = 0; i < pack_sites_.size(); ++i)
    steps_[pack_sites_[i].step].packed[pack_sites_[i].slot] = packed_[i].get();
  ctx_.pool = pool_.get();
  ctx_.n_threads = pool_ ? pool_->size() : 1;
  ctx_.scratch = run_->scratch.data();
  run_generation_ = run_->generation;
}

void CpuExecutable::pack_param(size_t index) {
  const cpu::KernelContext kc{pool_.get(), isa_cap()};
  const ByteView& bytes = params_[index];
  for (size_t i = 0; i < pack_sites_.size(); ++i) {
    const PackSite& site = pack_sites_[i];
    if (site.param != index) continue;
    const PackRequest& req = steps_[site.step].pack[site.slot];
    // A shared buffer never changes: one packed copy serves every executable that binds
    // it. An owned one may be overwritten by the next set_param: packed privately.
    packed_[i] = owned_[index] ? PackedWeightCache::pack(kc, bytes.data() + site.offset, req)
                               : pack_cache_->get(kc, bytes, site.offset, req);
  }
}

Status CpuExecutable::init(const ir::LirModule& lir, const ExtentInfo& extent, std::shared_ptr<cpu::ThreadPool> pool,
                           std::shared_ptr<PackedWeightCache> packed, bool check_finite) {
  const ir::Graph& g = lir.graph;
  if (!lir.dynamic_symbols.empty())
    return Error::invalid_argument("cpu backend: the module still has unbound symbols (bind them first)");
  // Value -> storage reference (views followed to their root).
  ASSIGN_OR_RETURN(runtime::StorageMap storage, runtime::resolve_storage(lir, "cpu"));
  const std::vector<ValueRef>& refs = storage.refs;
  pool_ = std::move(pool);
  pack_cache_ = std::move(packed);
  extent_ = extent;
  manifest_ = std::make_shared<const ir::IoManifest>(lir.manifest);
  const ir::IoManifest& m = *manifest_;

  auto pb = std::make_shared<std::vector<int64_t>>();
  for (const ir::ManifestEntry& e : m.params) {
    pb->push_back(e.bytes);
    params_.emplace_back();  // set by set_param or set_param_shared
    owned_.push_back(nullptr);
  }
  param_bytes_ = pb;
  param_set_.assign(m.params.size(), false);
  n_params_unset_ = m.params.size();
  for (const ir::ManifestEntry& e : m.handles)
    handles_.push_back(std::make_shared<HostHandle>(static_cast<size_t>(std::max<int64_t>(e.bytes, 1))));
  for (ValueId v : storage.constants) {
    const auto& bytes = g.node(v).attr<ir::ConstantAttrs>().data.bytes;
    constants_.push_back(bytes ? bytes : std::make_shared<const std::vector<uint8_t>>(8, uint8_t{0}));
  }

  // Steps, in schedule order.
  const auto& table = cpu_kernel_table();
  std::vector<StepBuilder> builders(static_cast<size_t>(ir::kNumOpKinds), nullptr);
  for (const KernelEntry& e : table) builders[static_cast<size_t>(e.kind)] = e.build;
  int64_t scratch_bytes = 0;
  BuildCtx bctx;
  bctx.lir = &lir;
  bctx.graph = &g;
  bctx.bucket_axis = extent.empty() ? nullptr : &extent_.axis;
  bctx.n_threads = pool_ ? pool_->size() : 1;
  bctx.scratch_bytes = &scratch_bytes;
  std::vector<bool> read_plain(m.params.size(), false);  // param read by a step that does not pack it
  std::vector<ValueId> schedule = lir.plan.schedule;
  if (schedule.empty())
    for (ValueId v = 0; v < g.size(); ++v) schedule.push_back(v);
  for (ValueId v : schedule) {
    const ir::Node& n = g.node(v);
    StepBuilder b = builders[static_cast<size_t>(n.op)];
    if (b == nullptr)
      return Error::unsupported("cpu backend has no kernel for {} (op {})", g.describe(v), ir::op_name(n.op));
    // Views cost nothing, except UpdateSlice whose write is the point.
    if (lir.plan.slots[static_cast<size_t>(v)].kind == SlotKind::kView && ir::in_place_input(n) < 0) continue;
    for (const ir::Dim& d : n.shape)
      if (!d.is_static()) return Error::invalid_argument("cpu backend: {} has a symbolic shape", g.describe(v));
    Step s;
    s.node = v;
    for (ValueId in : n.inputs) s.in.push_back(refs[static_cast<size_t>(in)]);
    s.out = refs[static_cast<size_t>(v)];
    bctx.id = v;
    bctx.step_scratch = 0;
    TRY(b(bctx, s));
    if (s.fn == nullptr) continue;
    RLX_ASSERT(s.pack.size() <= Step::kMaxPacked);
    if (!pack_cache_) s.pack.clear();
    for (size_t i = 0; i < s.in.size(); ++i) {
      if (s.in[i].kind != StorageKind::kParam) continue;
      const auto req = std::find_if(s.pack.begin(), s.pack.end(), [&](const PackRequest& r) { return r.input == i; });
      if (req == s.pack.end()) {
        read_plain[static_cast<size_t>(s.in[i].index)] = true;
      } else {
        const auto slot = static_cast<size_t>(req - s.pack.begin());
        pack_sites_.push_back({steps_.size(), slot, static_cast<size_t>(s.in[i].index), s.in[i].offset});
      }
    }
    steps_.push_back(std::move(s));
  }
  n_live_steps_ = static_cast<int>(steps_.size());
  if (check_finite) {
    check_ = std::make_unique<FiniteCheck>();
    auto names = std::make_shared<std::vector<std::string>>();
    for (const Step& st : steps_) {
      const ir::Node& n = g.node(st.node);
      const bool f32 = n.dtype == DType::F32 && st.out.kind != StorageKind::kNone;
      check_->floats.push_back(f32 ? st.out.bytes / 4 : 0);
      names->push_back(ir::print_node(g, st.node));  // its text form: op, operands, steps of a region, label
    }
    check_->names = std::move(names);
  }
  if (env_config().cpu_profile) {
    auto groups = std::make_shared<std::vector<std::string>>();
    for (const Step& st : steps_) {
      // The weight's dtype joins the group: a Q4_K_M model's Q4_K and Q6_K matmuls apart.
      const ir::Node& n = g.node(st.node);
      std::string_view weight;
      for (size_t i = 0; i < st.in.size(); ++i)
        if (st.in[i].kind == StorageKind::kParam) weight = ir::dtype_name(g.node(n.inputs[i]).dtype);
      groups->push_back(runtime::profile_group(g.describe(st.node), weight));
    }
    prof_ = std::make_unique<Profile>();
    prof_->groups = std::move(groups);
    prof_->step_ms.assign(steps_.size(), 0.0);
  }
  // A param that another step reads in its own layout (e.g. a tied embedding: Gather and
  // LM head) stays unpacked: packing it would keep both layouts resident.
  std::erase_if(pack_sites_, [&](const PackSite& site) { return read_plain[site.param]; });
  packed_.assign(pack_sites_.size(), nullptr);

  // Inputs are copied into their arena slots; outputs outside the arena are staged.
  int64_t arena_size = lir.plan.arena_size;
  for (const ir::ManifestEntry& e : m.inputs) {
    const ValueRef& r = refs[static_cast<size_t>(e.value)];
    if (r.kind != StorageKind::kArena)
      return Error::internal("cpu backend: input '{}' is not in the arena", e.name);
    input_offsets_.push_back(r.offset);
    input_bytes_.push_back(e.bytes);
  }
  for (const ir::ManifestEntry& e : m.outputs) {
    const ValueRef& r = refs[static_cast<size_t>(e.value)];
    if (r.kind == StorageKind::kArena) {
      out_slots_.emplace_back(r.offset, e.bytes);
    } else {
      const int64_t off = static_cast<int64_t>(align_up(static_cast<size_t>(arena_size), 64));
      arena_size = off + e.bytes;
      staged_.push_back({r, off});
      out_slots_.emplace_back(off, e.bytes);
    }
  }
  arena_bytes_ = static_cast<size_t>(std::max<int64_t>(arena_size, 64));
  scratch_bytes_ = static_cast<size_t>(std::max<int64_t>(scratch_bytes, 64));
  run_ = std::make_shared<HostRunBlock>();
  run_->grow(arena_bytes_, scratch_bytes_);
  resolve();
  return {};
}

Status CpuExecutable::set_param(size_t index, const void* data, int64_t bytes, DType dtype) {
  const ir::ManifestEntry& e = manifest_->params[index];
  auto& buf = owned_[index];
  if (!buf || buf.use_count() > 1) {  // unset, shared bytes, or shared with a clone: copy on write
    buf = std::make_shared<AlignedBuffer>(static_cast<size_t>(std::max<int64_t>(e.bytes, 1)));
    params_[index] = ByteView(buf->data(), buf->size(), nullptr);  // owned_[index] keeps it alive
  }
  const DType want = e.type.dtype;
  if (dtype == want) {
    if (bytes != e.bytes) return Error::internal("param '{}': {} bytes for {}", e.name, bytes, e.bytes);
    std::memcpy(buf->data(), data, static_cast<size_t>(bytes));
  } else {
    const int64_t n = *e.type.shape.num_elements();
    const auto* src = static_cast<const uint8_t*>(data);
    for (int64_t i = 0; i < n; ++i) store_f(want, buf->data(), i, load_f(dtype, src, i));
  }
  if (!param_set_[index]) {
    param_set_[index] = true;
    --n_params_unset_;
  }
  pack_param(index);  // the new bytes; a packed copy of the old ones is never read again
  resolve();
  return {};
}

Status CpuExecutable::set_param_shared(size_t index, ByteView bytes) {
  const ir::ManifestEntry& e = manifest_->params[index];
  if (bytes.data() == nullptr || static_cast<int64_t>(bytes.size()) != e.bytes)
    return Error::internal("param '{}': shared bytes of {} bytes for {}", e.name, bytes.size(), e.bytes);
  // Never written through: set_param copies into a buffer of its own instead.
  params_[index] = std::move(bytes);
  owned_[index] = nullptr;
  if (!param_set_[index]) {
    param_set_[index] = true;
    --n_params_unset_;
  }
  pack_param(index);
  resolve();
  return {};
}

Status CpuExecutable::write_handle(size_t index, const void* data, int64_t bytes) {
  const ir::ManifestEntry& e = manifest_->handles[index];
  if (bytes != e.bytes) return Error::internal("handle '{}': {} bytes for {}", e.name, bytes, e.bytes);
  std::memcpy(handles_[index]->buf.data(), data, static_cast<size_t>(bytes));
  return {};
}

Status CpuExecutable::share_handle(size_t index, std::shared_ptr<HandleStorage> storage) {
  const ir::ManifestEntry& e = manifest_->handles[index];
  auto host = std::dynamic_pointer_cast<HostHandle>(storage);
  if (!host)
    return Error::invalid_argument("handle '{}': storage from {} cannot be bound by the cpu backend", e.name,
                                   storage ? storage->where() : std::string("nowhere"));
  if (host->bytes() < std::max<int64_t>(e.bytes, 1))
    return Error::invalid_argument("handle '{}': a shared buffer must hold at least {} bytes, not {}", e.name, e.bytes,
                                   host->bytes());
  handles_[index] = std::move(host);
  resolve();
  return {};
}

Status CpuExecutable::run(std::span<const void* const> inputs) {
  if (n_params_unset_ != 0) {
    for (size_t i = 0; i < param_set_.size(); ++i)
      if (!param_set_[i]) return Error::invalid_argument("param '{}' was never set", manifest_->params[i].name);
  }
  if (inputs.size() != input_offsets_.size())
    return Error::internal("cpu executable: {} inputs for {}", inputs.size(), input_offsets_.size());
  if (run_generation_ != run_->generation) resolve();  // another sharer grew the block
  uint8_t* arena = run_->arena.data();
  for (size_t i = 0; i < inputs.size(); ++i) {
    uint8_t* dst = arena + input_offsets_[i];
    if (dst != inputs[i]) std::memcpy(dst, inputs[i], static_cast<size_t>(input_bytes_[i]));
  }
  // Per-thread scratch: which thread takes which task varies from run to run, and a later
  // run must not allocate because a thread meets a kind of task for the first time. So
  // every thread of the pool grows to the largest need any thread met (process-wide)
  // after a run, when it has not yet -- on a fresh pool's first run and after a run that
  // raised a need; a new calling thread catches up before its run.
  cpu::thread_scratch_catch_up();
  struct CatchUpAfter {
    cpu::ThreadPool* pool;
    ~CatchUpAfter() {
      if (!pool) return;
      const uint64_t now = cpu::thread_scratch_raises();
      if (pool->scratch_caught_up_at.load(std::memory_order_relaxed) == now) return;  // (every run: a read only)
      pool->scratch_caught_up_at.store(now, std::memory_order_relaxed);
      pool->broadcast([] { cpu::thread_scratch_catch_up(); });
    }
  } catch_up_after{pool_.get()};
  if (check_) {
    for (size_t i = 0; i < steps_.size(); ++i) {
      Status st = steps_[i].fn(steps_[i], ctx_);
      if (!st.ok()) return st;
      check_step(i);
    }
  } else if (prof_) {
    using Clock = std::chrono::steady_clock;
    const Clock::time_point start = Clock::now();
    Clock::time_point t = start;
    for (size_t i = 0; i < steps_.size(); ++i) {
      Status st = steps_[i].fn(steps_[i], ctx_);
      if (!st.ok()) return st;
      const Clock::time_point now = Clock::now();
      prof_->step_ms[i] += std::chrono::duration<double, std::milli>(now - t).count();
      t = now;
    }
    prof_->run_ms += std::chrono::duration<double, std::milli>(t - start).count();
    ++prof_->runs;
  } else {
    for (const Step& s : steps_) {
      Status st = s.fn(s, ctx_);
      if (!st.ok()) return st;
    }
  }
  for (const StagedOutput& o : staged_)
    std::memcpy(arena + o.dst_offset, base(o.src.kind, o.src.index) + o.src.offset, static_cast<size_t>(o.src.bytes));
  return {};
}

Status CpuExecutable::set_active_extent(int64_t actual, int64_t upper) {
  TRY(runtime::check_active_extent(extent_, actual, upper));
  if (actual < upper) {
    for (const Step& s : steps_)
      if (!s.extent_ok)
        return Error::unsupported("set_active_extent: node %{} combines rows along {} in a way the cpu backend "
                                  "cannot restrict",
                                  s.node, ir::symbol_name(extent_.symbol));
  }
  ctx_.extent_on = actual < upper;
  ctx_.actual = actual;
  ctx_.upper = upper;
  return {};
}

Expected<std::unique_ptr<Executable>> CpuExecutable::clone() const {
  auto c = std::make_unique<CpuExecutable>();
  c->manifest_ = manifest_;
  c->param_bytes_ = param_bytes_;
  c->steps_ = steps_;
  c->n_live_steps_ = n_live_steps_;
  c->arena_bytes_ = arena_bytes_;
  c->scratch_bytes_ = scratch_bytes_;
  c->run_ = std::make_shared<HostRunBlock>();  // a clone runs apart: its own block
  c->run_->grow(arena_bytes_, scratch_bytes_);
  c->params_ = params_;  // owned_ shared until one side sets a param again
  c->owned_ = owned_;
  c->param_set_ = param_set_;
  c->n_params_unset_ = n_params_unset_;
  for (const auto& h : handles_) {
    auto copy = std::make_shared<HostHandle>(h->buf.size());
    std::memcpy(copy->buf.data(), h->buf.data(), h->buf.size());
    c->handles_.push_back(std::move(copy));
  }
  c->constants_ = constants_;
  c->input_offsets_ = input_offsets_;
  c->input_bytes_ = input_bytes_;
  c->out_slots_ = out_slots_;
  c->staged_ = staged_;
  c->pool_ = pool_;
  c->pack_cache_ = pack_cache_;
  c->pack_sites_ = pack_sites_;
  c->packed_ = packed_;  // shared like params_; a set_param on either side repacks for that side only
  c->extent_ = extent_;
  c->ctx_ = ctx_;
  c->comm_ = comm_;
  if (check_) {
    c->check_ = std::make_unique<FiniteCheck>();
    c->check_->floats = check_->floats;
    c->check_->names = check_->names;
  }
  if (prof_) {
    c->prof_ = std::make_unique<Profile>();
    c->prof_->groups = prof_->groups;
    c->prof_->step_ms.assign(steps_.size(), 0.0);
  }
  c->resolve();
  return std::unique_ptr<Executable>(std::move(c));
}

int default_threads(int requested) {
  if (requested > 0) return requested;
  if (env_config().threads > 0) return env_config().threads;
  return 0;  // ThreadPool: hardware concurrency
}

}  // namespace

compile::OpSet cpu_supported_ops() {
  compile::OpSet ops;
  for (const KernelEntry& e : cpu_kernel_table()) ops.add(e.kind);
  return ops;
}

CpuBackend::CpuBackend(int threads, bool prepack_weights, std::string packed_cache_dir, bool check_finite)
    : ops_(cpu_supported_ops()),
      pool_(std::make_shared<cpu::ThreadPool>(default_threads(threads))),
      check_finite_(check_finite || env_config().check_finite) {
  if (prepack_weights && env_config().cpu_prepack) packed_ = std::make_shared<PackedWeightCache>(std::move(packed_cache_dir));
}

Expected<std::unique_ptr<Executable>> CpuBackend::compile(const ir::LirModule& lir,
                                                          const compile::CompileOptions& options) {
  return compile_with_extent(lir, options, ExtentInfo{});
}

Expected<std::unique_ptr<Executable>> CpuBackend::compile_with_extent(const ir::LirModule& lir,
                                                                      const compile::CompileOptions&,
                                                                      const ExtentInfo& extent) {
  auto exe = std::make_unique<CpuExecutable>();
  TRY(exe->init(lir, extent, pool_, packed_, check_finite_));
  return std::unique_ptr<Executable>(std::move(exe));
}

Expected<std::vector<std::shared_ptr<Communicator>>> CpuBackend::create_communicators(
    const std::vector<std::shared_ptr<Backend>>& ranks) {
  for (const auto& b : ranks)
    if (!b || b->name() != "cpu")
      return Error::invalid_argument("cpu backend: a tensor-parallel group of cpu ranks cannot include {}",
                                     b ? b->name() : std::string("nothing"));
  std::vector<std::shared_ptr<Communicator>> out;
  for (auto& c : HostCommunicator::create_group(static_cast<int>(ranks.size()))) out.push_back(std::move(c));
  return out;
}

}  // namespace rlx::cpu_backend
