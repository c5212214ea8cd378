// What every step-list executor (the CPU and CUDA backends) does the same way, kept
// once: where each LIR value lives (arena, param, handle, constant; views followed to
// their root), the checks of set_active_extent, broadcast strides, and the part of a
// step builder's context that only reads the graph. Private to src/ (backends include
// it as "runtime/executor_skeleton.h").
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "rlx/base/status.h"
#include "rlx/ir/module.h"
#include "rlx/runtime/backend.h"

namespace rlx::runtime {

/// Where a value's bytes live at run time.
enum class StorageKind : uint8_t { kArena, kParam, kHandle, kConstant, kScratch, kNone };

/// A value's storage: its kind, the param / handle / constant index (unused for the
/// arena and scratch), and the byte range inside that storage.
struct ValueRef {
  StorageKind kind = StorageKind::kNone;
  int32_t index = 0;
  int64_t offset = 0;
  int64_t bytes = 0;
};

/// The storage of every value of an LIR module.
struct StorageMap {
  std::vector<ValueRef> refs;          ///< per value id
  std::vector<ir::ValueId> constants;  ///< constant index -> its Constant node, ascending ids
};

/// Resolves the module's buffer plan against its manifest: arena slots keep their
/// offsets, params and handles take their manifest index, constants are numbered in
/// value order, and views are followed to their root. An internal error (naming
/// `backend` and the value) for a plan that does not match the graph or manifest.
Expected<StorageMap> resolve_storage(const ir::LirModule& lir, std::string_view backend);

/// The argument checks of Executable::set_active_extent, shared by the backends: the
/// graph has a bucket symbol, `upper` is the size it was compiled for, and 1 <= actual
/// <= upper. The caller then checks that its steps can run a prefix of the rows.
Status check_active_extent(const ExtentInfo& extent, int64_t actual, int64_t upper);

/// Right-aligned broadcast strides (in elements) of an input of dims `in` read as
/// dims `out`: 0 on broadcast (size-1 or missing) axes.
std::vector<int64_t> broadcast_strides(const std::vector<int64_t>& in, const std::vector<int64_t>& out);

/// What an all_reduce / all_gather step moves: its input's elements, bytes and dtype,
/// and the group size the node was made for.
struct CollectiveShape {
  int64_t count = 0, bytes = 0;
  ir::DType dtype = ir::DType::F32;
  int64_t world = 2;
};
/// The CollectiveShape of collective node `v`; an error (naming `backend` and the node)
/// when its input has no static size, or an all_reduce input is not f32/f16/bf16.
Expected<CollectiveShape> collective_shape(const ir::Graph& g, ir::ValueId v, std::string_view backend);

/// What every backend's step builder reads of the graph: the node being built, its
/// inputs, and the bucket axis of every value (-1: none; -2: only inside a combined dim).
struct StepBuildGraph {
  const ir::LirModule* lir = nullptr;
  const ir::Graph* graph = nullptr;
  ir::ValueId id = ir::kNoValue;
  const std::vector<int>* bucket_axis = nullptr;  ///< per value; null when the graph has no bucket

  const ir::Node& node() const { return graph->node(id); }
  const ir::Node& input(size_t i) const { return graph->node(node().inputs[i]); }
  int bucket(ir::ValueId v) const {
    return bucket_axis && !bucket_axis->empty() ? (*bucket_axis)[static_cast<size_t>(v)] : -1;
  }
};

}  // namespace rlx::runtime
