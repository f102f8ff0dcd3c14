"""bexpress errors: every failed call raises an Error carrying the C++ status code and message.

Each code has its own subclass, which also derives from the built-in exception a Python
programmer would catch for it (DeadlineExceeded is a TimeoutError, InvalidArgument a
ValueError, Unavailable a ConnectionError), so both styles work:

    try:
        rows = client.fetch("user", ids)
    except bexpress.DeadlineExceeded:
        ...
    except bexpress.Error as e:
        log(e.code, e.message)
"""


class Error(Exception):
    """A bexpress call failed. `code` is the status code's name ("UNAVAILABLE"), `message` says
    what failed and why."""

    code = "UNKNOWN"

    def __init__(self, message, code=None):
        super().__init__(f"{code or self.code}: {message}")
        if code is not None:
            self.code = code
        self.message = message


class InvalidArgument(Error, ValueError):
    code = "INVALID_ARGUMENT"


class NotFound(Error, LookupError):
    code = "NOT_FOUND"


class Unavailable(Error, ConnectionError):
    code = "UNAVAILABLE"


class ResourceExhausted(Error):
    code = "RESOURCE_EXHAUSTED"


class FailedPrecondition(Error):
    code = "FAILED_PRECONDITION"


class DeadlineExceeded(Error, TimeoutError):
    code = "DEADLINE_EXCEEDED"


class Aborted(Error):
    code = "ABORTED"


class DataLoss(Error):
    code = "DATA_LOSS"


class Internal(Error):
    code = "INTERNAL"


class Unimplemented(Error, NotImplementedError):
    code = "UNIMPLEMENTED"


class PermissionDenied(Error, PermissionError):
    code = "PERMISSION_DENIED"


_BY_CODE = {cls.code: cls for cls in (InvalidArgument, NotFound, Unavailable, ResourceExhausted,
                                      FailedPrecondition, DeadlineExceeded, Aborted, DataLoss,
                                      Internal, Unimplemented, PermissionDenied)}


def from_status(code, message):
    """The exception for a C++ status (called by the extension module)."""
    cls = _BY_CODE.get(code)
    return cls(message) if cls is not None else Error(message, code=code)
