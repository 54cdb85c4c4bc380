#include "reactor/event_fd.hpp"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <system_error>

namespace rkv::reactor {

EventFd::EventFd(unsigned int initial) : fd_(::eventfd(initial, EFD_NONBLOCK | EFD_CLOEXEC)) {
  if (!fd_) throw std::system_error(errno, std::system_category(), "eventfd(EFD_NONBLOCK|EFD_CLOEXEC)");
}

bool EventFd::notify(std::uint64_t n) {
  for (;;) {
    const ssize_t rc = ::write(fd_.get(), &n, sizeof n);
    if (rc == static_cast<ssize_t>(sizeof n)) return true;
    if (rc < 0 && errno == EINTR) continue;
    if (rc < 0 && errno == EAGAIN) return false;  // counter would overflow
    throw std::system_error(rc < 0 ? errno : EIO, std::system_category(), "eventfd write");
  }
}

std::uint64_t EventFd::consume() {
  for (;;) {
    std::uint64_t value = 0;
    const ssize_t rc = ::read(fd_.get(), &value, sizeof value);
    if (rc == static_cast<ssize_t>(sizeof value)) return value;
    if (rc < 0 && errno == EINTR) continue;
    if (rc < 0 && errno == EAGAIN) return 0;
    throw std::system_error(rc < 0 ? errno : EIO, std::system_category(), "eventfd read");
  }
}

}  // namespace rkv::reactor
