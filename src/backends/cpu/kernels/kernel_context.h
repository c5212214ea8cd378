// What every CPU kernel receives besides its operands: the thread pool to run on and
// the ISA cap. Also the small shared vocabulary (activation kinds, weight dtypes,
// dims) and per-thread scratch used inside kernels.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>

#include "backends/cpu/kernels/cpu_features.h"
#include "backends/cpu/kernels/thread_pool.h"

namespace rlx::cpu {

/// Execution context of one kernel call. Cheap to copy; owns nothing.
struct KernelContext {
  ThreadPool* pool = nullptr;          ///< null: run on the calling thread only
  IsaLevel isa = IsaLevel::kAmx;       ///< cap; clamped to what the CPU supports

  int n_threads() const { return pool ? pool->size() : 1; }
  /// The same context without a pool (for work nested inside a task).
  KernelContext single_threaded() const { return KernelContext{nullptr, isa}; }
};

/// Runs fn(i) for i in [0, n) on ctx's pool (or inline when it has none).
template <typename F>
void parallel_for(const KernelContext& ctx, int64_t n, F&& fn) {
  if (ctx.pool != nullptr && n > 1) {
    ctx.pool->parallel_for(n, fn);
  } else {
    for (int64_t i = 0; i < n; ++i) fn(i);
  }
}

/// Elementwise unary operations (also the activations of fused epilogues).
enum class UnaryOp : uint8_t {
  kIdentity, kGelu, kGeluTanh, kSilu, kRelu, kSigmoid, kTanh, kExp, kLog,
  kSqrt, kRsqrt, kNeg, kAbs, kSin, kCos, kSoftplus,
};

/// Elementwise binary operations (numpy broadcasting in elementwise.h).
enum class BinaryOp : uint8_t { kAdd, kSub, kMul, kDiv, kMax, kMin, kPow };

/// Comparisons producing uint8 booleans (0 or 1).
enum class CompareOp : uint8_t { kEq, kNe, kLt, kLe, kGt, kGe };

/// Reductions along axes.
enum class ReduceOp : uint8_t { kSum, kMean, kMax, kMin };

/// Activation applied elementwise (GEMM epilogues, unary ops).
enum class Activation : uint8_t {
  kIdentity,
  kRelu,
  kSilu,      ///< x * sigmoid(x)
  kGelu,      ///< 0.5 x (1 + erf(x / sqrt 2))
  kGeluTanh,  ///< 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
};

/// Storage type of a weight operand (B of GEMM/GEMV); arithmetic is always f32.
enum class WeightType : uint8_t { kF32, kF16, kBF16 };

/// Bytes per element of a WeightType.
constexpr size_t weight_type_size(WeightType t) { return t == WeightType::kF32 ? 4 : 2; }

/// Largest tensor rank the shape-generic kernels accept.
inline constexpr int kMaxRank = 8;

/// A small fixed-capacity shape (row-major, contiguous unless strides are given).
struct Dims {
  int rank = 0;
  int64_t d[kMaxRank] = {};

  Dims() = default;
  Dims(std::initializer_list<int64_t> dims) {
    for (int64_t v : dims) d[rank++] = v;
  }
  static Dims of(const int64_t* dims, int rank) {
    Dims r;
    for (int i = 0; i < rank; ++i) r.d[r.rank++] = dims[i];
    return r;
  }
  int64_t operator[](int i) const { return d[i]; }
  int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < rank; ++i) n *= d[i];
    return n;
  }
};

/// Identifies one of the per-thread scratch buffers (distinct users must not share).
/// kAttention: prefill attention's own rows, live while it calls the GEMM kernels
/// (which use the others). kPanels: B panels a kernel packs once on the calling thread
/// and shares with its tasks (rel_pos_attention's K and V). kGemmPanels: a stripe of B
/// that gemm() packs on the calling thread for the BF16 dot products.
enum class ScratchSlot : int {
  kPackA = 0, kPackB = 1, kTemp = 2, kShared = 3, kAttention = 4, kPanels = 5, kGemmPanels = 6, kCount = 7
};

/// Returns a 64-byte aligned buffer of at least `bytes` bytes owned by the calling
/// thread. The buffer only grows, so steady-state calls do not allocate. Contents are
/// unspecified; valid until the next call for the same slot on the same thread.
void* thread_scratch(ScratchSlot slot, size_t bytes);

/// How many times any thread's scratch has grown past the largest size asked of its
/// slot so far, process-wide: unchanged across a run means the run met no new need.
uint64_t thread_scratch_raises();

/// Grows the calling thread's buffers to the largest size asked of each slot by any
/// thread, unless it already did so since the last raise. Run on every pool thread
/// after a run that raised a need (ThreadPool::broadcast) and by a run's calling thread
/// first, it leaves no thread to allocate later when it first takes a kind of task
/// another thread has already taken: steady-state runs then allocate nothing whichever
/// thread takes which task.
void thread_scratch_catch_up();

}  // namespace rlx::cpu
