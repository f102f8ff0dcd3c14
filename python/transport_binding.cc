// bexpress.Transport, Listener and Socket: the socket-like interface (bx/transport.h) by URL.
// A received message reaches Python as a uint8 NumPy array whose base owns the received Buffer
// (no copy); send() copies the caller's bytes once into registered memory, where the NIC can
// read them. Blocking calls release the GIL.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <future>
#include <memory>
#include <mutex>
#include <string>

#include "bindings.h"
#include "bx/transport.h"
#include "status_error.h"

namespace py = pybind11;

namespace bx::python {
namespace {

// The socket calls take milliseconds: the timeout rounded up to them.
std::chrono::milliseconds Millis(double seconds) {
  return std::chrono::ceil<std::chrono::milliseconds>(TimeoutFromSeconds(seconds));
}

// A received message: owns the Buffer that a returned array views.
struct ReceivedMessage {
  Buffer buffer;
};

// Sockets and listeners keep their transport alive: destroying it ends them.
class PySocket {
 public:
  PySocket(std::shared_ptr<Transport> transport, std::shared_ptr<Socket> socket)
      : transport_(std::move(transport)), socket_(std::move(socket)) {}

  // Copies `data` (any C-contiguous buffer) into a registered Buffer and sends it; with `wait`,
  // returns once the message has left (raising the error that ended the socket, or
  // RESOURCE_EXHAUSTED when its send queue is full).
  void Send(const py::object& data, bool wait) {
    Py_buffer view;
    if (PyObject_GetBuffer(data.ptr(), &view, PyBUF_C_CONTIGUOUS) != 0) {
      throw py::error_already_set();
    }
    const size_t bytes = static_cast<size_t>(view.len);
    Result<Buffer> message = Buffer::Allocate(bytes);
    if (message.ok() && bytes > 0) std::memcpy(message->data(), view.buf, bytes);
    PyBuffer_Release(&view);
    ThrowIfError(message.status());
    if (!wait) return socket_->Send(std::move(message).value());
    Status status;
    {
      py::gil_scoped_release release;
      std::promise<Status> left;
      socket_->Send(std::move(message).value(), [&left](const Status& s) { left.set_value(s); });
      status = left.get_future().get();
    }
    ThrowIfError(status);
  }

  py::array Receive(double timeout) {
    const auto wait = Millis(timeout);
    Result<Buffer> message = Status(StatusCode::kInternal, "not received");
    {
      py::gil_scoped_release release;
      message = socket_->Receive(wait);
    }
    ThrowIfError(message.status());
    auto owner = std::make_unique<ReceivedMessage>(ReceivedMessage{std::move(message).value()});
    const auto size = static_cast<py::ssize_t>(owner->buffer.size());
    if (size == 0) return py::array_t<uint8_t>(0);
    auto* data = reinterpret_cast<uint8_t*>(owner->buffer.data());
    py::object base = py::cast(std::move(owner));
    return py::array_t<uint8_t>({size}, {py::ssize_t{1}}, data, base);
  }

  void Close() {
    py::gil_scoped_release release;
    socket_->Close();
  }

  Socket& socket() { return *socket_; }

 private:
  std::shared_ptr<Transport> transport_;  // destroyed after the socket
  std::shared_ptr<Socket> socket_;
};

// Accepted sockets wait here for Listener.accept(); shared with the accept handler, which runs
// on an I/O thread and may outlive the Python object.
struct AcceptQueue {
  std::mutex mu;
  std::condition_variable ready;
  std::deque<std::shared_ptr<Socket>> sockets;
  bool closed = false;
};

class PyListener {
 public:
  PyListener(std::shared_ptr<Transport> transport, std::unique_ptr<Listener> listener,
             std::shared_ptr<AcceptQueue> queue)
      : transport_(std::move(transport)),
        listener_(std::move(listener)),
        queue_(std::move(queue)) {}
  ~PyListener() { Close(); }

  std::unique_ptr<PySocket> Accept(double timeout) {
    const auto wait = Millis(timeout);
    std::shared_ptr<Socket> socket;
    {
      py::gil_scoped_release release;
      std::unique_lock lock(queue_->mu);
      queue_->ready.wait_for(lock, wait,
                             [&] { return queue_->closed || !queue_->sockets.empty(); });
      if (!queue_->sockets.empty()) {
        socket = std::move(queue_->sockets.front());
        queue_->sockets.pop_front();
      }
    }
    if (socket) return std::make_unique<PySocket>(transport_, std::move(socket));
    if (queue_->closed) throw StatusError(FailedPrecondition("the listener is closed"));
    throw StatusError(DeadlineExceeded("no connection within the timeout"));
  }

  void Close() {
    if (!listener_) return;
    {
      std::lock_guard lock(queue_->mu);
      queue_->closed = true;
    }
    queue_->ready.notify_all();
    py::gil_scoped_release release;
    listener_->Close();
  }

  std::string Url() const { return listener_ ? listener_->url() : ""; }

 private:
  std::shared_ptr<Transport> transport_;  // destroyed after the listener
  std::unique_ptr<Listener> listener_;
  std::shared_ptr<AcceptQueue> queue_;
};

class PyTransport {
 public:
  PyTransport(const std::string& scheme, int io_threads, const std::string& auth_secret,
              size_t max_message_bytes) {
    TransportOptions options;
    options.io_threads = io_threads;
    options.auth_secret = auth_secret;
    options.max_message_bytes = max_message_bytes;
    Result<std::unique_ptr<Transport>> transport = CreateTransport(scheme, options);
    ThrowIfError(transport.status());
    transport_ = std::move(transport).value();
  }

  std::unique_ptr<PyListener> Listen(const std::string& url) {
    auto queue = std::make_shared<AcceptQueue>();
    Result<std::unique_ptr<Listener>> listener =
        transport_->Listen(url, [queue](const std::shared_ptr<Socket>& socket) {
          {
            std::lock_guard lock(queue->mu);
            if (!queue->closed) queue->sockets.push_back(socket);
          }
          queue->ready.notify_one();
          return SocketHandlers{};  // messages queue for Socket.receive()
        });
    ThrowIfError(listener.status());
    return std::make_unique<PyListener>(transport_, std::move(listener).value(), queue);
  }

  std::unique_ptr<PySocket> Connect(const std::string& url, double timeout) {
    const auto wait = Millis(timeout);
    Result<std::shared_ptr<Socket>> socket = Status(StatusCode::kInternal, "not connected");
    {
      py::gil_scoped_release release;
      socket = transport_->Connect(url, SocketHandlers{}, wait);
    }
    ThrowIfError(socket.status());
    return std::make_unique<PySocket>(transport_, std::move(socket).value());
  }

  std::string Scheme() const { return std::string(transport_->scheme()); }

 private:
  std::shared_ptr<Transport> transport_;
};

}  // namespace

void BindTransport(py::module_& m) {
  py::class_<ReceivedMessage>(m, "ReceivedMessage",
                              "Owns the memory of a received message (the array's .base).")
      .def_property_readonly("address", [](const ReceivedMessage& r) {
        return reinterpret_cast<uintptr_t>(r.buffer.data());
      });

  py::class_<PySocket>(m, "Socket", "One connection carrying whole messages, in order.")
      .def("send", &PySocket::Send, py::arg("data"), py::arg("wait") = true,
           "Sends the bytes of `data` (copied once into registered memory) as one message.")
      .def("receive", &PySocket::Receive, py::arg("timeout") = 5.0,
           "The next message, as a uint8 array over the received memory (no copy).")
      .def("close", &PySocket::Close)
      .def_property_readonly("scheme", [](PySocket& s) { return std::string(s.socket().scheme()); })
      .def_property_readonly("peer", [](PySocket& s) { return s.socket().peer(); })
      .def_property_readonly("error",
                             [](PySocket& s) -> py::object {
                               Status status = s.socket().status();
                               if (status.ok()) return py::none();
                               return ToException(status);
                             })
      .def("counters", [](PySocket& s) { return s.socket().counters(); });

  py::class_<PyListener>(m, "Listener")
      .def("accept", &PyListener::Accept, py::arg("timeout") = 5.0,
           "The next accepted connection, waiting up to `timeout` seconds.")
      .def("close", &PyListener::Close)
      .def_property_readonly("url", &PyListener::Url);

  py::class_<PyTransport>(m, "Transport", "rdma:// or tcp:// (bexpress.init first).")
      .def(py::init<const std::string&, int, const std::string&, size_t>(), py::arg("scheme"),
           py::arg("io_threads") = 1, py::arg("auth_secret") = "",
           py::arg("max_message_bytes") = TransportOptions{}.max_message_bytes)
      .def("listen", &PyTransport::Listen, py::arg("url"),
           "Listens on `url` (port 0: any free port; the listener's .url says which).")
      .def("connect", &PyTransport::Connect, py::arg("url"), py::arg("timeout") = 5.0)
      .def_property_readonly("scheme", &PyTransport::Scheme);
}

}  // namespace bx::python
