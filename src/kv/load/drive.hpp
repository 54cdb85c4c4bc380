#pragma once
// drive(): the loop that runs fibers and the reactor on one thread. Each
// iteration resumes every ready fiber (Scheduler::run_ready), then runs one
// reactor iteration (run_once: without waiting if fibers are ready again,
// else up to 100 ms), whose callbacks complete I/O and wake fibers. Fibers
// therefore always run with the reactor idle, never inside a callback.

#include <chrono>
#include <functional>

#include "kv/load/fiber.hpp"
#include "reactor/reactor.hpp"

namespace rkv::kv::load {

// Runs until done() holds (checked after the fibers ran) or `timeout`
// passes; `tick` (may be null) runs after every reactor iteration. True if
// done(). Rethrows what a fiber threw (see Scheduler::run_ready).
bool drive(reactor::Reactor& reactor, Scheduler& scheduler, const std::function<bool()>& done,
           std::chrono::milliseconds timeout, const std::function<void()>& tick = {});

}  // namespace rkv::kv::load
