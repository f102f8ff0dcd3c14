// bx::Status as Python exceptions: every non-OK Status reaches Python as an instance of
// bexpress.Error (or its subclass for the code, bexpress/errors.py) carrying .code and .message.
#pragma once

#include <pybind11/pybind11.h>

#include <stdexcept>

#include "bx/status.h"

namespace bx::python {

// Thrown by the bindings; pybind11 turns it into the bexpress exception (RegisterStatusError).
class StatusError : public std::runtime_error {
 public:
  explicit StatusError(Status status)
      : std::runtime_error(status.ToString()), status_(std::move(status)) {}
  const Status& status() const { return status_; }

 private:
  Status status_;
};

inline void ThrowIfError(const Status& status) {
  if (!status.ok()) throw StatusError(status);
}

// The Python exception object for `status` (for a Future's set_exception). Needs the GIL.
pybind11::object ToException(const Status& status);

// Installs the translator from StatusError. Called once from the module's init.
void RegisterStatusError(pybind11::module_& m);

}  // namespace bx::python
