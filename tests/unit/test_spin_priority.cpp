// Unit tests for the reactor's idle spin at idle priority (reactor.hpp,
// "Spin, then block"; spin_priority.hpp): once an idle stretch has lasted
// half the spin budget, the loop's turns run under SCHED_IDLE where the
// thread may return from it, and run_once never returns with the thread
// lowered. Where it may not (no CAP_SYS_NICE, RLIMIT_NICE 0: a child drops
// the capability), nothing is lowered. No speed is asserted: the windows
// are measured by the reactor's own clock, and only lower bounds are used.
#include <gtest/gtest.h>
#include <linux/capability.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <utility>

#include "reactor/reactor.hpp"
#include "reactor/spin_priority.hpp"

namespace rkv::reactor {
namespace {

using namespace std::chrono_literals;

// Whether this thread has CAP_SYS_NICE in its effective set, asked of the
// kernel (capget), not of /proc as SpinPriority does.
bool cap_sys_nice() {
  __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2]{};
  if (::syscall(SYS_capget, &hdr, data) != 0) return false;
  return (data[CAP_TO_INDEX(CAP_SYS_NICE)].effective & CAP_TO_MASK(CAP_SYS_NICE)) != 0;
}

bool drop_cap_sys_nice() {
  __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2]{};
  if (::syscall(SYS_capget, &hdr, data) != 0) return false;
  data[CAP_TO_INDEX(CAP_SYS_NICE)].effective &= ~CAP_TO_MASK(CAP_SYS_NICE);
  return ::syscall(SYS_capset, &hdr, data) == 0;
}

// What one spin window saw: polls under SCHED_IDLE, the policy after each
// run_once, and the turns.
struct Seen {
  int polls = 0;
  int idle_polls = 0;
  bool other_after_each = true;
};

// A poller with `budget` that reports work `works` times (once per call to
// run_once that it is asked to), then idles until the window closes.
Seen spin_window(std::chrono::microseconds budget, int works) {
  Reactor r;
  Seen seen;
  int left = 0;
  PollerOptions o;
  o.spin = budget;
  Poller p = r.add_poller(
      [&] {
        ++seen.polls;
        if (::sched_getscheduler(0) == SCHED_IDLE) ++seen.idle_polls;
        return left > 0 && left-- > 0;
      },
      o);
  for (int i = 0; i < works; ++i) {
    left = 1;
    r.run_once(0ms);  // the work opens (or keeps) the window
    seen.other_after_each = seen.other_after_each && ::sched_getscheduler(0) == SCHED_OTHER;
  }
  // The window's idle turns, inside this one call, until it closes.
  for (int i = 0; i < 100 && r.spinning(); ++i) {
    r.run_once(10s);
    seen.other_after_each = seen.other_after_each && ::sched_getscheduler(0) == SCHED_OTHER;
  }
  return seen;
}

TEST(SpinPriority, AllowedWhereTheThreadMayReturn) {
  ASSERT_EQ(::sched_getscheduler(0), SCHED_OTHER);
  rlimit lim{};
  ASSERT_EQ(::getrlimit(RLIMIT_NICE, &lim), 0);
  const bool rlimit_allows = lim.rlim_cur == RLIM_INFINITY || lim.rlim_cur >= 20;  // nice 0
  EXPECT_EQ(SpinPriority().allowed(), cap_sys_nice() || rlimit_allows);
}

TEST(SpinPriority, IdleSpinRunsLoweredInsideRunOnceOnly) {
  const bool may = SpinPriority().allowed();
  // A window lowers the thread at the first clock read (every 8th idle turn)
  // past half its budget; a thread preempted across that whole second half
  // sees none. So, where it may lower, up to five windows until one did.
  Seen seen;
  for (int window = 0; window < 5; ++window) {
    seen = spin_window(100ms, 3);
    EXPECT_TRUE(seen.other_after_each);  // never returned lowered
    if (!may || seen.idle_polls > 0) break;
  }
  EXPECT_EQ(::sched_getscheduler(0), SCHED_OTHER);
  EXPECT_GT(seen.polls, 3);
  if (may) {
    EXPECT_GT(seen.idle_polls, 0);  // the second half of the idle stretch
    EXPECT_LT(seen.idle_polls, seen.polls);  // the work turns and the first half were not
  } else {
    EXPECT_EQ(seen.idle_polls, 0);
  }
}

TEST(SpinPriority, NoBudgetNoLowering) {
  const Seen seen = spin_window(0us, 3);
  EXPECT_EQ(seen.idle_polls, 0);
  EXPECT_TRUE(seen.other_after_each);
}

// A thread that could not leave SCHED_IDLE is never put there: a child
// without CAP_SYS_NICE (RLIMIT_NICE stays as it is: 0 by default) spins a
// window and stays SCHED_OTHER throughout. Exit status: 0 passed, 1 the
// capability could not be dropped, 2 still allowed, 3 lowered.
TEST(SpinPriority, NotAllowedWithoutCapabilityOrRlimit) {
  rlimit lim{};
  ASSERT_EQ(::getrlimit(RLIMIT_NICE, &lim), 0);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    const rlimit none{0, lim.rlim_max};
    if (::setrlimit(RLIMIT_NICE, &none) != 0 || (cap_sys_nice() && !drop_cap_sys_nice())) ::_exit(1);
    if (SpinPriority().allowed()) ::_exit(2);
    const Seen seen = spin_window(20ms, 2);
    ::_exit(seen.idle_polls == 0 && seen.other_after_each ? 0 : 3);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

}  // namespace
}  // namespace rkv::reactor
