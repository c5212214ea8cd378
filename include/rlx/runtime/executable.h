// Executable: what a backend's compiler produces from one LirModule, and what a
// CompiledGraph wraps. Positional and allocation-free in steady state: inputs,
// params, handles and outputs are addressed by their index in the IoManifest
// (CompiledGraph maps names to indices and checks user input before calling in).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>

#include "rlx/base/aligned_buffer.h"
#include "rlx/base/byte_view.h"
#include "rlx/base/status.h"
#include "rlx/ir/module.h"
#include "rlx/runtime/communicator.h"

namespace rlx {

/// (byte offset from arena_ptr(), byte length) of one output.
using OutputSlot = std::pair<int64_t, int64_t>;

/// The storage of one persistent handle (a KV cache, a recurrent state) where its backend
/// keeps it: host memory on the CPU, device memory on a GPU. Several executables of one
/// model bind the same storage, so that moving between them (prefill and decode, one
/// bucket and another) copies nothing; whoever holds it keeps the state alive. Opaque to
/// callers: a backend accepts only storage of its own kind (share_handle checks).
class HandleStorage {
 public:
  virtual ~HandleStorage() = default;
  virtual int64_t bytes() const = 0;
  /// Where it lives, for messages and checks ("cpu", "cuda:0").
  virtual std::string where() const = 0;
  /// Copies the first `n` rows of sequence `src` over those of sequence `dst`, the storage
  /// seen as [batch, rows, row bytes] (a stacked KV cache): a cached prompt prefix
  /// handed from one sequence to another on the device, without recomputing it. Bad
  /// arguments (a sequence outside [0, batch), src == dst, n outside [0, rows], a size
  /// that does not split so) are errors; backends that cannot keep the default.
  virtual Status copy_sequence_rows(int64_t batch, int64_t rows, int64_t src, int64_t dst, int64_t n) {
    (void)batch, (void)rows, (void)src, (void)dst, (void)n;
    return Error::unsupported("copying between sequences of a handle is not supported on {}", where());
  }

  // Paged storage. A large handle (a stacked KV cache seen as [batch, rows, row bytes])
  // may be a reserved address range that memory backs page by page: the rows a sequence
  // has written take memory, the context it has not reached takes none. Storage that is
  // not paged keeps the defaults (all of it backed from the start).

  /// The unit memory backs the storage in (bytes; ranges are rounded out to whole
  /// pages); 0 when the storage is not paged.
  virtual int64_t page_bytes() const { return 0; }
  /// Backs rows [first, first + n) of sequence `seq` (the storage seen as [batch, rows,
  /// row bytes]) with memory before a run writes or reads them; pages backed here read
  /// as zeros until written. Called between runs. Errors: arguments outside the storage,
  /// or memory the device cannot give (kResourceExhausted). A paged storage that nobody
  /// backs before its first run is backed whole then (a graph run directly behaves as if
  /// the storage were not paged).
  virtual Status back_rows(int64_t batch, int64_t rows, int64_t seq, int64_t first, int64_t n) {
    (void)batch, (void)rows, (void)seq, (void)first, (void)n;
    return {};
  }
  /// Gives back the memory of the whole pages inside rows [first, first + n) of sequence
  /// `seq`: they read as zeros once backed again. Called between runs, never on rows a
  /// later run reads before writing them.
  virtual Status release_rows(int64_t batch, int64_t rows, int64_t seq, int64_t first, int64_t n) {
    (void)batch, (void)rows, (void)seq, (void)first, (void)n;
    return {};
  }
  /// Bytes of memory backing the storage now (bytes() when it is not paged).
  virtual int64_t resident_bytes() const { return bytes(); }
};

/// The memory a run uses and leaves nothing in (activations, step scratch, workspaces)
/// where a backend keeps it, as something several executables can hold: executables
/// that never run at the same time (the variants of one model, run in turn by one
/// thread) need one block, as large as the largest of them. Opaque to callers: a backend
/// accepts only its own kind (share_run_memory checks).
class RunMemory {
 public:
  virtual ~RunMemory() = default;
  virtual int64_t bytes() const = 0;
};

/// Where copy_sequence_rows reads and writes in a storage of `bytes` bytes: byte offsets
/// of the source and destination rows and their length, or the error naming the bad
/// argument.
struct SequenceRowsSpan {
  int64_t src_offset = 0, dst_offset = 0, length = 0;
};
/// Bytes [offset, offset + length) of rows [first, first + n) of sequence `seq` in a
/// storage of `bytes` bytes seen as [batch, rows, row bytes], or the error naming the bad
/// argument (back_rows / release_rows).
struct ByteRange {
  int64_t offset = 0, length = 0;
};
inline Expected<ByteRange> sequence_row_range(int64_t bytes, int64_t batch, int64_t rows, int64_t seq, int64_t first,
                                              int64_t n) {
  if (batch < 1 || rows < 1 || bytes % (batch * rows) != 0)
    return Error::invalid_argument("{} bytes do not split into [{}, {}, row] rows", bytes, batch, rows);
  if (seq < 0 || seq >= batch) return Error::invalid_argument("sequence {} outside [0, {})", seq, batch);
  if (first < 0 || n < 0 || first > rows || n > rows - first)
    return Error::invalid_argument("rows [{}, +{}) outside [0, {})", first, n, rows);
  const int64_t seq_bytes = bytes / batch, row_bytes = seq_bytes / rows;
  return ByteRange{seq * seq_bytes + first * row_bytes, n * row_bytes};
}
/// copy_sequence_rows' source and destination ranges (the first `n` rows of `src` and
/// `dst`, which must differ) by sequence_row_range.
inline Expected<SequenceRowsSpan> sequence_rows_span(int64_t bytes, int64_t batch, int64_t rows, int64_t src,
                                                     int64_t dst, int64_t n) {
  if (src == dst) return Error::invalid_argument("copy_sequence_rows: sequences {} -> {} are the same", src, dst);
  Expected<ByteRange> from = sequence_row_range(bytes, batch, rows, src, 0, n);
  if (!from) return from.error().with_context("copy_sequence_rows");
  Expected<ByteRange> to = sequence_row_range(bytes, batch, rows, dst, 0, n);
  if (!to) return to.error().with_context("copy_sequence_rows");
  return SequenceRowsSpan{from->offset, to->offset, from->length};
}

/// Bytes an executable moved between the host and its device since it was made (zero
/// for the CPU backend, whose device is the host).
struct TransferStats {
  int64_t host_to_device = 0;
  int64_t device_to_host = 0;
  int64_t runs = 0;
};

class Executable {
 public:
  virtual ~Executable() = default;

  /// Inputs, params, handles and outputs, in the order every index below refers to.
  virtual const ir::IoManifest& manifest() const = 0;

  /// Stores weight `index` from `bytes` of `dtype` (the declared dtype, or a float
  /// dtype the executable converts from). Sizes are checked by the caller.
  virtual Status set_param(size_t index, const void* data, int64_t bytes, ir::DType dtype) = 0;
  /// True once param `index` has been set.
  virtual bool param_is_set(size_t index) const = 0;
  /// Makes weight `index` read `buffer` in place, without a copy, so that several
  /// executables (the variants of one model) hold one copy of the weights. `buffer`
  /// holds exactly the declared bytes in the declared dtype (checked by the caller)
  /// and must not change while shared; a later set_param stores a private copy
  /// instead. Backends that must transform or upload weights keep the default
  /// (kUnsupported) and callers fall back to set_param; a backend may also keep a
  /// derived copy next to the shared bytes (the CPU backend packs matmul weights once
  /// per buffer for all its executables).
  virtual Status set_param_shared(size_t index, ByteView bytes) {
    (void)index;
    (void)bytes;
    return Error::unsupported("shared (zero-copy) params are not supported by this backend");
  }
  /// The host bytes weight `index` is read from (null when unset or not in host
  /// memory); lets callers check that params are shared.
  virtual const void* param_data(size_t index) const {
    (void)index;
    return nullptr;
  }

  /// Overwrites persistent handle `index` with `bytes` bytes of its declared dtype.
  virtual Status write_handle(size_t index, const void* data, int64_t bytes) = 0;
  /// The handle's current contents (declared dtype and shape).
  virtual const void* handle_data(size_t index) const = 0;
  /// The storage of handle `index`, so that another executable of the same model can
  /// bind it (share_handle); null when the backend cannot share its handles.
  virtual std::shared_ptr<HandleStorage> handle_storage(size_t index) {
    (void)index;
    return nullptr;
  }
  /// Makes handle `index` read and write `storage` (another executable's handle_storage
  /// on the same backend, at least the handle's bytes; a larger one is bound by its first
  /// bytes, as a model running fewer of its sequences binds the front of a stacked
  /// [batch, ...] cache): the executables then hold one KV cache, and moving between
  /// them copies nothing. Backends that cannot share keep the
  /// default (kUnsupported) and callers copy through write_handle instead.
  virtual Status share_handle(size_t index, std::shared_ptr<HandleStorage> storage) {
    (void)index;
    (void)storage;
    return Error::unsupported("shared handles are not supported by this backend");
  }
  /// This executable's run memory (allocated now if it was not), for share_run_memory of
  /// another executable; null when the backend keeps no such memory apart.
  virtual std::shared_ptr<RunMemory> run_memory() { return nullptr; }
  /// Makes this executable run in `memory` (another executable's run_memory on the same
  /// backend and device), growing it when this one needs more. Only for executables whose
  /// runs never overlap. Backends that cannot keep the default (kUnsupported).
  virtual Status share_run_memory(std::shared_ptr<RunMemory> memory) {
    (void)memory;
    return Error::unsupported("shared run memory is not supported by this backend");
  }
  /// Binds this executable's end of a tensor-parallel group (its all_reduce /
  /// all_gather steps call through it) before it runs; a communicator of a kind the
  /// backend cannot use is an error. Backends without collectives keep the default.
  virtual Status bind_communicator(std::shared_ptr<Communicator> comm) {
    (void)comm;
    return Error::unsupported("collectives (tensor parallelism) are not supported by this backend");
  }
  /// Host <-> device traffic so far (inputs, outputs, handle reads and writes).
  virtual TransferStats transfer_stats() const { return {}; }

  /// Runs once. `inputs[i]` points at manifest().inputs[i]'s bytes (dtype and shape
  /// already checked). Errors: a param never set, an index out of range at run time.
  virtual Status run(std::span<const void* const> inputs) = 0;

  /// Base of the activation arena; outputs live at output_slots() after a run.
  virtual const uint8_t* arena_ptr() const = 0;
  virtual std::span<const OutputSlot> output_slots() const = 0;

  /// Limits the next runs to the first `actual` of `upper` rows along the bucket axis
  /// (see CompiledGraph::set_active_extent); actual == upper turns it off.
  virtual Status set_active_extent(int64_t actual, int64_t upper) = 0;

  /// Submits a run without waiting for it (synchronous on backends without queues).
  virtual Status commit_no_wait(std::span<const void* const> inputs) { return run(inputs); }
  /// Waits for the run submitted last.
  virtual Status sync_pending() { return {}; }

  /// An independent executable: own arena and handles, sharing read-only params.
  virtual Expected<std::unique_ptr<Executable>> clone() const = 0;

  /// One line for logs: backend, arena bytes, steps.
  virtual std::string describe() const = 0;
};

}  // namespace rlx
