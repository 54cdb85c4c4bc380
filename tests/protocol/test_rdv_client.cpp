// protocol suite: the rendezvous path of ClientConn through
// FakeLink + FakeRegistrar: what they post (RDMA READ/WRITE, replies,
// RELEASE), pins and their release, errors mid-transfer.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "fake_link.hpp"
#include "fake_registrar.hpp"
#include "wire_helpers.hpp"
#include "kv/client/client_conn.hpp"
#include "proto/copy.hpp"
#include "proto/decode.hpp"
#include "proto/encode.hpp"

namespace rkv::kv::client {
namespace {

using proto::Opcode;
using test::FakeLink;
using test::FakeRegistrar;
using verbs::CompletionOpcode;
using verbs::CompletionStatus;

using test::decode;
using test::pack;
using test::text;
// --- ClientConn -----------------------------------------------------------------

class ClientRdv : public ::testing::Test {
 protected:
  ClientRdv() : recv_(4, 8192), send_(4, 8192) {
    RdvOptions o;
    o.landing_size = 16384;
    o.landing_spares = 1;
    cc_ = std::make_unique<ClientConn>(link_, recv_, send_, &reg_, o);
    EXPECT_EQ(cc_->post_receives(), 0);
    cc_->on_accepted();
    cc_->on_established(4, 8192, 1u << 20);
  }
  void reply(std::initializer_list<proto::MessageSpec> specs) {
    cc_->on_completion(FakeLink::deliver(link_.recvs[next_recv_++ % 4], pack(specs)));
  }
  // The server's WRITE with immediate of a `len`-byte value (the caller put it in place).
  void written(std::uint32_t req_id, std::uint16_t credits, std::size_t len) {
    cc_->on_completion(FakeLink::deliver_written(link_.recvs[next_recv_++ % 4],
                                                 proto::pack_written_reply(req_id, credits),
                                                 static_cast<std::uint32_t>(len)));
  }

  FakeLink link_;
  FakeRegistrar reg_;
  BufferPool recv_, send_;
  std::unique_ptr<ClientConn> cc_;
  std::size_t next_recv_ = 0;
};

TEST_F(ClientRdv, LargeSetSendsADescriptorOfTheRegisteredValue) {
  EXPECT_EQ(reg_.registrations(), 1u) << "the spare landing buffer, at setup";
  std::vector<std::byte> value(100000, std::byte{'v'});
  Status got = Status::invalid_use;
  ASSERT_EQ(cc_->submit_set("k", value, [&](Status s, bool, std::span<const std::byte>) { got = s; }), Status::ok);
  EXPECT_EQ(reg_.registrations(), 2u) << "registered before the SEND: its rkey is in it";
  EXPECT_EQ(reg_.last_access, verbs::Access::remote_read);
  ASSERT_EQ(cc_->flush(), 1u);
  const auto m = decode(link_.sends[0].bytes);
  ASSERT_EQ(m.size(), 1u);
  ASSERT_TRUE(m[0].rdv);
  EXPECT_EQ(m[0].rdv->addr, reinterpret_cast<std::uint64_t>(value.data()));
  EXPECT_EQ(m[0].header.value_len, value.size());
  reply({proto::msg::set_reply(m[0].header.req_id, 1)});
  EXPECT_EQ(got, Status::ok);
  // Same buffer again: a cache hit.
  ASSERT_EQ(cc_->submit_set("k", value, nullptr), Status::ok);
  EXPECT_EQ(reg_.registrations(), 2u);
  EXPECT_EQ(cc_->counters().sets_large, 1u);
  EXPECT_EQ(cc_->counters().bytes_copied, 0u);
  // Over the server's limit: refused before anything is sent.
  std::vector<std::byte> huge((1u << 20) + 1);
  EXPECT_EQ(cc_->submit_set("k", huge, nullptr), Status::too_large);
}

TEST_F(ClientRdv, GetOffersALandingBufferTheServerWrites) {
  std::string seen;
  ASSERT_EQ(cc_->submit_get("k", [&](Status s, bool found, std::span<const std::byte> v) {
    EXPECT_EQ(s, Status::ok);
    EXPECT_TRUE(found);
    seen = text(v);
  }),
            Status::ok);
  ASSERT_EQ(cc_->flush(), 1u);
  const auto m = decode(link_.sends[0].bytes);
  ASSERT_TRUE(m[0].rdv) << "a landing buffer is offered";
  EXPECT_EQ(m[0].header.value_len, 16384u);
  auto* dst = reinterpret_cast<std::byte*>(m[0].rdv->addr);
  std::memset(dst, 'w', 9000);  // the server's RDMA WRITE
  const std::uint32_t credits = cc_->credits();
  written(m[0].header.req_id, 2, 9000);
  EXPECT_EQ(seen, std::string(9000, 'w'));
  EXPECT_EQ(cc_->credits(), credits + 2) << "the immediate's credits";
  EXPECT_EQ(cc_->counters().gets_written, 1u);
  EXPECT_EQ(cc_->counters().replies, 0u) << "no reply message: the WRITE's immediate is the reply";
  EXPECT_EQ(cc_->counters().rdma_reads, 0u);
  EXPECT_EQ(reg_.registrations(), 1u) << "the lent buffer counts as a spare and comes back: no registration";
}

TEST_F(ClientRdv, AValueUpToCopyOutMaxIsCopiedOutAndItsBufferServesTheNextGet) {
  std::string seen;
  std::unique_ptr<LandingBuffer> kept;
  auto get = [&] {
    ASSERT_EQ(cc_->submit_get("k", [&](Status, bool, std::span<const std::byte> v) {
      kept = cc_->adopt_landing();
      if (!kept) proto::copy_to_string(seen, v, cc_->copy_account());  // as the C API and get_sync copy it out
    }),
              Status::ok);
    ASSERT_EQ(cc_->flush(), 1u);
  };
  get();
  auto m = decode(link_.sends.back().bytes);
  ASSERT_TRUE(m[0].rdv);
  const std::uint64_t offered = m[0].rdv->addr;
  std::memset(reinterpret_cast<std::byte*>(offered), 'c', 9000);  // the server's RDMA WRITE
  written(m[0].header.req_id, 1, 9000);
  EXPECT_EQ(seen, std::string(9000, 'c'));
  EXPECT_FALSE(kept) << "9,000 bytes <= kCopyOutMax: not handed over";
  EXPECT_EQ(cc_->counters().bytes_copied, 9000u) << "the caller's copy-out, counted by the copy itself";
  // The same buffer, still registered, is offered to the next GET.
  get();
  m = decode(link_.sends.back().bytes);
  ASSERT_TRUE(m[0].rdv);
  EXPECT_EQ(m[0].rdv->addr, offered);
  EXPECT_EQ(reg_.registrations(), 1u) << "no new landing buffer was registered";
}

TEST_F(ClientRdv, DelOffersNoLandingBufferAndTheNextGetStillGetsOne) {
  bool found = false;
  ASSERT_EQ(cc_->submit_del("k", [&](Status s, bool f, std::span<const std::byte>) {
    EXPECT_EQ(s, Status::ok);
    found = f;
  }),
            Status::ok);
  ASSERT_EQ(cc_->submit_get("k", nullptr), Status::ok);
  ASSERT_EQ(cc_->flush(), 1u);
  const auto m = decode(link_.sends[0].bytes);
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m[0].opcode(), Opcode::del);
  EXPECT_FALSE(m[0].rdv) << "no value comes back: nothing to offer";
  EXPECT_TRUE(m[1].rdv) << "the one spare went to the GET";
  reply({proto::msg::del_reply(m[0].header.req_id, 1, true)});
  EXPECT_TRUE(found);
  EXPECT_EQ(reg_.registrations(), 1u);
}

TEST_F(ClientRdv, PulledGetIsReadThenReleased) {
  std::string seen;
  std::unique_ptr<LandingBuffer> kept;
  ASSERT_EQ(cc_->submit_get("k", [&](Status, bool, std::span<const std::byte> v) {
    seen = text(v);
    kept = cc_->adopt_landing();
  }),
            Status::ok);
  ASSERT_EQ(cc_->flush(), 1u);
  const auto m = decode(link_.sends[0].bytes);
  const std::uint32_t id = m[0].header.req_id;
  std::vector<std::byte> server(100000, std::byte{'p'});  // over kCopyOutMax: handed over
  reply({proto::msg::get_reply_pull(id, 1, {reinterpret_cast<std::uint64_t>(server.data()), 9}, server.size())});
  EXPECT_TRUE(link_.reads.empty()) << "queued: the CQ pass's flush posts it, with the pass's other READs";
  EXPECT_EQ(cc_->flush(), 0u) << "a READ, no SEND";
  ASSERT_EQ(link_.reads.size(), 1u);
  EXPECT_EQ(link_.reads[0].rkey, 9u);
  EXPECT_EQ(cc_->counters().rdma_reads, 1u);
  EXPECT_EQ(cc_->counters().onesided_reads, 0u) << "a pull, not a one-sided GET";
  EXPECT_TRUE(seen.empty()) << "delivered only after the READ";
  std::memcpy(link_.reads[0].target.data(), server.data(), server.size());  // the HCA's READ
  cc_->on_completion(FakeLink::complete(link_.reads[0], CompletionOpcode::rdma_read, 100000));
  EXPECT_EQ(seen.size(), 100000u);
  ASSERT_TRUE(kept);
  EXPECT_FALSE(kept->registered()) << "adopted: no remote access any more";
  EXPECT_EQ(reinterpret_cast<const char*>(kept->data().data())[100000], '\0');
  // The RELEASE goes alone (nothing queued, credits to spare).
  ASSERT_EQ(cc_->flush(), 1u);
  const auto rel = decode(link_.sends.back().bytes);
  ASSERT_EQ(rel.size(), 1u);
  EXPECT_EQ(rel[0].opcode(), Opcode::release);
  EXPECT_EQ(rel[0].header.req_id, id);
  EXPECT_EQ(cc_->counters().releases_sent, 1u);
  EXPECT_EQ(cc_->counters().messages_sent, 2u);
}

TEST_F(ClientRdv, GetIntoOffersTheCallersBufferRegisteredForTheRequestOnly) {
  std::vector<std::byte> into(20000, std::byte{0});
  const int live_before = reg_.live;
  std::span<const std::byte> seen;
  ASSERT_EQ(cc_->submit_get_into("k", into, [&](Status s, bool found, std::span<const std::byte> v) {
    EXPECT_EQ(s, Status::ok);
    EXPECT_TRUE(found);
    seen = v;
  }),
            Status::ok);
  EXPECT_EQ(reg_.live, live_before + 1) << "registered before the SEND: its rkey is in it";
  EXPECT_EQ(reg_.last_access, verbs::Access::local_write | verbs::Access::remote_write);
  ASSERT_EQ(cc_->flush(), 1u);
  const auto m = decode(link_.sends[0].bytes);
  ASSERT_TRUE(m[0].rdv);
  EXPECT_EQ(m[0].rdv->addr, reinterpret_cast<std::uint64_t>(into.data())) << "the caller's memory, not a spare";
  EXPECT_EQ(m[0].header.value_len, into.size()) << "all of it: no byte kept for a NUL";
  std::memset(into.data(), 'w', into.size());  // the server's RDMA WRITE, filling it exactly
  written(m[0].header.req_id, 1, into.size());
  EXPECT_EQ(seen.data(), into.data()) << "delivered in place";
  EXPECT_EQ(seen.size(), into.size());
  EXPECT_EQ(reg_.live, live_before) << "deregistered with the request";
  EXPECT_EQ(cc_->counters().gets_into_direct, 1u);
  EXPECT_EQ(cc_->counters().bytes_copied, 0u);
}

TEST_F(ClientRdv, GetIntoPullsIntoTheBufferOrReleasesAValueThatDoesNotFit) {
  std::vector<std::byte> into(60000, std::byte{0});
  std::vector<std::byte> server(50000, std::byte{'p'});
  std::span<const std::byte> seen;
  ASSERT_EQ(cc_->submit_get_into("k", into, [&](Status s, bool, std::span<const std::byte> v) {
    EXPECT_EQ(s, Status::ok);
    seen = v;
  }),
            Status::ok);
  ASSERT_EQ(cc_->flush(), 1u);
  auto m = decode(link_.sends.back().bytes);
  // The server could not WRITE (e.g. no transfer slot): a pull, READ into the caller's buffer.
  reply({proto::msg::get_reply_pull(m[0].header.req_id, 1, {reinterpret_cast<std::uint64_t>(server.data()), 9},
                                    server.size())});
  EXPECT_EQ(cc_->flush(), 0u);  // the pass's flush posts the READ
  ASSERT_EQ(link_.reads.size(), 1u);
  EXPECT_EQ(link_.reads[0].target.data(), into.data());
  EXPECT_EQ(link_.reads[0].target.size(), server.size());
  std::memcpy(link_.reads[0].target.data(), server.data(), server.size());
  cc_->on_completion(FakeLink::complete(link_.reads[0], CompletionOpcode::rdma_read, 50000));
  EXPECT_EQ(seen.data(), into.data());
  EXPECT_EQ(seen.size(), 50000u);
  // Too small: the value is not read, its pin is RELEASEd, too_large.
  std::vector<std::byte> small(10000);
  Status got = Status::ok;
  bool found = false;
  ASSERT_EQ(cc_->submit_get_into("k", small, [&](Status s, bool f, std::span<const std::byte>) {
    got = s;
    found = f;
  }),
            Status::ok);
  ASSERT_EQ(cc_->flush(), 1u);  // with the first GET's RELEASE
  m = decode(link_.sends.back().bytes);
  const auto& get = m.back();
  EXPECT_EQ(get.opcode(), Opcode::get);
  reply({proto::msg::get_reply_pull(get.header.req_id, 1, {reinterpret_cast<std::uint64_t>(server.data()), 9},
                                    server.size())});
  EXPECT_EQ(got, Status::too_large);
  EXPECT_TRUE(found);
  EXPECT_EQ(link_.reads.size(), 1u) << "no READ for a value that does not fit";
  ASSERT_EQ(cc_->flush(), 1u);
  const auto rel = decode(link_.sends.back().bytes);
  ASSERT_EQ(rel.size(), 1u);
  EXPECT_EQ(rel[0].opcode(), Opcode::release);
  EXPECT_EQ(rel[0].header.req_id, get.header.req_id);
  EXPECT_EQ(cc_->state(), ConnState::established);
}

TEST_F(ClientRdv, GetIntoASmallBufferOffersNothingAndGetsTheValueInTheReply) {
  std::vector<std::byte> into(100);
  std::string seen;
  const auto regs = reg_.registrations();
  ASSERT_EQ(cc_->submit_get_into("k", into, [&](Status, bool, std::span<const std::byte> v) { seen = text(v); }),
            Status::ok);
  EXPECT_EQ(reg_.registrations(), regs) << "no large value fits 100 bytes: nothing to register";
  ASSERT_EQ(cc_->flush(), 1u);
  const auto m = decode(link_.sends[0].bytes);
  EXPECT_FALSE(m[0].rdv) << "not even a spare landing buffer";
  reply({proto::msg::get_reply_found(m[0].header.req_id, 1, proto::as_bytes(std::string_view("small")))});
  EXPECT_EQ(seen, "small") << "the caller copies it from the reply";
}

// Depth 32 of 5,000-byte values (over the eager limit): the GETs that found
// no spare were pulled into buffers registered at their size; those come back
// to the pool, which keeps as many as requests can be in flight (not a fixed
// 16), so the next 32 GETs are all offered a landing buffer and WRITTEN: no
// pull, no registration.
TEST(ClientRdvDepth, ThePoolKeepsALandingBufferForEveryRequestInFlight) {
  constexpr std::uint32_t kDepth = 32;
  FakeLink link;
  FakeRegistrar reg;
  BufferPool recv(kDepth, 8192), send(kDepth, 8192);
  RdvOptions o;
  o.landing_size = 16384;
  o.landing_spares = 1;
  ClientConn cc(link, recv, send, &reg, o);
  ASSERT_EQ(cc.post_receives(), 0);
  cc.on_accepted();
  cc.on_established(kDepth, 8192, 1u << 20);
  ASSERT_EQ(cc.max_in_flight(), kDepth);
  std::size_t next_recv = 0;
  auto reply = [&](const proto::MessageSpec& spec) {
    cc.on_completion(FakeLink::deliver(link.recvs[next_recv++ % link.recvs.size()], pack({spec})));
  };
  std::vector<std::byte> server(5000, std::byte{'s'});
  int done = 0;
  auto round = [&](bool pulls) {
    const std::size_t first_send = link.sends.size();
    for (std::uint32_t i = 0; i < kDepth; ++i) {
      ASSERT_EQ(cc.submit_get("k" + std::to_string(i), [&](Status st, bool found, std::span<const std::byte> v) {
        EXPECT_EQ(st, Status::ok);
        EXPECT_TRUE(found);
        EXPECT_EQ(v.size(), 5000u);
        ++done;
      }),
                Status::ok);
    }
    ASSERT_GE(cc.flush(), 1u);
    std::vector<proto::MessageView> gets;
    for (std::size_t i = first_send; i < link.sends.size(); ++i) {
      for (const auto& m : decode(link.sends[i].bytes)) {
        if (m.opcode() == Opcode::get) gets.push_back(m);
      }
    }
    ASSERT_EQ(gets.size(), kDepth);
    // All in flight at once: the pull replies come first, their READs all
    // posted before any completes; the WRITTEN ones are answered last.
    const std::size_t first_read = link.reads.size();
    for (const auto& m : gets) {
      if (!m.rdv) {  // none to offer: the value is pulled
        reply(proto::msg::get_reply_pull(m.header.req_id, 1, {reinterpret_cast<std::uint64_t>(server.data()), 9},
                                         server.size()));
      }
    }
    EXPECT_EQ(cc.flush(), 0u) << "the pass's flush posts the READs, no SEND";
    if (pulls) {
      EXPECT_GT(link.reads.size(), first_read);
    }
    for (std::size_t r = first_read; r < link.reads.size(); ++r) {
      std::memcpy(link.reads[r].target.data(), server.data(), server.size());
      cc.on_completion(FakeLink::complete(link.reads[r], CompletionOpcode::rdma_read, server.size()));
    }
    for (const auto& m : gets) {
      if (m.rdv) {  // offered: the server WRITES the value, its reply in the immediate
        std::memcpy(reinterpret_cast<std::byte*>(m.rdv->addr), server.data(), server.size());
        cc.on_completion(FakeLink::deliver_written(link.recvs[next_recv++ % link.recvs.size()],
                                                   proto::pack_written_reply(m.header.req_id, 1),
                                                   static_cast<std::uint32_t>(server.size())));
      }
    }
    if (pulls) {
      EXPECT_GE(cc.flush(), 1u) << "the RELEASEs of the pulls";
    } else {
      EXPECT_EQ(cc.flush(), 0u) << "nothing was pulled: nothing to release";
    }
  };
  round(true);
  EXPECT_EQ(done, 32);
  EXPECT_EQ(cc.counters().gets_written, 1u) << "one spare at connect";
  EXPECT_EQ(cc.counters().gets_pulled, kDepth - 1);
  const auto registered = reg.registrations();
  round(false);
  EXPECT_EQ(done, 64);
  EXPECT_EQ(cc.counters().gets_written, 1u + kDepth) << "every GET of the second round offered a spare";
  EXPECT_EQ(cc.counters().gets_pulled, kDepth - 1);
  EXPECT_EQ(reg.registrations(), registered) << "and none registered anything";
}

TEST_F(ClientRdv, ReleaseIsFoldedIntoTheNextRequest) {
  ASSERT_EQ(cc_->submit_get("k", nullptr), Status::ok);
  ASSERT_EQ(cc_->flush(), 1u);
  const auto id = decode(link_.sends[0].bytes)[0].header.req_id;
  std::vector<std::byte> server(20000);
  reply({proto::msg::get_reply_pull(id, 1, {reinterpret_cast<std::uint64_t>(server.data()), 9}, server.size())});
  ASSERT_EQ(cc_->flush(), 0u);  // the READ
  ASSERT_EQ(cc_->submit_get("other", nullptr), Status::ok);  // queued before the READ completes
  cc_->on_completion(FakeLink::complete(link_.reads[0], CompletionOpcode::rdma_read, 20000));
  ASSERT_EQ(cc_->flush(), 1u);
  const auto m = decode(link_.sends.back().bytes);
  ASSERT_EQ(m.size(), 2u) << "RELEASE + GET in one SEND";
  EXPECT_EQ(m[0].opcode(), Opcode::release);
  EXPECT_EQ(m[1].opcode(), Opcode::get);
}

TEST_F(ClientRdv, ThePullReadCarriesTheRequestsSlotKeyAndAStaleOneIsDropped) {
  ASSERT_EQ(cc_->submit_get("k", nullptr), Status::ok);
  ASSERT_EQ(cc_->flush(), 1u);
  const auto id = decode(link_.sends[0].bytes)[0].header.req_id;
  std::vector<std::byte> server(20000);
  reply({proto::msg::get_reply_pull(id, 1, {reinterpret_cast<std::uint64_t>(server.data()), 9}, server.size())});
  ASSERT_EQ(cc_->flush(), 0u);  // the READ
  ASSERT_EQ(link_.reads.size(), 1u);
  const reactor::SlotKey key = reactor::SlotKey::unpack32(id);
  EXPECT_EQ(link_.reads[0].id.slot(), key.index);
  EXPECT_EQ(link_.reads[0].id.generation(), key.generation) << "the request's generation, not a constant";
  EXPECT_EQ(link_.reads[0].id.kind(), verbs::WrKind::rdma_read);
  const auto done = FakeLink::complete(link_.reads[0], CompletionOpcode::rdma_read, 20000);
  cc_->on_completion(done);
  EXPECT_EQ(cc_->in_flight(), 0u);
  // The same completion again names a freed slot: dropped and counted, not a failure.
  cc_->on_completion(done);
  EXPECT_EQ(cc_->state(), ConnState::established);
  EXPECT_EQ(cc_->counters().stale_reads, 1u);
  // Also once the index is reused by a newer request: its generation differs.
  ASSERT_EQ(cc_->submit_get("k2", nullptr), Status::ok);
  ASSERT_EQ(cc_->flush(), 1u);
  const auto id2 = decode(link_.sends.back().bytes).back().header.req_id;
  ASSERT_EQ(reactor::SlotKey::unpack32(id2).index, key.index);
  cc_->on_completion(done);
  EXPECT_EQ(cc_->state(), ConnState::established);
  EXPECT_EQ(cc_->counters().stale_reads, 2u);
  EXPECT_EQ(cc_->in_flight(), 1u) << "the newer request is untouched";
}

TEST_F(ClientRdv, AReadCompletionForARequestThatPostedNoneFailsTheConnection) {
  ASSERT_EQ(cc_->submit_get("k", nullptr), Status::ok);
  ASSERT_EQ(cc_->flush(), 1u);
  const auto key = reactor::SlotKey::unpack32(decode(link_.sends[0].bytes)[0].header.req_id);
  verbs::Completion c;
  c.wr_id = verbs::WrId(key.index, key.generation, verbs::WrKind::rdma_read);
  c.status = CompletionStatus::success;
  cc_->on_completion(c);  // the GET awaits its reply; it posted no READ
  EXPECT_EQ(cc_->state(), ConnState::failed);
  EXPECT_EQ(cc_->counters().stale_reads, 0u);
}

TEST_F(ClientRdv, FailedReadFailsTheConnection) {
  Status got = Status::ok;
  ASSERT_EQ(cc_->submit_get("k", [&](Status s, bool, std::span<const std::byte>) { got = s; }), Status::ok);
  ASSERT_EQ(cc_->flush(), 1u);
  const auto id = decode(link_.sends[0].bytes)[0].header.req_id;
  reply({proto::msg::get_reply_pull(id, 1, {0x1234, 9}, 20000)});
  ASSERT_EQ(cc_->flush(), 0u);  // the READ
  EXPECT_EQ(cc_->outstanding_work(), 4u + 1u + 1u) << "receives, the GET's send, the READ";
  cc_->on_completion(FakeLink::failed(link_.reads[0], CompletionStatus::remote_access_error));
  EXPECT_EQ(got, Status::connection_failed);
  EXPECT_EQ(cc_->state(), ConnState::failed);
}

// A WRITE with immediate the client cannot match to a GET that offered a
// buffer the length fits fails the connection, with the GET completed once
// (connection_failed): for no request, for a DEL, past the offered buffer,
// for a GET that offered none.
TEST_F(ClientRdv, AWriteWithImmediateForNoOfferFailsTheConnection) {
  enum class Bad { no_request, not_a_get, too_long, no_offer };
  for (Bad bad : {Bad::no_request, Bad::not_a_get, Bad::too_long, Bad::no_offer}) {
    SCOPED_TRACE(static_cast<int>(bad));
    FakeLink link;
    FakeRegistrar reg;
    BufferPool recv(4, 8192), send(4, 8192);
    RdvOptions o;
    o.landing_size = 16384;
    o.landing_spares = bad == Bad::no_offer ? 0 : 1;
    ClientConn cc(link, recv, send, bad == Bad::no_offer ? nullptr : &reg, o);
    ASSERT_EQ(cc.post_receives(), 0);
    cc.on_accepted();
    cc.on_established(4, 8192, 1u << 20);
    int calls = 0;
    Status got = Status::ok;
    auto cb = [&](Status st, bool, std::span<const std::byte>) {
      ++calls;
      got = st;
    };
    ASSERT_EQ(bad == Bad::not_a_get ? cc.submit_del("k", cb) : cc.submit_get("k", cb), Status::ok);
    ASSERT_EQ(cc.flush(), 1u);
    const auto m = decode(link.sends[0].bytes);
    ASSERT_EQ(m[0].rdv.has_value(), bad == Bad::no_request || bad == Bad::too_long);
    const std::uint32_t id = m[0].header.req_id;
    const std::uint32_t req = bad == Bad::no_request ? id + 1 : id;  // the next slot index: none is live
    const auto len = static_cast<std::uint32_t>(bad == Bad::too_long ? m[0].header.value_len + 1 : 5000);  // past the offer
    cc.on_completion(FakeLink::deliver_written(link.recvs[0], proto::pack_written_reply(req, 1), len));
    EXPECT_EQ(cc.state(), ConnState::failed);
    EXPECT_EQ(calls, 1);
    EXPECT_EQ(got, Status::connection_failed);
    EXPECT_EQ(cc.counters().gets_written, 0u);
  }
}

}  // namespace
}  // namespace rkv::kv::client
