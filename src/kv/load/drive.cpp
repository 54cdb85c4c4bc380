// drive(): see drive.hpp.
#include "kv/load/drive.hpp"

#include <algorithm>

namespace rkv::kv::load {

bool drive(reactor::Reactor& reactor, Scheduler& scheduler, const std::function<bool()>& done,
           std::chrono::milliseconds timeout, const std::function<void()>& tick) {
  using namespace std::chrono_literals;
  const auto deadline = reactor::Reactor::now() + timeout;
  for (;;) {
    scheduler.run_ready();
    if (done()) return true;
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - reactor::Reactor::now());
    if (left.count() <= 0) return false;
    reactor.run_once(scheduler.ready_count() > 0 ? 0ms : std::min<std::chrono::milliseconds>(left, 100ms));
    if (tick) tick();
  }
}

}  // namespace rkv::kv::load
