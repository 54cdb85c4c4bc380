// Move-only RAII handles returned by the Reactor: Registration (fd watch),
// Timer and Poller. Each is a Reactor pointer plus a generation-checked
// SlotKey; destroying the handle (or reset()) removes the source.
//
// Lifetime rule: every handle must be destroyed before its Reactor. ~Reactor
// asserts that no handle is alive; a handle outliving its Reactor is a
// programming error (use-after-free in release builds).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string_view>
#include <utility>

#include "reactor/slot_table.hpp"

namespace rkv::reactor {

class Reactor;

enum class HandleKind : std::uint8_t { kWatch, kTimer, kPoller };

[[nodiscard]] constexpr std::string_view to_string(HandleKind k) noexcept {
  switch (k) {
    case HandleKind::kWatch: return "watch";
    case HandleKind::kTimer: return "timer";
    case HandleKind::kPoller: return "poller";
  }
  return "?";
}

namespace detail {

// Shared move/release logic; the derived classes add kind-specific calls.
template <HandleKind Kind>
class Handle {
 public:
  Handle() noexcept = default;
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  Handle(Handle&& other) noexcept
      : reactor_(std::exchange(other.reactor_, nullptr)), key_(other.key_) {}
  Handle& operator=(Handle&& other) noexcept {
    if (this != &other) {
      reset();
      reactor_ = std::exchange(other.reactor_, nullptr);
      key_ = other.key_;
    }
    return *this;
  }
  ~Handle() { reset(); }

  // Removes the source now; the handle becomes empty. Safe inside callbacks,
  // including the source's own. No-op on an empty handle.
  void reset() noexcept;

  // True until reset()/moved-from. (For a Timer this does not mean "still
  // scheduled"; see Timer::pending().)
  explicit operator bool() const noexcept { return reactor_ != nullptr; }

  // Diagnostics/tests: the slot this handle refers to.
  [[nodiscard]] SlotKey key() const noexcept { return key_; }

 protected:
  Handle(Reactor* reactor, SlotKey key) noexcept;
  [[nodiscard]] Reactor* reactor() const noexcept { return reactor_; }

 private:
  Reactor* reactor_ = nullptr;
  SlotKey key_{};
};

extern template class Handle<HandleKind::kWatch>;
extern template class Handle<HandleKind::kTimer>;
extern template class Handle<HandleKind::kPoller>;

}  // namespace detail

// An fd watched by the reactor. Destroy it before closing the fd: closing
// first can make EPOLL_CTL_DEL hit a reused fd number.
class Registration : public detail::Handle<HandleKind::kWatch> {
 public:
  Registration() noexcept = default;

  // Changes the epoll event mask. Precondition: non-empty handle. Throws
  // std::system_error if epoll_ctl(MOD) fails.
  void modify(std::uint32_t events);

  [[nodiscard]] int fd() const noexcept;
  [[nodiscard]] std::uint32_t events() const noexcept;

 private:
  friend class Reactor;
  Registration(Reactor* reactor, SlotKey key) noexcept : Handle(reactor, key) {}
};

// A one-shot or periodic timer; destroying the handle cancels it.
class Timer : public detail::Handle<HandleKind::kTimer> {
 public:
  Timer() noexcept = default;

  // True while the timer will still fire.
  [[nodiscard]] bool pending() const noexcept;

 private:
  friend class Reactor;
  Timer(Reactor* reactor, SlotKey key) noexcept : Handle(reactor, key) {}
};

// What a Poller asks of the loop besides being run every turn (reactor.hpp,
// "Spin, then block").
inline constexpr std::chrono::microseconds kSpinForever = std::chrono::microseconds::max();
// The budget kvd, kvload, the C++ client and the C API use unless told
// otherwise (--poll-us, RKV_POLL_US): long enough to cover a request's round
// trip plus the peer's turnaround in the Soft-RoCE guest, where it was
// measured (docs/performance.md "Polling"); on hardware a round trip is a
// few microseconds, so it covers bursts with room to spare.
inline constexpr std::chrono::microseconds kDefaultSpin{200};
struct PollerOptions {
  // Keep the loop turning without sleeping this long after the last turn
  // that did work; kSpinForever: never sleep while this poller lives.
  std::chrono::microseconds spin{0};
  // Runs when the loop is about to block (never while it spins); true if it
  // found work, which keeps the loop awake. E.g. arm a completion queue.
  std::function<bool()> before_sleep;
};

// A function run once per loop iteration (CQ polling, deferred work).
class Poller : public detail::Handle<HandleKind::kPoller> {
 public:
  Poller() noexcept = default;

  // Asks the reactor not to sleep before the pollers run next: in this loop
  // turn if called from a callback before the pollers ran, otherwise in the
  // next turn, whose epoll_wait then does not block. The way to defer work to
  // the end of a turn without a syscall (a 0 ns timer costs two
  // timerfd_settime calls). No-op on an empty handle.
  void wake() noexcept;

 private:
  friend class Reactor;
  Poller(Reactor* reactor, SlotKey key) noexcept : Handle(reactor, key) {}
};

}  // namespace rkv::reactor
