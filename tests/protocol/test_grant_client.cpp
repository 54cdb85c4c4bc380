// protocol suite: ClientConn's side of "SET by grant" (docs/protocol.md)
// through FakeLink + FakeRegistrar: grants kept from SET replies, a large SET
// that fits one posted as one WRITE WITH IMMEDIATE (value | key | trailer)
// instead of a request, its credit, its order behind SENDs, and the grants
// a client must refuse.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "fake_link.hpp"
#include "fake_registrar.hpp"
#include "kv/client/client_conn.hpp"
#include "proto/connect_params.hpp"
#include "proto/crc32c.hpp"
#include "proto/encode.hpp"
#include "proto/grant.hpp"
#include "wire_helpers.hpp"

namespace rkv::kv::client {
namespace grant_client_test {

using test::decode;
using test::FakeLink;
using test::FakeRegistrar;
using test::pack;

constexpr std::uint64_t kGrantAddr = 0x7000'0000;
constexpr std::uint32_t kGrantRkey = 0x4242;

class ClientGrant : public ::testing::Test {
 protected:
  explicit ClientGrant(bool ask = true, std::uint16_t server_features = proto::kFeatureGrants)
      : recv_(4, 8192), send_(4, 8192) {
    RdvOptions o;
    o.landing_spares = 0;
    cc_ = std::make_unique<ClientConn>(link_, recv_, send_, &reg_, o);
    if (ask) {
      EXPECT_TRUE(cc_->enable_grants());
      EXPECT_EQ(reg_.last_access, verbs::Access::none) << "the key + trailer buffer is read by our device only";
    }
    EXPECT_EQ(cc_->post_receives(), 0);
    cc_->on_accepted();
    cc_->on_established(4, 8192, 1u << 20, server_features);
  }
  void reply(std::initializer_list<proto::MessageSpec> specs) {
    cc_->on_completion(FakeLink::deliver(link_.recvs[next_recv_++ % 4], pack(specs)));
  }
  // A large SET by READ (a descriptor in a SEND), answered ok with grant `id` of `capacity` bytes.
  void set_by_read_granting(std::uint32_t id, std::uint64_t capacity) {
    const std::size_t before = link_.sends.size();
    ASSERT_EQ(cc_->submit_set("seed", value_, nullptr), Status::ok);
    ASSERT_EQ(cc_->flush(), 1u);
    ASSERT_EQ(link_.sends.size(), before + 1);
    const auto m = decode(link_.sends.back().bytes);
    ASSERT_EQ(m.size(), 1u);
    ASSERT_TRUE(m[0].rdv) << "no grant held yet: by the server's READ";
    reply({proto::msg::set_reply_grant(m[0].header.req_id, 1, {kGrantAddr, kGrantRkey, id}, capacity)});
  }

  FakeLink link_;
  FakeRegistrar reg_;
  BufferPool recv_, send_;
  std::unique_ptr<ClientConn> cc_;
  std::size_t next_recv_ = 0;
  std::vector<std::byte> value_ = std::vector<std::byte>(20000, std::byte{'v'});
};

TEST_F(ClientGrant, ALargeSetIntoAHeldGrantIsOneWriteWithImmediate) {
  set_by_read_granting(3, 32768);
  EXPECT_EQ(cc_->grants_held(), 1u);
  std::vector<std::byte> value(20000);
  for (std::size_t i = 0; i < value.size(); ++i) value[i] = static_cast<std::byte>(i * 7);
  Status got = Status::invalid_use;
  const std::uint32_t credits = cc_->credits();
  ASSERT_EQ(cc_->submit_set("granted-key", value, [&](Status s, bool, std::span<const std::byte>) { got = s; },
                            nullptr, 5000),
            Status::ok);
  const std::size_t sends = link_.sends.size();
  EXPECT_EQ(cc_->flush(), 1u) << "one credit spent";
  EXPECT_EQ(link_.sends.size(), sends) << "no request message";
  EXPECT_EQ(cc_->credits(), credits - 1);
  EXPECT_EQ(cc_->grants_held(), 0u);
  ASSERT_EQ(link_.writes.size(), 1u);
  const auto& w = link_.writes[0];
  EXPECT_TRUE(w.with_imm);
  EXPECT_EQ(w.imm, 3u) << "the immediate names the grant";
  EXPECT_EQ(w.remote_addr, kGrantAddr);
  EXPECT_EQ(w.rkey, kGrantRkey);
  ASSERT_EQ(w.bytes.size(), proto::granted_set_size(11, value.size()));
  const auto parsed = proto::read_granted_set(w.bytes);
  ASSERT_TRUE(std::holds_alternative<proto::GrantedSet>(parsed));
  const auto& set = std::get<proto::GrantedSet>(parsed);
  EXPECT_EQ(set.key, "granted-key");
  EXPECT_TRUE(std::equal(set.value.begin(), set.value.end(), value.begin(), value.end()));
  EXPECT_EQ(set.value_crc, proto::crc32c(value.data(), value.size()));
  ASSERT_TRUE(set.ttl);
  EXPECT_EQ(*set.ttl, 5000u);
  EXPECT_FALSE(set.epoch);
  EXPECT_EQ(got, Status::invalid_use) << "completed by its reply only";
  // Its reply (matched by the trailer's req_id) brings the next grant.
  reply({proto::msg::set_reply_grant(set.req_id, 1, {kGrantAddr, kGrantRkey, 3}, 32768)});
  EXPECT_EQ(got, Status::ok);
  EXPECT_EQ(cc_->grants_held(), 1u);
  // The WRITE's own completion, after its reply: nothing more happens.
  cc_->on_completion(FakeLink::complete(w, verbs::CompletionOpcode::rdma_write));
  EXPECT_FALSE(cc_->ended()) << cc_->failure();
  EXPECT_EQ(cc_->outstanding_work(), 5u) << "4 receives and the first SET's SEND, whose completion never came";
  const auto c = cc_->counters();
  EXPECT_EQ(c.sets_granted, 1u);
  EXPECT_EQ(c.sets_large, 1u) << "the first one, by READ";
  EXPECT_EQ(c.grants_received, 2u);
  EXPECT_EQ(c.rdma_reads, 0u);
  EXPECT_EQ(c.onesided_reads, 0u);
}

TEST_F(ClientGrant, SendsAppendedBeforeAGrantedSetArePostedBeforeIt) {
  set_by_read_granting(1, 32768);
  const std::size_t posts = link_.posts.size();
  const std::vector<std::byte> small(10, std::byte{'s'});
  ASSERT_EQ(cc_->submit_set("k", small, nullptr), Status::ok);   // eager: a SEND
  ASSERT_EQ(cc_->submit_set("k", value_, nullptr), Status::ok);  // granted: a WRITE
  ASSERT_EQ(cc_->submit_get("k", nullptr), Status::ok);          // a SEND after it
  EXPECT_EQ(cc_->flush(), 3u);
  ASSERT_EQ(link_.posts.size(), posts + 2) << "the SEND before the WRITE goes in its own post";
  EXPECT_EQ(link_.posts[posts], std::vector<verbs::SendOp>{verbs::SendOp::send});
  EXPECT_EQ(link_.posts[posts + 1],
            (std::vector<verbs::SendOp>{verbs::SendOp::rdma_write_imm, verbs::SendOp::send}));
  EXPECT_EQ(cc_->counters().sets_granted, 1u);
}

TEST_F(ClientGrant, ASetThatDoesNotFitTheGrantGoesByReadAndTheGrantIsKept) {
  set_by_read_granting(2, 8192);
  const std::size_t writes = link_.writes.size();
  ASSERT_EQ(cc_->submit_set("k", value_, nullptr), Status::ok);  // 20000 B: past 8192
  ASSERT_EQ(cc_->flush(), 1u);
  EXPECT_EQ(link_.writes.size(), writes);
  EXPECT_TRUE(decode(link_.sends.back().bytes)[0].rdv);
  EXPECT_EQ(cc_->grants_held(), 1u);
}

TEST_F(ClientGrant, AGrantedSetWaitsForACredit) {
  set_by_read_granting(1, 32768);
  // Spend every credit on eager SETs, answered without returning one.
  const std::vector<std::byte> small(10, std::byte{'e'});
  std::uint32_t last_id = 0;
  while (cc_->credits() > 0) {
    ASSERT_EQ(cc_->submit_set("e", small, nullptr), Status::ok);
    ASSERT_EQ(cc_->flush(), 1u);
    cc_->on_completion(FakeLink::complete(link_.sends.back(), verbs::CompletionOpcode::send));
    if (last_id != 0) reply({proto::msg::set_reply(last_id, 0)});
    last_id = decode(link_.sends.back().bytes)[0].header.req_id;
  }
  const std::uint64_t stalls = cc_->counters().credit_stalls;
  ASSERT_EQ(cc_->submit_set("k", value_, nullptr), Status::ok);
  EXPECT_EQ(cc_->flush(), 0u);
  EXPECT_TRUE(link_.writes.empty());
  EXPECT_EQ(cc_->counters().credit_stalls, stalls + 1);
  EXPECT_EQ(cc_->queued(), 1u);
  // A reply returns a credit: the WRITE goes.
  reply({proto::msg::set_reply(last_id, 1)});
  EXPECT_EQ(cc_->flush(), 1u);
  EXPECT_EQ(link_.writes.size(), 1u);
}

// A RELEASE gets no reply, so it may spend the last credit only in a SEND
// with a request. A SET into a grant is no such request: the RELEASE waits
// (sent alone it would leave no credit and nothing to return one: the hang
// 64 connections at full depth found).
TEST_F(ClientGrant, AReleaseDoesNotTakeTheLastCreditBesideAGrantedSet) {
  set_by_read_granting(1, 32768);
  ASSERT_EQ(cc_->submit_get("pulled", nullptr), Status::ok);
  ASSERT_EQ(cc_->flush(), 1u);
  const auto get_id = decode(link_.sends.back().bytes)[0].header.req_id;
  std::vector<std::byte> server(20000, std::byte{'p'});
  reply({proto::msg::get_reply_pull(get_id, 0, {reinterpret_cast<std::uint64_t>(server.data()), 9}, server.size())});
  ASSERT_EQ(cc_->flush(), 0u);  // the READ
  ASSERT_EQ(link_.reads.size(), 1u);
  const std::vector<std::byte> small(10, std::byte{'e'});
  while (cc_->credits() > 1) {  // spend all but one, answered without a credit back
    ASSERT_EQ(cc_->submit_set("e", small, nullptr), Status::ok);
    ASSERT_EQ(cc_->flush(), 1u);
    cc_->on_completion(FakeLink::complete(link_.sends.back(), verbs::CompletionOpcode::send));
    reply({proto::msg::set_reply(decode(link_.sends.back().bytes)[0].header.req_id, 0)});
  }
  cc_->on_completion(FakeLink::complete(link_.reads[0], verbs::CompletionOpcode::rdma_read, 20000));  // RELEASE due
  ASSERT_EQ(cc_->submit_set("k", value_, nullptr), Status::ok);  // fits the grant
  const std::size_t sends = link_.sends.size();
  EXPECT_EQ(cc_->flush(), 1u);
  EXPECT_EQ(link_.writes.size(), 1u) << "the SET took the last credit";
  EXPECT_EQ(link_.sends.size(), sends) << "the RELEASE did not";
  EXPECT_EQ(cc_->counters().releases_sent, 0u);
  // Its reply returns credits: the RELEASE goes with the next request.
  const auto set = std::get<proto::GrantedSet>(proto::read_granted_set(link_.writes[0].bytes));
  reply({proto::msg::set_reply(set.req_id, 1)});
  ASSERT_EQ(cc_->submit_get("e", nullptr), Status::ok);
  EXPECT_EQ(cc_->flush(), 1u);
  const auto m = decode(link_.sends.back().bytes);
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m[0].opcode(), proto::Opcode::release);
  EXPECT_EQ(m[1].opcode(), proto::Opcode::get);
}

TEST_F(ClientGrant, AFailedWriteFailsTheConnection) {
  set_by_read_granting(1, 32768);
  bool called = false;
  Status got = Status::ok;
  ASSERT_EQ(cc_->submit_set("k", value_, [&](Status s, bool, std::span<const std::byte>) {
              called = true;
              got = s;
            }),
            Status::ok);
  ASSERT_EQ(cc_->flush(), 1u);
  ASSERT_EQ(link_.writes.size(), 1u);
  cc_->on_completion(FakeLink::failed(link_.writes[0], verbs::CompletionStatus::remote_access_error));
  EXPECT_TRUE(cc_->ended());
  EXPECT_TRUE(called);
  EXPECT_EQ(got, Status::connection_failed);
  EXPECT_NE(cc_->failure().find("granted SET"), std::string::npos) << cc_->failure();
}

TEST_F(ClientGrant, AGrantItAlreadyHoldsFailsTheConnection) {
  set_by_read_granting(5, 8192);
  ASSERT_EQ(cc_->submit_set("k", value_, nullptr), Status::ok);  // past 8192: by READ
  ASSERT_EQ(cc_->flush(), 1u);
  const auto m = decode(link_.sends.back().bytes);
  ASSERT_TRUE(m[0].rdv);
  reply({proto::msg::set_reply_grant(m[0].header.req_id, 1, {kGrantAddr, kGrantRkey, 5}, 8192)});
  EXPECT_TRUE(cc_->ended()) << "grant 5 is held and not written: the server cannot give it again";
}

TEST_F(ClientGrant, AGrantWrittenMayComeBackWithItsReply) {
  set_by_read_granting(5, 32768);
  ASSERT_EQ(cc_->submit_set("k", value_, nullptr), Status::ok);  // into grant 5
  ASSERT_EQ(cc_->flush(), 1u);
  const auto set = std::get<proto::GrantedSet>(proto::read_granted_set(link_.writes.at(0).bytes));
  reply({proto::msg::set_reply_grant(set.req_id, 1, {kGrantAddr, kGrantRkey, 5}, 32768)});
  EXPECT_FALSE(cc_->ended()) << cc_->failure();
  EXPECT_EQ(cc_->grants_held(), 1u);
}

class ClientGrantNotAsked : public ClientGrant {
 protected:
  ClientGrantNotAsked() : ClientGrant(false) {}
};

TEST_F(ClientGrantNotAsked, AGrantItDidNotAskForFailsTheConnection) {
  ASSERT_FALSE(cc_->grants_enabled());
  ASSERT_EQ(cc_->submit_set("seed", value_, nullptr), Status::ok);
  ASSERT_EQ(cc_->flush(), 1u);
  const auto m = decode(link_.sends.back().bytes);
  reply({proto::msg::set_reply_grant(m[0].header.req_id, 1, {kGrantAddr, kGrantRkey, 1}, 32768)});
  EXPECT_TRUE(cc_->ended());
  EXPECT_NE(cc_->failure().find("did not ask"), std::string::npos) << cc_->failure();
}

class ClientGrantRefusedByServer : public ClientGrant {
 protected:
  ClientGrantRefusedByServer() : ClientGrant(true, 0) {}
};

TEST_F(ClientGrantRefusedByServer, AServerThatDoesNotGrantLeavesEveryLargeSetByRead) {
  EXPECT_FALSE(cc_->grants_enabled()) << "the buffer went with the server's answer";
  ASSERT_EQ(cc_->submit_set("seed", value_, nullptr), Status::ok);
  ASSERT_EQ(cc_->flush(), 1u);
  EXPECT_TRUE(decode(link_.sends.back().bytes)[0].rdv);
}

}  // namespace grant_client_test
}  // namespace rkv::kv::client
