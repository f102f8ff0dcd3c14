// StatusError translation (status_error.h): the exception classes live in bexpress/errors.py,
// where Python users read them; this side only names the code.
#include "status_error.h"

#include <string>

namespace py = pybind11;

namespace bx::python {

py::object ToException(const Status& status) {
  py::object from_status = py::module_::import("bexpress.errors").attr("from_status");
  return from_status(std::string(StatusCodeName(status.code())), status.message());
}

void RegisterStatusError(py::module_& m) {
  py::register_exception_translator([](std::exception_ptr error) {
    try {
      if (error) std::rethrow_exception(error);
    } catch (const StatusError& e) {
      py::object exception = ToException(e.status());
      PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exception.ptr())), exception.ptr());
    }
  });
  // The code names, as errors.py maps them (for tests and users who switch on the code).
  py::list names;
  for (int code = 0; code <= static_cast<int>(kLastStatusCode); ++code) {
    names.append(std::string(StatusCodeName(static_cast<StatusCode>(code))));
  }
  m.attr("STATUS_CODES") = names;
}

}  // namespace bx::python
