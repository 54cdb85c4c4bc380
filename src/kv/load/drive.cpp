// drive(): see drive.hpp.
#include "kv/load/drive.hpp"


namespace rkv::kv::load {

bool drive(reactor::Reactor& reactor, Scheduler& scheduler, const std::function<bool()>& done,
           std::chrono::milliseconds timeout, const std::function<void()>& tick) {
  using namespace std::chrono_literals;
  // The deadline is a reactor timer, not a clock read per iteration: under a
  // TCG guest every clock_gettime is a real syscall (no vDSO clocksource).
  bool expired = false;
  const reactor::Timer deadline = reactor.after(timeout, [&expired] { expired = true; });
  for (;;) {
    scheduler.run_ready();
    if (done()) return true;
    if (expired) return false;
    reactor.run_once(scheduler.ready_count() > 0 ? 0ms : 100ms);
    if (tick) tick();
  }
}

}  // namespace rkv::kv::load
