// Unit tests for src/reactor (its loop control and spinning:
// test_reactor_loop.cpp). Every loop is bounded: run_once with a timeout
// inside an iteration cap, never an unbounded run() without a stop path.
// Wall-clock checks are of two kinds, never a speed: lower bounds ("slept at
// least ~the timeout": a slow machine only lengthens a sleep), and upper
// bounds that are the property with a wide margin ("did not sleep", where a
// sleep would take 10 s), each said where it stands.
#include <gtest/gtest.h>
#include <pthread.h>
#include <signal.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/epoll.h>

#include <array>
#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "reactor/reactor.hpp"
#include "reactor/slot_table.hpp"

namespace rkv::reactor {
namespace {

using namespace std::chrono_literals;

// Runs the loop until pred() holds or the cap is reached; returns pred().
template <class Pred>
bool run_until(Reactor& r, Pred pred, std::chrono::milliseconds budget = 5s) {
  const auto deadline = Reactor::now() + budget;
  while (!pred() && Reactor::now() < deadline) r.run_once(10ms);
  return pred();
}

bool signal_blocked(int signo) {
  sigset_t cur;
  pthread_sigmask(SIG_BLOCK, nullptr, &cur);
  return sigismember(&cur, signo) == 1;
}

// ---------------------------------------------------------------- basics

TEST(UniqueFd, ClosesAndReleases) {
  EventFd probe;
  UniqueFd a(::dup(probe.fd()));
  ASSERT_TRUE(a.valid());
  const int raw = a.get();
  UniqueFd b(std::move(a));
  EXPECT_FALSE(a.valid());
  EXPECT_EQ(b.get(), raw);
  b.reset();
  EXPECT_FALSE(b);
  errno = 0;
  EXPECT_EQ(::fcntl(raw, F_GETFD), -1);
  EXPECT_EQ(errno, EBADF);
}

TEST(EventFd, NotifyAndConsume) {
  EventFd efd;
  EXPECT_EQ(efd.consume(), 0u);
  EXPECT_TRUE(efd.notify());
  EXPECT_TRUE(efd.notify(41));
  EXPECT_EQ(efd.consume(), 42u);
  EXPECT_EQ(efd.consume(), 0u);
}

TEST(SlotTable, GenerationsStartAtOneAndSkipZeroWhenTheyWrap) {
  SlotTable<int> t;
  SlotKey k = t.insert(1);
  EXPECT_EQ(k.generation, 1u);
  for (std::uint32_t i = 0; i < SlotKey::kGenerationMask; ++i) {
    ASSERT_TRUE(t.erase(k));
    k = t.insert(2);
    ASSERT_NE(k.generation, 0u);
    ASSERT_LE(k.generation, SlotKey::kGenerationMask);
  }
  EXPECT_EQ(k.index, 0u);
  EXPECT_EQ(k.generation, 1u);  // wrapped past kGenerationMask, skipping 0
  EXPECT_EQ(t.find(SlotKey{0, 0}), nullptr);
}

TEST(SlotTable, BoundedTableRefusesAndKeepsIndicesBelowTheBound) {
  SlotTable<std::string> t(3);
  std::vector<SlotKey> keys;
  for (int i = 0; i < 3; ++i) {
    auto k = t.try_insert(std::to_string(i));
    ASSERT_TRUE(k.has_value());
    keys.push_back(*k);
  }
  EXPECT_TRUE(t.full());
  EXPECT_FALSE(t.try_insert("x").has_value());
  EXPECT_THROW((void)t.insert("x"), std::length_error);
  ASSERT_TRUE(t.erase(keys[1]));
  const auto again = t.try_insert("y");
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(again->index, keys[1].index);
  EXPECT_NE(again->generation, keys[1].generation);
  EXPECT_EQ(t.find(keys[1]), nullptr);  // the old key is stale
  EXPECT_EQ(*t.find(*again), "y");
  EXPECT_EQ(t.slot_count(), 3u);
}

TEST(SlotTable, Pack32RoundTripsAndStaleKeysAreRejected) {
  SlotTable<int> t(1u << 16);
  const SlotKey k = t.insert(5);
  EXPECT_EQ(SlotKey::unpack32(k.pack32()), k);
  EXPECT_EQ(SlotKey::unpack(k.pack()), k);
  ASSERT_TRUE(t.erase(k));
  EXPECT_EQ(t.find(SlotKey::unpack32(k.pack32())), nullptr);
}

TEST(Reactor, EnumsHaveNames) {
  EXPECT_EQ(to_string(ReactorState::kIdle), "idle");
  EXPECT_EQ(to_string(ReactorState::kWaiting), "waiting");
  EXPECT_EQ(to_string(ReactorState::kDispatching), "dispatching");
  EXPECT_EQ(to_string(SlotState::kDoomed), "doomed");
  EXPECT_EQ(to_string(HandleKind::kPoller), "poller");
}

TEST(Reactor, IdleRunOnceTimesOut) {
  Reactor r;
  r.assert_owner_thread();
  const auto t0 = Reactor::now();
  EXPECT_EQ(r.run_once(20ms), 0u);
  EXPECT_GE(Reactor::now() - t0, 15ms);
  EXPECT_EQ(r.state(), ReactorState::kIdle);
}

// ---------------------------------------------------------------- fd watches

TEST(Reactor, EventFdReadinessDispatch) {
  Reactor r;
  EventFd efd;
  int calls = 0;
  std::uint64_t got = 0;
  auto reg = r.watch(efd.fd(), EPOLLIN, [&](std::uint32_t revents) {
    EXPECT_TRUE(revents & EPOLLIN);
    ++calls;
    got += efd.consume();
  });
  EXPECT_EQ(reg.fd(), efd.fd());
  EXPECT_EQ(r.watch_count(), 1u);
  EXPECT_EQ(r.run_once(0ms), 0u);  // not readable yet
  efd.notify(3);
  EXPECT_EQ(r.run_once(1000ms), 1u);
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(got, 3u);
  EXPECT_EQ(r.run_once(0ms), 0u);  // consumed: level-triggered source is quiet
  reg.reset();
  EXPECT_EQ(r.watch_count(), 0u);
  efd.notify();
  EXPECT_EQ(r.run_once(0ms), 0u);
  EXPECT_EQ(calls, 1);
}

TEST(Reactor, DuplicateWatchThrows) {
  Reactor r;
  EventFd efd;
  auto reg = r.watch(efd.fd(), EPOLLIN, [](std::uint32_t) {});
  EXPECT_THROW((void)r.watch(efd.fd(), EPOLLIN, [](std::uint32_t) {}), std::system_error);
  EXPECT_THROW((void)r.watch(-1, EPOLLIN, [](std::uint32_t) {}), std::system_error);
  EXPECT_EQ(r.watch_count(), 1u);
}

TEST(Reactor, CallbackDestroysOwnRegistration) {
  Reactor r;
  EventFd efd;
  auto token = std::make_shared<int>(7);
  std::weak_ptr<int> alive = token;
  Registration reg;
  int calls = 0;
  reg = r.watch(efd.fd(), EPOLLIN, [&, token = std::move(token)](std::uint32_t) {
    ++calls;
    reg.reset();  // destroys the std::function we are running in
    EXPECT_EQ(*token, 7);  // captures stay valid until we return
  });
  efd.notify();
  EXPECT_EQ(r.run_once(1000ms), 1u);
  EXPECT_EQ(calls, 1);
  EXPECT_FALSE(reg);
  EXPECT_TRUE(alive.expired());  // released right after the callback returned
  EXPECT_EQ(r.run_once(0ms), 0u);  // still readable, but no longer watched
  EXPECT_EQ(calls, 1);
}

TEST(Reactor, CallbackDestroysOtherReadyRegistration) {
  Reactor r;
  EventFd a;
  EventFd b;
  Registration ra;
  Registration rb;
  int a_calls = 0;
  int b_calls = 0;
  // Whichever runs first kills the other; epoll's order is not ours to pick.
  ra = r.watch(a.fd(), EPOLLIN, [&](std::uint32_t) { ++a_calls; rb.reset(); });
  rb = r.watch(b.fd(), EPOLLIN, [&](std::uint32_t) { ++b_calls; ra.reset(); });
  a.notify();
  b.notify();  // both ready before the single epoll_wait below
  EXPECT_EQ(r.run_once(1000ms), 1u);
  EXPECT_EQ(a_calls + b_calls, 1);
  EXPECT_EQ(r.watch_count(), 1u);
  EXPECT_EQ(r.run_once(0ms), 1u);  // the survivor is still level-triggered ready
}

TEST(Reactor, SlotReuseBumpsGenerationAndDropsStaleEvent) {
  Reactor r;
  EventFd a;
  EventFd b;
  Registration ra;
  Registration rb;
  Registration fresh;
  std::optional<SlotKey> victim;
  int first_calls = 0;
  int fresh_calls = 0;
  // The first callback destroys the other (still pending in this batch) and
  // re-registers that fd; the new watch must take the freed slot.
  const auto replace = [&](Registration& other, int other_fd) {
    ++first_calls;
    victim = other.key();
    other.reset();
    fresh = r.watch(other_fd, EPOLLIN, [&](std::uint32_t) { ++fresh_calls; });
  };
  ra = r.watch(a.fd(), EPOLLIN, [&](std::uint32_t) {
    a.consume();
    replace(rb, b.fd());
  });
  rb = r.watch(b.fd(), EPOLLIN, [&](std::uint32_t) {
    b.consume();
    replace(ra, a.fd());
  });
  a.notify();
  b.notify();
  EXPECT_EQ(r.run_once(1000ms), 1u);
  EXPECT_EQ(first_calls, 1);
  ASSERT_TRUE(victim.has_value());
  EXPECT_EQ(fresh.key().index, victim->index);
  EXPECT_EQ(fresh.key().generation, victim->generation + 1);
  EXPECT_EQ(fresh_calls, 0);  // the stale event of the old slot was dropped
  EXPECT_EQ(r.run_once(1000ms), 1u);  // next batch: only the fresh watch is ready
  EXPECT_EQ(fresh_calls, 1);
  EXPECT_EQ(first_calls, 1);
}

TEST(Reactor, ModifyChangesInterest) {
  Reactor r;
  EventFd efd;  // an eventfd is always writable, readable only when notified
  std::uint32_t last = 0;
  int calls = 0;
  auto reg = r.watch(efd.fd(), EPOLLIN, [&](std::uint32_t revents) {
    last = revents;
    ++calls;
  });
  EXPECT_EQ(r.run_once(0ms), 0u);
  reg.modify(EPOLLOUT);
  EXPECT_EQ(reg.events(), static_cast<std::uint32_t>(EPOLLOUT));
  EXPECT_EQ(r.run_once(1000ms), 1u);
  EXPECT_TRUE(last & EPOLLOUT);
  EXPECT_FALSE(last & EPOLLIN);
  reg.modify(EPOLLIN);
  EXPECT_EQ(r.run_once(0ms), 0u);
  EXPECT_EQ(calls, 1);
}

TEST(Reactor, ModifyNarrowedEarlierInBatchIsHonoured) {
  Reactor r;
  EventFd a;
  EventFd b;
  Registration ra;
  Registration rb;
  int a_calls = 0;
  int b_calls = 0;
  // Both writable; whichever runs first narrows the other to EPOLLIN, so its
  // already-fetched EPOLLOUT event must be filtered out (ae.c's mask check).
  ra = r.watch(a.fd(), EPOLLOUT, [&](std::uint32_t) { ++a_calls; rb.modify(EPOLLIN); });
  rb = r.watch(b.fd(), EPOLLOUT, [&](std::uint32_t) { ++b_calls; ra.modify(EPOLLIN); });
  EXPECT_EQ(r.run_once(1000ms), 1u);
  EXPECT_EQ(a_calls + b_calls, 1);
}

// ---------------------------------------------------------------- timers

TEST(Reactor, TimersFireInDeadlineOrder) {
  Reactor r;
  std::vector<int> order;
  const auto base = Reactor::now();
  auto t3 = r.at(base + 30ms, [&] { order.push_back(3); });
  auto t1 = r.at(base + 10ms, [&] { order.push_back(1); });
  auto t2 = r.at(base + 20ms, [&] { order.push_back(2); });
  EXPECT_EQ(r.timer_count(), 3u);
  ASSERT_TRUE(run_until(r, [&] { return order.size() == 3; }));
  EXPECT_EQ(order, (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(r.timer_count(), 0u);  // one-shots free their slot after firing
  EXPECT_FALSE(t1.pending());
}

TEST(Reactor, TimerDoesNotFireEarly) {
  Reactor r;
  bool fired = false;
  const auto t0 = Reactor::now();
  Reactor::Clock::time_point when{};
  auto t = r.after(30ms, [&] {
    fired = true;
    when = Reactor::now();
  });
  EXPECT_TRUE(t.pending());
  ASSERT_TRUE(run_until(r, [&] { return fired; }));
  EXPECT_GE(when - t0, 30ms);
}

TEST(Reactor, EqualDeadlinesFireInCreationOrder) {
  Reactor r;
  std::vector<int> order;
  const auto when = Reactor::now() + 5ms;
  std::vector<Timer> timers;
  for (int i = 0; i < 8; ++i) timers.push_back(r.at(when, [&order, i] { order.push_back(i); }));
  ASSERT_TRUE(run_until(r, [&] { return order.size() == 8; }));
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7}));
}

TEST(Reactor, CancelBeforeFiring) {
  Reactor r;
  bool cancelled_fired = false;
  bool sentinel = false;
  auto t = r.after(5ms, [&] { cancelled_fired = true; });
  auto s = r.after(30ms, [&] { sentinel = true; });
  t.reset();
  EXPECT_FALSE(t.pending());
  ASSERT_TRUE(run_until(r, [&] { return sentinel; }));
  EXPECT_FALSE(cancelled_fired);
}

TEST(Reactor, CancelFromAnotherTimersCallback) {
  Reactor r;
  const auto when = Reactor::now() + 5ms;  // same deadline: same due batch
  Timer second;
  bool second_fired = false;
  auto first = r.at(when, [&] { second.reset(); });
  second = r.at(when, [&] { second_fired = true; });
  bool sentinel = false;
  auto s = r.at(when + 20ms, [&] { sentinel = true; });
  ASSERT_TRUE(run_until(r, [&] { return sentinel; }));
  EXPECT_FALSE(second_fired);
}

TEST(Reactor, PeriodicTimerFiresNTimesAndCancelsItself) {
  Reactor r;
  int ticks = 0;
  Timer t;
  t = r.every(2ms, [&] {
    if (++ticks == 5) t.reset();  // cancel from inside its own callback
  });
  EXPECT_TRUE(t.pending());
  ASSERT_TRUE(run_until(r, [&] { return ticks == 5; }));
  EXPECT_FALSE(t);
  EXPECT_EQ(r.timer_count(), 0u);
  for (int i = 0; i < 5; ++i) r.run_once(5ms);
  EXPECT_EQ(ticks, 5);
}

TEST(Reactor, PeriodicTimerStopsWhenHandleDies) {
  Reactor r;
  int ticks = 0;
  {
    auto t = r.every(1ms, [&] { ++ticks; });
    ASSERT_TRUE(run_until(r, [&] { return ticks >= 3; }));
  }
  const int seen = ticks;
  for (int i = 0; i < 5; ++i) r.run_once(3ms);
  EXPECT_EQ(ticks, seen);
  EXPECT_THROW((void)r.every(0ns, [] {}), std::invalid_argument);
}

TEST(Reactor, TimerReArmsItselfFromCallback) {
  Reactor r;
  int fired = 0;
  Timer t;
  std::function<void()> again = [&] {
    if (++fired < 4) t = r.after(1ms, again);  // replaces the running timer
  };
  t = r.after(1ms, again);
  ASSERT_TRUE(run_until(r, [&] { return fired == 4; }));
  for (int i = 0; i < 3; ++i) r.run_once(3ms);
  EXPECT_EQ(fired, 4);
}

TEST(Reactor, ZeroDelayTimerAddedInCallbackWaitsForNextIteration) {
  Reactor r;
  int inner = 0;
  Timer second;
  auto first = r.after(0ns, [&] { second = r.after(0ns, [&] { ++inner; }); });
  EXPECT_EQ(r.run_once(1000ms), 1u);  // only `first`: no starvation loop
  EXPECT_EQ(inner, 0);
  EXPECT_EQ(r.run_once(1000ms), 1u);
  EXPECT_EQ(inner, 1);
}

// ---------------------------------------------------------------- signals

TEST(Reactor, SignalWatchDeliversAndRestoresMask) {
  ASSERT_FALSE(signal_blocked(SIGUSR1));
  Reactor r;
  std::vector<int> got;
  {
    auto watch = r.on_signals({SIGUSR1, SIGUSR2}, [&](int signo) { got.push_back(signo); });
    EXPECT_TRUE(signal_blocked(SIGUSR1));
    EXPECT_TRUE(signal_blocked(SIGUSR2));
    EXPECT_THROW((void)r.on_signals({SIGUSR1}, [](int) {}), std::invalid_argument);
    ASSERT_EQ(::raise(SIGUSR1), 0);
    ASSERT_TRUE(run_until(r, [&] { return !got.empty(); }));
    EXPECT_EQ(got, (std::vector<int>{SIGUSR1}));
  }
  EXPECT_FALSE(signal_blocked(SIGUSR1));
  EXPECT_FALSE(signal_blocked(SIGUSR2));
  EXPECT_EQ(r.watch_count(), 0u);
}

TEST(Reactor, SignalWatchKeepsCallersBlockedSignals) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGUSR2);
  ASSERT_EQ(pthread_sigmask(SIG_BLOCK, &set, nullptr), 0);
  {
    Reactor r;
    auto watch = r.on_signals({SIGUSR2}, [](int) {});
  }
  EXPECT_TRUE(signal_blocked(SIGUSR2));  // was blocked before: stays blocked
  ASSERT_EQ(pthread_sigmask(SIG_UNBLOCK, &set, nullptr), 0);
}

TEST(Reactor, SignalWatchDrainsPendingSignalOnDestroy) {
  Reactor r;
  {
    auto watch = r.on_signals({SIGUSR1}, [](int) { ADD_FAILURE() << "loop never ran"; });
    ASSERT_EQ(::raise(SIGUSR1), 0);  // pending, never read by the loop
  }
  // Reaching this line means unblocking did not deliver SIGUSR1 (which would
  // have killed the process).
  EXPECT_FALSE(signal_blocked(SIGUSR1));
}

TEST(Reactor, SignalCallbackMayDestroyItsWatch) {
  Reactor r;
  SignalWatch watch;
  int got = 0;
  watch = r.on_signals({SIGUSR1}, [&](int) {
    ++got;
    watch.reset();
  });
  ASSERT_EQ(::raise(SIGUSR1), 0);
  ASSERT_TRUE(run_until(r, [&] { return got == 1; }));
  EXPECT_FALSE(watch);
  EXPECT_FALSE(signal_blocked(SIGUSR1));
}

// ---------------------------------------------------------------- lifetime

TEST(Reactor, HandlesCapturedInCallbacksDieWithReactor) {
  // A handle owned by a callback stored in the reactor is legitimate (via
  // shared_ptr: std::function needs copyable captures). Two timers owning
  // each other form a cycle that only ~Reactor can break; it must not assert.
  auto r = std::make_unique<Reactor>();
  auto ha = std::make_shared<Timer>();
  auto hb = std::make_shared<Timer>();
  *ha = r->after(1h, [hb] {});
  *hb = r->after(1h, [ha] {});
  std::weak_ptr<Timer> wa = ha;
  ha.reset();
  hb.reset();
  EXPECT_EQ(r->timer_count(), 2u);
  r.reset();
  EXPECT_TRUE(wa.expired());
}

#ifndef NDEBUG
TEST(ReactorDeathTest, HandleOutlivingReactorAsserts) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        auto r = std::make_unique<Reactor>();
        auto t = r->after(1h, [] {});
        r.reset();
      },
      "must die before its Reactor");
}

// Public calls and handle operations from a thread other than the owner trip
// assert_owner_thread() (debug builds).
TEST(ReactorDeathTest, ForeignThreadTripsTheOwnerAssert) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  Reactor r;
  Poller p = r.add_poller([] { return false; });
  const auto on_foreign_thread = [](auto fn) { std::thread(fn).join(); };
  EXPECT_DEATH(on_foreign_thread([&] { r.assert_owner_thread(); }), "other than its owner");
  EXPECT_DEATH(on_foreign_thread([&] { r.stop(); }), "other than its owner");
  EXPECT_DEATH(on_foreign_thread([&] { EXPECT_EQ(r.poller_count(), 1u); }), "other than its owner");
  EXPECT_DEATH(on_foreign_thread([&] { p.wake(); }), "other than its owner");
  r.assert_owner_thread();  // the owner passes
}
#endif

// ---------------------------------------------------------------- stress

TEST(Reactor, StressNoLostWakeups) {
  constexpr int kFds = 64;
  constexpr int kRounds = 2000;
  Reactor r;
  std::array<EventFd, kFds> fds;
  std::array<std::uint64_t, kFds> consumed{};
  std::uint64_t total = 0;
  std::vector<Registration> regs;
  for (int i = 0; i < kFds; ++i) {
    regs.push_back(r.watch(fds[i].fd(), EPOLLIN, [&, i](std::uint32_t) {
      const std::uint64_t n = fds[i].consume();
      consumed[i] += n;
      total += n;
    }));
  }
  std::atomic<bool> done{false};
  std::thread producer([&] {
    for (int round = 0; round < kRounds; ++round) {
      for (int i = 0; i < kFds; ++i) fds[i].notify(static_cast<std::uint64_t>(i % 3) + 1);
    }
    done.store(true, std::memory_order_release);
  });
  std::array<std::uint64_t, kFds> expected_per_fd{};
  std::uint64_t expected = 0;
  for (int i = 0; i < kFds; ++i) {
    expected_per_fd[i] = static_cast<std::uint64_t>(kRounds) * (static_cast<std::uint64_t>(i % 3) + 1);
    expected += expected_per_fd[i];
  }
  const auto deadline = Reactor::now() + 30s;
  while (total < expected && Reactor::now() < deadline) r.run_once(100ms);
  producer.join();
  EXPECT_TRUE(done.load(std::memory_order_acquire));
  r.run_once(0ms);  // anything left would show up as an overshoot below
  EXPECT_EQ(total, expected);
  for (int i = 0; i < kFds; ++i) EXPECT_EQ(consumed[i], expected_per_fd[i]) << "fd #" << i;
}

}  // namespace
}  // namespace rkv::reactor
