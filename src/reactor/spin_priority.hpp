#pragma once
// SpinPriority: an idle spin at idle priority (reactor.hpp, "Spin, then
// block"). Once a loop has turned without work for half its spin budget, its
// thread runs under SCHED_IDLE, so the spin only takes a CPU no task with
// work wants; Reactor::run_once puts it back under SCHED_OTHER before it
// returns (after the turn that found work, or when the window closed). On a
// machine with a free core nothing changes (the spinner still has that
// core); on a crowded one (more client processes than cores, beside kvd and
// the kernel's RDMA work) the spinners stop taking CPU from the process whose
// reply they wait for (docs/performance.md, "8 client processes").
//
// Only where the thread may return: an unprivileged thread may leave
// SCHED_IDLE only if RLIMIT_NICE allows its nice value, or with
// CAP_SYS_NICE (sched(7)). Where it may not, or where the thread runs under
// another policy than SCHED_OTHER (someone chose it), lower() does nothing.
//
// Thread: the owner's (the Reactor's); it changes the calling thread's policy.

namespace rkv::reactor {

class SpinPriority {
 public:
  // Decides whether this thread may spin at idle priority (one look at its
  // policy, nice value, RLIMIT_NICE and capabilities). Never throws.
  SpinPriority() noexcept;
  // Restores the thread's policy if it is still lowered.
  ~SpinPriority();
  SpinPriority(const SpinPriority&) = delete;
  SpinPriority& operator=(const SpinPriority&) = delete;

  // Idle spinning from now: SCHED_IDLE (one syscall the first time).
  void lower() noexcept {
    if (allowed_ && !lowered_) set_idle(true);
  }
  // Work, or a sleep, from now: SCHED_OTHER again (one syscall if lowered).
  void restore() noexcept {
    if (lowered_) set_idle(false);
  }
  // Whether lower() may act: the constructor's verdict, until a change of
  // policy failed.
  [[nodiscard]] bool allowed() const noexcept { return allowed_; }

 private:
  void set_idle(bool idle) noexcept;

  bool allowed_ = false;
  bool lowered_ = false;
};

}  // namespace rkv::reactor
