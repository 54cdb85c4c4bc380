#include "reactor/reactor.hpp"

#include <spdlog/spdlog.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <algorithm>
#include <cassert>
#include <cerrno>
#include <climits>
#include <stdexcept>
#include <utility>
#include <string>
#include <system_error>

namespace rkv::reactor {
namespace {

// epoll_data for the timerfd. Index 0xFFFFFFFF is never allocated by a
// SlotTable, so no registration can collide with it.
constexpr std::uint64_t kTimerToken = ~std::uint64_t{0};
constexpr std::size_t kInitialEvents = 64;
constexpr std::size_t kMaxEvents = 4096;
// While spinning: epoll_wait and the spin window's clock read every this many turns.
constexpr unsigned kSpinFdEvery = 8;

[[noreturn]] void throw_errno(int err, const std::string& what) {
  throw std::system_error(err, std::system_category(), what);
}

}  // namespace

Reactor::Reactor()
    : epoll_fd_(::epoll_create1(EPOLL_CLOEXEC)),
      owner_(std::this_thread::get_id()),
      events_(kInitialEvents) {
  if (!epoll_fd_) throw_errno(errno, "epoll_create1(EPOLL_CLOEXEC)");
  timer_fd_.reset(::timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC));
  if (!timer_fd_) throw_errno(errno, "timerfd_create(CLOCK_MONOTONIC)");
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = kTimerToken;
  if (::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_ADD, timer_fd_.get(), &ev) < 0) {
    throw_errno(errno, "epoll_ctl(EPOLL_CTL_ADD) timerfd");
  }
  ::sigemptyset(&signals_);
  SPDLOG_DEBUG("reactor: created (epoll fd {}, timerfd {})", epoll_fd_.get(), timer_fd_.get());
}

Reactor::~Reactor() {
  assert_owner_thread();
  // Drop callbacks first: handles captured inside them release themselves
  // here; any handle still counted after that is owned from outside.
  watches_.clear();
  timers_.clear();
  pollers_.clear();
  if (live_handles_ != 0) {
    SPDLOG_ERROR("reactor: destroyed while {} handle(s) are alive", live_handles_);
    assert(live_handles_ == 0 && "every Registration/Timer/Poller/SignalWatch must die before its Reactor");
  }
}

void Reactor::run() {
  assert_owner_thread();
  while (!stop_requested_) run_once(std::chrono::milliseconds(-1));
  stop_requested_ = false;
}

void Reactor::stop() noexcept {
  assert_owner_thread();
  stop_requested_ = true;
}

void Reactor::begin_turn() {
  assert_owner_thread();
  if (state_ != ReactorState::kIdle) {
    throw std::logic_error("Reactor::run_once/settle_once called from a callback (state " +
                           std::string(to_string(state_)) + ")");
  }
  if (spin_budget_dirty_) update_spin_budget();  // here no poller is mid-call
}

std::size_t Reactor::run_once(std::chrono::milliseconds timeout) {
  begin_turn();
  const bool forever = spin_budget_ == kSpinForever && pollers_.live() > 0;
  bool block = timeout.count() != 0 && !wake_requested_ && !spinning_ && !forever;
  std::size_t ran = 0;
  state_ = ReactorState::kDispatching;
  if (block) {  // about to sleep: the pollers arm what they poll
    ran += run_before_sleep();
    block = ran == 0;
  }
  // Spinning turns look at the fds (epoll_wait, a syscall: in a TCG guest a
  // costly one) only every kSpinFdEvery-th time; the pollers run every turn.
  const bool look = block || !(spinning_ || forever) || ++spin_turns_ % kSpinFdEvery == 0;
  return end_turn(ran, look, block ? timeout : std::chrono::milliseconds(0));
}

std::size_t Reactor::settle_once() {
  begin_turn();
  state_ = ReactorState::kDispatching;
  std::size_t ran = run_before_sleep();  // arm what the pollers poll, as before a sleep
  ran = end_turn(ran, true, std::chrono::milliseconds(0));
  return ran + (wake_requested_ ? 1 : 0);  // a poller asked to run again
}

std::size_t Reactor::end_turn(std::size_t ran, bool look, std::chrono::milliseconds timeout) {
  int n = 0;
  if (look) {
    arm_timerfd();
    state_ = ReactorState::kWaiting;
    try {
      n = wait(timeout);
    } catch (...) {
      state_ = ReactorState::kIdle;
      throw;
    }
  }
  state_ = ReactorState::kDispatching;
  ran += dispatch(n);
  ran += run_timers();
  ran += run_pollers();
  note_turn(ran);
  // A full batch hints at more ready fds than slots; grow like ae.c's setsize.
  if (static_cast<std::size_t>(n) == events_.size() && events_.size() < kMaxEvents) {
    events_.resize(events_.size() * 2);
  }
  state_ = ReactorState::kIdle;
  return ran;
}

// Work opens (or extends) the spin window; idle turns close it once the
// budget has passed since the first of them. Only every kSpinFdEvery-th idle
// spinning turn reads the clock: a busy turn needs no time, and the window is
// measured from the first clock read after the work (a few turns late).
void Reactor::note_turn(std::size_t ran) noexcept {
  if (spin_budget_.count() == 0) {
    spinning_ = false;
    return;
  }
  if (ran > 0) {
    spinning_ = true;
    idle_since_.reset();
    return;
  }
  if (!spinning_ || spin_budget_ == kSpinForever) return;
  if (++idle_turns_ % kSpinFdEvery != 0) return;  // the clock is a syscall too
  const Clock::time_point now = Clock::now();
  if (!idle_since_) {
    idle_since_ = now;
  } else if (now - *idle_since_ >= spin_budget_) {
    spinning_ = false;
    idle_since_.reset();
  }
}

int Reactor::wait(std::chrono::milliseconds timeout) {
  using std::chrono::milliseconds;
  const bool forever = timeout.count() < 0;
  milliseconds left = std::min(timeout, milliseconds(INT_MAX));
  const Clock::time_point deadline = left.count() > 0 ? Clock::now() + left : Clock::time_point{};
  for (;;) {
    const int ms = forever ? -1 : static_cast<int>(left.count());
    const int n = ::epoll_wait(epoll_fd_.get(), events_.data(), static_cast<int>(events_.size()), ms);
    if (n >= 0) return n;
    if (errno != EINTR) throw_errno(errno, "epoll_wait");
    // Retry with whatever time is left so EINTR cannot stretch the timeout.
    if (!forever && left.count() > 0) {
      left = std::max(milliseconds(0), std::chrono::ceil<milliseconds>(deadline - Clock::now()));
    }
  }
}

std::size_t Reactor::dispatch(int n) noexcept {
  std::size_t ran = 0;
  for (int i = 0; i < n; ++i) {
    const epoll_event ev = events_[static_cast<std::size_t>(i)];
    if (ev.data.u64 == kTimerToken) {
      drain_timerfd();  // due timers run after the fd batch
      timer_fired_ = true;
      continue;
    }
    const SlotKey key = SlotKey::unpack(ev.data.u64);
    // Re-checked per event: an earlier callback in this batch may have
    // destroyed (and even reused) this slot; the generation tells.
    Watch* w = watches_.begin_call(key);
    if (w == nullptr) {
      SPDLOG_TRACE("reactor: dropping stale event for slot {} gen {}", key.index, key.generation);
      continue;
    }
    // Like ae.c, honour a mask narrowed by modify() earlier in the batch.
    const std::uint32_t revents = ev.events & (w->events | EPOLLERR | EPOLLHUP);
    if (revents != 0) {
      SPDLOG_TRACE("reactor: fd {} ready {:#x}", w->fd, revents);
      w->cb(revents);
      ++ran;
    }
    watches_.end_call(key.index);
  }
  return ran;
}

// Only after the timerfd fired: it is armed at the earliest deadline (one in
// the past fires at once), so a turn without it has no due timer and needs
// no clock read (a syscall in a TCG guest without a vDSO clocksource).
std::size_t Reactor::run_timers() noexcept {
  if (!std::exchange(timer_fired_, false)) return 0;
  const auto next = timers_.next_deadline();
  if (!next) return 0;
  const Clock::time_point now = Clock::now();
  if (*next > now) return 0;
  return timers_.run_due(now);
}

std::size_t Reactor::run_pollers() noexcept {
  wake_requested_ = false;  // every poller runs now; a wake() from one of them counts for the next turn
  return call_pollers([](PollerEntry& p) noexcept { return p.fn(); });
}

std::size_t Reactor::run_before_sleep() noexcept {
  return call_pollers([](PollerEntry& p) noexcept { return p.options.before_sleep && p.options.before_sleep(); });
}

// Index-based: pollers may be added or removed by the ones we run.
std::size_t Reactor::call_pollers(bool (*call)(PollerEntry&) noexcept) noexcept {
  std::size_t worked = 0;
  const std::uint32_t count = pollers_.slot_count();
  for (std::uint32_t i = 0; i < count; ++i) {
    const auto key = pollers_.key_at(i);
    if (!key) continue;
    PollerEntry* p = pollers_.begin_call(*key);
    if (p == nullptr) continue;
    if (call(*p)) ++worked;
    pollers_.end_call(i);
  }
  return worked;
}

void Reactor::update_spin_budget() noexcept {
  std::chrono::microseconds most{0};
  const std::uint32_t count = pollers_.slot_count();
  for (std::uint32_t i = 0; i < count; ++i) {
    if (const auto key = pollers_.key_at(i)) most = std::max(most, pollers_.find(*key)->options.spin);
  }
  spin_budget_ = most;
  spin_budget_dirty_ = false;
  if (most.count() == 0) spinning_ = false;
}

void Reactor::arm_timerfd() noexcept {
  const auto next = timers_.next_deadline();
  if (next == armed_) return;
  itimerspec spec{};  // all zero disarms
  if (next) {
    // An all-zero it_value would disarm, so clamp to 1ns (already expired).
    const auto ns = std::max<std::int64_t>(next->time_since_epoch().count(), 1);
    spec.it_value.tv_sec = static_cast<time_t>(ns / 1'000'000'000);
    spec.it_value.tv_nsec = static_cast<long>(ns % 1'000'000'000);
  }
  if (::timerfd_settime(timer_fd_.get(), TFD_TIMER_ABSTIME, &spec, nullptr) < 0) {
    SPDLOG_ERROR("reactor: timerfd_settime failed: errno {}", errno);
    assert(false && "timerfd_settime cannot fail with a valid fd and spec");
    return;
  }
  armed_ = next;
}

void Reactor::drain_timerfd() noexcept {
  std::uint64_t expirations = 0;
  while (::read(timer_fd_.get(), &expirations, sizeof expirations) < 0 && errno == EINTR) {
  }
  armed_.reset();  // expired: force a re-arm before the next wait
}

Registration Reactor::watch(int fd, std::uint32_t events, FdCallback cb) {
  assert_owner_thread();
  const SlotKey key = watches_.insert(Watch{fd, events, std::move(cb)});
  epoll_event ev{};
  ev.events = events;
  ev.data.u64 = key.pack();
  if (::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_ADD, fd, &ev) < 0) {
    const int err = errno;
    watches_.erase(key);
    throw_errno(err, "epoll_ctl(EPOLL_CTL_ADD) fd " + std::to_string(fd));
  }
  SPDLOG_DEBUG("reactor: watch fd {} events {:#x} slot {} gen {}", fd, events, key.index, key.generation);
  return Registration(this, key);
}

void Reactor::modify_watch(SlotKey key, std::uint32_t events) {
  assert_owner_thread();
  Watch* w = watches_.find(key);
  assert(w != nullptr && "modify on a dead registration");
  if (w == nullptr) return;
  epoll_event ev{};
  ev.events = events;
  ev.data.u64 = key.pack();
  if (::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_MOD, w->fd, &ev) < 0) {
    throw_errno(errno, "epoll_ctl(EPOLL_CTL_MOD) fd " + std::to_string(w->fd));
  }
  w->events = events;
}

void Reactor::unwatch(SlotKey key) noexcept {
  const Watch* w = watches_.find(key);
  if (w == nullptr) return;
  if (::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_DEL, w->fd, nullptr) < 0) {
    // EBADF/ENOENT: the fd was closed first; the kernel already dropped it.
    if (errno == EBADF || errno == ENOENT) {
      SPDLOG_DEBUG("reactor: fd {} closed before its registration", w->fd);
    } else {
      SPDLOG_WARN("reactor: epoll_ctl(DEL) fd {} failed: errno {}", w->fd, errno);
    }
  }
  SPDLOG_DEBUG("reactor: unwatch fd {} slot {} gen {}", w->fd, key.index, key.generation);
  watches_.erase(key);
}

void Reactor::release(HandleKind kind, SlotKey key) noexcept {
  assert_owner_thread();
  assert(live_handles_ > 0);
  --live_handles_;
  switch (kind) {
    case HandleKind::kWatch:
      unwatch(key);
      return;
    case HandleKind::kTimer:
      timers_.cancel(key);
      return;
    case HandleKind::kPoller:
      pollers_.erase(key);
      spin_budget_dirty_ = true;
      return;
  }
}

Timer Reactor::after(std::chrono::nanoseconds delay, std::function<void()> cb) {
  assert_owner_thread();
  return at(now() + std::max(delay, std::chrono::nanoseconds(0)), std::move(cb));
}

Timer Reactor::at(Clock::time_point deadline, std::function<void()> cb) {
  assert_owner_thread();
  return Timer(this, timers_.add(deadline, Clock::duration(0), std::move(cb)));
}

Timer Reactor::every(std::chrono::nanoseconds period, std::function<void()> cb) {
  assert_owner_thread();
  if (period.count() <= 0) throw std::invalid_argument("Reactor::every: period must be positive");
  return Timer(this, timers_.add(now() + period, period, std::move(cb)));
}

SignalWatch Reactor::on_signals(std::initializer_list<int> signals, std::function<void(int signo)> cb) {
  assert_owner_thread();
  return SignalWatch(*this, signals, std::move(cb));
}

Poller Reactor::add_poller(std::function<bool()> poll_fn, PollerOptions options) {
  assert_owner_thread();
  if (options.spin.count() < 0) throw std::invalid_argument("Reactor::add_poller: negative spin budget");
  Poller p(this, pollers_.insert(PollerEntry{std::move(poll_fn), std::move(options)}));
  spin_budget_dirty_ = true;
  return p;
}

}  // namespace rkv::reactor
