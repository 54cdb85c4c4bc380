#pragma once
// Test helper for the rdma suite: a loopback RC connection through rdma_cm
// on $SOFTROCE_ADDR (listener + client in one process), with both CM event
// channels driven from one thread by poll(2). Independent of src/reactor.

#include <poll.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "verbs/cm_id.hpp"
#include "verbs/comp_channel.hpp"
#include "verbs/cq.hpp"
#include "verbs/event_channel.hpp"
#include "verbs/pd.hpp"
#include "verbs/qp.hpp"

namespace rkv::verbs::test {

using namespace std::chrono_literals;

// $SOFTROCE_ADDR, after checking an RDMA device exists. Throws (failing the
// test with the message) when either is missing: these tests never skip.
std::string softroce_addr();

// One side of the connection. Members in destruction-safe order (the QP
// goes first, the cm_id last).
struct Endpoint {
  std::optional<CmId> id;
  std::optional<ProtectionDomain> pd;
  std::optional<CompletionChannel> channel;
  std::optional<CompletionQueue> cq;  // used for both send and recv
  std::optional<QueuePair> qp;

  // The QP goes on `shared_pd` if given (then `pd` stays empty), else on a
  // PD of its own.
  void create_resources(const QpCaps& caps, int cq_entries, const ProtectionDomain* shared_pd = nullptr);
  // Waits (poll on the completion channel fd, never busy-polls) and drains
  // until `done()` or the timeout; returns done().
  template <class F>
  bool drain_until(std::chrono::milliseconds timeout, F&& on_completion, const std::function<bool()>& done);
};

struct LoopbackOptions {
  QpCaps caps;
  int cq_entries = 256;
  ConnParams client_params;
  ConnParams server_params;
  // Called after each side's QP exists and before connect()/accept(): post
  // receives here. The return value is that side's private data.
  std::function<std::vector<std::byte>(Endpoint&)> before_connect;
  std::function<std::vector<std::byte>(Endpoint&)> before_accept;
  // The server side's QP on this PD (another Loopback's server.pd), as
  // kvd's connections share one: for checks that one connection cannot use
  // what was opened to another.
  const ProtectionDomain* server_pd = nullptr;
  std::chrono::milliseconds timeout = 120s;  // per CM step; TCG guests are slow
};

class Loopback {
 public:
  static constexpr std::uint64_t kListenerToken = 1;
  static constexpr std::uint64_t kClientToken = 2;
  static constexpr std::uint64_t kServerToken = 3;

  // Establishes the connection; throws std::runtime_error on any failure.
  Loopback(const std::string& addr, LoopbackOptions options);
  ~Loopback();  // best-effort disconnect if still connected; never throws
  Loopback(const Loopback&) = delete;
  Loopback& operator=(const Loopback&) = delete;

  // Teardown steps 2-3 (see verbs/qp.hpp): the client disconnects, the
  // server answers on DISCONNECTED, both wait for their DISCONNECTED.
  void disconnect();

  // Declared first: destroyed last.
  EventChannel server_events;
  EventChannel client_events;
  std::optional<CmId> listener;
  Endpoint server;
  Endpoint client;
  std::vector<std::byte> server_saw_private;  // from connect_request
  std::vector<std::byte> client_saw_private;  // from established
  std::uint8_t server_saw_initiator_depth = 0;      // the client's, from connect_request
  std::uint8_t client_saw_responder_resources = 0;  // the server's, from established

 private:
  // Polls both event channels until done() or timeout (throws on timeout).
  void pump(const char* what, const std::function<void(CmEvent&)>& handle, const std::function<bool()>& done);

  LoopbackOptions options_;
  bool connected_ = false;
};

// The next completion on `ep`, waited for up to 60 s (throws if none comes,
// or if more than one came at once: a caller expecting one would lose one).
Completion one_completion(Endpoint& ep);

// n test bytes from `seed` (byte i: (i * 131 + seed) mod 256).
std::vector<std::byte> byte_pattern(std::size_t n, unsigned seed);

// What one service() pass did.
struct ServiceStats {
  unsigned events = 0;         // channel events taken
  std::size_t before_arm = 0;  // completions polled before the re-arm
  std::size_t after_arm = 0;   // completions found by arm_and_poll: the arm race was hit
  int error = 0;               // 0, or the errno of the failing verbs call
  [[nodiscard]] std::size_t completions() const noexcept { return before_arm + after_arm; }
};

// One pass of the kvd loop over a CQ whose channel fd was readable, from the
// production calls in their production order (Server::on_cq_event, then the
// arm pass before the loop sleeps): take the channel's events, poll until
// empty, then CompletionQueue::arm_and_poll (re-arm, poll again).
template <class F>
ServiceStats service(CompletionQueue& cq, F&& on_completion) {
  ServiceStats st;
  for (;;) {
    const int e = cq.take_event();
    if (e < 0) {
      st.error = -e;
      return st;
    }
    if (e == 0) break;
    ++st.events;
  }
  for (;;) {
    const int n = cq.poll(CompletionQueue::kPollBatch, on_completion);
    if (n < 0) {
      st.error = -n;
      return st;
    }
    st.before_arm += static_cast<std::size_t>(n);
    if (n < CompletionQueue::kPollBatch) break;
  }
  const ArmStats armed = cq.arm_and_poll(on_completion);
  st.after_arm = armed.completions;
  st.error = armed.error;
  return st;
}

template <class F>
bool Endpoint::drain_until(std::chrono::milliseconds timeout, F&& on_completion, const std::function<bool()>& done) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!done()) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd pfd{channel->fd(), POLLIN, 0};
    const int n = ::poll(&pfd, 1, static_cast<int>(left.count()));
    if (n < 0) return false;
    if (n == 0) continue;  // re-check the deadline
    const ServiceStats st = service(*cq, on_completion);
    if (st.error != 0) return false;
  }
  return true;
}

}  // namespace rkv::verbs::test
