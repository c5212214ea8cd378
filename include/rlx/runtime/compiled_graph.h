// CompiledGraph: a graph compiled for one device, ready to run again and again.
// It wraps a backend Executable and adds names, checks and conveniences:
//
//   CompiledGraph g = *session.compile(graph);
//   TRY(g.set_param("w", weights));                      // f32; set_param_typed for f16/bf16/packed
//   auto out = g.run({{"x", x_values, x_shape}});        // f32 convenience; typed views too
//
// Steady state: after the first run, run_slots() allocates nothing and run()
// allocates only the returned output tensors. One CompiledGraph must not be run from
// two threads at once; clone() gives an independent one (own arena and handles,
// shared weights) that may run concurrently.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "rlx/base/status.h"
#include "rlx/compile/fusion_report.h"
#include "rlx/compile/legalize.h"
#include "rlx/ir/module.h"
#include "rlx/runtime/device.h"
#include "rlx/runtime/executable.h"
#include "rlx/runtime/tensor.h"

namespace rlx {

class CompiledGraph {
 public:
  /// Wraps `exe` (normally made by Session). `bucket` / `bucket_upper`: the bucket
  /// symbol and the size it was compiled for (0 when the graph had no symbol).
  CompiledGraph(Device device, std::unique_ptr<Executable> exe, compile::FusionReport fusion = {},
                compile::DispatchReport dispatch = {}, ir::SymbolId bucket = 0, int64_t bucket_upper = 0);
  CompiledGraph(CompiledGraph&&) noexcept;
  CompiledGraph& operator=(CompiledGraph&&) noexcept;
  ~CompiledGraph();

  const Device& device() const { return device_; }
  /// Inputs, params, handles and outputs with names, dtypes and shapes (positional
  /// order used by run_slots and output indices).
  const ir::IoManifest& manifest() const { return exe_->manifest(); }
  const compile::FusionReport& fusion_report() const { return fusion_; }
  const compile::DispatchReport& dispatch_report() const { return dispatch_; }
  Executable& executable() { return *exe_; }

  // ---- weights ---------------------------------------------------------------------
  /// Sets a weight from f32 values (converted when the param is f16/bf16).
  Status set_param(std::string_view name, std::span<const float> values);
  /// Sets a weight from raw bytes of `dtype`: the declared dtype is stored as given
  /// (f16/bf16/packed blocks stay as they are); a different float dtype is converted.
  /// The byte count must be exactly what `dtype` needs for the param's shape.
  Status set_param_typed(std::string_view name, std::span<const uint8_t> bytes, ir::DType dtype);

  // ---- running -----------------------------------------------------------------------
  /// Runs with named typed inputs (every input exactly once, dtype and shape as
  /// compiled). Outputs in declared dtypes, except f16/bf16/f64 widened to f32.
  Expected<std::vector<Tensor>> run(std::span<const NamedTensorView> inputs);
  Expected<std::vector<Tensor>> run(std::initializer_list<NamedTensorView> inputs) {
    return run(std::span<const NamedTensorView>(inputs.begin(), inputs.size()));
  }
  /// f32 convenience: inputs as f32 values (converted when an input is f16/bf16/i32/i64).
  Expected<std::vector<Tensor>> run(std::span<const NamedF32> inputs);
  Expected<std::vector<Tensor>> run(std::initializer_list<NamedF32> inputs) {
    return run(std::span<const NamedF32>(inputs.begin(), inputs.size()));
  }
  /// As run(), but every output keeps its declared dtype.
  Expected<std::vector<Tensor>> run_typed(std::span<const NamedTensorView> inputs);
  /// Runs and returns only the outputs at `indices` (declared dtypes).
  Expected<std::vector<Tensor>> run_read_outputs(std::span<const NamedTensorView> inputs,
                                                 std::span<const size_t> indices);
  /// After a run: elements [row*inner, (row+1)*inner) of output `out_index` as f32.
  Expected<std::vector<float>> read_output_row(size_t out_index, int64_t row, int64_t inner) const;
  /// The same into `dst` (dst.size() elements from row*dst.size()), allocation-free.
  Status read_output_row_into(size_t out_index, int64_t row, std::span<float> dst) const;

  /// The fast path: inputs by manifest position (checked), no name lookups and no
  /// allocation. Returns (byte offset, byte length) of every output relative to
  /// arena_ptr(); valid until the next run (of this executable, or of any that shares its
  /// run memory).
  Expected<std::span<const OutputSlot>> run_slots(std::span<const TensorView> inputs);
  const uint8_t* arena_ptr() const { return exe_->arena_ptr(); }

  // ---- persistent handles (KV caches, recurrent state) --------------------------------
  /// Overwrites handle `name` (dtype and shape must match its declaration). Handles
  /// start zeroed, stay alive across runs and are updated in place by UpdateSlice.
  Status bind_handle(std::string_view name, const TensorView& data);
  Status bind_handle(std::string_view name, std::span<const float> values);
  /// A copy of the handle's current contents.
  Expected<Tensor> read_handle(std::string_view name) const;
  /// Makes every handle of this graph that `owner` also declares (same name and type)
  /// use owner's storage: both then read and write one buffer (e.g. the KV cache shared
  /// by a model's prefill and decode executables, so switching copies nothing). Returns
  /// how many were shared; kUnsupported when the backend cannot share handles.
  Expected<size_t> share_handles_with(CompiledGraph& owner);
  /// The storage of every handle, by name: a model keeps these (its state, on the
  /// device) and binds them into each executable it compiles (bind_handle_storage).
  /// Empty when the backend cannot share handles.
  std::vector<std::pair<std::string, std::shared_ptr<HandleStorage>>> handle_storage();
  /// Binds handle `name` to `storage` (made by this backend for a handle of the same
  /// dtype and at least its bytes; a larger one is bound by its first bytes): no copy;
  /// from now on this graph reads and writes that memory.
  Status bind_handle_storage(std::string_view name, std::shared_ptr<HandleStorage> storage);
  /// The executable's run memory (Executable::run_memory), and binding another's: the
  /// variants of one model, run in turn, hold one block (null / kUnsupported where the
  /// backend keeps none apart).
  std::shared_ptr<RunMemory> run_memory() { return exe_->run_memory(); }
  Status share_run_memory(std::shared_ptr<RunMemory> memory) { return exe_->share_run_memory(std::move(memory)); }
  /// Bytes moved between the host and the device so far (zero on the CPU).
  TransferStats transfer_stats() const { return exe_->transfer_stats(); }

  // ---- bucketed shapes ------------------------------------------------------------------
  /// The bucket axis is the first symbolic dim of the graph's inputs (in input order),
  /// e.g. SEQ in x[SEQ, d]; the graph was compiled with it bound to `upper`. Later runs
  /// process only the first `actual` rows along it: inputs keep their compiled shapes
  /// (rows >= actual are ignored), kernels scale their work with `actual`, real rows
  /// never see padded rows (attention keys and reductions along the axis stop at
  /// `actual`), and output rows >= actual are unspecified. actual == upper restores
  /// full runs. Errors when the graph had no symbol, `upper` is not the compiled size,
  /// or a node mixes rows along the axis in a way the backend cannot restrict.
  Status set_active_extent(int64_t actual, int64_t upper);
  /// The bucket symbol (0 if none) and its compiled size.
  ir::SymbolId bucket_symbol() const { return bucket_; }
  int64_t bucket_upper() const { return bucket_upper_; }

  // ---- asynchronous forms (synchronous on the CPU) --------------------------------------
  /// Submits a run; its outputs come from sync_pending().
  Status commit_no_wait(std::span<const NamedTensorView> inputs);
  /// Waits for the submitted run and returns its outputs (as run()).
  Expected<std::vector<Tensor>> sync_pending();
  /// Runs every input set in order, overlapping where the backend can; returns each
  /// run's outputs intact.
  Expected<std::vector<std::vector<Tensor>>> run_pipelined(
      std::span<const std::vector<NamedTensorView>> input_sets);

  /// An independent graph: own arena and handles (copied), weights shared until
  /// either side sets them again.
  Expected<CompiledGraph> clone() const;

 private:
  Status bind_inputs(size_t n, const NamedTensorView* typed, const NamedF32* f32s);
  Status check_view(const ir::ManifestEntry& e, const TensorView& v) const;
  Expected<std::vector<Tensor>> collect_outputs(bool widen) const;
  Tensor output_tensor(size_t i, bool widen) const;
  Expected<size_t> find(const std::vector<ir::ManifestEntry>& list, std::string_view name, const char* what) const;

  Device device_;
  std::unique_ptr<Executable> exe_;
  compile::FusionReport fusion_;
  compile::DispatchReport dispatch_;
  ir::SymbolId bucket_ = 0;
  int64_t bucket_upper_ = 0;
  std::vector<const void*> input_ptrs_;             // per manifest input, reused each run
  std::vector<std::vector<uint8_t>> input_staging_;  // f32 -> declared dtype conversions
  bool pending_ = false;
};

}  // namespace rlx
