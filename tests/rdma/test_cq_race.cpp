// verbs_cq_race: no completion is lost under the arm/poll race.
//
// One loopback RC connection. The client SENDs `count` small messages
// (8-byte sequence numbers), never more in flight than the server has
// receives posted (credit-like; rnr_retry_count = 0, so any RNR would surface
// as an error instead of a silent retry). The server waits ONLY via poll(2)
// on its completion-channel fd, with a timeout that fails the test, and
// serves its CQ as kvd does (service(), loopback.hpp: take the events, poll,
// CompletionQueue::arm_and_poll), re-posting receives as one chain.
//
// Making the race likely and a lost completion visible:
//  - rxe processes a user QP's SEND inline in the ibv_post_send syscall,
//    loopback delivery and the receiver's completion included. With sender
//    and receiver on one thread every completion already exists when the
//    pass runs, so the window between its last poll and its re-arm is never
//    hit. The main test therefore posts from a second thread, one SEND per
//    syscall, so completions land while the receiver drains and re-arms
//    (ServiceStats::after_arm counts the hits; the test requires some).
//  - A completion that lands in that window raises no event; it is only
//    "rescued" when a later completion raises one. So the sender works in
//    bursts (1..16 messages) and waits until the receiver has consumed the
//    whole burst before the next: a missed last completion of a burst is then
//    a stall that fails the test. (Checked: with the poll after the arm
//    removed from arm_and_poll(), this test fails; a continuously streaming
//    sender did not.)
// The single-thread variant keeps the reactor-like interleaving (post a
// batch, drain, post ...) for coverage of that pattern.
#include <gtest/gtest.h>
#include <poll.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "loopback.hpp"
#include "verbs/mr.hpp"
#include "verbs/wr_id.hpp"

namespace rkv::verbs::test {
namespace {

constexpr std::uint32_t kRecvWindow = 16;  // small: many drain/re-arm cycles
constexpr std::uint32_t kSendDepth = 64;
constexpr std::size_t kMsgSize = 64;
constexpr std::uint32_t kGen = 1;
constexpr int kWaitMs = 30'000;  // a lost wakeup fails here instead of hanging

std::uint64_t message_count(std::uint64_t fallback) {
  if (const char* s = std::getenv("RKV_CQ_RACE_COUNT")) return std::strtoull(s, nullptr, 10);
  return fallback;
}

// Connection, buffers and both sides' bookkeeping.
struct Race {
  std::vector<std::byte> recv_buf = std::vector<std::byte>(kRecvWindow * kMsgSize);
  std::vector<std::byte> send_buf = std::vector<std::byte>(kSendDepth * kMsgSize);
  std::optional<MemoryRegion> recv_mr;
  std::optional<MemoryRegion> send_mr;
  std::optional<Loopback> lb;

  // Receiver. recv_posted is the sender's credit limit.
  std::atomic<std::uint64_t> recv_posted{0};
  std::atomic<std::uint64_t> received{0};  // read by the sender thread to end a burst
  std::uint64_t expected_seq = 0, out_of_order = 0, bad_len = 0, recv_errors = 0;
  Completion first_recv_error{};
  std::array<RecvRequest, kRecvWindow> reposts{};
  std::size_t n_reposts = 0;
  std::uint64_t drains = 0, events = 0, race_hits = 0, after_arm = 0, empty_wakeups = 0;

  // Sender.
  std::uint64_t sent = 0, send_done = 0, send_errors = 0;
  Completion first_send_error{};
  std::mt19937 rng{12345};

  std::span<std::byte> recv_slot(std::uint32_t slot) noexcept {
    return std::span<std::byte>(recv_buf).subspan(slot * kMsgSize, kMsgSize);
  }

  void connect(const std::string& addr) {
    LoopbackOptions opt;
    opt.caps = QpCaps{kSendDepth, kRecvWindow, 1, 1};
    opt.cq_entries = static_cast<int>(kSendDepth + kRecvWindow);
    opt.client_params.rnr_retry_count = 0;  // prove the credit accounting: RNR = error
    opt.server_params.rnr_retry_count = 0;
    opt.before_connect = [this](Endpoint& c) {
      send_mr.emplace(*c.pd, std::span<std::byte>(send_buf), Access::none);  // SEND source: local read only
      return std::vector<std::byte>{};
    };
    opt.before_accept = [this](Endpoint& s) {
      recv_mr.emplace(*s.pd, std::span<std::byte>(recv_buf), Access::local_write);
      std::vector<RecvRequest> reqs;
      for (std::uint32_t i = 0; i < kRecvWindow; ++i) {
        reqs.push_back({WrId(i, kGen, WrKind::recv), recv_slot(i), recv_mr->lkey()});
      }
      std::size_t posted = 0;
      if (s.qp->post_recv_batch(reqs, &posted) != 0) throw std::runtime_error("initial post_recv_batch failed");
      recv_posted += posted;
      return std::vector<std::byte>{};
    };
    lb.emplace(addr, std::move(opt));
  }

  void on_recv(const Completion& c) noexcept {
    if (!c.ok() || c.opcode != CompletionOpcode::recv || c.wr_id.kind() != WrKind::recv) {
      if (recv_errors++ == 0) first_recv_error = c;
      return;
    }
    if (c.byte_len != sizeof(std::uint64_t)) ++bad_len;
    std::uint64_t seq = 0;
    std::memcpy(&seq, recv_slot(c.wr_id.slot()).data(), sizeof seq);
    if (seq != expected_seq) ++out_of_order;
    expected_seq = seq + 1;
    ++received;
    if (n_reposts < reposts.size()) {
      reposts[n_reposts++] = {WrId(c.wr_id.slot(), kGen, WrKind::recv), recv_slot(c.wr_id.slot()), recv_mr->lkey()};
    }
  }

  void on_send(const Completion& c) noexcept {
    if ((!c.ok() || c.wr_id.kind() != WrKind::send) && send_errors++ == 0) first_send_error = c;
    ++send_done;
  }

  // Receiver step, called when its channel fd is readable. 0 or errno.
  int drain_receiver() {
    n_reposts = 0;
    const ServiceStats st = service(*lb->server.cq, [this](const Completion& c) noexcept { on_recv(c); });
    if (st.error != 0) return st.error;
    ++drains;
    events += st.events;
    after_arm += st.after_arm;
    if (st.after_arm > 0) ++race_hits;
    if (st.completions() == 0) ++empty_wakeups;
    std::size_t posted = 0;
    const int rc = lb->server.qp->post_recv_batch(std::span<const RecvRequest>(reposts.data(), n_reposts), &posted);
    recv_posted += posted;  // publish the credit only after the receives are really posted
    return rc;
  }

  // Sender step: up to `want` messages within credit and send-queue room.
  // Returns the number posted, or -errno.
  int post_batch(std::uint64_t count, std::uint64_t want) {
    const std::uint64_t credit = recv_posted.load() - sent;
    const std::uint64_t room = kSendDepth - (sent - send_done);
    const std::uint64_t batch = std::min({credit, room, count - sent, want});
    for (std::uint64_t i = 0; i < batch; ++i) {
      const auto slot = static_cast<std::uint32_t>(sent % kSendDepth);
      auto msg = std::span<std::byte>(send_buf).subspan(slot * kMsgSize, sizeof(std::uint64_t));
      std::memcpy(msg.data(), &sent, sizeof sent);
      if (int rc = lb->client.qp->post_send(WrId(slot, kGen, WrKind::send), msg, send_mr->lkey(), true); rc != 0) {
        return -rc;
      }
      ++sent;
    }
    return static_cast<int>(batch);
  }

  int drain_sender() {
    return service(*lb->client.cq, [this](const Completion& c) noexcept { on_send(c); }).error;
  }

  void report(const char* name, std::uint64_t count) const {
    spdlog::info("{}: {} msgs, {} receiver drains, {} channel events, {} drains hit the arm race "
                 "({} completions found after re-arm), {} empty wakeups",
                 name, count, drains, events, race_hits, after_arm, empty_wakeups);
  }

  void check(std::uint64_t count) {
    EXPECT_EQ(recv_errors, 0u) << "recv error: " << to_string(first_recv_error.status) << " ("
                               << first_recv_error.status_detail() << ")";
    EXPECT_EQ(send_errors, 0u) << "send error: " << to_string(first_send_error.status) << " ("
                               << first_send_error.status_detail() << ")";
    EXPECT_EQ(sent, count);
    EXPECT_EQ(received.load(), count);
    EXPECT_EQ(expected_seq, count);
    EXPECT_EQ(out_of_order, 0u);  // every sequence number exactly once, in order
    EXPECT_EQ(bad_len, 0u);
    EXPECT_EQ(send_done, count);
  }

  // Teardown per verbs/qp.hpp: disconnect, to_error, then exactly the
  // receives still posted come back flushed.
  void teardown() {
    lb->disconnect();
    EXPECT_EQ(lb->server.qp->to_error(), 0);
    std::uint64_t flushed = 0;
    const std::uint64_t outstanding = recv_posted.load() - received.load();
    auto on_flush = [&](const Completion& c) noexcept {
      if (c.status == CompletionStatus::flushed) ++flushed;
    };
    EXPECT_TRUE(lb->server.drain_until(60s, on_flush, [&] { return flushed >= outstanding; }))
        << "flushed " << flushed << " of " << outstanding;
    EXPECT_EQ(flushed, outstanding);
  }
};

TEST(VerbsCqRace, NoCompletionLostWithConcurrentSender) {
  const std::string addr = softroce_addr();
  const std::uint64_t count = message_count(20000);
  Race r;
  r.connect(addr);

  std::atomic<bool> stop{false};
  std::string sender_failure;
  std::thread sender([&] {
    // Only this thread touches the client QP/CQ and the sender counters.
    std::uniform_int_distribution<std::uint64_t> burst_dist(1, kRecvWindow);
    const auto deadline = std::chrono::steady_clock::now() + 400s;
    auto fail = [&](std::string why) {
      sender_failure = std::move(why);
      stop = true;
    };
    auto reap = [&](int timeout_ms) {  // send completions free send-queue slots
      pollfd pfd{r.lb->client.channel->fd(), POLLIN, 0};
      if (::poll(&pfd, 1, timeout_ms) > 0) {
        if (int rc = r.drain_sender(); rc != 0) fail(std::string("sender drain: ") + std::strerror(rc));
      }
      if (r.send_errors != 0) fail("send completion error");
    };
    while (r.sent < count && !stop.load()) {
      if (std::chrono::steady_clock::now() > deadline) {
        fail("sender timed out");
        break;
      }
      // One burst, one SEND per syscall so arrivals spread over the
      // receiver's drain/re-arm.
      std::uint64_t burst = burst_dist(r.rng);
      while (burst > 0 && r.sent < count && !stop.load()) {
        const int posted = r.post_batch(count, 1);
        if (posted < 0) {
          fail(std::string("post_send: ") + std::strerror(-posted));
          break;
        }
        if (posted == 0) break;  // out of credit: the burst ends early
        --burst;
      }
      // Quiesce: nothing more is sent until the receiver consumed the burst,
      // so a completion it missed would never be rescued by a later one.
      while (r.received.load() < r.sent && !stop.load()) reap(1);
      reap(0);
    }
    while (r.send_done < r.sent && !stop.load()) {
      if (std::chrono::steady_clock::now() > deadline) {
        fail("send completions timed out");
        break;
      }
      reap(10);
    }
  });

  // Receiver: waits only via poll() on its completion channel.
  std::string receiver_failure;
  while (r.received < count && !stop.load()) {
    pollfd pfd{r.lb->server.channel->fd(), POLLIN, 0};
    const int n = ::poll(&pfd, 1, kWaitMs);
    if (n <= 0) {
      receiver_failure = "no completion event for " + std::to_string(kWaitMs) + " ms with " +
                         std::to_string(r.recv_posted.load() - r.received.load()) +
                         " receives posted: a completion was lost (received " + std::to_string(r.received.load()) + "/" +
                         std::to_string(count) + ")";
      break;
    }
    if (int rc = r.drain_receiver(); rc != 0) {
      receiver_failure = std::string("receiver drain/repost: ") + std::strerror(rc);
      break;
    }
    if (r.recv_errors != 0) {
      receiver_failure = "receive completion error";
      break;
    }
  }
  if (!receiver_failure.empty()) stop = true;
  sender.join();

  r.report("cq_race(threads)", count);
  EXPECT_EQ(receiver_failure, "");
  EXPECT_EQ(sender_failure, "");
  r.check(count);
  if (count >= 10000) {
    // Otherwise the run proved nothing about the race (seen: 5..700 hits per
    // 20000 messages under TCG).
    EXPECT_GT(r.race_hits, 0u) << "no completion ever landed during a re-arm";
  }
  r.teardown();
}

TEST(VerbsCqRace, NoCompletionLostInterleavedOnOneThread) {
  const std::string addr = softroce_addr();
  const std::uint64_t count = message_count(20000) / 4;
  Race r;
  r.connect(addr);

  while (r.received < count) {
    ASSERT_EQ(r.recv_errors, 0u) << to_string(r.first_recv_error.status);
    ASSERT_EQ(r.send_errors, 0u) << to_string(r.first_send_error.status);
    std::uniform_int_distribution<std::uint64_t> batch_dist(1, 8);
    const int posted = r.post_batch(count, batch_dist(r.rng));
    ASSERT_GE(posted, 0) << "post_send: " << std::strerror(-posted);
    // Don't block while the sender could keep posting: that interleaves
    // draining with arrivals. Otherwise block, bounded.
    const bool can_send = r.sent < count && r.recv_posted.load() > r.sent && (r.sent - r.send_done) < kSendDepth;
    std::array<pollfd, 2> fds{{{r.lb->server.channel->fd(), POLLIN, 0}, {r.lb->client.channel->fd(), POLLIN, 0}}};
    const int n = ::poll(fds.data(), fds.size(), can_send ? 0 : kWaitMs);
    ASSERT_GE(n, 0);
    ASSERT_TRUE(n > 0 || can_send) << "no completion event for " << kWaitMs << " ms with "
                                   << (r.sent - r.received.load()) << " messages in flight: a completion was lost";
    if (fds[0].revents & POLLIN) {
      ASSERT_EQ(r.drain_receiver(), 0);
    }
    if (fds[1].revents & POLLIN) {
      ASSERT_EQ(r.drain_sender(), 0);
    }
  }
  ASSERT_TRUE(r.lb->client.drain_until(60s, [&](const Completion& c) noexcept { r.on_send(c); },
                                       [&] { return r.send_done == r.sent; }))
      << "send completions: " << r.send_done << "/" << r.sent;

  r.report("cq_race(one thread)", count);
  r.check(count);
  r.teardown();
}

}  // namespace
}  // namespace rkv::verbs::test
