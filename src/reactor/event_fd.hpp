// EventFd: RAII eventfd(2) in counter mode, EFD_NONBLOCK | EFD_CLOEXEC.
//
// notify() may be called from any thread; consume() is meant for the thread
// that watches fd() (normally the reactor thread).
#pragma once

#include <cstdint>

#include "reactor/fd.hpp"

namespace rkv::reactor {

class EventFd {
 public:
  // Throws std::system_error if eventfd() fails.
  explicit EventFd(unsigned int initial = 0);

  EventFd(const EventFd&) = delete;
  EventFd& operator=(const EventFd&) = delete;
  EventFd(EventFd&&) noexcept = default;
  EventFd& operator=(EventFd&&) noexcept = default;
  ~EventFd() = default;

  // Adds n to the counter, making fd() readable. Thread-safe. Returns false
  // only if the counter is saturated (the reader is then certainly woken);
  // throws std::system_error on any other failure.
  bool notify(std::uint64_t n = 1);

  // Reads and resets the counter; returns 0 if it was already 0 (EAGAIN).
  std::uint64_t consume();

  [[nodiscard]] int fd() const noexcept { return fd_.get(); }

 private:
  UniqueFd fd_;
};

}  // namespace rkv::reactor
