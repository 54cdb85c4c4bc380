#pragma once
// Shared by the fiber and key-order unit tests.
#include <chrono>

#include "kv/load/fiber.hpp"
#include "reactor/reactor.hpp"

namespace rkv::kv::load::test {

// A simulated async op: a fiber arms a reactor timer whose callback wakes it,
// then parks until it fired — the pattern kvload uses for client operations.
inline void await_timer(reactor::Reactor& r, Scheduler& s, std::chrono::milliseconds delay) {
  bool fired = false;
  const FiberId me = s.current();
  reactor::Timer t = r.after(delay, [&] {
    fired = true;
    s.wake(me);
  });
  while (!fired) s.suspend();
}

}  // namespace rkv::kv::load::test
