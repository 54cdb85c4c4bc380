// protocol suite: ServerConn running CALLs (server_call.cpp) through a
// FakeLink: eager requests and replies, no handler / a throwing / a refusing
// handler answered with a status on a connection that stays up, a large
// request READ into the arena and handed to the handler, a large reply
// pulled and RELEASEd, and handler writes recorded with a FakeDurability:
// the reply waits for every record of the CALL, io_error if one fails.
#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <deque>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "fake_durability.hpp"
#include "fake_link.hpp"
#include "server_request.hpp"
#include "fake_registrar.hpp"
#include "kv/server/arena.hpp"
#include "kv/server/server_conn.hpp"
#include "wire_helpers.hpp"

namespace rkv::kv::server {
namespace {

using proto::Opcode;
using proto::Status;
using store::DurableAck;
using test::FakeDurability;
using test::FakeLink;
using test::FakeRegistrar;
using verbs::CompletionOpcode;

using test::decode;
using test::pack;

constexpr std::uint16_t kEcho = 0x1000;    // reply = request
constexpr std::uint16_t kWrite = 0x1001;   // sets "a" and "b" to the request, deletes "c"; reply "done"
constexpr std::uint16_t kThrow = 0x1002;   // writes "t", then throws
constexpr std::uint16_t kRefuse = 0x1003;  // refuses
constexpr std::uint16_t kBig = 0x1004;     // a reply of 100000 bytes 'r'
constexpr std::uint16_t kSwallow = 0x1005; // sets "s", catching whatever that throws; reply "ok"

class ServerCall : public ::testing::Test {
 protected:
  explicit ServerCall(bool durable = false) : recv_(4, 8192), send_(8, 8192), arena_(reg_, {4096, 1u << 20, 64u << 20}) {
    handlers_.add(kEcho, [](std::span<const std::byte> req, ReplyWriter& reply, StoreAccess&) { reply.append(req); });
    handlers_.add(kWrite, [](std::span<const std::byte> req, ReplyWriter& reply, StoreAccess& s) {
      ASSERT_TRUE(s.set("a", req));
      ASSERT_TRUE(s.set("b", req));
      s.del("c");  // true the first time only
      EXPECT_EQ(s.get("a"), proto::as_string_view(req));
      reply.append(std::string_view("done"));
    });
    handlers_.add(kThrow, [](std::span<const std::byte>, ReplyWriter& reply, StoreAccess& s) {
      reply.append(std::string_view("partial"));
      EXPECT_TRUE(s.set("t", std::string_view("x")));
      throw std::runtime_error("bug");
    });
    handlers_.add(kRefuse, [](std::span<const std::byte>, ReplyWriter& reply, StoreAccess&) { reply.refuse(); });
    handlers_.add(kBig, [](std::span<const std::byte>, ReplyWriter& reply, StoreAccess&) {
      reply.reserve(100000);
      const auto out = reply.extend(100000);
      std::memset(out.data(), 'r', out.size());
    });
    handlers_.add(kSwallow, [](std::span<const std::byte>, ReplyWriter& reply, StoreAccess& s) {
      try {
        (void)s.set("s", std::string_view("x"));
      } catch (...) {  // a handler that hides the gate's refusal
      }
      reply.append(std::string_view("ok"));
    });
    EXPECT_THROW(handlers_.add(0x00FF, [](auto, auto&, auto&) {}), std::invalid_argument);
    ServerConnConfig cfg;
    cfg.credits = 4;
    cfg.generation = 3;
    cfg.peer_recv_size = 8192;
    cfg.max_value = 1u << 20;
    cfg.max_transfers = 2;
    cfg.max_pins = 2;
    cfg.handlers = &handlers_;
    cfg.stats = test::stats_of(counters_, store_);
    cfg.latency = &latency_;
    cfg.gate = &gate_;
    store_.attach_large_blocks([a = &arena_](std::size_t n) { return a->allocate(n); });  // as Server::make_pd
    sc_ = std::make_unique<ServerConn>(link_, recv_, send_, store_, arena_, counters_, cfg, durable ? &dur_ : nullptr);
    EXPECT_EQ(sc_->start(), Verdict::keep);
    sc_->on_established();
    EXPECT_TRUE(store_.set("c", "to delete"));
  }
  Verdict request(const std::vector<std::byte>& bytes) { return test::deliver_request(*sc_, link_, next_recv_, bytes); }
  std::vector<proto::MessageView> replies_since(std::size_t sends) { return test::replies_since(link_, sends); }
  static proto::MessageSpec call(std::uint32_t id, std::uint16_t op, std::string_view req) {
    static std::deque<std::array<char, 2>> keys;  // the specs view their opcode keys (stable on push_back)
    keys.push_back(proto::call_op_key(op));
    return proto::msg::call_request(id, std::string_view(keys.back().data(), 2), proto::as_bytes(req));
  }

  FakeLink link_;
  FakeRegistrar reg_;
  FakeDurability dur_;
  Handlers handlers_;
  BufferPool recv_, send_;
  Store store_;
  ServerCounters counters_;
  kv::server::LatencyHistograms latency_;
  kv::server::ShardGate gate_;  // open: a static list's server
  Arena arena_;
  std::unique_ptr<ServerConn> sc_;
  std::size_t next_recv_ = 0;
};

TEST_F(ServerCall, EagerCallsAndErrorStatusesOnAConnectionThatStaysUp) {
  ASSERT_EQ(request(pack({call(1, kEcho, "hello"), call(2, 0x7777, "x"), call(3, kThrow, ""), call(4, kRefuse, "")})),
            Verdict::keep);
  const auto r = replies_since(0);
  ASSERT_EQ(r.size(), 4u);
  EXPECT_EQ(r[0].opcode(), Opcode::call_reply);
  EXPECT_EQ(r[0].value_text(), "hello");
  EXPECT_EQ(r[1].header.status, Status::no_handler);
  EXPECT_EQ(r[2].header.status, Status::handler_failed);
  EXPECT_TRUE(r[2].value.empty()) << "what the handler appended before it threw is not sent";
  EXPECT_TRUE(store_.get("t").found) << "what it wrote stays";
  EXPECT_EQ(r[3].header.status, Status::refused);
  EXPECT_EQ(r[3].header.credits, 1u);
  EXPECT_EQ(sc_->state(), ConnState::established);
  EXPECT_EQ(counters_.calls, 4u);
  EXPECT_EQ(counters_.calls_no_handler, 1u);
  EXPECT_EQ(counters_.calls_failed, 1u);
  // The connection serves on.
  ASSERT_EQ(request(pack({call(5, kWrite, "v")})), Verdict::keep);
  const auto r2 = replies_since(1);
  ASSERT_EQ(r2.size(), 1u);
  EXPECT_EQ(r2[0].value_text(), "done");
  EXPECT_EQ(store_.get("b").value, "v");
  EXPECT_FALSE(store_.get("c").found);
}

// A cluster member's gate (shard_gate.hpp) applies to what a handler does
// with the store: a read of a shard it is not the primary of, or a write
// while its lease may have lapsed, answers the CALL not_owner (even if the
// handler caught the throw) and writes nothing; a handler that touches no
// key is answered as usual.
TEST_F(ServerCall, TheShardGateAppliesToAHandlersStoreAccesses) {
  gate_.close_to_cluster();
  gate_.serve(std::vector<proto::ShardPart>(64, proto::ShardPart{proto::ShardRole::primary, 1}));
  gate_.lease_held_until(ShardGate::Clock::now() - std::chrono::seconds(1));  // lapsed: reads only
  ASSERT_EQ(request(pack({call(1, kWrite, "v"), call(2, kSwallow, ""), call(3, kEcho, "e")})), Verdict::keep);
  const auto r = replies_since(0);
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(r[0].header.status, Status::not_owner);
  EXPECT_EQ(r[1].header.status, Status::not_owner) << "the handler caught it; the CALL is refused all the same";
  EXPECT_EQ(r[2].header.status, Status::ok);
  EXPECT_EQ(r[2].value_text(), "e");
  EXPECT_FALSE(store_.get("a").found) << "nothing written";
  EXPECT_FALSE(store_.get("s").found) << "nothing written";
  EXPECT_EQ(counters_.not_owner, 2u);
  EXPECT_EQ(counters_.calls_failed, 0u) << "a refusal, not a handler failure";
  gate_.lease_held_until(ShardGate::Clock::now() + std::chrono::hours(1));
  ASSERT_EQ(request(pack({call(4, kWrite, "w")})), Verdict::keep);
  const auto r2 = replies_since(1);
  ASSERT_EQ(r2.size(), 1u);
  EXPECT_EQ(r2[0].value_text(), "done");
  EXPECT_EQ(store_.get("a").value, "w");
}

TEST_F(ServerCall, LargeRequestIsReadIntoTheArenaAndLargeReplyIsPulled) {
  const proto::RdvDesc desc{0x1000, 77};
  const auto op = proto::call_op_key(kEcho);
  ASSERT_EQ(request(pack({proto::msg::call_request_rdv(9, std::string_view(op.data(), 2), desc, 50000)})),
            Verdict::keep);
  ASSERT_EQ(link_.reads.size(), 1u);
  EXPECT_TRUE(link_.sends.empty()) << "the handler runs when the READ completed";
  const auto& rd = link_.reads[0];
  ASSERT_EQ(rd.target.size(), 50000u);
  for (std::size_t i = 0; i < rd.target.size(); ++i) rd.target[i] = std::byte{static_cast<unsigned char>(i)};
  EXPECT_EQ(sc_->on_completion(FakeLink::complete(rd, CompletionOpcode::rdma_read)), Verdict::keep);
  EXPECT_EQ(sc_->flush(), Verdict::keep);
  auto r = replies_since(0);
  ASSERT_EQ(r.size(), 1u);
  ASSERT_TRUE(r[0].rdv.has_value());
  EXPECT_TRUE(r[0].header.pull());
  EXPECT_EQ(r[0].header.value_len, 50000u);
  // The descriptor names the reply block: the echo of what the READ brought.
  const auto* reply = reinterpret_cast<const unsigned char*>(r[0].rdv->addr);
  for (std::size_t i = 0; i < 50000; i += 997) ASSERT_EQ(reply[i], static_cast<unsigned char>(i));
  EXPECT_EQ(sc_->pins(), 1u) << "the reply is pinned until RELEASE (the request block is gone)";
  EXPECT_EQ(sc_->transfers_in_flight(), 0u);
  ASSERT_EQ(request(pack({proto::msg::release(9)})), Verdict::keep);
  EXPECT_EQ(sc_->pins(), 0u);
  // A large reply of an eager request.
  const std::size_t before = link_.sends.size();
  ASSERT_EQ(request(pack({call(10, kBig, "")})), Verdict::keep);
  r = replies_since(before);
  ASSERT_EQ(r.size(), 1u);
  ASSERT_TRUE(r[0].rdv.has_value());
  EXPECT_EQ(r[0].header.value_len, 100000u);
  EXPECT_EQ(reinterpret_cast<const char*>(r[0].rdv->addr)[99999], 'r');
  EXPECT_EQ(sc_->pins(), 1u);
  ASSERT_EQ(request(pack({proto::msg::release(10)})), Verdict::keep);
  EXPECT_EQ(sc_->pins(), 0u);
}

class ServerCallDurable : public ServerCall {
 protected:
  ServerCallDurable() : ServerCall(true) {}
};

TEST_F(ServerCallDurable, TheReplyWaitsForEveryRecordOfTheCall) {
  ASSERT_EQ(request(pack({call(1, kWrite, "v1")})), Verdict::keep);
  EXPECT_TRUE(link_.sends.empty());
  ASSERT_EQ(dur_.records.size(), 3u);  // SET a, SET b, DEL c
  for (const auto& rec : dur_.records) EXPECT_EQ(rec.wait, dur_.records[0].wait) << "one CALL, one entry";
  const std::uint32_t first = dur_.records[0].wait;
  EXPECT_TRUE(dur_.records[2].del);
  EXPECT_EQ(sc_->durable_waits(), 3u);
  ASSERT_EQ(sc_->on_durable(first, proto::Status::ok), Verdict::keep);
  ASSERT_EQ(sc_->on_durable(first, proto::Status::ok), Verdict::keep);
  EXPECT_EQ(sc_->flush(), Verdict::keep);
  EXPECT_TRUE(link_.sends.empty()) << "one record is not durable yet";
  ASSERT_EQ(sc_->on_durable(first, proto::Status::ok), Verdict::keep);
  EXPECT_EQ(sc_->flush(), Verdict::keep);
  auto r = replies_since(0);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].header.status, Status::ok);
  EXPECT_EQ(r[0].value_text(), "done");
  EXPECT_EQ(r[0].header.credits, 1u);
  EXPECT_EQ(sc_->durable_waits(), 0u);
  // One record fails: io_error, not the bytes.
  ASSERT_EQ(request(pack({call(2, kWrite, "v2")})), Verdict::keep);
  ASSERT_EQ(dur_.records.size(), 6u);
  const std::uint32_t second = dur_.records[3].wait;
  ASSERT_EQ(sc_->on_durable(second, proto::Status::ok), Verdict::keep);
  ASSERT_EQ(sc_->on_durable(second, proto::Status::io_error), Verdict::keep);
  ASSERT_EQ(sc_->on_durable(second, proto::Status::ok), Verdict::keep);
  EXPECT_EQ(sc_->flush(), Verdict::keep);
  r = replies_since(1);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].header.status, Status::io_error);
  EXPECT_EQ(counters_.io_errors, 1u);
  // A CALL that writes nothing is answered at once; one whose record fails at once is io_error at once.
  ASSERT_EQ(request(pack({call(3, kEcho, "e")})), Verdict::keep);
  dur_.answer = DurableAck::failed;
  ASSERT_EQ(request(pack({call(4, kWrite, "v3")})), Verdict::keep);
  r = replies_since(2);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].value_text(), "e");
  EXPECT_EQ(r[1].header.status, Status::io_error);
  EXPECT_EQ(sc_->state(), ConnState::established);
}

TEST_F(ServerCallDurable, ThrowingHandlerStillWaitsForItsWrites) {
  ASSERT_EQ(request(pack({call(1, kThrow, "")})), Verdict::keep);
  EXPECT_TRUE(link_.sends.empty());
  ASSERT_EQ(dur_.records.size(), 1u);
  ASSERT_EQ(sc_->on_durable(dur_.records[0].wait, proto::Status::ok), Verdict::keep);
  EXPECT_EQ(sc_->flush(), Verdict::keep);
  const auto r = replies_since(0);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].header.status, Status::handler_failed);
}

}  // namespace
}  // namespace rkv::kv::server
