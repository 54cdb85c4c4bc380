#include "reactor/signal_source.hpp"

#include <pthread.h>
#include <spdlog/spdlog.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <cerrno>
#include <stdexcept>
#include <string>
#include <system_error>
#include <utility>

#include "reactor/reactor.hpp"

namespace rkv::reactor {
namespace {

// Reads one queued signal; 0 if none (EAGAIN) or on error.
int read_one(int fd) noexcept {
  for (;;) {
    signalfd_siginfo info{};
    const ssize_t rc = ::read(fd, &info, sizeof info);
    if (rc == static_cast<ssize_t>(sizeof info)) return static_cast<int>(info.ssi_signo);
    if (rc < 0 && errno == EINTR) continue;
    if (rc < 0 && errno != EAGAIN) SPDLOG_ERROR("reactor: signalfd {} read failed: errno {}", fd, errno);
    return 0;
  }
}

}  // namespace

SignalWatch::SignalWatch() noexcept {
  ::sigemptyset(&watched_);
  ::sigemptyset(&blocked_);
}

SignalWatch::SignalWatch(Reactor& reactor, std::initializer_list<int> signals,
                         std::function<void(int signo)> cb)
    : SignalWatch() {
  reactor.assert_owner_thread();
  if (signals.size() == 0) throw std::invalid_argument("Reactor::on_signals: empty signal list");
  for (const int signo : signals) {
    if (signo <= 0 || signo > SIGRTMAX || signo == SIGKILL || signo == SIGSTOP) {
      throw std::invalid_argument("Reactor::on_signals: signal " + std::to_string(signo) +
                                  " cannot be watched");
    }
    // Two signalfds for one signal would each see only some deliveries.
    if (::sigismember(&reactor.signals_, signo) == 1) {
      throw std::invalid_argument("Reactor::on_signals: signal " + std::to_string(signo) +
                                  " is already watched by another SignalWatch");
    }
    ::sigaddset(&watched_, signo);
  }

  sigset_t previous;
  if (const int rc = ::pthread_sigmask(SIG_BLOCK, &watched_, &previous); rc != 0) {
    throw std::system_error(rc, std::system_category(), "pthread_sigmask(SIG_BLOCK)");
  }
  // Only unblock later what was unblocked before; the rest belongs to the caller.
  for (const int signo : signals) {
    if (::sigismember(&previous, signo) == 0) ::sigaddset(&blocked_, signo);
  }
  const auto rollback = [this] { ::pthread_sigmask(SIG_UNBLOCK, &blocked_, nullptr); };

  fd_.reset(::signalfd(-1, &watched_, SFD_NONBLOCK | SFD_CLOEXEC));
  if (!fd_) {
    const int err = errno;
    rollback();
    throw std::system_error(err, std::system_category(), "signalfd(SFD_NONBLOCK|SFD_CLOEXEC)");
  }
  try {
    // One signal per dispatch: the callback may destroy this watch (closing the
    // fd), so never touch the fd after calling it. Level-triggered epoll
    // brings us back for the rest.
    reg_ = reactor.watch(fd_.get(), EPOLLIN, [fd = fd_.get(), cb = std::move(cb)](std::uint32_t) {
      if (const int signo = read_one(fd); signo != 0) {
        SPDLOG_DEBUG("reactor: signal {} received", signo);
        cb(signo);
      }
    });
  } catch (...) {
    fd_.reset();
    rollback();
    throw;
  }
  reactor_ = &reactor;
  for (const int signo : signals) ::sigaddset(&reactor.signals_, signo);
  SPDLOG_DEBUG("reactor: watching {} signal(s) on signalfd {}", signals.size(), fd_.get());
}

SignalWatch::SignalWatch(SignalWatch&& other) noexcept : SignalWatch() { take(other); }

SignalWatch& SignalWatch::operator=(SignalWatch&& other) noexcept {
  if (this != &other) {
    reset();
    take(other);
  }
  return *this;
}

SignalWatch::~SignalWatch() { reset(); }

void SignalWatch::take(SignalWatch& other) noexcept {
  reactor_ = std::exchange(other.reactor_, nullptr);
  watched_ = other.watched_;
  blocked_ = other.blocked_;
  fd_ = std::move(other.fd_);
  reg_ = std::move(other.reg_);
  ::sigemptyset(&other.watched_);
  ::sigemptyset(&other.blocked_);
}

void SignalWatch::reset() noexcept {
  Reactor* reactor = std::exchange(reactor_, nullptr);
  if (reactor == nullptr) return;
  reactor->assert_owner_thread();
  reg_.reset();
  // Drain first: unblocking a still-queued signal would run its default
  // action (SIGUSR1/SIGTERM terminate the process).
  while (const int signo = read_one(fd_.get())) {
    SPDLOG_DEBUG("reactor: dropping signal {} queued at watch teardown", signo);
  }
  fd_.reset();
  if (const int rc = ::pthread_sigmask(SIG_UNBLOCK, &blocked_, nullptr); rc != 0) {
    SPDLOG_WARN("reactor: pthread_sigmask(SIG_UNBLOCK) failed: {}", rc);
  }
  for (int signo = 1; signo <= SIGRTMAX; ++signo) {
    if (::sigismember(&watched_, signo) == 1) ::sigdelset(&reactor->signals_, signo);
  }
  ::sigemptyset(&watched_);
  ::sigemptyset(&blocked_);
}

}  // namespace rkv::reactor
