// rlx.Error: the Python face of rlx::Error (message and code name), registered once
// per interpreter by the module's init.
#include "errors.h"

namespace rlx::python {
namespace {

namespace py = pybind11;

// error_code_name gives "kInvalidArgument"-style names; Python sees "invalid_argument".
std::string python_code_name(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument: return "invalid_argument";
    case ErrorCode::kInvalidFile: return "invalid_file";
    case ErrorCode::kNotFound: return "not_found";
    case ErrorCode::kUnsupported: return "unsupported";
    case ErrorCode::kIo: return "io";
    case ErrorCode::kParse: return "parse";
    case ErrorCode::kVerify: return "verify";
    case ErrorCode::kInternal: return "internal";
    case ErrorCode::kResourceExhausted: return "resource_exhausted";
  }
  return "internal";
}

}  // namespace

void register_errors(py::module_& m) {
  // Kept alive for the interpreter's lifetime: the translator below refers to it.
  static py::handle error_type;
  error_type = PyErr_NewExceptionWithDoc(
      "rlx.Error",
      "An error reported by RLX (bad input, a malformed model file, an unsupported request). "
      "str(e) is the C++ message; e.code names its kind (invalid_argument, invalid_file, "
      "not_found, unsupported, io, parse, verify, internal, resource_exhausted).",
      PyExc_RuntimeError, nullptr);
  if (!error_type) throw py::error_already_set();
  m.add_object("Error", error_type);
  py::register_exception_translator([](std::exception_ptr p) {
    if (!p) return;
    try {
      std::rethrow_exception(p);
    } catch (const ErrorException& e) {
      py::object instance = py::reinterpret_borrow<py::object>(error_type)(e.error().message());
      instance.attr("code") = python_code_name(e.error().code());
      PyErr_SetObject(error_type.ptr(), instance.ptr());
    }
  });
}

}  // namespace rlx::python
