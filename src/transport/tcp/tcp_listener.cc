#include "transport/tcp/tcp_listener.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <utility>

#include "transport/socket_util.h"
#include "transport/tcp/tcp_socket.h"

namespace bx::tcp {

// The listening socket's epoll handler. Everything but Start runs on the first I/O thread.
class TcpListener::Acceptor final : public IoThread::Handler,
                                    public std::enable_shared_from_this<Acceptor> {
 public:
  Acceptor(int fd, std::vector<std::shared_ptr<IoThread>> io_threads,
           const TransportOptions& options, AcceptHandler on_accept)
      : fd_(fd),
        io_threads_(std::move(io_threads)),
        options_(options),
        on_accept_(std::move(on_accept)) {}
  ~Acceptor() override {
    if (fd_ >= 0) ::close(fd_);
  }

  Status Start() { return io_threads_.front()->Add(fd_, EPOLLIN, shared_from_this()); }
  IoThread& home() { return *io_threads_.front(); }

  void OnEvents(uint32_t) override {
    while (fd_ >= 0) {
      sockaddr_storage address{};
      socklen_t length = sizeof(address);
      int fd = accept4(fd_, reinterpret_cast<sockaddr*>(&address), &length,
                       SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        // EAGAIN: nothing more to accept. EMFILE and the like: the connection stays in the
        // backlog and epoll reports it again; nothing better to do than try later.
        return;
      }
      (void)transport::SetNoDelay(fd);  // a failure only costs latency
      std::shared_ptr<IoThread> io_thread = io_threads_[next_thread_++ % io_threads_.size()];
      std::shared_ptr<TcpSocket> socket = TcpSocket::Create(
          fd, io_thread, options_,
          transport::FormatAddress("tcp", reinterpret_cast<sockaddr*>(&address), length));
      io_thread->Post(
          [socket, self = shared_from_this()] { (void)socket->Start(self->on_accept_(socket)); });
    }
  }

  void Shutdown(const Status&) override { CloseOnIoThread(); }

  void CloseOnIoThread() {
    if (fd_ < 0) return;
    home().Remove(fd_, this);
    ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_;
  const std::vector<std::shared_ptr<IoThread>> io_threads_;
  const TransportOptions options_;
  const AcceptHandler on_accept_;
  size_t next_thread_ = 0;
};

Result<std::unique_ptr<TcpListener>> TcpListener::Start(
    int fd, std::string url, std::vector<std::shared_ptr<IoThread>> io_threads,
    const TransportOptions& options, AcceptHandler on_accept) {
  auto acceptor =
      std::make_shared<Acceptor>(fd, std::move(io_threads), options, std::move(on_accept));
  BX_RETURN_IF_ERROR(acceptor->Start());
  return std::unique_ptr<TcpListener>(new TcpListener(std::move(url), std::move(acceptor)));
}

TcpListener::~TcpListener() {
  Close();
}

void TcpListener::Close() {
  std::shared_ptr<Acceptor> acceptor = acceptor_;
  if (acceptor->home().IsCurrent()) {
    acceptor->CloseOnIoThread();
  } else if (IoThread::OnAnyIoThread()) {
    // Waiting for one I/O thread from another could deadlock: close soon rather than now.
    acceptor->home().Post([acceptor] { acceptor->CloseOnIoThread(); });
  } else {
    acceptor->home().RunAndWait([acceptor] { acceptor->CloseOnIoThread(); });
  }
}

}  // namespace bx::tcp
