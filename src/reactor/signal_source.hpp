// SignalWatch: signals delivered through a signalfd watched by the reactor.
//
// Creating a watch blocks its signals in the calling (reactor) thread with
// pthread_sigmask so they queue for the signalfd instead of running a handler;
// destroying it drains any still-pending ones and unblocks exactly the signals
// that the watch itself blocked, restoring the previous mask for them.
//
// A process-directed signal (kill, Ctrl-C) goes to any thread that does not
// block it, so block these signals before spawning other threads (the mask is
// inherited), or block them in every thread.
#pragma once

#include <signal.h>

#include <functional>
#include <initializer_list>

#include "reactor/fd.hpp"
#include "reactor/handle.hpp"

namespace rkv::reactor {

class Reactor;

class SignalWatch {
 public:
  SignalWatch() noexcept;
  SignalWatch(const SignalWatch&) = delete;
  SignalWatch& operator=(const SignalWatch&) = delete;
  SignalWatch(SignalWatch&& other) noexcept;
  SignalWatch& operator=(SignalWatch&& other) noexcept;
  ~SignalWatch();

  // Stops watching: unregisters, drains pending signals, restores the mask.
  // Must run on the reactor thread (the mask is per thread).
  void reset() noexcept;

  explicit operator bool() const noexcept { return reactor_ != nullptr; }

 private:
  friend class Reactor;
  // Throws std::invalid_argument for a bad or already-watched signal and
  // std::system_error if signalfd/epoll setup fails (the mask is rolled back).
  SignalWatch(Reactor& reactor, std::initializer_list<int> signals,
              std::function<void(int signo)> cb);
  void take(SignalWatch& other) noexcept;

  Reactor* reactor_ = nullptr;
  sigset_t watched_{};  // every signal of this watch
  sigset_t blocked_{};  // the subset that was unblocked before and we blocked
  UniqueFd fd_;
  Registration reg_;
};

}  // namespace rkv::reactor
