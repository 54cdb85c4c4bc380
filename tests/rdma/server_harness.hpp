#pragma once
// ServerHarness: a kv::server::Server running in-process on the test's own Reactor
// (bound to $SOFTROCE_ADDR, port 0), stepped by the test's wait loops.
// Single-threaded: the test thread is the reactor thread.

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "kv/server/server.hpp"
#include "kv/store/store.hpp"
#include "raw_client.hpp"
#include "reactor/reactor.hpp"

namespace rkv::test {

class ServerHarness {
 public:
  // A fixed window of `credits` per client (initial = most: the elastic
  // credits never grow or shrink), which raw clients count on exactly.
  ServerHarness(const std::string& addr, std::uint16_t credits) {
    kv::server::ServerOptions opt;
    opt.bind_address = addr;
    opt.port = 0;
    opt.credits = credits;
    opt.initial_credits = credits;
    opt.disconnect_timeout = std::chrono::seconds(5);
    opt.drain_timeout = std::chrono::seconds(5);
    server.emplace(reactor, store, opt);
  }
  ~ServerHarness() { server.reset(); }  // its reactor handles die before the reactor
  ServerHarness(const ServerHarness&) = delete;
  ServerHarness& operator=(const ServerHarness&) = delete;

  void step() { reactor.run_once(std::chrono::milliseconds(1)); }
  std::function<void()> stepper() {
    return [this] { step(); };
  }
  bool wait(const std::function<bool()>& done, std::chrono::milliseconds timeout,
            std::initializer_list<RawClient*> clients) {
    return wait_until(done, timeout, stepper(), clients);
  }
  // Clean shutdown; true if every connection was torn down in time.
  bool shutdown(std::chrono::milliseconds timeout, std::initializer_list<RawClient*> clients) {
    auto done = std::make_shared<bool>(false);
    server->shutdown([done] { *done = true; });
    return wait([done] { return *done; }, timeout, clients);
  }

  reactor::Reactor reactor;  // declared first: destroyed last
  kv::store::Store store;
  std::optional<kv::server::Server> server;
};

}  // namespace rkv::test
