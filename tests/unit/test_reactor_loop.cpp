// Unit tests for src/reactor's loop control: stop, re-entry, pollers, the
// spin window and busy polling, before-sleep work, settle_once. The rules of
// test_reactor.cpp hold here too: every loop is bounded, and a wall-clock
// check is a lower bound or an upper bound with a wide margin, never a speed.
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/epoll.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <utility>

#include "reactor/reactor.hpp"

namespace rkv::reactor {
namespace {

using namespace std::chrono_literals;

// ---------------------------------------------------------------- loop control

TEST(Reactor, StopFromCallbackEndsRun) {
  Reactor r;
  EventFd efd;
  int calls = 0;
  auto reg = r.watch(efd.fd(), EPOLLIN, [&](std::uint32_t) {
    efd.consume();
    if (++calls == 3) {
      r.stop();
    } else {
      efd.notify();
    }
  });
  efd.notify();
  r.run();  // returns only through stop()
  EXPECT_EQ(calls, 3);
  EXPECT_FALSE(r.stop_requested());  // cleared so run() can be reused

  auto t = r.after(1ms, [&] { r.stop(); });
  r.run();
  EXPECT_FALSE(t.pending());
}

TEST(Reactor, RunOnceIsNotReentrant) {
  Reactor r;
  bool threw = false;
  auto t = r.after(0ns, [&] {
    try {
      r.run_once(0ms);
    } catch (const std::logic_error&) {
      threw = true;
    }
  });
  EXPECT_EQ(r.run_once(1000ms), 1u);
  EXPECT_TRUE(threw);
}

TEST(Reactor, PollerRunsOncePerIterationInDefaultMode) {
  Reactor r;
  int polls = 0;
  auto p = r.add_poller([&] {
    ++polls;
    return false;
  });
  EXPECT_EQ(r.poller_count(), 1u);
  EXPECT_EQ(r.run_once(0ms), 0u);  // no work reported
  EXPECT_EQ(polls, 1);
  const auto t0 = Reactor::now();
  r.run_once(30ms);  // default mode still sleeps in epoll_wait
  EXPECT_GE(Reactor::now() - t0, 20ms);
  EXPECT_EQ(polls, 2);
}

TEST(Reactor, BusyPollSpinsWithZeroTimeout) {
  Reactor r;
  int polls = 0;
  int sleeps = 0;
  PollerOptions busy;
  busy.spin = kSpinForever;
  busy.before_sleep = [&] {
    ++sleeps;
    return false;
  };
  Poller p = r.add_poller(
      [&] {
        ++polls;
        return true;
      },
      busy);
  const auto t0 = Reactor::now();
  std::size_t ran = 0;
  for (int i = 0; i < 1000; ++i) ran += r.run_once(10s);  // would take hours if it slept
  EXPECT_LT(Reactor::now() - t0, 10s);  // the property: a single sleep would take 10 s
  EXPECT_EQ(polls, 1000);
  EXPECT_EQ(ran, 1000u);
  EXPECT_EQ(r.spin_budget(), kSpinForever);
  EXPECT_EQ(sleeps, 0);  // never about to sleep

  // A poller may remove itself; with no poller left the loop sleeps again.
  p = r.add_poller([&] {
    p.reset();
    return false;
  });
  r.run_once(0ms);
  EXPECT_EQ(r.poller_count(), 0u);
  const auto t1 = Reactor::now();
  r.run_once(20ms);
  EXPECT_GE(Reactor::now() - t1, 15ms);
  EXPECT_EQ(r.spin_budget(), 0us);
}

// Spin, then block: work opens a window in which no wait blocks; it closes
// once the budget passed without work, and only then, right before the first
// blocking wait, the before_sleep hooks run.
TEST(Reactor, SpinWindowThenBeforeSleepThenBlock) {
  Reactor r;
  int polls = 0;
  int sleeps = 0;
  bool work = true;
  PollerOptions o;
  o.spin = 20ms;
  o.before_sleep = [&] {
    ++sleeps;
    return false;
  };
  Poller p = r.add_poller(
      [&] {
        ++polls;
        return std::exchange(work, false);
      },
      o);
  EXPECT_FALSE(r.spinning());
  EXPECT_EQ(r.run_once(0ms), 1u);  // the work opens the window
  EXPECT_TRUE(r.spinning());
  EXPECT_EQ(r.spin_budget(), 20ms);
  const auto t0 = Reactor::now();
  int turns = 0;
  while (r.spinning()) {
    r.run_once(10s);  // never blocks inside the window
    ++turns;
    ASSERT_LT(Reactor::now() - t0, 5s);  // only ends a loop that would never end
  }
  EXPECT_GE(Reactor::now() - t0, 20ms);
  EXPECT_GT(turns, 1);
  EXPECT_EQ(sleeps, 0);  // no hook while spinning

  int fired = 0;
  // t1 before the timer: its deadline is then at least t1 + 30 ms whatever
  // the scheduler does between the two lines (taken after, a preemption
  // there once left 3.8 ms to wait on a loaded CI host).
  const auto t1 = Reactor::now();
  Timer t = r.after(30ms, [&] { ++fired; });
  r.run_once(10s);  // about to sleep: the hook, then a wait until the timer
  EXPECT_EQ(sleeps, 1);
  EXPECT_EQ(fired, 1);
  EXPECT_GE(Reactor::now() - t1, 20ms);
  EXPECT_TRUE(r.spinning());  // the timer's callback was work: a new window
}

// A hook that finds work (e.g. arming a CQ found completions) keeps the loop
// awake: that wait does not block, and the work opens a window.
TEST(Reactor, BeforeSleepWorkSkipsTheSleep) {
  Reactor r;
  int found = 1;
  PollerOptions o;
  o.spin = 0us;  // pure events: the hook runs before every blocking wait
  o.before_sleep = [&] { return found-- > 0; };
  Poller p = r.add_poller([] { return false; }, o);
  const auto t0 = Reactor::now();
  EXPECT_EQ(r.run_once(10s), 1u);  // the hook's work; no sleep
  EXPECT_LT(Reactor::now() - t0, 5s);  // the property: a sleep would take 10 s
  EXPECT_FALSE(r.spinning());  // budget 0: no window
  const auto t1 = Reactor::now();
  EXPECT_EQ(r.run_once(30ms), 0u);  // the hook finds nothing: sleeps
  EXPECT_GE(Reactor::now() - t1, 20ms);
}

TEST(Reactor, NegativeSpinBudgetIsRefused) {
  Reactor r;
  PollerOptions o;
  o.spin = -1us;
  EXPECT_THROW({ Poller p = r.add_poller([] { return false; }, o); }, std::invalid_argument);
}

// Poller::wake() defers work to the end of a turn without a timer: the next
// run_once does not sleep, runs the pollers once, and the one after sleeps
// again. A wake() from inside a poller counts for the following turn.
TEST(Reactor, PollerWakeSkipsTheSleepOnce) {
  Reactor r;
  int polls = 0;
  bool rewake = false;
  Poller p;
  p = r.add_poller([&] {
    ++polls;
    if (std::exchange(rewake, false)) p.wake();
    return true;
  });
  p.wake();
  auto t0 = Reactor::now();
  EXPECT_EQ(r.run_once(10s), 1u);  // would sleep 10 s without the wake
  EXPECT_LT(Reactor::now() - t0, 5s);  // the property: a sleep would take 10 s
  EXPECT_EQ(polls, 1);
  EXPECT_EQ(r.timer_count(), 0u);

  rewake = true;
  p.wake();
  t0 = Reactor::now();
  r.run_once(10s);  // woken: runs the poller, which wakes again
  r.run_once(10s);  // so this one does not sleep either
  EXPECT_LT(Reactor::now() - t0, 5s);  // the property: a sleep would take 10 s
  EXPECT_EQ(polls, 3);

  t0 = Reactor::now();
  r.run_once(20ms);  // nothing asked: sleeps the timeout
  EXPECT_GE(Reactor::now() - t0, 15ms);
  EXPECT_EQ(polls, 4);

  Poller empty;
  empty.wake();  // no-op on an empty handle
}

// settle_once: the turn of a caller that sleeps in its own poll() on fd().
// It looks at the fds even inside a spin window (run_once skips them on most
// spinning turns), runs the before_sleep hooks even while spinning, and
// counts a pending wake() as work; once it returns 0, fd() is readable
// exactly when a source has something.
bool fd_readable(const Reactor& r, int timeout_ms) {
  pollfd p{r.fd(), POLLIN, 0};
  return ::poll(&p, 1, timeout_ms) == 1 && (p.revents & POLLIN) != 0;
}

TEST(Reactor, SettleOnceLooksAtFdsAndArmsWhileSpinning) {
  Reactor r;
  EventFd efd;
  int fd_calls = 0;
  auto reg = r.watch(efd.fd(), EPOLLIN, [&](std::uint32_t) {
    ++fd_calls;
    efd.consume();
  });
  int hooks = 0;
  bool work = true;
  PollerOptions o;
  o.spin = 10s;  // the window stays open for the whole test
  o.before_sleep = [&] {
    ++hooks;
    return false;
  };
  Poller p = r.add_poller([&] { return std::exchange(work, false); }, o);
  EXPECT_EQ(r.run_once(0ms), 1u);
  ASSERT_TRUE(r.spinning());
  EXPECT_FALSE(fd_readable(r, 0));
  for (int i = 0; i < 16; ++i) {  // every turn, not every 8th
    efd.notify();
    EXPECT_TRUE(fd_readable(r, 0));
    EXPECT_EQ(r.settle_once(), 1u);  // the fd's callback
    EXPECT_EQ(fd_calls, i + 1);
    EXPECT_EQ(hooks, i + 1);  // the hook ran although the loop spins
  }
  EXPECT_EQ(r.settle_once(), 0u);
  EXPECT_FALSE(fd_readable(r, 0));

  // A timer reports through fd() after a settled turn: the timerfd is armed.
  int fired = 0;
  Timer t = r.after(20ms, [&] { ++fired; });
  EXPECT_EQ(r.settle_once(), 0u);
  EXPECT_TRUE(fd_readable(r, 5000));
  EXPECT_EQ(r.settle_once(), 1u);
  EXPECT_EQ(fired, 1);
}

TEST(Reactor, SettleOnceCountsHookWorkAndPendingWakes) {
  Reactor r;
  int found = 2;
  PollerOptions o;
  o.before_sleep = [&] { return found-- > 0; };
  Poller p;
  bool rewake = false;
  p = r.add_poller(
      [&] {
        if (std::exchange(rewake, false)) p.wake();
        return false;
      },
      o);
  EXPECT_EQ(r.settle_once(), 1u);  // the hook found work
  EXPECT_EQ(r.settle_once(), 1u);
  EXPECT_EQ(r.settle_once(), 0u);
  rewake = true;
  EXPECT_EQ(r.settle_once(), 1u);  // the poller did no work but asked to run again
  EXPECT_EQ(r.settle_once(), 0u);  // it ran, nothing left
  p.wake();
  EXPECT_EQ(r.settle_once(), 0u);  // a wake from outside: the pollers run in this very turn
}

}  // namespace
}  // namespace rkv::reactor
