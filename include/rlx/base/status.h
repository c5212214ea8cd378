// Error values for every API boundary where a user or a file can be wrong.
// `Status` is success or an `Error`; `Expected<T>` is a value or an `Error`.
// Messages name what was wrong and where (file, tensor, node, key, offset).
#pragma once

#include <fmt/format.h>

#include <cstdlib>
#include <new>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>

namespace rlx {

/// Broad category of an error; the message carries the detail.
enum class ErrorCode {
  kInvalidArgument,  ///< a caller passed a bad value (shape, name, flag)
  kInvalidFile,      ///< a file is malformed, truncated or hostile
  kNotFound,         ///< a named thing (file, param, key, op) does not exist
  kUnsupported,      ///< valid request this build/backend cannot serve
  kIo,               ///< the operating system failed a read/write/mmap
  kParse,            ///< text (IR, TOML, JSON) could not be parsed
  kVerify,           ///< a graph broke an IR invariant
  kInternal,         ///< our own bug surfaced as an error instead of a crash
  kResourceExhausted,  ///< a budget or the machine's memory cannot give what was asked
};

const char* error_code_name(ErrorCode code);

/// An error: a code plus a human-readable message naming what and where.
class [[nodiscard]] Error {
 public:
  Error(ErrorCode code, std::string message) : code_(code), message_(std::move(message)) {}

  ErrorCode code() const { return code_; }
  const std::string& message() const { return message_; }
  /// "invalid file: <message>"
  std::string to_string() const;

  /// Returns a copy with `context` prepended ("context: message").
  Error with_context(const std::string& context) const {
    return Error(code_, context + ": " + message_);
  }

  template <typename... Args>
  static Error invalid_argument(fmt::format_string<Args...> f, Args&&... args) {
    return Error(ErrorCode::kInvalidArgument, fmt::format(f, std::forward<Args>(args)...));
  }
  template <typename... Args>
  static Error invalid_file(fmt::format_string<Args...> f, Args&&... args) {
    return Error(ErrorCode::kInvalidFile, fmt::format(f, std::forward<Args>(args)...));
  }
  template <typename... Args>
  static Error not_found(fmt::format_string<Args...> f, Args&&... args) {
    return Error(ErrorCode::kNotFound, fmt::format(f, std::forward<Args>(args)...));
  }
  template <typename... Args>
  static Error unsupported(fmt::format_string<Args...> f, Args&&... args) {
    return Error(ErrorCode::kUnsupported, fmt::format(f, std::forward<Args>(args)...));
  }
  template <typename... Args>
  static Error io(fmt::format_string<Args...> f, Args&&... args) {
    return Error(ErrorCode::kIo, fmt::format(f, std::forward<Args>(args)...));
  }
  template <typename... Args>
  static Error parse(fmt::format_string<Args...> f, Args&&... args) {
    return Error(ErrorCode::kParse, fmt::format(f, std::forward<Args>(args)...));
  }
  template <typename... Args>
  static Error verify(fmt::format_string<Args...> f, Args&&... args) {
    return Error(ErrorCode::kVerify, fmt::format(f, std::forward<Args>(args)...));
  }
  template <typename... Args>
  static Error internal(fmt::format_string<Args...> f, Args&&... args) {
    return Error(ErrorCode::kInternal, fmt::format(f, std::forward<Args>(args)...));
  }
  template <typename... Args>
  static Error resource_exhausted(fmt::format_string<Args...> f, Args&&... args) {
    return Error(ErrorCode::kResourceExhausted, fmt::format(f, std::forward<Args>(args)...));
  }

 private:
  ErrorCode code_;
  std::string message_;
};

/// A value of type T, or an Error. Minimal stand-in for C++23 std::expected.
template <typename T>
class [[nodiscard]] Expected {
 public:
  using value_type = T;

  Expected(const T& value) : storage_(value) {}                       // NOLINT: implicit by design
  Expected(T&& value) : storage_(std::move(value)) {}                 // NOLINT
  Expected(Error error) : storage_(std::move(error)) {}               // NOLINT
  template <typename U, typename = std::enable_if_t<std::is_constructible_v<T, U&&> &&
                                                    !std::is_same_v<std::decay_t<U>, T> &&
                                                    !std::is_same_v<std::decay_t<U>, Error> &&
                                                    !std::is_same_v<std::decay_t<U>, Expected>>>
  Expected(U&& value) : storage_(T(std::forward<U>(value))) {}        // NOLINT

  bool has_value() const { return storage_.index() == 0; }
  explicit operator bool() const { return has_value(); }

  T& value() & { check(); return std::get<0>(storage_); }
  const T& value() const& { check(); return std::get<0>(storage_); }
  T&& value() && { check(); return std::get<0>(std::move(storage_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  const Error& error() const& { return std::get<1>(storage_); }
  Error&& error() && { return std::get<1>(std::move(storage_)); }

  template <typename U>
  T value_or(U&& fallback) const& {
    return has_value() ? std::get<0>(storage_) : T(std::forward<U>(fallback));
  }

 private:
  void check() const {
    if (!has_value()) detail_abort_on_error(std::get<1>(storage_));
  }
  [[noreturn]] static void detail_abort_on_error(const Error& e);
  std::variant<T, Error> storage_;
};

[[noreturn]] void abort_with_error(const Error& e);

template <typename T>
void Expected<T>::detail_abort_on_error(const Error& e) {
  abort_with_error(e);
}

/// Success, or an Error.
class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Error error) : error_(std::move(error)), ok_(false) {}  // NOLINT: implicit by design
  static Status ok_status() { return Status(); }

  bool ok() const { return ok_; }
  explicit operator bool() const { return ok_; }
  const Error& error() const { return error_; }

 private:
  Error error_{ErrorCode::kInternal, ""};
  bool ok_ = true;
};

namespace detail {
inline Error take_error(Status&& s) { return s.error(); }
inline Error take_error(const Status& s) { return s.error(); }
template <typename T>
Error take_error(Expected<T>&& e) { return std::move(e).error(); }
template <typename T>
Error take_error(const Expected<T>& e) { return e.error(); }
inline bool is_ok(const Status& s) { return s.ok(); }
template <typename T>
bool is_ok(const Expected<T>& e) { return e.has_value(); }
}  // namespace detail

}  // namespace rlx

#define RLX_CONCAT_INNER(a, b) a##b
#define RLX_CONCAT(a, b) RLX_CONCAT_INNER(a, b)

/// TRY(expr): evaluate a Status/Expected expression; on error return that error.
#define TRY(expr)                                                            \
  do {                                                                       \
    auto&& rlx_try_result_ = (expr);                                         \
    if (!::rlx::detail::is_ok(rlx_try_result_))                             \
      return ::rlx::detail::take_error(std::move(rlx_try_result_));          \
  } while (0)

/// ASSIGN_OR_RETURN(lhs, expr): lhs = *expr, or return expr's error.
#define ASSIGN_OR_RETURN(lhs, expr) \
  ASSIGN_OR_RETURN_IMPL(RLX_CONCAT(rlx_aor_, __LINE__), lhs, expr)
#define ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr)           \
  auto tmp = (expr);                                    \
  if (!tmp.has_value()) return std::move(tmp).error(); \
  lhs = std::move(tmp).value()

/// Internal invariant check (our bugs only, never user input).
#define RLX_ASSERT(cond)                                                   \
  do {                                                                     \
    if (!(cond)) ::rlx::assert_fail(#cond, __FILE__, __LINE__);            \
  } while (0)

namespace rlx {
[[noreturn]] void assert_fail(const char* cond, const char* file, int line);
}
