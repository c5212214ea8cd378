// CudaExecutable: runs the precompiled steps of one LIR module on one CUDA stream over
// a single device arena allocated at compile time. Weights are uploaded once at
// set_param (packed blocks stay packed) and shared by clones until set again; handles
// (KV caches) stay on the device; inputs and outputs pass through pinned staging, so
// commit_no_wait returns as soon as the work is queued. From the second run with a
// given active extent on, the steps' whole launch sequence is captured once as a CUDA
// graph and replayed between the input and output copies:
// every per-run value (token ids, positions, KV write offsets) is an input the kernels
// read from the arena, so a replay needs no re-capture.
#include "backends/cuda/cuda_backend.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "backends/cuda/cuda_step.h"
#include "backends/cuda/device_storage.h"
#include "backends/cuda/cuda_util.h"
#include "backends/cuda/nccl.h"
#include "rlx/base/env.h"
#include "rlx/base/log.h"
#include "rlx/ir/text.h"
#include "rlx/runtime/tensor.h"
#include "runtime/step_profile.h"

namespace rlx::cuda_backend {
namespace {

using ir::DType;
using ir::SlotKind;
using ir::ValueId;

constexpr size_t kWorkspaceBytes = 32u << 20;
constexpr size_t kMaxGraphs = 4;  // captured graphs kept per executable (one per active extent)

struct StagedOutput {
  ValueRef src;
  int64_t host_offset = 0;
};

/// Read-only state shared by an executable and its clones.
struct Shared {
  ir::IoManifest manifest;
  std::vector<Step> steps;  // pointers unresolved
  DeviceBuffer constants;                ///< every Constant node's bytes, one buffer
  std::vector<int64_t> constant_offsets;  ///< where each starts in it (256-aligned)
  std::vector<int64_t> input_offsets, input_bytes, input_staging;
  std::vector<OutputSlot> out_slots;  // offsets into the host output buffer
  std::vector<StagedOutput> outputs;
  int64_t arena_bytes = 0, scratch_bytes = 0, zeroed_bytes = 0, staging_bytes = 0, host_out_bytes = 0;
  std::vector<bool> param_split;  // stored in the split device layout (see packed_split)
  int ordinal = 0;
  ExtentInfo extent;
  // Check mode (CudaOptions::check_finite): per step, the elements of its floating-point
  // result (0: not checked), their dtype, and the step's text form for the warning.
  bool check_finite = false;
  std::vector<int64_t> check_elems;
  std::vector<DT> check_dt;
  std::vector<std::string> check_names;
};

/// Packed params of a split-layout type are stored split when every step that reads
/// them can (Step::split_inputs) and reads the whole param; those steps get `split`.
void decide_split(Shared& sh) {
  const auto& params = sh.manifest.params;
  sh.param_split.assign(params.size(), false);
  std::vector<bool> blocked(params.size(), false);
  for (const Step& s : sh.steps)
    for (size_t i = 0; i < s.in.size(); ++i) {
      const ValueRef& r = s.in[i];
      if (r.kind != StorageKind::kParam) continue;
      const auto pi = static_cast<size_t>(r.index);
      const bool can = i < 8 && (s.split_inputs >> i & 1) != 0 && r.offset == 0 && r.bytes == params[pi].bytes;
      (can ? sh.param_split[pi] : blocked[pi]) = true;
    }
  for (const StagedOutput& o : sh.outputs)
    if (o.src.kind == StorageKind::kParam) blocked[static_cast<size_t>(o.src.index)] = true;
  for (size_t pi = 0; pi < params.size(); ++pi)
    sh.param_split[pi] = sh.param_split[pi] && !blocked[pi] && packed_split(static_cast<DT>(params[pi].type.dtype));
  for (Step& s : sh.steps) {
    s.split = false;
    for (size_t i = 0; i < s.in.size(); ++i)
      if (s.in[i].kind == StorageKind::kParam && (s.split_inputs >> i & 1) != 0 &&
          sh.param_split[static_cast<size_t>(s.in[i].index)])
        s.split = true;
  }
}

class CudaExecutable final : public Executable {
 public:
  ~CudaExecutable() override { report_profile(); }
  Status init(const ir::LirModule& lir, const ExtentInfo& extent, int ordinal, const CudaOptions& opt, int sms);

  const ir::IoManifest& manifest() const override { return shared_->manifest; }
  Status set_param(size_t index, const void* data, int64_t bytes, DType dtype) override;
  Status set_param_shared(size_t index, ByteView bytes) override;
  bool param_is_set(size_t index) const override { return params_[index] != nullptr; }
  Status write_handle(size_t index, const void* data, int64_t bytes) override;
  const void* handle_data(size_t index) const override;
  std::shared_ptr<HandleStorage> handle_storage(size_t index) override { return handles_[index]; }
  Status share_handle(size_t index, std::shared_ptr<HandleStorage> storage) override;
  std::shared_ptr<RunMemory> run_memory() override {
    if (!ensure_run_block().ok()) return nullptr;
    return run_block_;
  }
  Status share_run_memory(std::shared_ptr<RunMemory> memory) override;
  Status bind_communicator(std::shared_ptr<Communicator> comm) override {
    auto nccl = std::dynamic_pointer_cast<NcclCommunicator>(comm);
    if (!nccl || nccl->ordinal() != shared_->ordinal)
      return Error::invalid_argument("cuda backend: cuda:{} cannot bind a {} communicator{}", shared_->ordinal,
                                     comm ? comm->kind() : std::string("null"),
                                     nccl ? fmt::format(" of cuda:{}", nccl->ordinal()) : std::string());
    nccl_ = std::move(nccl);
    graphs_cache_.clear();  // captured launches baked the old communicator in
    return {};
  }
  TransferStats transfer_stats() const override { return xfer_; }
  Status run(std::span<const void* const> inputs) override;
  Status commit_no_wait(std::span<const void* const> inputs) override;
  Status sync_pending() override;
  const uint8_t* arena_ptr() const override { return host_out_; }
  std::span<const OutputSlot> output_slots() const override { return shared_->out_slots; }
  Status set_active_extent(int64_t actual, int64_t upper) override;
  Expected<std::unique_ptr<Executable>> clone() const override;
  std::string describe() const override {
    return fmt::format("cuda executable on cuda:{}: {} steps, arena {} bytes, scratch {} bytes, graphs {}",
                       shared_->ordinal, steps_.size(), shared_->arena_bytes, shared_->scratch_bytes,
                       !graphs_ ? "off" : graph_failed_ ? "off (capture failed)" : "on");
  }

 private:
  Status allocate();  // per-executable device state (counters, handles, stream, plans)
  // The run block exists (this executable's own when none was shared) and the steps point
  // into its current memory.
  Status ensure_run_block();
  Status copy_inputs(cudaStream_t st);   // pinned staging -> arena
  Status enqueue(cudaStream_t st);       // every step
  Status copy_outputs(cudaStream_t st);  // arena -> pinned output buffer, error word
  Status launch_graph(int64_t key);  // replays (capturing first) the graph of `key`
  uint8_t* base(StorageKind k, int32_t index) const;
  void resolve();
  std::string where(const char* what) const { return fmt::format("{} (cuda:{})", what, shared_->ordinal); }

  std::shared_ptr<const Shared> shared_;
  std::vector<Step> steps_;
  std::vector<std::shared_ptr<DeviceBuffer>> params_;
  std::vector<bool> param_cached_;  // params_[i] is DeviceWeightCache's (never written in place)
  std::shared_ptr<NcclCommunicator> nccl_;  // bind_communicator's (a tensor-parallel rank)
  std::vector<std::shared_ptr<DeviceHandle>> handles_;  // may be shared with other executables
  mutable std::vector<std::vector<uint8_t>> handle_host_;
  mutable TransferStats xfer_;  // host <-> device bytes (transfer_stats)
  // The run memory (possibly shared with the other executables of a model): the arena,
  // step scratch and the cuBLASLt workspace (when a step multiplies through it); made at
  // the first run or run_memory() unless share_run_memory gave one before.
  std::shared_ptr<RunBlock> run_block_;
  uint64_t run_generation_ = ~uint64_t{0};  // the block generation the steps point into
  int64_t run_bytes_ = 0;                   // what this executable needs of it
  // This executable's own device words: the zeroed counters with the error word after
  // them, and the check record (they carry state from run to run: never shared).
  DeviceBuffer block_;
  uint8_t* arena_ = nullptr;
  uint8_t* scratch_ = nullptr;
  uint8_t* workspace_ = nullptr;  // (null when no step multiplies through cuBLASLt)
  int64_t workspace_bytes_ = 0;
  uint8_t* zeroed_ = nullptr;
  uint8_t* err_ = nullptr;
  uint8_t* finite_ = nullptr;
  // One pinned block (pinned allocations are slow, and a warm start makes every
  // executable anew): input staging, output staging, the error word, the check record.
  PinnedBuffer pinned_;
  uint8_t* staging_ = nullptr;
  uint8_t* host_out_ = nullptr;
  uint8_t* err_host_ = nullptr;
  uint8_t* finite_host_ = nullptr;
  bool finite_warned_ = false;  // check mode: one warning per executable
  void report_non_finite();
  StreamPtr stream_;
  LtHandlePtr lt_;
  std::vector<std::shared_ptr<const LtPlan>> plans_;  // per GEMM of every step; equal shapes share one
  bool pending_ = false;
  bool extent_on_ = false;
  int64_t actual_ = 0, upper_ = 0;
  bool allow_tf32_ = false;
  // CUDA graphs, keyed by the active extent (0: none). A key is captured on its second
  // run; graphs are dropped whenever a device pointer they baked in may change.
  struct CapturedGraph {
    int64_t key = 0;
    GraphExecPtr exec;
  };
  bool graphs_ = true;
  bool graph_failed_ = false;  // a capture failed: run step by step from now on
  std::vector<CapturedGraph> graphs_cache_;
  std::vector<int64_t> seen_keys_;
  // Profiling (CudaOptions::profile): an event before every step and after the last.
  struct Profile {
    std::vector<EventPtr> events;
    std::vector<double> step_ms;  // summed over runs
    int runs = 0;
    double host_ms = 0;
    std::chrono::steady_clock::time_point t0;
  };
  std::unique_ptr<Profile> prof_;
  void report_profile() const;  // to stderr, when the executable goes away
};

uint8_t* CudaExecutable::base(StorageKind k, int32_t index) const {
  switch (k) {
    case StorageKind::kArena: return arena_;
    case StorageKind::kParam: {
      const auto& p = params_[static_cast<size_t>(index)];
      return p ? p->data() : nullptr;
    }
    case StorageKind::kHandle: return handles_[static_cast<size_t>(index)]->data();
    case StorageKind::kConstant: return shared_->constants.data() + shared_->constant_offsets[static_cast<size_t>(index)];
    case StorageKind::kScratch:  // not used: CUDA scratch is per step (RunCtx::scratch)
    case StorageKind::kNone: return nullptr;
  }
  return nullptr;
}

void CudaExecutable::resolve() {
  graphs_cache_.clear();  // pointers may have changed
  for (Step& s : steps_) {
    s.in_ptr.resize(s.in.size());
    for (size_t i = 0; i < s.in.size(); ++i) {
      uint8_t* b = base(s.in[i].kind, s.in[i].index);
      s.in_ptr[i] = b ? b + s.in[i].offset : nullptr;
    }
    uint8_t* b = base(s.out.kind, s.out.index);
    s.out_ptr = b ? b + s.out.offset : nullptr;
  }
}

void CudaExecutable::report_profile() const {
  if (!prof_ || prof_->runs == 0) return;
  std::vector<std::string> groups;
  double total = 0;
  for (size_t i = 0; i < steps_.size(); ++i) {
    groups.push_back(runtime::profile_group(*steps_[i].what));
    total += prof_->step_ms[i];
  }
  const double runs = prof_->runs;
  const std::string header =
      fmt::format("rlx cuda profile: {} steps, {} runs: GPU {:.3f} ms/run (kernels back to back), host {:.3f} ms/run",
                  steps_.size(), prof_->runs, total / runs, prof_->host_ms / runs);
  std::fputs(runtime::format_profile(header, groups, prof_->step_ms, prof_->runs).c_str(), stderr);
}

Status CudaExecutable::allocate() {
  const Shared& sh = *shared_;
  using Clock = std::chrono::steady_clock;
  Clock::time_point t0 = Clock::now();
  double split_ms[4] = {};  // stream and cuBLASLt handle, device block, pinned block, plans
  auto lap = [&](int i) {
    const Clock::time_point t = Clock::now();
    split_ms[i] = std::chrono::duration<double, std::milli>(t - t0).count();
    t0 = t;
  };
  RLX_CUDA_TRY(cudaSetDevice(sh.ordinal), where("compile"));
  cudaStream_t st = nullptr;
  RLX_CUDA_TRY(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking), where("stream"));
  stream_.reset(st);
  bool gemms = false;
  for (const Step& s : sh.steps) gemms = gemms || !s.gemms.empty();
  if (gemms) {  // (a cuBLASLt handle only where a step multiplies through cuBLASLt)
    cublasLtHandle_t lt = nullptr;
    RLX_CUBLAS_TRY(cublasLtCreate(&lt), where("cuBLASLt handle"));
    lt_.reset(lt);
  }
  lap(0);
  {
    auto round = [](int64_t b) { return (b + 255) / 256 * 256; };
    const int64_t arena = round(std::max<int64_t>(sh.arena_bytes, 256));
    const int64_t scratch = round(std::max<int64_t>(sh.scratch_bytes, 256));
    const int64_t workspace = gemms ? static_cast<int64_t>(kWorkspaceBytes) : 0;
    const int64_t zeroed = round(std::max<int64_t>(sh.zeroed_bytes, 256));
    const int64_t finite = sh.check_finite ? round(static_cast<int64_t>(sizeof(FiniteRecord))) : 0;
    run_bytes_ = arena + scratch + workspace;
    workspace_bytes_ = workspace;
    ASSIGN_OR_RETURN(block_, DeviceBuffer::create(zeroed + 256 + finite, where("counters")));
    zeroed_ = block_.data();
    err_ = zeroed_ + zeroed;
    finite_ = sh.check_finite ? err_ + 256 : nullptr;
    RLX_CUDA_TRY(cudaMemset(zeroed_, 0, static_cast<size_t>(zeroed + 256)), where("counters"));
  }
  lap(1);
  {
    const int64_t staging = (std::max<int64_t>(sh.staging_bytes, 64) + 63) / 64 * 64;
    const int64_t out = (std::max<int64_t>(sh.host_out_bytes, 64) + 63) / 64 * 64;
    const int64_t finite = sh.check_finite ? (static_cast<int64_t>(sizeof(FiniteRecord)) + 63) / 64 * 64 : 0;
    ASSIGN_OR_RETURN(pinned_, PinnedBuffer::create(staging + out + 64 + finite, where("host staging")));
    staging_ = pinned_.data();
    host_out_ = staging_ + staging;
    err_host_ = host_out_ + out;
    finite_host_ = sh.check_finite ? err_host_ + 64 : nullptr;
  }
  if (sh.check_finite) {
    const FiniteRecord none;
    RLX_CUDA_TRY(cudaMemcpy(finite_, &none, sizeof none, cudaMemcpyHostToDevice), where("check record"));
    std::memcpy(finite_host_, &none, sizeof none);
  }
  std::memset(err_host_, 0, sizeof(int));
  lap(2);
  steps_ = sh.steps;
  plans_.clear();
  // The layers of a model repeat a few shapes: one heuristic query (the slow part of a
  // plan) per distinct product, shared by every step that runs it (descriptors are
  // read-only while a product runs).
  std::map<std::string, std::shared_ptr<const LtPlan>> by_shape;
  for (Step& s : steps_) {
    if (s.gemms.empty()) continue;
    s.plan = static_cast<int>(plans_.size());
    for (const GemmDesc* g : s.gemms) {
      GemmDesc gd = *g;
      gd.tf32 = gd.tf32 || allow_tf32_;
      const std::string key = fmt::format("{} {} {} {:d}{:d} {} {} {} {:d} {} {} {} {:d}", gd.M, gd.N, gd.K, gd.ta, gd.tb,
                                          static_cast<int>(gd.ab_dt), static_cast<int>(gd.c_dt), gd.batch, gd.strided,
                                          gd.a_bstride, gd.b_bstride, static_cast<int>(gd.epilogue), gd.tf32);
      auto it = by_shape.find(key);
      if (it == by_shape.end()) {
        ASSIGN_OR_RETURN(LtPlan plan, make_lt_plan(lt_.get(), gd, kWorkspaceBytes, *s.what));
        it = by_shape.emplace(key, std::make_shared<const LtPlan>(std::move(plan))).first;
      }
      plans_.push_back(it->second);
    }
  }
  lap(3);
  RLX_LOG_DEBUG("cuda allocate: {:.2f} ms stream and cuBLASLt handle, {:.2f} ms device block, {:.2f} ms pinned block, "
                "{:.2f} ms cuBLASLt plans",
                split_ms[0], split_ms[1], split_ms[2], split_ms[3]);
  return {};
}

Status CudaExecutable::init(const ir::LirModule& lir, const ExtentInfo& extent, int ordinal, const CudaOptions& opt,
                            int sms) {
  const auto t_start = std::chrono::steady_clock::now();
  auto ms_since = [](std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
  };
  const ir::Graph& g = lir.graph;
  if (!lir.dynamic_symbols.empty())
    return Error::invalid_argument("cuda backend: the module still has unbound symbols (bind them first)");
  allow_tf32_ = opt.allow_tf32;
  graphs_ = opt.graphs && !opt.profile;
  if (opt.profile) prof_ = std::make_unique<Profile>();
  auto sh = std::make_shared<Shared>();
  sh->manifest = lir.manifest;
  sh->ordinal = ordinal;
  sh->extent = extent;
  RLX_CUDA_TRY(cudaSetDevice(ordinal), where("compile"));
  const ir::IoManifest& m = sh->manifest;

  ASSIGN_OR_RETURN(runtime::StorageMap storage, runtime::resolve_storage(lir, "cuda"));
  const std::vector<ValueRef>& refs = storage.refs;
  // The constants in one buffer, one copy (each at least 8 bytes, zero-padded).
  {
    std::vector<uint8_t> host;
    for (ValueId v : storage.constants) {
      const auto& bytes = g.node(v).attr<ir::ConstantAttrs>().data.bytes;
      const size_t size = bytes ? bytes->size() : 0;
      sh->constant_offsets.push_back(static_cast<int64_t>(host.size()));
      host.resize(host.size() + (std::max<size_t>(size, 8) + 255) / 256 * 256, 0);
      if (size > 0) std::memcpy(host.data() + sh->constant_offsets.back(), bytes->data(), size);
    }
    if (!host.empty()) {
      const std::string what = fmt::format("constants (cuda:{})", ordinal);
      ASSIGN_OR_RETURN(sh->constants, DeviceBuffer::create(static_cast<int64_t>(host.size()), what));
      RLX_CUDA_TRY(cudaMemcpy(sh->constants.data(), host.data(), host.size(), cudaMemcpyHostToDevice), what);
    }
  }

  BuildCtx bctx;
  bctx.lir = &lir;
  bctx.graph = &g;
  bctx.bucket_axis = extent.empty() ? nullptr : &sh->extent.axis;
  // Scratch is per step (steps run in order on one stream, and a kernel touches scratch
  // only after its predecessor has finished): every step's region starts at 0 and the
  // buffer is as large as the largest step's need.
  int64_t step_scratch = 0;
  bctx.scratch_bytes = &step_scratch;
  bctx.zeroed_bytes = &sh->zeroed_bytes;
  bctx.allow_tf32 = opt.allow_tf32;
  bctx.attention_tc = opt.attention_tensor_cores;
  bctx.attention_flash = opt.attention_flash;
  bctx.attention_rows = opt.attention_rows;
  bctx.gemv_int8_x = opt.gemv_int8_x;
  bctx.int8_prefill = opt.int8_prefill;
  bctx.half_rows = opt.half_rows;
  bctx.sms = sms;
  std::vector<ValueId> schedule = lir.plan.schedule;
  if (schedule.empty())
    for (ValueId v = 0; v < g.size(); ++v) schedule.push_back(v);
  // Debug log: where building the steps spends its time, per op kind.
  const bool timed = log_level() <= LogLevel::kDebug;
  std::map<std::string_view, double> build_ms;
  for (ValueId v : schedule) {
    const ir::Node& n = g.node(v);
    StepBuilder b = cuda_builder(n.op);
    if (b == nullptr)
      return Error::unsupported("cuda backend has no kernel for {} (op {})", g.describe(v), ir::op_name(n.op));
    if (lir.plan.slots[static_cast<size_t>(v)].kind == SlotKind::kView && ir::in_place_input(n) < 0) continue;
    for (const ir::Dim& d : n.shape)
      if (!d.is_static()) return Error::invalid_argument("cuda backend: {} has a symbolic shape", g.describe(v));
    Step s;
    s.node = v;
    for (ValueId in : n.inputs) s.in.push_back(refs[static_cast<size_t>(in)]);
    s.out = refs[static_cast<size_t>(v)];
    bctx.id = v;
    step_scratch = 0;
    const auto t_build = timed ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
    TRY(b(bctx, s));
    if (timed) build_ms[ir::op_name(n.op)] += ms_since(t_build);
    sh->scratch_bytes = std::max(sh->scratch_bytes, step_scratch);
    if (s.fn == nullptr) continue;
    s.index = static_cast<int>(sh->steps.size());
    s.what = std::make_shared<const std::string>(g.describe(v));
    sh->steps.push_back(std::move(s));
  }
  sh->arena_bytes = lir.plan.arena_size;

  for (const ir::ManifestEntry& e : m.inputs) {
    const ValueRef& r = refs[static_cast<size_t>(e.value)];
    if (r.kind != StorageKind::kArena) return Error::internal("cuda backend: input '{}' is not in the arena", e.name);
    sh->input_offsets.push_back(r.offset);
    sh->input_bytes.push_back(e.bytes);
    sh->input_staging.push_back(sh->staging_bytes);
    sh->staging_bytes += (e.bytes + 63) / 64 * 64;
  }
  for (const ir::ManifestEntry& e : m.outputs) {
    ValueRef r = refs[static_cast<size_t>(e.value)];
    r.bytes = e.bytes;
    sh->outputs.push_back({r, sh->host_out_bytes});
    sh->out_slots.emplace_back(sh->host_out_bytes, e.bytes);
    sh->host_out_bytes += (e.bytes + 63) / 64 * 64;
  }
  decide_split(*sh);
  // The decode fusions are the IR's fused_linear nodes (compile/fuse_linear.cpp); their
  // launch groups become one launch each. What stays a step rewrite: rope(q), rope(k)
  // and the cache writes the products did not take, as one launch.
  TRY(merge_linear_groups(sh->steps, g));
  if (opt.fuse_rope_kv) {
    std::vector<ValueId> outs;
    for (const ir::ManifestEntry& e : m.outputs) outs.push_back(e.value);
    fuse_rope_kv_steps(sh->steps, g, outs);
  }
  if (opt.check_finite) {
    sh->check_finite = true;
    for (const Step& st : sh->steps) {
      const ir::Node& n = g.node(st.node);
      const bool fp = (n.dtype == DType::F32 || n.dtype == DType::F16 || n.dtype == DType::BF16) &&
                      st.out.kind != StorageKind::kNone;
      sh->check_elems.push_back(fp ? st.out.bytes / static_cast<int64_t>(ir::dtype_info(n.dtype).bytes_per_block) : 0);
      sh->check_dt.push_back(static_cast<DT>(n.dtype));
      sh->check_names.push_back(ir::print_node(g, st.node));  // op, operands, a region's steps, label
    }
  }
  if (log_level() <= LogLevel::kDebug)
    for (const Step& st : sh->steps) RLX_LOG_DEBUG("cuda step {}: {}", st.index, *st.what);
  shared_ = sh;
  params_.assign(m.params.size(), nullptr);
  param_cached_.assign(m.params.size(), false);
  const double steps_ms = ms_since(t_start);
  const auto t_alloc = std::chrono::steady_clock::now();
  TRY(allocate());
  const double alloc_ms = ms_since(t_alloc);
  const auto t_handles = std::chrono::steady_clock::now();
  {
    std::vector<int64_t> sizes;
    for (const ir::ManifestEntry& e : m.handles) sizes.push_back(e.bytes);
    ASSIGN_OR_RETURN(handles_, make_handles(sizes, shared_->ordinal, where("handles")));
  }
  handle_host_.resize(m.handles.size());
  resolve();
  std::vector<const LtPlan*> distinct;
  for (const auto& pl : plans_) distinct.push_back(pl.get());
  std::sort(distinct.begin(), distinct.end());
  distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
  if (timed) {
    std::vector<std::pair<double, std::string_view>> top;
    for (const auto& [op, ms] : build_ms) top.emplace_back(ms, op);
    std::sort(top.rbegin(), top.rend());
    std::string list;
    for (size_t i = 0; i < std::min<size_t>(top.size(), 5); ++i)
      list += fmt::format("{}{} {:.2f}", i ? ", " : "", top[i].second, top[i].first);
    RLX_LOG_DEBUG("cuda compile: building steps, ms per op kind: {}", list);
  }
  RLX_LOG_DEBUG("cuda compile: {:.2f} ms steps and constants, {:.2f} ms allocation and {} cuBLASLt plans ({} distinct), "
                "{:.2f} ms handles ({} steps)",
                steps_ms, alloc_ms, plans_.size(), distinct.size(), ms_since(t_handles), steps_.size());
  return {};
}

Status CudaExecutable::set_param(size_t index, const void* data, int64_t bytes, DType dtype) {
  const ir::ManifestEntry& e = shared_->manifest.params[index];
  const std::string what = "param '" + e.name + "'";
  RLX_CUDA_TRY(cudaSetDevice(shared_->ordinal), what);
  TRY(sync_pending());
  auto& buf = params_[index];
  if (!buf || buf.use_count() > 1 || param_cached_[index]) {  // unset, shared, or the cache's: a private copy
    ASSIGN_OR_RETURN(DeviceBuffer b, DeviceBuffer::create(std::max<int64_t>(e.bytes, 8), what));
    buf = std::make_shared<DeviceBuffer>(std::move(b));
  }
  const DType want = e.type.dtype;
  if (dtype == want && shared_->param_split[index]) {
    // Upload as stored, then move the block scales out (the split device layout).
    if (bytes != e.bytes) return Error::internal("{}: {} bytes for {}", what, bytes, e.bytes);
    ASSIGN_OR_RETURN(DeviceBuffer raw, DeviceBuffer::create(bytes, what));
    RLX_CUDA_TRY(cudaMemcpy(raw.data(), data, static_cast<size_t>(bytes), cudaMemcpyHostToDevice), what);
    const int64_t blocks = bytes / ir::dtype_info(want).bytes_per_block;
    launch_repack_split(static_cast<DT>(want), raw.data(), buf->data(), blocks, stream_.get());
    RLX_CUDA_TRY(cudaGetLastError(), what);
    RLX_CUDA_TRY(cudaStreamSynchronize(stream_.get()), what);
  } else if (dtype == want) {
    if (bytes != e.bytes) return Error::internal("{}: {} bytes for {}", what, bytes, e.bytes);
    RLX_CUDA_TRY(cudaMemcpy(buf->data(), data, static_cast<size_t>(bytes), cudaMemcpyHostToDevice), what);
  } else {
    if (ir::is_packed(want) || ir::is_packed(dtype))
      return Error::invalid_argument("{}: cannot convert {} to {}", what, ir::dtype_name(dtype), ir::dtype_name(want));
    const int64_t n = *e.type.shape.num_elements();
    std::vector<float> f(static_cast<size_t>(n));
    convert_to_f32(dtype, data, f.data(), n);
    std::vector<uint8_t> conv(static_cast<size_t>(e.bytes));
    convert_from_f32(want, f.data(), conv.data(), n);
    RLX_CUDA_TRY(cudaMemcpy(buf->data(), conv.data(), conv.size(), cudaMemcpyHostToDevice), what);
  }
  xfer_.host_to_device += e.bytes;
  param_cached_[index] = false;
  resolve();
  return {};
}

Status CudaExecutable::set_param_shared(size_t index, ByteView bytes) {
  const ir::ManifestEntry& e = shared_->manifest.params[index];
  if (!bytes.owner() || static_cast<int64_t>(bytes.size()) != e.bytes)
    return Error::unsupported("param '{}': only owned views of its exact bytes are shared", e.name);
  const DeviceWeightCache::Key key{bytes.owner().get(), bytes.data(), bytes.size(), static_cast<int>(e.type.dtype),
                                   static_cast<bool>(shared_->param_split[index]), shared_->ordinal};
  if (std::shared_ptr<DeviceBuffer> hit = DeviceWeightCache::get().find(key, bytes.owner())) {
    TRY(sync_pending());
    params_[index] = std::move(hit);
    param_cached_[index] = true;
    resolve();
    return {};
  }
  params_[index] = nullptr;  // a fresh buffer: never write into one another executable shares
  TRY(set_param(index, bytes.data(), e.bytes, e.type.dtype));
  DeviceWeightCache::get().put(key, bytes.owner(), params_[index]);
  param_cached_[index] = true;  // a later set_param copies instead of writing into it
  return {};
}

Status CudaExecutable::write_handle(size_t index, const void* data, int64_t bytes) {
  const ir::ManifestEntry& e = shared_->manifest.handles[index];
  if (bytes != e.bytes) return Error::internal("handle '{}': {} bytes for {}", e.name, bytes, e.bytes);
  RLX_CUDA_TRY(cudaSetDevice(shared_->ordinal), "handle '" + e.name + "'");
  TRY(sync_pending());
  if (Status st = handles_[index]->write(data, bytes); !st.ok())
    return st.error().with_context("handle '" + e.name + "'");
  xfer_.host_to_device += bytes;
  return {};
}

Status CudaExecutable::ensure_run_block() {
  if (!run_block_) {
    run_block_ = std::make_shared<RunBlock>();
    run_block_->ordinal = shared_->ordinal;
  }
  if (run_block_->buf.size() < run_bytes_)
    TRY(grow_run_block(*run_block_, run_bytes_, where("arena, scratch and workspace")));
  if (run_generation_ == run_block_->generation && arena_) return {};
  const auto round = [](int64_t b) { return (b + 255) / 256 * 256; };
  const int64_t arena = round(std::max<int64_t>(shared_->arena_bytes, 256));
  const int64_t scratch = round(std::max<int64_t>(shared_->scratch_bytes, 256));
  arena_ = run_block_->buf.data();
  scratch_ = arena_ + arena;
  workspace_ = workspace_bytes_ > 0 ? scratch_ + scratch : nullptr;
  resolve();  // (drops captured graphs: they baked the old pointers in)
  run_generation_ = run_block_->generation;
  return {};
}

Status CudaExecutable::share_run_memory(std::shared_ptr<RunMemory> memory) {
  if (shared_->check_finite)  // rows past a run's extent would hold another's values
    return Error::unsupported("cuda backend: run memory is not shared in check mode");
  auto block = std::dynamic_pointer_cast<RunBlock>(memory);
  if (!block || block->ordinal != shared_->ordinal)
    return Error::invalid_argument("run memory from another backend or device cannot be shared on cuda:{}",
                                   shared_->ordinal);
  TRY(sync_pending());
  if (block == run_block_) return {};
  // Grow to this executable's need: the other sharers move with it (nothing of theirs
  // runs now: sharers run in turn).
  if (block->buf.size() < run_bytes_) TRY(grow_run_block(*block, run_bytes_, where("shared arena, scratch and workspace")));
  run_block_ = std::move(block);
  run_generation_ = ~uint64_t{0};
  return {};
}

Status CudaExecutable::share_handle(size_t index, std::shared_ptr<HandleStorage> storage) {
  const ir::ManifestEntry& e = shared_->manifest.handles[index];
  auto dev = std::dynamic_pointer_cast<DeviceHandle>(storage);
  if (!dev || dev->ordinal != shared_->ordinal)
    return Error::invalid_argument("handle '{}': storage from {} cannot be bound on cuda:{}", e.name,
                                   storage ? storage->where() : std::string("nowhere"), shared_->ordinal);
  if (dev->bytes() < std::max<int64_t>(e.bytes, 8))
    return Error::invalid_argument("handle '{}': a shared buffer must hold at least {} bytes, not {}", e.name,
                                   std::max<int64_t>(e.bytes, 8), dev->bytes());
  TRY(sync_pending());
  handles_[index] = std::move(dev);
  resolve();  // (drops captured graphs: they baked the old pointer in)
  return {};
}

const void* CudaExecutable::handle_data(size_t index) const {
  const ir::ManifestEntry& e = shared_->manifest.handles[index];
  auto& host = handle_host_[index];
  host.resize(static_cast<size_t>(e.bytes));
  // Interface without an error channel: on failure the copy is left zeroed.
  if (cudaSetDevice(shared_->ordinal) != cudaSuccess || cudaStreamSynchronize(stream_.get()) != cudaSuccess ||
      !handles_[index]->read(host.data(), static_cast<int64_t>(host.size())).ok())
    std::fill(host.begin(), host.end(), uint8_t{0});
  xfer_.device_to_host += static_cast<int64_t>(host.size());
  return host.data();
}

Status CudaExecutable::copy_inputs(cudaStream_t st) {
  const Shared& sh = *shared_;
  for (size_t i = 0; i < sh.input_offsets.size(); ++i) {
    RLX_CUDA_TRY(cudaMemcpyAsync(arena_ + sh.input_offsets[i], staging_ + sh.input_staging[i],
                                 static_cast<size_t>(sh.input_bytes[i]), cudaMemcpyHostToDevice, st),
                 "input '" + sh.manifest.inputs[i].name + "'");
    xfer_.host_to_device += sh.input_bytes[i];
  }
  ++xfer_.runs;
  return {};
}

Status CudaExecutable::copy_outputs(cudaStream_t st) {
  const Shared& sh = *shared_;
  for (const StagedOutput& o : sh.outputs) {
    RLX_CUDA_TRY(cudaMemcpyAsync(host_out_ + o.host_offset, base(o.src.kind, o.src.index) + o.src.offset,
                                 static_cast<size_t>(o.src.bytes), cudaMemcpyDeviceToHost, st),
                 where("output copy"));
    xfer_.device_to_host += o.src.bytes;
  }
  RLX_CUDA_TRY(cudaMemcpyAsync(err_host_, err_, sizeof(int), cudaMemcpyDeviceToHost, st), where("run"));
  xfer_.device_to_host += static_cast<int64_t>(sizeof(int));
  if (sh.check_finite)
    RLX_CUDA_TRY(cudaMemcpyAsync(finite_host_, finite_, sizeof(FiniteRecord), cudaMemcpyDeviceToHost, st),
                 where("check record"));
  return {};
}

void CudaExecutable::report_non_finite() {
  FiniteRecord r;
  std::memcpy(&r, finite_host_, sizeof r);
  if (r.step == 0 || finite_warned_) return;
  finite_warned_ = true;
  const auto i = static_cast<size_t>(r.step - 1);
  const auto bits = static_cast<uint32_t>(r.first & 0xffffffffull);
  float value = 0;
  std::memcpy(&value, &bits, sizeof value);
  RLX_LOG_WARN("check_finite: step {} of {} produced {} at element {} of {} (the first non-finite result this "
               "executable computed; cuda:{}): {}",
               i, steps_.size(), value, r.first >> 32, i < shared_->check_elems.size() ? shared_->check_elems[i] : 0,
               shared_->ordinal, i < shared_->check_names.size() ? shared_->check_names[i] : std::string("?"));
}

Status CudaExecutable::enqueue(cudaStream_t st) {
  RunCtx ctx;
  ctx.stream = st;
  ctx.lt = lt_.get();
  ctx.workspace = workspace_;
  ctx.workspace_bytes = static_cast<size_t>(workspace_bytes_);
  ctx.scratch = scratch_;
  ctx.zeroed = zeroed_;
  ctx.err = reinterpret_cast<int*>(err_);
  ctx.extent_on = extent_on_;
  ctx.actual = actual_;
  ctx.upper = upper_;
  ctx.plans = &plans_;
  ctx.nccl = nccl_.get();
  if (prof_ && prof_->events.size() != steps_.size() + 1) {
    prof_->events.clear();
    for (size_t i = 0; i <= steps_.size(); ++i) {
      cudaEvent_t ev = nullptr;
      RLX_CUDA_TRY(cudaEventCreate(&ev), where("profile"));
      prof_->events.emplace_back(ev);
    }
    prof_->step_ms.assign(steps_.size(), 0.0);
  }
  for (size_t i = 0; i < steps_.size(); ++i) {
    const Step& s = steps_[i];
    if (prof_) RLX_CUDA_TRY(cudaEventRecord(prof_->events[i].get(), st), where("profile"));
    TRY(s.fn(s, ctx));
    if (shared_->check_finite && shared_->check_elems[i] > 0)
      launch_check_finite(s.out_ptr, shared_->check_dt[i], shared_->check_elems[i], static_cast<int>(i),
                          reinterpret_cast<FiniteRecord*>(finite_), st);
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return cuda_error(e, "kernel launch", *s.what);
  }
  if (prof_) RLX_CUDA_TRY(cudaEventRecord(prof_->events.back().get(), st), where("profile"));
  return {};
}

Status CudaExecutable::launch_graph(int64_t key) {
  cudaStream_t st = stream_.get();
  for (const CapturedGraph& g : graphs_cache_)
    if (g.key == key) {
      RLX_CUDA_TRY(cudaGraphLaunch(g.exec.get(), st), where("graph launch"));
      return {};
    }
  // Capture. Work that fails to enqueue or capture leaves the stream usable and the
  // executable running step by step (the same error, if any, then comes from there).
  RLX_CUDA_TRY(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal), where("graph capture"));
  const Status queued = enqueue(st);
  cudaGraph_t raw = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(st, &raw);
  GraphPtr graph(raw);
  cudaGraphExec_t exec = nullptr;
  if (!queued.ok() || ended != cudaSuccess || graph == nullptr ||
      cudaGraphInstantiate(&exec, graph.get(), 0) != cudaSuccess) {
    cudaGetLastError();  // clear a capture error so later calls do not report it
    graph_failed_ = true;
    // The ranks of a group must all replay their collectives from graphs or none: this
    // one cannot, so the run fails (and its group aborts) rather than going on alone.
    if (nccl_)
      return Error::unsupported("cuda backend: cuda:{}: capturing a tensor-parallel step as a CUDA graph failed "
                                "({}); RLX_CUDA_GRAPHS=0 runs groups without graphs",
                                shared_->ordinal, queued.ok() ? "the capture ended in an error" : queued.error().message());
    return enqueue(st);
  }
  if (graphs_cache_.size() >= kMaxGraphs) graphs_cache_.erase(graphs_cache_.begin());
  graphs_cache_.push_back({key, GraphExecPtr(exec)});
  RLX_CUDA_TRY(cudaGraphLaunch(exec, st), where("graph launch"));
  return {};
}

Status CudaExecutable::commit_no_wait(std::span<const void* const> inputs) {
  const Shared& sh = *shared_;
  for (size_t i = 0; i < params_.size(); ++i)
    if (!params_[i]) return Error::invalid_argument("param '{}' was never set", sh.manifest.params[i].name);
  if (inputs.size() != sh.input_offsets.size())
    return Error::internal("cuda executable: {} inputs for {}", inputs.size(), sh.input_offsets.size());
  if (nccl_ && nccl_->aborted())  // (a captured graph would replay its collectives on a dead communicator)
    return Error::unsupported("cuda backend: cuda:{}: its tensor-parallel group was aborted after a failed run",
                              sh.ordinal);
  RLX_CUDA_TRY(cudaSetDevice(sh.ordinal), where("run"));
  TRY(sync_pending());  // staging buffers are reused
  TRY(ensure_run_block());
  for (const auto& h : handles_) TRY(h->ready());  // paged handles nobody manages: backed whole
  if (prof_) prof_->t0 = std::chrono::steady_clock::now();
  for (size_t i = 0; i < inputs.size(); ++i)
    std::memcpy(staging_ + sh.input_staging[i], inputs[i], static_cast<size_t>(sh.input_bytes[i]));
  const int64_t key = extent_on_ ? actual_ : 0;
  bool replay = false;
  if (graphs_ && !graph_failed_) {
    replay = std::find(seen_keys_.begin(), seen_keys_.end(), key) != seen_keys_.end();
    if (!replay) {
      if (seen_keys_.size() >= 64) seen_keys_.erase(seen_keys_.begin());
      seen_keys_.push_back(key);
    }
  }
  // Another sharer of the run memory may still be running (committed, not waited for).
  RunBlock& rb = *run_block_;
  if (rb.last_user != this && rb.last_user != nullptr && rb.done)
    RLX_CUDA_TRY(cudaStreamWaitEvent(stream_.get(), rb.done.get(), 0), where("run memory"));
  TRY(copy_inputs(stream_.get()));
  TRY(replay ? launch_graph(key) : enqueue(stream_.get()));
  TRY(copy_outputs(stream_.get()));
  if (!rb.done) {
    cudaEvent_t ev = nullptr;
    RLX_CUDA_TRY(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), where("run memory"));
    rb.done.reset(ev);
  }
  RLX_CUDA_TRY(cudaEventRecord(rb.done.get(), stream_.get()), where("run memory"));
  rb.last_user = this;
  pending_ = true;
  return {};
}

Status CudaExecutable::sync_pending() {
  if (!pending_) return {};
  pending_ = false;
  RLX_CUDA_TRY(cudaSetDevice(shared_->ordinal), where("sync"));
  RLX_CUDA_TRY(cudaStreamSynchronize(stream_.get()), where("run (kernel execution)"));
  if (prof_ && prof_->events.size() == steps_.size() + 1) {
    prof_->host_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - prof_->t0).count();
    for (size_t i = 0; i < steps_.size(); ++i) {
      float ms = 0;
      if (cudaEventElapsedTime(&ms, prof_->events[i].get(), prof_->events[i + 1].get()) == cudaSuccess)
        prof_->step_ms[i] += ms;
    }
    ++prof_->runs;
  }
  int code = 0;
  std::memcpy(&code, err_host_, sizeof(int));
  if (code != 0) {
    std::memset(err_host_, 0, sizeof(int));
    RLX_CUDA_TRY(cudaMemset(err_, 0, sizeof(int)), where("sync"));
    const auto idx = static_cast<size_t>(code - 1);
    const std::string what = idx < steps_.size() ? *steps_[idx].what : std::string("an unknown step");
    return Error::invalid_argument("cuda backend: {}: an index or slice start is out of range at run time", what);
  }
  if (shared_->check_finite) report_non_finite();
  return {};
}

Status CudaExecutable::run(std::span<const void* const> inputs) {
  TRY(commit_no_wait(inputs));
  return sync_pending();
}

Status CudaExecutable::set_active_extent(int64_t actual, int64_t upper) {
  const ExtentInfo& ex = shared_->extent;
  TRY(runtime::check_active_extent(ex, actual, upper));
  if (actual < upper)
    for (const Step& s : steps_)
      if (!s.extent_ok)
        return Error::unsupported("set_active_extent: {} combines rows along {} in a way the cuda backend cannot restrict",
                                  *s.what, ir::symbol_name(ex.symbol));
  extent_on_ = actual < upper;
  actual_ = actual;
  upper_ = upper;
  return {};
}

Expected<std::unique_ptr<Executable>> CudaExecutable::clone() const {
  auto c = std::make_unique<CudaExecutable>();
  c->shared_ = shared_;
  c->allow_tf32_ = allow_tf32_;
  c->graphs_ = graphs_;
  c->params_ = params_;  // shared until either side sets them again
  c->param_cached_ = param_cached_;
  c->nccl_ = nccl_;
  c->extent_on_ = extent_on_;
  c->actual_ = actual_;
  c->upper_ = upper_;
  TRY(c->allocate());
  RLX_CUDA_TRY(cudaStreamSynchronize(stream_.get()), where("clone"));
  std::vector<int64_t> sizes;
  for (const auto& h : handles_) sizes.push_back(h->bytes());
  ASSIGN_OR_RETURN(c->handles_, make_handles(sizes, shared_->ordinal, where("clone")));
  for (size_t i = 0; i < handles_.size(); ++i) {
    if (handles_[i]->paged() || c->handles_[i]->paged()) {  // chunk by chunk, through the host
      std::vector<uint8_t> host(static_cast<size_t>(handles_[i]->bytes()));
      TRY(handles_[i]->read(host.data(), handles_[i]->bytes()));
      TRY(c->handles_[i]->write(host.data(), handles_[i]->bytes()));
      continue;
    }
    RLX_CUDA_TRY(cudaMemcpy(c->handles_[i]->data(), handles_[i]->data(), static_cast<size_t>(handles_[i]->bytes()),
                            cudaMemcpyDeviceToDevice),
                 where("clone"));
  }
  c->handle_host_.resize(handles_.size());
  c->resolve();
  return std::unique_ptr<Executable>(std::move(c));
}

}  // namespace

Expected<std::shared_ptr<CudaBackend>> CudaBackend::create(int ordinal, bool check_finite) {
  CudaOptions check;
  TRY(apply_fusion_list(env_config().cuda_fuse, check));
  CudaOptions o = default_cuda_options();
  o.check_finite = o.check_finite || check_finite;
  return create(ordinal, o);
}

CudaBackend::CudaBackend(int ordinal, CudaOptions options, int sms)
    : ops_(cuda_supported_ops()), ordinal_(ordinal), options_(options), sms_(sms) {}

Expected<std::shared_ptr<CudaBackend>> CudaBackend::create(int ordinal, CudaOptions options) {
  const int n = cuda_device_count();
  if (n == 0) return Error::not_found("cuda backend: no CUDA device is present (cudaGetDeviceCount found none)");
  if (ordinal < 0 || ordinal >= n)
    return Error::not_found("cuda backend: device cuda:{} does not exist ({} device{} present)", ordinal, n,
                            n == 1 ? "" : "s");
  cudaDeviceProp prop{};
  RLX_CUDA_TRY(cudaGetDeviceProperties(&prop, ordinal), fmt::format("cuda:{}", ordinal));
  set_programmatic_launch(options.programmatic_launch && prop.major >= 9);
  // Start the device's context and load cuBLASLt now (some 150 ms on an H200): that is
  // the device's start-up, paid once with the session, not a cost of the first compile.
  RLX_CUDA_TRY(cudaSetDevice(ordinal), fmt::format("cuda:{}", ordinal));
  RLX_CUDA_TRY(cudaFree(nullptr), fmt::format("cuda:{} context", ordinal));
  cublasLtHandle_t lt = nullptr;
  RLX_CUBLAS_TRY(cublasLtCreate(&lt), fmt::format("cuda:{} cuBLASLt", ordinal));
  cublasLtDestroy(lt);
  auto backend = std::shared_ptr<CudaBackend>(new CudaBackend(ordinal, options, prop.multiProcessorCount));
  // The process's first pinned allocation costs about a millisecond more than later ones
  // while an earlier one is still held (the driver page-locks host memory in larger
  // chunks than asked): start-up as well, so the backend holds a small one.
  ASSIGN_OR_RETURN(PinnedBuffer reserve, PinnedBuffer::create(4096, fmt::format("cuda:{} pinned memory", ordinal)));
  backend->pinned_reserve_ = std::make_shared<PinnedBuffer>(std::move(reserve));
  return backend;
}

Expected<std::vector<std::shared_ptr<Communicator>>> CudaBackend::create_communicators(
    const std::vector<std::shared_ptr<Backend>>& ranks) {
  std::vector<int> ordinals;
  for (const auto& b : ranks) {
    const auto* c = dynamic_cast<const CudaBackend*>(b.get());
    if (c == nullptr)
      return Error::invalid_argument("cuda backend: a tensor-parallel group of cuda ranks cannot include {}",
                                     b ? b->name() : std::string("nothing"));
    if (std::find(ordinals.begin(), ordinals.end(), c->ordinal()) != ordinals.end())
      return Error::invalid_argument("cuda backend: cuda:{} appears twice in a tensor-parallel group", c->ordinal());
    ordinals.push_back(c->ordinal());
  }
  return create_nccl_group(ordinals, env_config().nccl_library);
}

Expected<std::unique_ptr<Executable>> CudaBackend::compile(const ir::LirModule& lir,
                                                           const compile::CompileOptions& options) {
  return compile_with_extent(lir, options, ExtentInfo{});
}

Expected<std::unique_ptr<Executable>> CudaBackend::compile_with_extent(const ir::LirModule& lir,
                                                                       const compile::CompileOptions&,
                                                                       const ExtentInfo& extent) {
  auto exe = std::make_unique<CudaExecutable>();
  TRY(exe->init(lir, extent, ordinal_, options_, sms_));
  return std::unique_ptr<Executable>(std::move(exe));
}

}  // namespace rlx::cuda_backend
