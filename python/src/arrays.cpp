// NumPy <-> TensorView / Tensor conversions (see arrays.h).
#include "arrays.h"

#include <cstdint>
#include <utility>

#include "errors.h"

namespace rlx::python {
namespace py = pybind11;

py::dtype numpy_dtype(ir::DType t) {
  switch (t) {
    case ir::DType::F32: return py::dtype::of<float>();
    case ir::DType::F16: return py::dtype("float16");
    case ir::DType::BF16: return py::dtype::of<uint16_t>();
    case ir::DType::F64: return py::dtype::of<double>();
    case ir::DType::I8: return py::dtype::of<int8_t>();
    case ir::DType::U8: return py::dtype::of<uint8_t>();
    case ir::DType::I32: return py::dtype::of<int32_t>();
    case ir::DType::I64: return py::dtype::of<int64_t>();
    case ir::DType::Bool: return py::dtype::of<bool>();
    default: break;
  }
  throw ErrorException(Error::unsupported("dtype {} has no NumPy equivalent", ir::dtype_name(t)));
}

namespace {

std::string dtype_text(const py::dtype& d) { return py::str(py::handle(d)).cast<std::string>(); }

bool usable_as_is(const py::array& a, const py::dtype& want) {
  return a.dtype().equal(want) && (a.flags() & py::array::c_style) &&
         (a.flags() & py::detail::npy_api::NPY_ARRAY_ALIGNED_);
}

py::module_ numpy() { return py::module_::import("numpy"); }

}  // namespace

void prepare_array(py::handle obj, ir::DType want, const std::string& what, ArrayArg* out) {
  py::module_ np = numpy();
  py::array a;
  if (py::isinstance<py::array>(obj)) {
    a = py::reinterpret_borrow<py::array>(obj);
  } else if (py::hasattr(obj, "__dlpack__") && py::hasattr(obj, "__dlpack_device__")) {
    // A DLPack producer (a PyTorch / JAX / CuPy tensor): host memory is viewed as it is.
    const py::tuple device = obj.attr("__dlpack_device__")();
    if (device.size() < 1 || device[0].cast<int>() != 1)  // kDLCPU
      throw py::type_error(what + ": a DLPack tensor on device type " + py::str(device[0]).cast<std::string>() +
                           "; rlx takes host memory (copy it to the CPU first)");
    a = py::array(np.attr("from_dlpack")(obj));
  } else {
    a = py::array(np.attr("asarray")(obj));
  }
  const py::dtype target = numpy_dtype(want);
  const bool bf16_from_float = want == ir::DType::BF16 && a.dtype().kind() == 'f';
  if (want == ir::DType::BF16 && !bf16_from_float && !a.dtype().equal(target))
    throw py::type_error(what + ": expected bf16, which takes a float array or a uint16 array of raw bf16 bits; "
                         "got numpy " + dtype_text(a.dtype()));
  if (!bf16_from_float && !usable_as_is(a, target)) {
    if (!np.attr("can_cast")(a.dtype(), target, "same_kind").cast<bool>())
      throw py::type_error(what + ": expected " + std::string(ir::dtype_name(want)) + " (numpy " +
                           dtype_text(target) + "), got numpy " +
                           dtype_text(a.dtype()) + " (no same-kind cast)");
    a = py::array(np.attr("ascontiguousarray")(a, target));
    out->copied = true;
  }
  out->shape.assign(a.shape(), a.shape() + a.ndim());
  if (bf16_from_float) {
    py::array f32 = np.attr("ascontiguousarray")(a, py::dtype::of<float>());
    const auto n = static_cast<size_t>(f32.size());
    out->bf16_bits.resize(n * 2);
    convert_from_f32(ir::DType::BF16, static_cast<const float*>(f32.data()), out->bf16_bits.data(),
                     static_cast<int64_t>(n));
    out->array = std::move(f32);
    out->copied = true;
    out->view = TensorView{want, out->shape, out->bf16_bits.data()};
    return;
  }
  out->array = std::move(a);
  out->view = TensorView{want, out->shape, out->array.data()};
}

py::array to_numpy(Tensor&& t) {
  std::vector<py::ssize_t> shape(t.shape().begin(), t.shape().end());
  if (t.dtype() == ir::DType::BF16) {
    py::array_t<float> wide(shape);
    convert_to_f32(ir::DType::BF16, t.data(), wide.mutable_data(), t.num_elements());
    return wide;
  }
  const py::dtype dt = numpy_dtype(t.dtype());
  auto* owned = new Tensor(std::move(t));
  py::capsule owner(owned, [](void* p) { delete static_cast<Tensor*>(p); });
  return py::array(dt, shape, owned->mutable_data(), owner);
}

py::tuple shape_tuple(const ir::Shape& shape) {
  py::tuple out(static_cast<size_t>(shape.rank()));
  for (int64_t i = 0; i < shape.rank(); ++i) {
    const ir::Dim& d = shape[i];
    if (d.is_static())
      out[static_cast<size_t>(i)] = py::int_(d.value());
    else
      out[static_cast<size_t>(i)] = py::str(d.to_string());
  }
  return out;
}

std::vector<int32_t> token_ids(py::handle tokens) {
  if (py::isinstance<py::str>(tokens)) throw py::type_error("expected token ids (a list of ints), got a str");
  py::array a = py::module_::import("numpy").attr("asarray")(tokens);
  if (a.ndim() != 1) throw py::type_error("tokens must be a flat list of ints");
  if (a.size() == 0) return {};
  const char kind = a.dtype().kind();
  if (kind != 'i' && kind != 'u')
    throw py::type_error("tokens must be ints, got numpy " + py::str(py::handle(a.dtype())).cast<std::string>());
  auto wide = py::array_t<int64_t, py::array::c_style | py::array::forcecast>::ensure(a);
  if (!wide) throw py::error_already_set();
  std::vector<int32_t> ids;
  ids.reserve(static_cast<size_t>(wide.size()));
  for (py::ssize_t i = 0; i < wide.size(); ++i) {
    const int64_t t = wide.data()[i];
    if (t < INT32_MIN || t > INT32_MAX)
      throw ErrorException(Error::invalid_argument("token id {} is outside the vocabulary", t));
    ids.push_back(static_cast<int32_t>(t));
  }
  return ids;
}

py::array float_array(std::vector<float>&& values, std::vector<py::ssize_t> shape) {
  auto* owned = new std::vector<float>(std::move(values));
  py::capsule owner(owned, [](void* p) { delete static_cast<std::vector<float>*>(p); });
  return py::array_t<float>(shape, owned->data(), owner);
}

}  // namespace rlx::python
