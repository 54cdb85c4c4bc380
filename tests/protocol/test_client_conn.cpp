// protocol_client_conn: ClientConn driven through FakeLink (no device):
// coalescing, credits, max in flight, reply routing, failure handling, limits.
#include <gtest/gtest.h>

#include <deque>
#include <initializer_list>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "fake_link.hpp"
#include "wire_helpers.hpp"
#include "kv/client/client_conn.hpp"
#include "proto/connect_params.hpp"
#include "proto/decode.hpp"
#include "proto/encode.hpp"

namespace rkv::kv::client {
namespace {

using test::FakeLink;
using verbs::CompletionOpcode;
using verbs::CompletionStatus;

std::span<const std::byte> bytes_of(std::string_view s) { return proto::as_bytes(s); }

struct Result {
  Status status = Status::ok;
  bool found = false;
  std::string value;
};

class ClientConnTest : public ::testing::Test {
 protected:
  // Builds the connection: `recv_count` receive buffers (max in flight),
  // `send_count` send buffers, `credits` from the server.
  void start(std::uint32_t recv_count, std::uint32_t send_count, std::uint16_t credits,
             std::uint32_t server_recv = 8192) {
    recv_.emplace(recv_count, 8192);
    send_.emplace(send_count, 8192);
    conn_.emplace(link_, *recv_, *send_);
    ASSERT_EQ(conn_->post_receives(), 0);
    ASSERT_EQ(link_.recvs.size(), recv_count);
    EXPECT_EQ(conn_->state(), ConnState::connecting);
    conn_->on_accepted();
    conn_->on_established(credits, server_recv);
    EXPECT_EQ(conn_->state(), ConnState::established);
  }

  // A callback recording into results_[i].
  Callback record(std::size_t i) {
    if (results_.size() <= i) results_.resize(i + 1);
    return [this, i](Status st, bool found, std::span<const std::byte> v) {
      ++calls_[i];
      results_[i] = {st, found, std::string(proto::as_string_view(v))};
    };
  }

  // Messages packed in send number `n`.
  std::vector<proto::Header> sent(std::size_t n) {
    std::vector<proto::Header> out;
    proto::Decoder dec(link_.sends.at(n).bytes);
    for (;;) {
      auto r = dec.next();
      if (std::holds_alternative<proto::EndOfBuffer>(r)) break;
      EXPECT_FALSE(std::holds_alternative<proto::DecodeError>(r)) << "client sent a malformed message";
      if (!std::holds_alternative<proto::MessageView>(r)) break;
      out.push_back(std::get<proto::MessageView>(r).header);
    }
    return out;
  }

  // Delivers `bytes` into the oldest posted receive (receives are consumed in order).
  void deliver(std::span<const std::byte> bytes) {
    while (next_recv_ < link_.recvs.size()) posted_.push_back(next_recv_++);
    ASSERT_FALSE(posted_.empty()) << "no receive posted: the server's SEND would hit RNR";
    const Post p = link_.recvs[posted_.front()];
    posted_.pop_front();
    conn_->on_completion(FakeLink::deliver(p, bytes));
  }

  void reply(std::initializer_list<proto::MessageSpec> specs) {
    std::vector<std::byte> buf(8192);
    proto::Encoder enc(buf);
    for (const auto& s : specs) EXPECT_EQ(enc.append(s), proto::EncodeStatus::ok);
    deliver(enc.bytes());
  }
  void reply(const proto::MessageSpec& spec) { reply({spec}); }

  void complete_send(std::size_t n) {
    conn_->on_completion(FakeLink::complete(link_.sends.at(n), CompletionOpcode::send));
  }

  using Post = test::Post;
  FakeLink link_;
  std::optional<BufferPool> recv_, send_;
  std::optional<ClientConn> conn_;
  std::vector<Result> results_;
  std::map<std::size_t, int> calls_;
  std::size_t next_recv_ = 0;
  std::deque<std::size_t> posted_;
};

TEST_F(ClientConnTest, RequestsCoalesceIntoOneSend) {
  start(16, 4, 8);
  ASSERT_EQ(conn_->submit_set("a", bytes_of("1"), record(0)), Status::ok);
  ASSERT_EQ(conn_->submit_get("b", record(1)), Status::ok);
  ASSERT_EQ(conn_->submit_set("c", bytes_of("333"), record(2)), Status::ok);
  EXPECT_TRUE(link_.sends.empty()) << "submit only queues";
  EXPECT_EQ(conn_->flush(), 1u);
  ASSERT_EQ(link_.sends.size(), 1u);
  const auto msgs = sent(0);
  ASSERT_EQ(msgs.size(), 3u);
  EXPECT_EQ(msgs[0].opcode, proto::Opcode::set);
  EXPECT_EQ(msgs[1].opcode, proto::Opcode::get);
  EXPECT_EQ(msgs[2].opcode, proto::Opcode::set);
  EXPECT_EQ(conn_->credits(), 7u) << "one SEND costs one credit";
  EXPECT_EQ(conn_->in_flight(), 3u);
  EXPECT_EQ(conn_->counters().sends_posted, 1u);
  EXPECT_EQ(conn_->counters().messages_sent, 3u);
  EXPECT_EQ(conn_->counters().max_coalesced, 3u);
  EXPECT_EQ(conn_->counters().bytes_copied, 4u) << "the two eager values, counted by the encoder's copy of them";
}

TEST_F(ClientConnTest, ZeroCreditsPostNothing) {
  start(16, 4, 0);
  ASSERT_EQ(conn_->submit_get("k", record(0)), Status::ok);
  EXPECT_EQ(conn_->flush(), 0u);
  EXPECT_TRUE(link_.sends.empty());
  EXPECT_EQ(conn_->queued(), 1u);
  EXPECT_EQ(conn_->counters().credit_stalls, 1u);
}

TEST_F(ClientConnTest, ReplyCreditsReleaseQueuedRequests) {
  start(16, 4, 1);
  ASSERT_EQ(conn_->submit_get("a", record(0)), Status::ok);
  EXPECT_EQ(conn_->flush(), 1u);
  ASSERT_EQ(conn_->submit_get("b", record(1)), Status::ok);
  EXPECT_EQ(conn_->flush(), 0u) << "no credit left";
  EXPECT_EQ(link_.sends.size(), 1u);
  const auto first = sent(0);
  complete_send(0);
  reply(proto::msg::get_reply_missing(first[0].req_id, /*credits=*/1));
  EXPECT_EQ(calls_[0], 1);
  EXPECT_EQ(results_[0].status, Status::ok);
  EXPECT_FALSE(results_[0].found);
  EXPECT_EQ(conn_->credits(), 1u);
  EXPECT_EQ(conn_->flush(), 1u);
  ASSERT_EQ(link_.sends.size(), 2u);
  EXPECT_EQ(sent(1).size(), 1u);
}

TEST_F(ClientConnTest, MaxInFlightIsTheReceiveCount) {
  start(2, 4, 10);
  for (std::size_t i = 0; i < 5; ++i) ASSERT_EQ(conn_->submit_get("k" + std::to_string(i), record(i)), Status::ok);
  EXPECT_EQ(conn_->flush(), 1u);
  EXPECT_EQ(sent(0).size(), 2u);
  EXPECT_EQ(conn_->in_flight(), 2u);
  EXPECT_EQ(conn_->queued(), 3u);
  EXPECT_EQ(conn_->flush(), 0u) << "no free slot";
  complete_send(0);
  reply(proto::msg::get_reply_missing(sent(0)[0].req_id, 1));
  EXPECT_EQ(conn_->flush(), 1u);
  EXPECT_EQ(sent(1).size(), 1u);
  EXPECT_EQ(conn_->in_flight(), 2u);
}

TEST_F(ClientConnTest, RepliesRouteByReqIdInAnyOrder) {
  start(16, 4, 8);
  ASSERT_EQ(conn_->submit_get("a", record(0)), Status::ok);
  ASSERT_EQ(conn_->submit_get("b", record(1)), Status::ok);
  ASSERT_EQ(conn_->submit_set("c", bytes_of("v"), record(2)), Status::ok);
  conn_->flush();
  const auto m = sent(0);
  // Reversed, two replies coalesced into one receive, one alone.
  reply({proto::msg::set_reply(m[2].req_id, 1), proto::msg::get_reply_found(m[1].req_id, 0, bytes_of("B"))});
  reply(proto::msg::get_reply_found(m[0].req_id, 1, bytes_of("AAA")));
  EXPECT_EQ(calls_[0], 1);
  EXPECT_EQ(calls_[1], 1);
  EXPECT_EQ(calls_[2], 1);
  EXPECT_EQ(results_[0].value, "AAA");
  EXPECT_TRUE(results_[0].found);
  EXPECT_EQ(results_[1].value, "B");
  EXPECT_EQ(results_[2].status, Status::ok);
  EXPECT_EQ(conn_->credits(), 7u + 2u);
  EXPECT_EQ(conn_->in_flight(), 0u);
  EXPECT_EQ(conn_->state(), ConnState::established);
}

TEST_F(ClientConnTest, ServerStatusIsReported) {
  start(16, 4, 8);
  ASSERT_EQ(conn_->submit_set("a", bytes_of("1"), record(0)), Status::ok);
  conn_->flush();
  reply(proto::msg::error_reply(proto::Opcode::set, sent(0)[0].req_id, 1, proto::Status::no_memory));
  EXPECT_EQ(results_[0].status, Status::no_memory);
  EXPECT_EQ(conn_->state(), ConnState::established);
}

TEST_F(ClientConnTest, StaleReqIdFailsTheConnection) {
  start(16, 4, 8);
  ASSERT_EQ(conn_->submit_get("a", record(0)), Status::ok);
  ASSERT_EQ(conn_->submit_get("b", record(1)), Status::ok);
  conn_->flush();
  const auto m = sent(0);
  reply(proto::msg::get_reply_missing(m[0].req_id, 1));
  EXPECT_EQ(results_[0].status, Status::ok);
  reply(proto::msg::get_reply_missing(m[0].req_id, 1));  // same req_id again: stale
  EXPECT_EQ(conn_->state(), ConnState::failed);
  EXPECT_NE(conn_->failure().find("req_id"), std::string::npos) << conn_->failure();
  EXPECT_EQ(calls_[0], 1);
  EXPECT_EQ(calls_[1], 1);
  EXPECT_EQ(results_[1].status, Status::connection_failed);
}

TEST_F(ClientConnTest, AReusedSlotGetsANewReqIdAndTheOldOneIsStale) {
  start(1, 4, 8);
  EXPECT_EQ(conn_->max_in_flight(), 1u);
  ASSERT_EQ(conn_->submit_get("a", record(0)), Status::ok);
  conn_->flush();
  const auto first = sent(0)[0].req_id;
  complete_send(0);
  reply(proto::msg::get_reply_missing(first, 1));
  ASSERT_EQ(calls_[0], 1);
  ASSERT_EQ(conn_->submit_get("b", record(1)), Status::ok);
  conn_->flush();
  const auto second = sent(1)[0].req_id;
  const auto index = [](std::uint32_t id) { return reactor::SlotKey::unpack32(id).index; };
  EXPECT_EQ(index(second), index(first)) << "the one slot is reused ...";
  EXPECT_NE(second, first) << "... under a new generation";
  EXPECT_NE(reactor::SlotKey::unpack32(first).generation, 0u) << "generations start at 1";
  reply(proto::msg::get_reply_missing(first, 1));  // a late duplicate of the first reply
  EXPECT_EQ(conn_->state(), ConnState::failed);
  EXPECT_EQ(calls_[1], 1);
  EXPECT_EQ(results_[1].status, Status::connection_failed);
}

TEST_F(ClientConnTest, UnknownReqIdFailsTheConnection) {
  start(2, 4, 8);
  ASSERT_EQ(conn_->submit_get("a", record(0)), Status::ok);
  conn_->flush();
  reply(proto::msg::get_reply_missing(7, 1));  // slot 7 does not exist
  EXPECT_EQ(conn_->state(), ConnState::failed);
  EXPECT_EQ(calls_[0], 1);
  EXPECT_EQ(results_[0].status, Status::connection_failed);
}

TEST_F(ClientConnTest, WrongReplyOpcodeFailsTheConnection) {
  start(16, 4, 8);
  ASSERT_EQ(conn_->submit_get("a", record(0)), Status::ok);
  conn_->flush();
  reply(proto::msg::set_reply(sent(0)[0].req_id, 1));
  EXPECT_EQ(conn_->state(), ConnState::failed);
  EXPECT_EQ(results_[0].status, Status::connection_failed);
}

// Replication records (submit_record): SET, DEL and EXPIRE carry the shard
// epoch on the wire; anything else, or epoch 0, is refused at submit.
TEST_F(ClientConnTest, RecordsCarryTheirShardEpoch) {
  start(16, 4, 8);
  ASSERT_EQ(conn_->submit_record(proto::Opcode::set, "k", bytes_of("v"), 500, 7, record(0)), Status::ok);
  ASSERT_EQ(conn_->submit_record(proto::Opcode::del, "k", {}, 0, 7, record(1)), Status::ok);
  ASSERT_EQ(conn_->submit_record(proto::Opcode::expire, "k", {}, 0, 9, record(2)), Status::ok);
  EXPECT_EQ(conn_->submit_record(proto::Opcode::get, "k", {}, 0, 7, record(3)), Status::bad_request);
  EXPECT_EQ(conn_->submit_record(proto::Opcode::set, "k", bytes_of("v"), 0, 0, record(3)), Status::bad_request);
  EXPECT_EQ(conn_->submit_record(proto::Opcode::del, "k", bytes_of("v"), 0, 7, record(3)), Status::bad_request);
  EXPECT_EQ(conn_->counters().refused, 3u);
  EXPECT_EQ(conn_->flush(), 1u);
  const std::vector<proto::MessageView> msgs = test::decode(link_.sends.at(0).bytes);
  ASSERT_EQ(msgs.size(), 3u);
  EXPECT_EQ(msgs[0].opcode(), proto::Opcode::set);
  EXPECT_EQ(msgs[0].epoch, 7u);
  EXPECT_EQ(msgs[0].ttl, 500u);
  EXPECT_EQ(msgs[0].value_text(), "v");
  EXPECT_EQ(msgs[1].opcode(), proto::Opcode::del);
  EXPECT_EQ(msgs[1].epoch, 7u);
  EXPECT_EQ(msgs[2].opcode(), proto::Opcode::expire);
  EXPECT_EQ(msgs[2].epoch, 9u);
  EXPECT_EQ(msgs[2].ttl, 0u);
  reply({proto::msg::set_reply(msgs[0].header.req_id, 0),
         proto::msg::error_reply(proto::Opcode::del, msgs[1].header.req_id, 0, proto::Status::not_owner),
         proto::msg::expire_reply(msgs[2].header.req_id, 1, true)});
  EXPECT_EQ(results_[0].status, Status::ok);
  EXPECT_EQ(results_[1].status, Status::not_owner);
  EXPECT_EQ(results_[2].status, Status::ok);
}

TEST_F(ClientConnTest, DelGoesInOrderAsHeaderAndKeyAndReportsFound) {
  start(16, 4, 8);
  ASSERT_EQ(conn_->submit_set("k", bytes_of("v"), record(0)), Status::ok);
  ASSERT_EQ(conn_->submit_del("k", record(1)), Status::ok);
  ASSERT_EQ(conn_->submit_get("k", record(2)), Status::ok);
  ASSERT_EQ(conn_->submit_del("nope", record(3)), Status::ok);
  EXPECT_EQ(conn_->flush(), 1u);
  const std::vector<proto::MessageView> msgs = test::decode(link_.sends.at(0).bytes);
  ASSERT_EQ(msgs.size(), 4u);
  EXPECT_EQ(msgs[0].opcode(), proto::Opcode::set);
  EXPECT_EQ(msgs[1].opcode(), proto::Opcode::del);
  EXPECT_EQ(msgs[1].key, "k");
  EXPECT_EQ(msgs[1].header.value_len, 0u);
  EXPECT_EQ(msgs[1].header.flags, 0u);
  EXPECT_EQ(msgs[1].size, proto::kHeaderSize + 1);
  EXPECT_EQ(msgs[2].opcode(), proto::Opcode::get);
  EXPECT_EQ(msgs[3].opcode(), proto::Opcode::del);
  EXPECT_EQ(msgs[3].key, "nope");
  reply({proto::msg::set_reply(msgs[0].header.req_id, 0), proto::msg::del_reply(msgs[1].header.req_id, 0, true),
         proto::msg::get_reply_missing(msgs[2].header.req_id, 0),
         proto::msg::del_reply(msgs[3].header.req_id, 1, false)});
  for (int i = 0; i < 4; ++i) EXPECT_EQ(calls_[i], 1);
  EXPECT_EQ(results_[1].status, Status::ok);
  EXPECT_TRUE(results_[1].found) << "the key existed";
  EXPECT_TRUE(results_[1].value.empty());
  EXPECT_FALSE(results_[2].found);
  EXPECT_EQ(results_[3].status, Status::ok);
  EXPECT_FALSE(results_[3].found) << "no such key";
  EXPECT_EQ(conn_->in_flight(), 0u);
  EXPECT_EQ(conn_->state(), ConnState::established);
}

TEST_F(ClientConnTest, DelErrorsAndLimits) {
  start(16, 4, 8);
  EXPECT_EQ(conn_->submit_del("", record(0)), Status::bad_key);
  EXPECT_EQ(conn_->submit_del(std::string(1025, 'k'), record(0)), Status::bad_key);
  EXPECT_EQ(calls_[0], 0);
  ASSERT_EQ(conn_->submit_del(std::string(1024, 'k'), record(1)), Status::ok);
  conn_->flush();
  reply(proto::msg::error_reply(proto::Opcode::del, sent(0)[0].req_id, 1, proto::Status::io_error));
  EXPECT_EQ(results_[1].status, Status::io_error);
  EXPECT_FALSE(results_[1].found);
  EXPECT_EQ(conn_->state(), ConnState::established);
}

TEST_F(ClientConnTest, AReplyOfTheWrongKindToADelFailsTheConnection) {
  start(16, 4, 8);
  ASSERT_EQ(conn_->submit_del("a", record(0)), Status::ok);
  ASSERT_EQ(conn_->submit_get("b", record(1)), Status::ok);
  conn_->flush();
  const auto m = sent(0);
  reply(proto::msg::del_reply(m[1].req_id, 1, true));  // a DEL_REPLY to the GET
  EXPECT_EQ(conn_->state(), ConnState::failed);
  EXPECT_NE(conn_->failure().find("DEL_REPLY"), std::string::npos) << conn_->failure();
  EXPECT_EQ(results_[0].status, Status::connection_failed);
  EXPECT_EQ(results_[1].status, Status::connection_failed);
}

TEST_F(ClientConnTest, MalformedReplyFailsTheConnection) {
  start(16, 4, 8);
  ASSERT_EQ(conn_->submit_get("a", record(0)), Status::ok);
  conn_->flush();
  std::vector<std::byte> junk(30, std::byte{0x5A});
  deliver(junk);
  EXPECT_EQ(conn_->state(), ConnState::failed);
  EXPECT_NE(conn_->failure().find("malformed"), std::string::npos) << conn_->failure();
  EXPECT_EQ(calls_[0], 1);
}

TEST_F(ClientConnTest, ReceiveIsRepostedBeforeTheCallback) {
  start(4, 4, 8);
  ASSERT_EQ(conn_->submit_get("a", record(0)), Status::ok);
  conn_->flush();
  std::size_t recvs_seen_in_callback = 0;
  const auto id = sent(0)[0].req_id;
  ASSERT_EQ(conn_->submit_get("b", [&](Status, bool, std::span<const std::byte>) {
    recvs_seen_in_callback = link_.recvs.size();
    // A callback may submit; the request waits for the owner's flush.
    EXPECT_EQ(conn_->submit_get("c", record(5)), Status::ok);
  }), Status::ok);
  conn_->flush();
  const auto id_b = sent(1)[0].req_id;
  reply(proto::msg::get_reply_missing(id, 1));
  EXPECT_EQ(link_.recvs.size(), 5u);
  reply(proto::msg::get_reply_missing(id_b, 1));
  EXPECT_EQ(recvs_seen_in_callback, 6u) << "the receive must be re-posted before the callback runs";
  EXPECT_EQ(conn_->queued(), 1u);
  EXPECT_EQ(conn_->flush(), 1u);
}

TEST_F(ClientConnTest, FailureCompletesEveryPendingRequestOnce) {
  start(2, 4, 1);
  for (std::size_t i = 0; i < 4; ++i) ASSERT_EQ(conn_->submit_get("k" + std::to_string(i), record(i)), Status::ok);
  conn_->flush();  // 2 in flight (one SEND), 2 queued
  ASSERT_EQ(conn_->in_flight(), 2u);
  ASSERT_EQ(conn_->queued(), 2u);
  // The send fails (peer gone): everything completes with an error, once.
  conn_->on_completion(FakeLink::failed(link_.sends[0], CompletionStatus::retry_exceeded));
  EXPECT_EQ(conn_->state(), ConnState::failed);
  for (std::size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(calls_[i], 1) << i;
    EXPECT_EQ(results_[i].status, Status::connection_failed) << i;
  }
  // Flushed receives afterwards change nothing.
  for (const auto& r : link_.recvs) conn_->on_completion(FakeLink::failed(r, CompletionStatus::flushed));
  for (std::size_t i = 0; i < 4; ++i) EXPECT_EQ(calls_[i], 1) << i;
  EXPECT_EQ(conn_->outstanding_work(), 0u);
  EXPECT_EQ(conn_->submit_get("x", record(9)), Status::not_connected);
  EXPECT_EQ(conn_->flush(), 0u);
}

TEST_F(ClientConnTest, FlushWhileEstablishedFails) {
  start(2, 4, 4);
  ASSERT_EQ(conn_->submit_get("a", record(0)), Status::ok);
  conn_->flush();
  conn_->on_completion(FakeLink::failed(link_.recvs[0], CompletionStatus::flushed));
  EXPECT_EQ(conn_->state(), ConnState::failed);
  EXPECT_EQ(calls_[0], 1);
  EXPECT_EQ(results_[0].status, Status::connection_failed);
}

TEST_F(ClientConnTest, CloseCompletesPendingWithClosed) {
  start(2, 4, 4);
  ASSERT_EQ(conn_->submit_get("a", record(0)), Status::ok);
  conn_->flush();
  ASSERT_EQ(conn_->submit_get("b", record(1)), Status::ok);
  conn_->close();
  EXPECT_EQ(conn_->state(), ConnState::closing);  // established: the owner disconnects next
  EXPECT_EQ(results_[0].status, Status::closed);
  EXPECT_EQ(results_[1].status, Status::closed);
  EXPECT_EQ(calls_[0], 1);
  EXPECT_EQ(calls_[1], 1);
  conn_->fail("later");  // no-op
  EXPECT_EQ(conn_->state(), ConnState::closing);
  EXPECT_TRUE(conn_->on_disconnected());  // the owner's disconnect answered
  EXPECT_EQ(conn_->state(), ConnState::closed);
  EXPECT_FALSE(conn_->on_disconnected());
  EXPECT_EQ(calls_[0], 1);
  EXPECT_EQ(conn_->counters().disconnects, 2u);
  conn_->cm_done();  // no-op: closed already
  EXPECT_EQ(conn_->counters().unconfirmed_disconnects, 0u);
}

// The server leaves: pending requests fail once; a close() then has nothing to disconnect.
TEST_F(ClientConnTest, DisconnectedFailsPendingAndCloseNeedsNoDisconnect) {
  start(2, 4, 4);
  ASSERT_EQ(conn_->submit_get("a", record(0)), Status::ok);
  EXPECT_TRUE(conn_->on_disconnected());
  EXPECT_EQ(conn_->state(), ConnState::disconnected);
  EXPECT_EQ(results_[0].status, Status::connection_failed);
  EXPECT_EQ(conn_->failure(), "the server closed the connection");
  EXPECT_EQ(conn_->submit_get("b", record(1)), Status::not_connected);
  conn_->close();
  EXPECT_EQ(conn_->state(), ConnState::closed);
  EXPECT_EQ(calls_[0], 1);
}

// A failure keeps the rdma_cm connection: close() goes on to closing, and
// cm_done() ends it when no DISCONNECTED comes.
TEST_F(ClientConnTest, FailedThenClosedWaitsForTheDisconnect) {
  start(2, 4, 4);
  conn_->fail("test");
  EXPECT_EQ(conn_->state(), ConnState::failed);
  EXPECT_TRUE(conn_->ended());
  conn_->close();
  EXPECT_EQ(conn_->state(), ConnState::closing);
  conn_->cm_done();
  EXPECT_EQ(conn_->state(), ConnState::closed);
  EXPECT_EQ(conn_->counters().unconfirmed_disconnects, 1u);
  EXPECT_EQ(conn_->counters().disconnects, 0u);
}

TEST_F(ClientConnTest, PostFailureFailsTheConnection) {
  start(2, 4, 4);
  ASSERT_EQ(conn_->submit_get("a", record(0)), Status::ok);
  link_.fail_next_send = EINVAL;
  EXPECT_EQ(conn_->flush(), 0u);
  EXPECT_EQ(conn_->state(), ConnState::failed);
  EXPECT_EQ(calls_[0], 1);
}

TEST_F(ClientConnTest, SendBuffersLimitSendsUntilCompletion) {
  start(16, 1, 8);
  ASSERT_EQ(conn_->submit_get("a", record(0)), Status::ok);
  EXPECT_EQ(conn_->flush(), 1u);
  ASSERT_EQ(conn_->submit_get("b", record(1)), Status::ok);
  EXPECT_EQ(conn_->flush(), 0u) << "the only send buffer is in flight";
  complete_send(0);
  EXPECT_EQ(conn_->flush(), 1u);
  EXPECT_EQ(conn_->credits(), 6u);
}

TEST_F(ClientConnTest, LimitsAreCheckedAtSubmit) {
  start(4, 4, 4);
  EXPECT_EQ(conn_->submit_get("", record(0)), Status::bad_key);
  EXPECT_EQ(conn_->submit_get(std::string(1025, 'k'), record(0)), Status::bad_key);
  EXPECT_EQ(conn_->submit_get(std::string(1024, 'k'), record(0)), Status::ok);
  EXPECT_EQ(conn_->flush(), 1u);
  const std::string key(100, 'k');
  const std::string ok_value(4095 - key.size(), 'v');
  const std::string big_value(4096 - key.size(), 'v');
  EXPECT_EQ(conn_->submit_set(key, bytes_of(ok_value), record(1)), Status::ok);
  EXPECT_EQ(conn_->submit_set(key, bytes_of(big_value), record(2)), Status::too_large);
  EXPECT_EQ(conn_->counters().refused, 3u);
  EXPECT_EQ(conn_->counters().requests, 2u);
  EXPECT_EQ(calls_[2], 0) << "a refused request never calls back";
  // The 4095-byte SET fits a SEND.
  EXPECT_EQ(conn_->flush(), 1u);
  EXPECT_EQ(link_.sends[1].bytes.size(), proto::kMaxEagerSetSize - proto::kTtlSize - proto::kEpochSize);
}

TEST_F(ClientConnTest, SmallServerBuffersRefuseLargeRequests) {
  start(4, 4, 4, /*server_recv=*/proto::kMinRecvBufSize);
  const std::string value(3000, 'v');
  EXPECT_EQ(conn_->submit_set("k", bytes_of(value), record(0)), Status::too_large);
}

TEST_F(ClientConnTest, RequestsQueuedWhileConnectingGoOutOnEstablished) {
  recv_.emplace(4, 8192);
  send_.emplace(4, 8192);
  conn_.emplace(link_, *recv_, *send_);
  ASSERT_EQ(conn_->post_receives(), 0);
  ASSERT_EQ(conn_->submit_get("a", record(0)), Status::ok);
  EXPECT_EQ(conn_->flush(), 0u);
  conn_->on_accepted();
  conn_->on_established(2, 8192);
  EXPECT_EQ(conn_->flush(), 1u);
}

TEST(ClientStatus, NamesAndWireMapping) {
  EXPECT_EQ(to_string(ConnState::established), "established");
  EXPECT_EQ(to_string(ConnState::disconnected), "disconnected");
  EXPECT_EQ(to_string(Status::too_large), "too_large");
  EXPECT_EQ(from_wire(proto::Status::ok), Status::ok);
  EXPECT_EQ(from_wire(proto::Status::internal), Status::server_error);
}

}  // namespace
}  // namespace rkv::kv::client
