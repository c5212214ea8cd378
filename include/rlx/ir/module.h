// The three tiers as module types over one Graph:
//   HirModule  — may contain HIR ops (hir.linear, hir.attention_block, ...) + a FusionPolicy
//   MirModule  — primitive and fused ops only; what passes read and write
//   LirModule  — MIR + a buffer plan (arena slots, views, schedule), I/O manifest, unbound symbols
// plus symbolic-dim binding (DimBinding, bind) and the BindingManifest.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "rlx/ir/graph.h"

namespace rlx::ir {

/// Direct: HIR ops lower straight to fused MIR ops. Fusable: HIR ops lower to
/// primitives and the fusion passes recover fused forms.
enum class FusionPolicy : uint8_t { Direct, Fusable };

struct HirModule {
  Graph graph;
  FusionPolicy policy = FusionPolicy::Direct;
};

struct MirModule {
  Graph graph;
};

/// Where a value's bytes live at run time.
enum class SlotKind : uint8_t {
  kArena,     ///< [offset, offset+size) of the activation arena
  kView,      ///< aliases another value's bytes (root + byte offset), costs nothing
  kParam,     ///< a weight, stored outside the arena by the executable
  kHandle,    ///< a persistent buffer (KV cache), outside the arena
  kConstant,  ///< the node's constant data, outside the arena
};

struct BufferSlot {
  SlotKind kind = SlotKind::kArena;
  int64_t offset = 0;     ///< arena byte offset (kArena) or byte offset into the root (kView)
  int64_t size = 0;       ///< bytes
  ValueId root = kNoValue;  ///< kView: the value whose storage this aliases
};

struct BufferPlan {
  int64_t alignment = 64;
  int64_t arena_size = 0;
  std::vector<BufferSlot> slots;    ///< one per value
  std::vector<ValueId> schedule;    ///< execution order (topological)
  int64_t unshared_bytes = 0;       ///< sum of arena-resident sizes without reuse
  int64_t bytes_saved() const { return unshared_bytes - arena_size; }
};

/// One named input/param/handle/output of an executable and where it lives.
struct ManifestEntry {
  std::string name;
  ValueId value = kNoValue;
  TensorType type;
  int64_t bytes = 0;
  BufferSlot slot;
};

struct IoManifest {
  std::vector<ManifestEntry> inputs;
  std::vector<ManifestEntry> params;
  std::vector<ManifestEntry> handles;
  std::vector<ManifestEntry> outputs;
};

struct LirModule {
  Graph graph;
  BufferPlan plan;
  IoManifest manifest;
  std::vector<SymbolId> dynamic_symbols;  ///< symbols still unbound (empty when runnable)
};

/// symbol -> size.
class DimBinding {
 public:
  DimBinding() = default;
  DimBinding(std::initializer_list<std::pair<SymbolId, int64_t>> list) {
    for (const auto& [s, v] : list) set(s, v);
  }
  DimBinding& set(SymbolId s, int64_t value) {
    values_[s] = value;
    return *this;
  }
  DimBinding& set(std::string_view name, int64_t value) { return set(intern_symbol(name), value); }
  bool has(SymbolId s) const { return values_.count(s) != 0; }
  int64_t get(SymbolId s) const { return values_.at(s); }
  const std::map<SymbolId, int64_t>& values() const { return values_; }
  /// Evaluates a dim; symbols not bound stay symbolic. Asserts that no coefficient
  /// overflows int64 (bind() checks that and returns an error instead).
  Dim apply(const Dim& d) const;
  Shape apply(const Shape& s) const;
  /// "BATCH=1,SEQ=128" (sorted by symbol name; stable across processes).
  std::string to_string() const;
  uint64_t stable_hash() const;

 private:
  std::map<SymbolId, int64_t> values_;
};

/// Replaces bound symbols everywhere (declared boundary shapes, reshape/expand
/// targets, narrow lengths) and re-infers every node's type. Errors name the node
/// whose shape no longer works (e.g. a narrow past the bound length).
Expected<Graph> bind(const Graph& g, const DimBinding& binding);

/// Symbols appearing anywhere in the graph, sorted by name.
std::vector<SymbolId> free_symbols(const Graph& g);

/// Inputs, params, handles and outputs of a graph with their (bound) shapes.
struct BindingManifest {
  std::vector<ManifestEntry> inputs, params, handles, outputs;
  std::string to_string() const;
};
Expected<BindingManifest> binding_manifest(const Graph& g, const DimBinding& binding);

}  // namespace rlx::ir
