// Status and Result<T>: the one error type of bexpress.
//
// A Status is cheap when OK (an empty shared pointer: nothing allocated, copies touch no
// counter) and otherwise carries a code and a message that says what failed and why (the verbs
// call, errno, the peer, the QP number). Result<T> holds either a value or a non-OK Status; one
// built from an OK Status, a caller's bug, holds an INTERNAL error saying so (as Abseil's
// StatusOr does), in every build. Both are plain values: thread-compatible, not thread-safe.
//
// Errors are values: the library reports every failure as a Status and throws nothing of its
// own. The one exception is a caller's bug: value() (or *, ->) on a Result that holds an error
// throws bx::BadResultAccess, whose what() is that Status (as std::optional::value() throws
// std::bad_optional_access). Uncaught, the terminate handler prints it, so the cause is seen
// rather than "bad_variant_access". Check ok() first, or use BX_ASSIGN_OR_RETURN.
#pragma once

#include <exception>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

#include "bx/export.h"

namespace bx {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,     // the caller passed something wrong
  kNotFound,            // a named thing does not exist (device, key, method)
  kUnavailable,         // the resource or peer cannot be used now; retrying may help
  kResourceExhausted,   // a queue, pool or budget is full
  kFailedPrecondition,  // the object is in the wrong state for the call
  kDeadlineExceeded,
  kAborted,   // the operation was cut short (peer death, QP error, shutdown)
  kDataLoss,  // a malformed or corrupted message
  kInternal,  // a bug: an invariant did not hold
  kUnimplemented,
  kPermissionDenied,  // the caller is known but may not do this (a method kept to some peers)
};
// The highest code; a code read from the wire above it is malformed.
inline constexpr StatusCode kLastStatusCode = StatusCode::kPermissionDenied;

BX_EXPORT std::string_view StatusCodeName(StatusCode code);

class [[nodiscard]] BX_EXPORT Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message);

  static Status Ok() { return Status(); }
  // Builds a Status from an errno value, naming the call that failed: "ibv_post_send: ENOMEM ...".
  static Status FromErrno(int err, std::string_view what);

  bool ok() const { return state_ == nullptr; }
  StatusCode code() const { return state_ ? state_->code : StatusCode::kOk; }
  const std::string& message() const;
  std::string ToString() const;

  // Prefixes context to the message ("connect rdma://host:1: " + original).
  Status WithContext(std::string_view context) const;

 private:
  struct State {
    StatusCode code;
    std::string message;
  };
  std::shared_ptr<const State> state_;
};

inline Status InvalidArgument(std::string m) {
  return {StatusCode::kInvalidArgument, std::move(m)};
}
inline Status NotFound(std::string m) {
  return {StatusCode::kNotFound, std::move(m)};
}
inline Status Unavailable(std::string m) {
  return {StatusCode::kUnavailable, std::move(m)};
}
inline Status ResourceExhausted(std::string m) {
  return {StatusCode::kResourceExhausted, std::move(m)};
}
inline Status FailedPrecondition(std::string m) {
  return {StatusCode::kFailedPrecondition, std::move(m)};
}
inline Status Aborted(std::string m) {
  return {StatusCode::kAborted, std::move(m)};
}
inline Status DataLoss(std::string m) {
  return {StatusCode::kDataLoss, std::move(m)};
}
inline Status DeadlineExceeded(std::string m) {
  return {StatusCode::kDeadlineExceeded, std::move(m)};
}
inline Status Internal(std::string m) {
  return {StatusCode::kInternal, std::move(m)};
}
inline Status Unimplemented(std::string m) {
  return {StatusCode::kUnimplemented, std::move(m)};
}
inline Status PermissionDenied(std::string m) {
  return {StatusCode::kPermissionDenied, std::move(m)};
}

// Thrown by Result<T>::value() on an error: what() is the Status's ToString().
class BX_EXPORT BadResultAccess : public std::exception {
 public:
  explicit BadResultAccess(Status status);
  const char* what() const noexcept override;
  const Status& status() const { return status_; }

 private:
  Status status_;
  std::string what_;
};

// Throws BadResultAccess(status). Out of line, so that a program built with -fno-exceptions can
// use Result too: there the exception cannot be caught and terminates with the Status printed.
BX_EXPORT [[noreturn]] void ThrowBadResultAccess(const Status& status);

template <typename T>
class [[nodiscard]] BX_EXPORT Result {
 public:
  Result(T value) : v_(std::move(value)) {}        // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {  // NOLINT: implicit by design
    // Without this, ok() would be false while status().ok() is true: a caller checking either
    // would go on with no value and no error.
    if (std::get<Status>(v_).ok()) {
      v_ = Status(StatusCode::kInternal, "Result built from an OK Status: it holds no value");
    }
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  T& value() & {
    if (!ok()) ThrowBadAccess();
    return std::get<T>(v_);
  }
  const T& value() const& {
    if (!ok()) ThrowBadAccess();
    return std::get<T>(v_);
  }
  T&& value() && {
    if (!ok()) ThrowBadAccess();
    return std::get<T>(std::move(v_));
  }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }

 private:
  [[noreturn]] void ThrowBadAccess() const { ThrowBadResultAccess(std::get<Status>(v_)); }

  std::variant<T, Status> v_;
};

}  // namespace bx

// Returns early from the enclosing function when `expr` is a non-OK Status.
#define BX_RETURN_IF_ERROR(expr)             \
  do {                                       \
    ::bx::Status bx_status_ = (expr);        \
    if (!bx_status_.ok()) return bx_status_; \
  } while (0)

// Evaluates `expr`, a bx::Result<T>, once. When it is not OK, returns its Status from the
// enclosing function (which may return Status or any Result<U>); otherwise move-assigns its
// value to `lhs`, which may declare a variable or name an existing one:
//   BX_ASSIGN_OR_RETURN(auto qp, CreateQp(...));
//   BX_ASSIGN_OR_RETURN(existing, F());
// It expands to more than one statement, so it cannot be the body of an unbraced if or loop.
// The temporary's name carries __LINE__ so that several uses can share a scope; `expr` is
// variadic so that a comma inside it (template arguments) needs no extra parentheses.
#define BX_ASSIGN_OR_RETURN(lhs, ...) \
  BX_ASSIGN_OR_RETURN_IMPL_(BX_STATUS_CONCAT_(bx_result_, __LINE__), lhs, (__VA_ARGS__))

#define BX_STATUS_CONCAT_INNER_(a, b) a##b
#define BX_STATUS_CONCAT_(a, b) BX_STATUS_CONCAT_INNER_(a, b)
#define BX_ASSIGN_OR_RETURN_IMPL_(result, lhs, expr) \
  auto result = expr;                                \
  if (!result.ok()) return result.status();          \
  lhs = std::move(result).value()
