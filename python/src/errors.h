// How C++ errors reach Python: an rlx::Error becomes the Python exception rlx.Error
// (a RuntimeError subclass) carrying the C++ message and the error code's name, so
// no bad input from Python ever aborts the interpreter.
#pragma once

#include <pybind11/pybind11.h>

#include <string>
#include <utility>

#include "rlx/base/status.h"

namespace rlx::python {

/// Thrown by the binding for an rlx::Error; translated to rlx.Error on the way out.
class ErrorException : public std::exception {
 public:
  explicit ErrorException(Error error) : error_(std::move(error)) {}
  const Error& error() const { return error_; }
  const char* what() const noexcept override { return error_.message().c_str(); }

 private:
  Error error_;
};

/// Creates rlx.Error in `m` and registers the translator of ErrorException.
void register_errors(pybind11::module_& m);

/// Raises rlx.Error for a failed Status.
inline void check(const Status& s) {
  if (!s.ok()) throw ErrorException(s.error());
}

/// The value of `e`, or raises rlx.Error with its message.
template <typename T>
T unwrap(Expected<T>&& e) {
  if (!e) throw ErrorException(e.error());
  return std::move(*e);
}

}  // namespace rlx::python
