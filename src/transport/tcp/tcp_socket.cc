#include "transport/tcp/tcp_socket.h"

#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include <fmt/core.h>

namespace bx::tcp {
namespace {

// Received bytes are parsed from here. 64 KiB takes hundreds of small messages per read(), and
// is what a large message's first read copies at most; the rest goes straight into its Buffer.
constexpr size_t kStagingBytes = size_t{64} << 10;
// iovecs per sendmsg: 32 queued frames (header + payload each) per system call.
constexpr int kMaxIovecs = 64;
// From this size on, a message's payload is read by the kernel straight into its Buffer, and,
// while such messages keep coming, reads stop at the next frame header so that no payload bytes
// land in the staging area (a 64 KiB memcpy costs as much as the rest of a loopback round trip).
constexpr size_t kDirectReadBytes = size_t{16} << 10;
// A message's buffer starts at this (or its length, when smaller) and grows fourfold as its
// bytes arrive: a header announcing max_message_bytes reserves 1 MiB, not the whole, until the
// peer has actually sent that much (4x what arrived at most). The cost, one copy of about a
// third of a message above 1 MiB, falls on large messages only.
constexpr size_t kFirstReceiveBytes = size_t{1} << 20;
constexpr size_t kReceiveGrowth = 4;
// read() calls per epoll event before the other sockets of the I/O thread get their turn
// (epoll is level-triggered, so data left over is reported again).
constexpr int kReadsPerEvent = 16;

}  // namespace

std::shared_ptr<TcpSocket> TcpSocket::Create(int fd, std::shared_ptr<IoThread> io_thread,
                                             const TransportOptions& options, std::string peer) {
  return std::shared_ptr<TcpSocket>(
      new TcpSocket(fd, std::move(io_thread), options, std::move(peer)));
}

TcpSocket::TcpSocket(int fd, std::shared_ptr<IoThread> io_thread, const TransportOptions& options,
                     std::string peer)
    : fd_(fd),
      io_thread_(std::move(io_thread)),
      max_message_bytes_(options.max_message_bytes),
      max_queued_bytes_(options.max_queued_bytes),
      peer_(std::move(peer)) {}

TcpSocket::~TcpSocket() {
  if (!torn_down_) ::close(fd_);
}

Status TcpSocket::Start(SocketHandlers handlers) {
  handlers_ = std::move(handlers);
  has_message_handler_ = bool(handlers_.on_message);
  staging_.resize(kStagingBytes);
  Status status = io_thread_->Add(fd_, EPOLLIN, shared_from_this());
  if (!status.ok()) {
    std::lock_guard<std::mutex> lock(send_mutex_);
    BeginEndingLocked(status);
  }
  return status;
}

void TcpSocket::WriteTo(Buffer message, RemoteBuffer, uint16_t, SendCallback done) {
  message.Reset();
  if (done) done(Unimplemented("WriteTo needs rdma://; tcp:// has no one-sided writes"));
}

void TcpSocket::Send(Buffer message, SendCallback done) {
  auto refuse = [&](const Status& status) {
    message.Reset();
    if (done) done(status);
  };
  const size_t size = message.size();
  if (size > max_message_bytes_) {
    return refuse(InvalidArgument(
        fmt::format("tcp send to {}: message of {} bytes exceeds max_message_bytes ({})", peer_,
                    size, max_message_bytes_)));
  }
  Finished finished;
  bool write_failed = false;
  {
    std::unique_lock<std::mutex> lock(send_mutex_);
    if (!status_.ok()) {
      Status status = status_;
      lock.unlock();
      return refuse(status);
    }
    // A high-water mark, as over rdma: a message of any size is taken while the queue holds less
    // than the budget (else a large reply would be refused for a heartbeat queued ahead of it).
    if (queued_bytes_ >= max_queued_bytes_) {
      size_t queued = queued_bytes_;
      lock.unlock();
      counters_.sends_refused_queue_full.fetch_add(1, std::memory_order_relaxed);
      return refuse(ResourceExhausted(
          fmt::format("tcp send to {}: {} bytes already queued, max_queued_bytes is {}", peer_,
                      queued, max_queued_bytes_)));
    }
    send_queue_.push_back({EncodeFrameHeader(size), std::move(message), std::move(done)});
    queued_bytes_ += size;
    // Nothing ahead of it and the kernel not known to be full: write now, from this thread.
    if (send_queue_.size() == 1 && !writable_armed_) {
      FlushLocked(&finished);
      write_failed = !status_.ok();
    }
  }
  Complete(std::move(finished), Status::Ok());
  if (write_failed) {
    io_thread_->Post([self = shared_from_this()] { self->Teardown(self->status()); });
  }
}

void TcpSocket::FlushLocked(Finished* finished) {
  while (!send_queue_.empty()) {
    iovec iov[kMaxIovecs];
    int count = 0;
    size_t requested = 0;
    for (PendingSend& pending : send_queue_) {
      if (count + 2 > kMaxIovecs) break;
      size_t offset = pending.bytes_written;
      if (offset < kFrameHeaderBytes) {
        iov[count++] = {pending.header.data() + offset, kFrameHeaderBytes - offset};
        offset = 0;
      } else {
        offset -= kFrameHeaderBytes;
      }
      if (pending.message.size() > offset) {
        iov[count++] = {pending.message.data() + offset, pending.message.size() - offset};
      }
    }
    for (int i = 0; i < count; ++i) requested += iov[i].iov_len;
    msghdr header{};
    header.msg_iov = iov;
    header.msg_iovlen = count;
    ssize_t sent = ::sendmsg(fd_, &header, MSG_NOSIGNAL | MSG_DONTWAIT);
    counters_.sendmsg_calls.fetch_add(1, std::memory_order_relaxed);
    if (sent < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      BeginEndingLocked(Status::FromErrno(errno, "tcp send to " + peer_));
      return;
    }
    for (size_t left = static_cast<size_t>(sent); left > 0;) {
      PendingSend& front = send_queue_.front();
      size_t frame_bytes = kFrameHeaderBytes + front.message.size();
      size_t taken = std::min(left, frame_bytes - front.bytes_written);
      front.bytes_written += taken;
      left -= taken;
      if (front.bytes_written < frame_bytes) break;
      queued_bytes_ -= front.message.size();
      counters_.messages_sent.fetch_add(1, std::memory_order_relaxed);
      counters_.bytes_sent.fetch_add(front.message.size(), std::memory_order_relaxed);
      finished->push_back(std::move(front));
      send_queue_.pop_front();
    }
    // A short write means the kernel's buffer is full: the next call would only say EAGAIN.
    if (static_cast<size_t>(sent) < requested) break;
  }
  bool want_writable = !send_queue_.empty();
  if (want_writable != writable_armed_) {
    if (want_writable) counters_.send_queue_stalls.fetch_add(1, std::memory_order_relaxed);
    Status status = io_thread_->Modify(fd_, want_writable ? EPOLLIN | EPOLLOUT : EPOLLIN, this);
    if (!status.ok()) {
      BeginEndingLocked(status.WithContext("tcp socket to " + peer_));
      return;
    }
    writable_armed_ = want_writable;
  }
}

void TcpSocket::Complete(Finished finished, const Status& status) {
  if (finished.empty()) return;
  // The buffers go back to bemalloc before the callbacks run, as Socket::Send promises.
  std::vector<SendCallback> callbacks;
  for (PendingSend& pending : finished) {
    pending.message.Reset();
    if (pending.done) callbacks.push_back(std::move(pending.done));
  }
  if (callbacks.empty()) return;
  auto run = [callbacks = std::move(callbacks), status]() {
    for (const SendCallback& callback : callbacks) callback(status);
  };
  if (io_thread_->IsCurrent()) {
    run();
  } else {
    io_thread_->Post(std::move(run));
  }
}

void TcpSocket::BeginEndingLocked(Status reason) {
  if (status_.ok()) status_ = std::move(reason);
}

Result<Buffer> TcpSocket::Receive(std::chrono::milliseconds timeout) {
  if (has_message_handler_) {
    return FailedPrecondition("tcp socket to " + peer_ +
                              ": Receive() on a socket with an on_message handler");
  }
  return received_.Pop(timeout);
}

void TcpSocket::Close() {
  {
    std::lock_guard<std::mutex> lock(send_mutex_);
    if (!status_.ok()) return;  // already ending: that reason stands
    closed_locally_ = true;
    status_ = Aborted("tcp socket to " + peer_ + " closed by Close()");
  }
  close_requested_ = true;
  // Torn down on the I/O thread, never inside a handler that may be running there now.
  io_thread_->Post([self = shared_from_this()] { self->Teardown(self->status()); });
}

Status TcpSocket::status() const {
  std::lock_guard<std::mutex> lock(send_mutex_);
  return status_;
}

std::map<std::string, uint64_t> TcpSocket::counters() const {
  size_t queued = 0;
  {
    std::lock_guard<std::mutex> lock(send_mutex_);
    queued = queued_bytes_;
  }
  auto get = [](const std::atomic<uint64_t>& value) {
    return value.load(std::memory_order_relaxed);
  };
  return {
      {"messages_sent", get(counters_.messages_sent)},
      {"bytes_sent", get(counters_.bytes_sent)},
      {"messages_received", get(counters_.messages_received)},
      {"bytes_received", get(counters_.bytes_received)},
      {"sendmsg_calls", get(counters_.sendmsg_calls)},
      {"read_calls", get(counters_.read_calls)},
      {"sends_refused_queue_full", get(counters_.sends_refused_queue_full)},
      {"send_queue_stalls", get(counters_.send_queue_stalls)},
      {"staged_copy_bytes", get(counters_.staged_copy_bytes)},
      {"grown_copy_bytes", get(counters_.grown_copy_bytes)},
      {"queued_bytes", queued},
  };
}

void TcpSocket::OnEvents(uint32_t events) {
  if (torn_down_) return;
  if (events & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
    ReadAvailable();  // also how errors and end of stream are found: read() reports them
    if (torn_down_) return;
  }
  if (events & EPOLLOUT) {
    Finished finished;
    bool write_failed = false;
    {
      std::lock_guard<std::mutex> lock(send_mutex_);
      if (status_.ok()) FlushLocked(&finished);
      write_failed = !status_.ok() && !closed_locally_;
    }
    Complete(std::move(finished), Status::Ok());
    if (write_failed) Teardown(status());
  }
}

void TcpSocket::ReadAvailable() {
  for (int round = 0; round < kReadsPerEvent && !close_requested_; ++round) {
    size_t payload_room = 0;
    size_t requested = 0;
    ssize_t n = 0;
    if (reading_payload_) {
      // The staging area is empty while a payload is read: the payload first, then what follows
      // (only once the buffer holds the whole message: before that, what follows is payload).
      payload_room = incoming_.size() - incoming_filled_;
      size_t staging_room = incoming_.size() < incoming_length_ ? 0
                            : large_messages_                   ? kFrameHeaderBytes
                                                                : staging_.size();
      iovec iov[2] = {{incoming_.data() + incoming_filled_, payload_room},
                      {staging_.data(), staging_room}};
      requested = payload_room + staging_room;
      n = ::readv(fd_, iov, 2);
    } else {
      if (staged_begin_ > 0) {  // at most a partial header is left: move it to the front
        std::memmove(staging_.data(), staging_.data() + staged_begin_, staged_end_ - staged_begin_);
        staged_end_ -= staged_begin_;
        staged_begin_ = 0;
      }
      size_t limit = large_messages_ ? kFrameHeaderBytes : staging_.size();
      requested = (limit > staged_end_ ? limit : staging_.size()) - staged_end_;
      n = ::read(fd_, staging_.data() + staged_end_, requested);
    }
    counters_.read_calls.fetch_add(1, std::memory_order_relaxed);
    if (n > 0) {
      size_t into_payload = std::min(static_cast<size_t>(n), payload_room);
      Status status = ConsumeRead(into_payload, static_cast<size_t>(n) - into_payload);
      if (!status.ok()) {
        return Teardown(status.WithContext("tcp socket from " + peer_));
      }
      if (static_cast<size_t>(n) < requested) return;  // drained; epoll reports what comes next
      continue;
    }
    if (n == 0) {
      if (reading_payload_) {
        return Teardown(DataLoss(fmt::format(
            "tcp socket from {}: peer closed the connection in the middle of a message ({} of {} "
            "payload bytes)",
            peer_, incoming_filled_, incoming_length_)));
      }
      if (staged_end_ > staged_begin_) {
        return Teardown(DataLoss(fmt::format(
            "tcp socket from {}: peer closed the connection in the middle of a frame header ({} "
            "of {} bytes)",
            peer_, staged_end_ - staged_begin_, kFrameHeaderBytes)));
      }
      return Teardown(Aborted("tcp socket from " + peer_ + ": peer closed the connection"));
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return;
    return Teardown(Status::FromErrno(errno, "tcp read from " + peer_));
  }
}

Status TcpSocket::ConsumeRead(size_t into_payload, size_t into_staging) {
  if (reading_payload_) {
    incoming_filled_ += into_payload;
    if (incoming_filled_ == incoming_length_) {
      reading_payload_ = false;
      Deliver(std::move(incoming_));
    } else if (incoming_filled_ == incoming_.size()) {
      BX_RETURN_IF_ERROR(GrowIncoming());
    }
  }
  staged_end_ += into_staging;
  while (!reading_payload_ && staged_end_ - staged_begin_ >= kFrameHeaderBytes &&
         !close_requested_) {
    BX_ASSIGN_OR_RETURN(uint64_t length,
                        DecodeFrameHeader(&staging_[staged_begin_], max_message_bytes_));
    staged_begin_ += kFrameHeaderBytes;
    BX_RETURN_IF_ERROR(StartMessage(length));
    size_t copied = std::min<size_t>(length, staged_end_ - staged_begin_);
    if (copied > 0) std::memcpy(incoming_.data(), &staging_[staged_begin_], copied);
    counters_.staged_copy_bytes.fetch_add(copied, std::memory_order_relaxed);
    staged_begin_ += copied;
    incoming_filled_ = copied;
    if (incoming_filled_ == incoming_length_) {
      reading_payload_ = false;
      Deliver(std::move(incoming_));
    } else if (incoming_filled_ == incoming_.size()) {
      BX_RETURN_IF_ERROR(GrowIncoming());
    }
  }
  if (staged_begin_ == staged_end_) staged_begin_ = staged_end_ = 0;
  return Status::Ok();
}

Status TcpSocket::StartMessage(uint64_t length) {
  // DecodeFrameHeader has bounded `length` by max_message_bytes; the buffer starts smaller still
  // (kFirstReceiveBytes) and grows only as the payload arrives.
  BX_ASSIGN_OR_RETURN(incoming_, Buffer::Allocate(std::min<uint64_t>(length, kFirstReceiveBytes)));
  incoming_length_ = length;
  incoming_filled_ = 0;
  large_messages_ = length >= kDirectReadBytes;
  reading_payload_ = true;
  return Status::Ok();
}

// The buffer is full and the message is not: a buffer kReceiveGrowth times larger (at most the
// message's length) takes over what arrived.
Status TcpSocket::GrowIncoming() {
  const size_t next = std::min(incoming_length_, incoming_.size() * kReceiveGrowth);
  BX_ASSIGN_OR_RETURN(Buffer bigger, Buffer::Allocate(next));
  std::memcpy(bigger.data(), incoming_.data(), incoming_filled_);
  counters_.grown_copy_bytes.fetch_add(incoming_filled_, std::memory_order_relaxed);
  incoming_ = std::move(bigger);
  return Status::Ok();
}

void TcpSocket::Deliver(Buffer message) {
  counters_.messages_received.fetch_add(1, std::memory_order_relaxed);
  counters_.bytes_received.fetch_add(message.size(), std::memory_order_relaxed);
  if (close_requested_) return;  // no message after Close()
  if (handlers_.on_message) {
    handlers_.on_message(*this, std::move(message));
  } else {
    received_.Push(std::move(message));
  }
}

void TcpSocket::Shutdown(const Status& reason) {
  Teardown(reason);
}

void TcpSocket::Teardown(Status reason) {
  if (torn_down_) return;
  torn_down_ = true;
  std::deque<PendingSend> pending;
  Status status;
  bool closed_locally = false;
  {
    std::lock_guard<std::mutex> lock(send_mutex_);
    BeginEndingLocked(std::move(reason));
    status = status_;
    closed_locally = closed_locally_;
    pending.swap(send_queue_);
    queued_bytes_ = 0;
  }
  io_thread_->Remove(fd_, this);
  ::close(fd_);
  peer_slot_.Release();
  incoming_.Reset();
  reading_payload_ = false;
  staging_ = {};

  Finished failed(std::make_move_iterator(pending.begin()), std::make_move_iterator(pending.end()));
  Complete(std::move(failed), status);
  received_.Close(status);
  // Moved out first: on_close may drop the last reference the handlers hold to this socket.
  SocketHandlers handlers = std::move(handlers_);
  handlers_ = {};
  if (handlers.on_close) handlers.on_close(*this, closed_locally ? Status::Ok() : status);
}

}  // namespace bx::tcp
