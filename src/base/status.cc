#include "bx/status.h"

#include <cstring>

namespace bx {

std::string_view StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return "OK";
    case StatusCode::kInvalidArgument:
      return "INVALID_ARGUMENT";
    case StatusCode::kNotFound:
      return "NOT_FOUND";
    case StatusCode::kUnavailable:
      return "UNAVAILABLE";
    case StatusCode::kResourceExhausted:
      return "RESOURCE_EXHAUSTED";
    case StatusCode::kFailedPrecondition:
      return "FAILED_PRECONDITION";
    case StatusCode::kDeadlineExceeded:
      return "DEADLINE_EXCEEDED";
    case StatusCode::kAborted:
      return "ABORTED";
    case StatusCode::kDataLoss:
      return "DATA_LOSS";
    case StatusCode::kInternal:
      return "INTERNAL";
    case StatusCode::kUnimplemented:
      return "UNIMPLEMENTED";
    case StatusCode::kPermissionDenied:
      return "PERMISSION_DENIED";
  }
  return "UNKNOWN";
}

BadResultAccess::BadResultAccess(Status status)
    : status_(std::move(status)), what_(status_.ToString()) {}

const char* BadResultAccess::what() const noexcept {
  return what_.c_str();
}

void ThrowBadResultAccess(const Status& status) {
  throw BadResultAccess(status);
}

Status::Status(StatusCode code, std::string message) {
  if (code != StatusCode::kOk) state_ = std::make_shared<State>(State{code, std::move(message)});
}

Status Status::FromErrno(int err, std::string_view what) {
  StatusCode code = StatusCode::kInternal;
  switch (err) {
    case EINVAL:
      code = StatusCode::kInvalidArgument;
      break;
    case ENOENT:
    case ENODEV:
      code = StatusCode::kNotFound;
      break;
    case ENOMEM:
    case ENOSPC:
      code = StatusCode::kResourceExhausted;
      break;
    case EAGAIN:
    case ENOSYS:
    case ECONNREFUSED:
      code = StatusCode::kUnavailable;
      break;
    case ECONNRESET:
    case EPIPE:
      code = StatusCode::kAborted;
      break;
    case ETIMEDOUT:
      code = StatusCode::kDeadlineExceeded;
      break;
    default:
      break;
  }
  char buf[128];
  const char* text = strerror_r(err, buf, sizeof(buf));
  return Status(code, std::string(what) + ": " + text + " (errno " + std::to_string(err) + ")");
}

const std::string& Status::message() const {
  static const std::string kEmpty;
  return state_ ? state_->message : kEmpty;
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  return std::string(StatusCodeName(state_->code)) + ": " + state_->message;
}

Status Status::WithContext(std::string_view context) const {
  if (ok()) return *this;
  return Status(state_->code, std::string(context) + ": " + state_->message);
}

}  // namespace bx
