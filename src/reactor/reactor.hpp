// Reactor: single-threaded epoll event loop (fds, timers, signals, pollers).
//
// Model: Redis ae.c's small loop with Seastar-style RAII sources. Every source
// is a move-only handle (Registration, Timer, SignalWatch, Poller); it is
// registered when created and removed when the handle dies.
//
// Rules for users:
//  * Thread affinity: the reactor belongs to the thread that constructed it
//    (its owner thread). Every member function (and handle operation) except
//    the static now() must run on that thread, and debug builds assert it
//    (assert_owner_thread()); only EventFd::notify() is meant for other
//    threads (wake the loop through an EventFd you watch).
//  * Lifetime: destroy every handle before the Reactor (asserted in ~Reactor).
//    Destroy a Registration before closing its fd.
//  * Inside callbacks anything goes: destroy or modify any handle (including
//    the running one), create new sources, call stop(). Events already fetched
//    for a source destroyed earlier in the same batch are dropped (epoll
//    events carry a slot index + generation, never a pointer).
//  * Callbacks must not throw; an escaping exception calls std::terminate.
//  * Not reentrant: do not call run()/run_once()/settle_once() from a callback.
//
// Spin, then block (the adaptive polling of high-performance RDMA and network
// stacks, like Linux NAPI): a Poller may carry a spin budget. After a loop
// turn in which any callback did work, the loop keeps turning without
// sleeping (epoll_wait with a 0 timeout, pollers every turn) until no work
// was seen for the largest budget of the live pollers; only then it sleeps.
// Right before it sleeps it runs every poller's before_sleep hook (e.g. arm a
// completion queue and poll it once more); a hook that finds work keeps the
// loop awake. Budget 0 for every poller: pure events. kSpinForever: the loop
// never sleeps while such a poller lives (busy polling). A spinning loop
// makes few syscalls: it calls epoll_wait (fds, timers, signals) and reads
// the clock only every 8th turn; the pollers run every turn.
#pragma once

#include <sys/epoll.h>

#include <cassert>
#include <chrono>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <optional>
#include <string_view>
#include <thread>
#include <vector>

#include "reactor/event_fd.hpp"
#include "reactor/fd.hpp"
#include "reactor/handle.hpp"
#include "reactor/signal_source.hpp"
#include "reactor/slot_table.hpp"
#include "reactor/timer_queue.hpp"

namespace rkv::reactor {

enum class ReactorState : std::uint8_t {
  kIdle,         // not inside run_once()
  kWaiting,      // blocked in (or about to enter) epoll_wait
  kDispatching,  // running callbacks
};

[[nodiscard]] constexpr std::string_view to_string(ReactorState s) noexcept {
  switch (s) {
    case ReactorState::kIdle: return "idle";
    case ReactorState::kWaiting: return "waiting";
    case ReactorState::kDispatching: return "dispatching";
  }
  return "?";
}

class Reactor {
 public:
  using Clock = MonotonicClock;
  using FdCallback = std::function<void(std::uint32_t revents)>;

  // Throws std::system_error if epoll_create1 or timerfd_create fails.
  Reactor();
  // Asserts that no handle is alive.
  ~Reactor();
  Reactor(const Reactor&) = delete;
  Reactor& operator=(const Reactor&) = delete;
  Reactor(Reactor&&) = delete;
  Reactor& operator=(Reactor&&) = delete;

  // Loops until stop(); clears the stop request when it returns, so the
  // reactor can be run again. A stop() issued before run() makes it return
  // without waiting.
  void run();

  // One iteration: epoll_wait (timeout < 0 waits forever; forced to 0 while
  // spinning, see the header, or after a Poller::wake()), dispatch ready fds,
  // fire due timers, run pollers. Before a wait that may block, the pollers'
  // before_sleep hooks run (and their work counts).
  // Returns the number of user callbacks that ran (pollers count only when
  // they report work). Throws std::system_error if epoll_wait fails.
  std::size_t run_once(std::chrono::milliseconds timeout);

  // For a caller that waits on fd() itself (poll/epoll) instead of inside
  // run_once(), e.g. the C API's kv_fd: one turn that never blocks and never
  // skips the fds (not even while spinning). It runs the before_sleep hooks
  // first (they arm what the pollers poll, as before a sleep), then
  // epoll_wait(0), the ready fds, due timers and the pollers. Returns the
  // number of callbacks that did work (hooks included), plus 1 if a poller
  // asked to be woken (Poller::wake). Once it returns 0 nothing is left to
  // do: every source reports through fd() (the timerfd is armed, the hooks
  // armed theirs), so fd() turns readable when one has something.
  // Throws like run_once().
  std::size_t settle_once();

  // The epoll fd: readable (poll/select/epoll) when one of the watched fds
  // or the timer has something. For callers that sleep in their own poll()
  // (see settle_once); never epoll_ctl/epoll_wait it.
  [[nodiscard]] int fd() const noexcept {
    assert_owner_thread();
    return epoll_fd_.get();
  }

  // Asks run() to return after the current iteration. Safe from callbacks.
  void stop() noexcept;
  [[nodiscard]] bool stop_requested() const noexcept {
    assert_owner_thread();
    return stop_requested_;
  }

  // Watches a non-blocking fd. `events` is an EPOLLIN/EPOLLOUT/... mask
  // passed to epoll as is (EPOLLET allowed); the callback receives the ready
  // events, restricted to the current mask plus EPOLLERR/EPOLLHUP. One
  // registration per fd. Throws std::system_error if epoll_ctl(ADD) fails.
  [[nodiscard]] Registration watch(int fd, std::uint32_t events, FdCallback cb);

  // One-shot timer after `delay` (negative counts as 0).
  [[nodiscard]] Timer after(std::chrono::nanoseconds delay, std::function<void()> cb);
  // One-shot timer at an absolute CLOCK_MONOTONIC deadline (see now()).
  [[nodiscard]] Timer at(Clock::time_point deadline, std::function<void()> cb);
  // Periodic timer, first firing one period from now. Ticks missed while the
  // loop was busy are skipped, not replayed. Throws std::invalid_argument if
  // period <= 0.
  [[nodiscard]] Timer every(std::chrono::nanoseconds period, std::function<void()> cb);

  // Watches signals through a signalfd; see signal_source.hpp.
  [[nodiscard]] SignalWatch on_signals(std::initializer_list<int> signals,
                                       std::function<void(int signo)> cb);

  // Adds a function run once per loop iteration; returns true if it did
  // work. `options` (PollerOptions): its spin budget and before_sleep hook.
  [[nodiscard]] Poller add_poller(std::function<bool()> poll_fn, PollerOptions options = {});
  // The largest spin budget of the live pollers (0 with none), as of the
  // start of the last turn.
  [[nodiscard]] std::chrono::microseconds spin_budget() const noexcept {
    assert_owner_thread();
    return spin_budget_;
  }
  // True while the loop does not sleep between turns (inside a spin window).
  [[nodiscard]] bool spinning() const noexcept {
    assert_owner_thread();
    return spinning_;
  }

  // Reads CLOCK_MONOTONIC; static, so any thread may call it.
  [[nodiscard]] static Clock::time_point now() noexcept { return Clock::now(); }
  [[nodiscard]] ReactorState state() const noexcept {
    assert_owner_thread();
    return state_;
  }
  [[nodiscard]] std::size_t watch_count() const noexcept {
    assert_owner_thread();
    return watches_.live();
  }
  [[nodiscard]] std::size_t timer_count() const noexcept {
    assert_owner_thread();
    return timers_.size();
  }
  [[nodiscard]] std::size_t poller_count() const noexcept {
    assert_owner_thread();
    return pollers_.live();
  }

  // Asserts that the caller runs on this reactor's owner thread (the one that
  // constructed it). Every member function above except the constructor and
  // the static now() calls it, and so do the handle operations that reach the
  // reactor: creating, resetting or destroying a non-empty handle, modify(),
  // fd(), events(), pending(), wake(), SignalWatch setup and reset. Modules
  // that live on a reactor (Server, Client, the C API, ...) call it too
  // instead of keeping a thread id of their own. Debug builds only: with
  // NDEBUG it is an empty inline function and costs nothing.
  void assert_owner_thread() const noexcept {
    assert(std::this_thread::get_id() == owner_ && "Reactor used from a thread other than its owner");
  }

 private:
  template <HandleKind>
  friend class detail::Handle;
  friend class Registration;
  friend class Timer;
  friend class Poller;
  friend class SignalWatch;

  struct Watch {
    int fd;
    std::uint32_t events;
    FdCallback cb;
  };
  struct PollerEntry {
    std::function<bool()> fn;
    PollerOptions options;
  };

  // Handle plumbing.
  void retain() noexcept {
    assert_owner_thread();
    ++live_handles_;
  }
  void release(HandleKind kind, SlotKey key) noexcept;
  void unwatch(SlotKey key) noexcept;
  void modify_watch(SlotKey key, std::uint32_t events);
  [[nodiscard]] const Watch* find_watch(SlotKey key) const noexcept {
    assert_owner_thread();
    return watches_.find(key);
  }
  [[nodiscard]] bool timer_pending(SlotKey key) const noexcept {
    assert_owner_thread();
    return timers_.pending(key);
  }
  void wake_pollers() noexcept {
    assert_owner_thread();
    wake_requested_ = true;
  }

  void begin_turn();  // owner thread, not from a callback; the spin budget up to date
  // The rest of a turn after the hooks: epoll_wait (if `look`), fds, timers,
  // pollers, the spin window. Returns `ran` plus the callbacks that worked.
  std::size_t end_turn(std::size_t ran, bool look, std::chrono::milliseconds timeout);
  int wait(std::chrono::milliseconds timeout);
  std::size_t dispatch(int n) noexcept;
  std::size_t run_timers() noexcept;
  std::size_t run_pollers() noexcept;
  std::size_t run_before_sleep() noexcept;  // the hooks; count of those that found work
  std::size_t call_pollers(bool (*call)(PollerEntry&) noexcept) noexcept;  // count of calls that returned true
  void note_turn(std::size_t ran) noexcept;  // opens, keeps or closes the spin window
  void update_spin_budget() noexcept;
  void arm_timerfd() noexcept;
  void drain_timerfd() noexcept;

  UniqueFd epoll_fd_;
  UniqueFd timer_fd_;
  std::thread::id owner_;
  SlotTable<Watch> watches_;
  TimerQueue timers_;
  SlotTable<PollerEntry> pollers_;
  std::vector<epoll_event> events_;
  std::optional<Clock::time_point> armed_;  // deadline the timerfd is set to
  sigset_t signals_{};                       // signals owned by SignalWatches
  std::size_t live_handles_ = 0;
  ReactorState state_ = ReactorState::kIdle;
  bool stop_requested_ = false;
  std::chrono::microseconds spin_budget_{0};  // max over pollers_ (update_spin_budget)
  bool spin_budget_dirty_ = false;             // a poller came or went: recompute before the next turn
  bool spinning_ = false;                      // inside a spin window: waits do not block
  std::optional<Clock::time_point> idle_since_;  // first clock read of the current idle stretch
  unsigned spin_turns_ = 0;                      // spinning turns (every kSpinFdEvery-th looks at the fds)
  unsigned idle_turns_ = 0;                      // idle spinning turns (every kSpinFdEvery-th reads the clock)
  bool wake_requested_ = false;  // Poller::wake(): the next wait must not block
  bool timer_fired_ = false;     // the timerfd was read this turn: run_timers has work
};

}  // namespace rkv::reactor
