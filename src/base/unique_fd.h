// UniqueFd: owns one file descriptor and closes it when destroyed, unless release() hands it on
// first. For code with several ways out between getting a descriptor and passing it to its
// long-term owner, so that no way out has to remember to close it.
#pragma once

#include <unistd.h>

#include <utility>

namespace bx {

class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  ~UniqueFd() { reset(); }
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other) {
      reset();
      fd_ = other.release();
    }
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;

  int get() const { return fd_; }
  // The descriptor, no longer owned: the caller (or whom it hands it to) closes it.
  int release() { return std::exchange(fd_, -1); }
  // Closes the descriptor now, if one is held.
  void reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

}  // namespace bx
