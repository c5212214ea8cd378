// Error/Status support: code names, formatting, and the abort path used when a
// caller dereferences an Expected that holds an error (a programming bug).
#include "rlx/base/status.h"

#include <cstdio>

namespace rlx {

const char* error_code_name(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument: return "invalid argument";
    case ErrorCode::kInvalidFile: return "invalid file";
    case ErrorCode::kNotFound: return "not found";
    case ErrorCode::kUnsupported: return "unsupported";
    case ErrorCode::kIo: return "i/o error";
    case ErrorCode::kParse: return "parse error";
    case ErrorCode::kVerify: return "verify error";
    case ErrorCode::kInternal: return "internal error";
    case ErrorCode::kResourceExhausted: return "resource exhausted";
  }
  return "error";
}

std::string Error::to_string() const { return std::string(error_code_name(code_)) + ": " + message_; }

void abort_with_error(const Error& e) {
  std::fprintf(stderr, "rlx: value() on an Expected holding an error: %s\n", e.to_string().c_str());
  std::abort();
}

void assert_fail(const char* cond, const char* file, int line) {
  std::fprintf(stderr, "rlx: internal assertion failed: %s (%s:%d)\n", cond, file, line);
  std::abort();
}

}  // namespace rlx
