// NumPy arrays at the runtime boundary. Inputs: a C-contiguous, aligned array of the
// declared dtype is handed to the runtime as it is (its buffer, no copy), and so is a
// host-memory DLPack tensor (PyTorch, JAX, CuPy's host arrays: viewed through
// numpy.from_dlpack); anything else is converted once (same-kind casts only). Outputs are
// NumPy arrays, themselves DLPack producers (torch.from_dlpack takes them without a copy). Outputs: each rlx::Tensor moves into a
// capsule that owns it, and the returned array views its bytes (no copy).
//
// Also the model bindings' conversions: token ids from Python, float results to NumPy.
//
// dtypes: f32 <-> float32, f16 <-> float16, i32 <-> int32 (also i64, f64, i8, u8, bool).
// NumPy has no bfloat16: a bf16 input or param takes float arrays (rounded to bf16) or
// uint16 arrays holding raw bf16 bits (passed through); bf16 outputs come back widened
// to float32.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>
#include <vector>

#include "rlx/ir/dtype.h"
#include "rlx/ir/graph.h"
#include "rlx/runtime/tensor.h"

namespace rlx::python {

/// An array prepared for the runtime: `view` points into `array` (kept alive here).
struct ArrayArg {
  pybind11::array array;           ///< the caller's array, or its converted copy
  std::vector<int64_t> shape;      ///< view.shape points here
  std::vector<uint8_t> bf16_bits;  ///< a float array rounded to bf16 (view.data points here)
  TensorView view;
  bool copied = false;             ///< true when the caller's buffer could not be used as it is
};

/// The NumPy dtype that holds `t` without conversion (uint16 for bf16); raises rlx.Error
/// for packed and other dtypes NumPy cannot hold.
pybind11::dtype numpy_dtype(ir::DType t);

/// Prepares `obj` (an array or anything np.asarray takes) as a value of dtype `want`
/// for `what` (used in messages: "input 'x'"). Raises TypeError for a dtype that cannot
/// be cast to `want` without changing its kind (e.g. float -> int).
/// ArrayArg is returned through a pointer because view.shape points into it.
void prepare_array(pybind11::handle obj, ir::DType want, const std::string& what, ArrayArg* out);

/// Moves `t` into a NumPy array without copying its bytes (bf16 widened to float32).
pybind11::array to_numpy(Tensor&& t);

/// A shape as a Python tuple: ints for static dims, strings ("SEQ") for symbolic ones.
pybind11::tuple shape_tuple(const ir::Shape& shape);

/// Token ids from a flat list or array of ints; raises TypeError for a str, a nested or
/// non-integer array, and rlx.Error for ids that do not fit int32 (they would wrap).
std::vector<int32_t> token_ids(pybind11::handle tokens);

/// Moves `values` into a float32 array of `shape` without copying them.
pybind11::array float_array(std::vector<float>&& values, std::vector<pybind11::ssize_t> shape);

}  // namespace rlx::python
