// UniqueFd: move-only owner of a POSIX file descriptor.
#pragma once

#include <unistd.h>

#include <utility>

namespace rkv::reactor {

class UniqueFd {
 public:
  UniqueFd() noexcept = default;
  explicit UniqueFd(int fd) noexcept : fd_(fd) {}
  ~UniqueFd() { reset(); }

  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other) reset(other.release());
    return *this;
  }

  [[nodiscard]] int get() const noexcept { return fd_; }
  [[nodiscard]] bool valid() const noexcept { return fd_ >= 0; }
  explicit operator bool() const noexcept { return valid(); }

  // Gives up ownership without closing.
  [[nodiscard]] int release() noexcept { return std::exchange(fd_, -1); }

  // Closes the current fd (if any) and takes ownership of `fd`.
  void reset(int fd = -1) noexcept {
    const int old = std::exchange(fd_, fd);
    // On Linux the fd is released even if close() reports EINTR, so never retry.
    if (old >= 0) ::close(old);
  }

 private:
  int fd_ = -1;
};

}  // namespace rkv::reactor
