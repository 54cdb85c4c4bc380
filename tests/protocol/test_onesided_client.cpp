// protocol suite: ClientConn's one-sided GET (client_onesided.cpp) through
// FakeLink + FakeRegistrar against a "server memory" in this process (a
// ReadableIndex + Store with plain-memory blocks): what it READs, that it
// sends no message, and how it handles torn entries, stale blocks, misses,
// overflow and exhausted retries (docs/protocol.md, "One-sided GET").
#include <gtest/gtest.h>

#include <bit>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "fake_link.hpp"
#include "fake_registrar.hpp"
#include "wire_helpers.hpp"
#include "kv/client/client_conn.hpp"
#include "kv/store/readable_index.hpp"
#include "kv/store/store.hpp"
#include "proto/encode.hpp"

namespace rkv::kv::client {
namespace {

using store::LargeValue;
using store::ReadableIndex;
using store::Store;
using test::FakeLink;
using test::FakeRegistrar;
using test::Post;

constexpr std::uint32_t kBuckets = 64;

class OneSidedClient : public ::testing::Test {
 protected:
  OneSidedClient() : recv_(4, 8192), send_(4, 8192) {
    store_.attach_index(index_, [this](std::size_t n) { return block(n); });
    RdvOptions o;
    o.landing_size = 16384;
    o.landing_spares = 1;
    cc_ = std::make_unique<ClientConn>(link_, recv_, send_, &reg_, o);
    EXPECT_EQ(cc_->post_receives(), 0);
    cc_->on_established(4, 8192, 1u << 20);
    EXPECT_TRUE(cc_->enable_onesided({reinterpret_cast<std::uintptr_t>(region_.data()), 77, kBuckets}));
    EXPECT_EQ(reg_.last_access, verbs::Access::local_write) << "READ targets only";
  }
  std::shared_ptr<LargeValue> block(std::size_t n) {
    const std::size_t cap = std::max<std::size_t>(64, std::bit_ceil(n));
    mem_.push_back(std::make_unique<std::byte[]>(cap));
    auto v = std::make_shared<LargeValue>();
    v->bytes = {mem_.back().get(), n};
    v->addr = reinterpret_cast<std::uintptr_t>(mem_.back().get());
    v->rkey = 99;
    v->capacity = cap;
    return v;
  }
  // Completes the oldest unserved READ as the responder would: copies the
  // remote bytes (plain pointers here) into its local element(s).
  void serve(std::size_t i) {
    const Post& p = link_.reads.at(i);
    const auto* src = reinterpret_cast<const std::byte*>(p.remote_addr);
    if (p.scatter.empty()) {
      std::memcpy(p.target.data(), src, p.target.size());
    } else {
      for (const auto& s : p.scatter) {
        std::memcpy(s.data(), src, s.size());
        src += s.size();
      }
    }
    cc_->on_completion(FakeLink::complete(p, verbs::CompletionOpcode::rdma_read));
  }
  struct Result {
    bool done = false;
    Status st = Status::invalid_use;
    bool found = false;
    std::string value;
  };
  Status get(std::string_view key, Result& r) {
    return cc_->submit_get(key, [&r](Status s, bool f, std::span<const std::byte> v) {
      r.done = true;
      r.st = s;
      r.found = f;
      r.value.assign(reinterpret_cast<const char*>(v.data()), v.size());
    });
  }
  std::size_t bucket_of(std::string_view key) const {
    const auto home = proto::home_bucket(proto::hash64(key), kBuckets);
    for (std::size_t b = home; b < home + proto::kNeighborhood; ++b) {
      const auto e = proto::decode_entry(std::span<const std::byte>(region_).subspan(b * 64, 64));
      if (e && e->used() && e->key_hash == proto::hash64(key)) return b;
    }
    ADD_FAILURE() << "key not indexed";
    return 0;
  }

  std::vector<std::byte> region_ = std::vector<std::byte>(proto::index_region_bytes(kBuckets));
  ReadableIndex index_{region_, kBuckets};
  std::vector<std::unique_ptr<std::byte[]>> mem_;
  Store store_;
  FakeLink link_;
  FakeRegistrar reg_;
  BufferPool recv_, send_;
  std::unique_ptr<ClientConn> cc_;
};

TEST_F(OneSidedClient, AHitIsTwoReadsAndNoMessage) {
  store_.set("key", "value bytes");
  Result r;
  ASSERT_EQ(get("key", r), Status::ok);
  EXPECT_EQ(cc_->flush(), 0u) << "no SEND";
  ASSERT_EQ(link_.reads.size(), 1u);
  const auto home = proto::home_bucket(proto::hash64("key"), kBuckets);
  EXPECT_EQ(link_.reads[0].remote_addr, reinterpret_cast<std::uintptr_t>(region_.data()) + home * 64);
  EXPECT_EQ(link_.reads[0].rkey, 77u);
  EXPECT_EQ(link_.reads[0].target.size(), proto::kNeighborhoodBytes) << "the whole neighborhood in one READ";
  serve(0);
  ASSERT_EQ(link_.reads.size(), 2u);
  ASSERT_EQ(link_.reads[1].scatter.size(), 2u) << "value and key scattered";
  EXPECT_EQ(link_.reads[1].scatter[0].size(), 11u);
  EXPECT_EQ(link_.reads[1].scatter[1].size(), 3u);
  EXPECT_EQ(link_.reads[1].rkey, 99u);
  serve(1);
  ASSERT_TRUE(r.done);
  EXPECT_EQ(r.st, Status::ok);
  EXPECT_TRUE(r.found);
  EXPECT_EQ(r.value, "value bytes");
  EXPECT_TRUE(link_.sends.empty());
  const auto& c = cc_->counters();
  EXPECT_EQ(c.onesided_gets, 1u);
  EXPECT_EQ(c.onesided_hits, 1u);
  EXPECT_EQ(c.messages_sent, 0u);
  EXPECT_EQ(c.rdma_reads, 2u);
  EXPECT_EQ(cc_->in_flight(), 0u);
}

TEST_F(OneSidedClient, AMissIsAnsweredByTheIndexAlone) {
  Result r;
  ASSERT_EQ(get("absent", r), Status::ok);
  cc_->flush();
  serve(0);
  ASSERT_TRUE(r.done);
  EXPECT_EQ(r.st, Status::ok);
  EXPECT_FALSE(r.found);
  EXPECT_EQ(link_.reads.size(), 1u);
  EXPECT_TRUE(link_.sends.empty());
  EXPECT_EQ(cc_->counters().onesided_misses, 1u);
}

TEST_F(OneSidedClient, ATornEntryIsReadAgain) {
  store_.set("key", "v1");
  Result r;
  ASSERT_EQ(get("key", r), Status::ok);
  cc_->flush();
  // The READ saw the entry mid-rewrite: one field changed, entry_crc not yet.
  const std::size_t b = bucket_of("key");
  region_[b * 64 + 16] ^= std::byte{0x40};
  serve(0);
  EXPECT_FALSE(r.done);
  ASSERT_EQ(link_.reads.size(), 2u) << "the neighborhood is read again";
  EXPECT_TRUE(link_.reads[1].scatter.empty());
  region_[b * 64 + 16] ^= std::byte{0x40};  // the rewrite finished
  serve(1);
  serve(2);
  ASSERT_TRUE(r.done);
  EXPECT_EQ(r.value, "v1");
  EXPECT_EQ(cc_->counters().onesided_retries, 1u);
}

TEST_F(OneSidedClient, AReusedBlockFailsTheDataCrcAndTheNewValueIsRead) {
  store_.set("key", "old value");
  Result r;
  ASSERT_EQ(get("key", r), Status::ok);
  cc_->flush();
  serve(0);  // entry names the old block
  const auto* old_block = reinterpret_cast<char*>(link_.reads[1].remote_addr);
  store_.set("key", "new value!");  // the entry now names a new block...
  std::memcpy(const_cast<char*>(old_block), "REUSED!!!", 9);  // ...and the old one was reused
  serve(1);
  EXPECT_FALSE(r.done) << "bytes that fail the data CRC are never returned";
  ASSERT_EQ(link_.reads.size(), 3u);
  serve(2);
  serve(3);
  ASSERT_TRUE(r.done);
  EXPECT_EQ(r.value, "new value!");
  EXPECT_EQ(cc_->counters().onesided_retries, 1u);
}

TEST_F(OneSidedClient, RetriesAreBoundedThenTheGetGoesByMessage) {
  store_.set("key", "v");
  Result r;
  ASSERT_EQ(get("key", r), Status::ok);
  cc_->flush();
  region_[bucket_of("key") * 64 + 8] ^= std::byte{1};  // torn for good
  for (unsigned i = 0; i < proto::kOneSidedAttempts; ++i) serve(i);
  EXPECT_EQ(link_.reads.size(), proto::kOneSidedAttempts);
  EXPECT_FALSE(r.done);
  ASSERT_EQ(cc_->flush(), 1u) << "the fallback GET message";
  const auto m = test::decode(link_.sends.at(0).bytes);
  ASSERT_EQ(m.size(), 1u);
  EXPECT_EQ(m[0].opcode(), proto::Opcode::get);
  EXPECT_EQ(m[0].key, "key");
  const auto& c = cc_->counters();
  EXPECT_EQ(c.onesided_retries, proto::kOneSidedAttempts - 1);
  EXPECT_EQ(c.onesided_fallbacks, 1u);
  cc_->on_completion(FakeLink::deliver(link_.recvs[0], test::pack({proto::msg::get_reply_found(
                                                          m[0].header.req_id, 1, proto::as_bytes(std::string_view("v")))})));
  ASSERT_TRUE(r.done);
  EXPECT_EQ(r.value, "v");
}

TEST_F(OneSidedClient, BothReadsCarryTheRequestsSlotKeyAndAReplyForItFails) {
  store_.set("key", "value");
  Result r;
  ASSERT_EQ(get("key", r), Status::ok);
  cc_->flush();
  serve(0);
  ASSERT_EQ(link_.reads.size(), 2u);
  const verbs::WrId hood = link_.reads[0].id;
  EXPECT_EQ(link_.reads[1].id, hood) << "one request, one slot key, both READs";
  EXPECT_EQ(hood.kind(), verbs::WrKind::rdma_read);
  EXPECT_NE(hood.generation(), 0u) << "slot generations start at 1";
  // No message went out, so no reply may name this request.
  const std::uint32_t id = reactor::SlotKey{hood.slot(), hood.generation()}.pack32();
  cc_->on_completion(FakeLink::deliver(
      link_.recvs[0], test::pack({proto::msg::get_reply_found(id, 1, proto::as_bytes(std::string_view("x")))})));
  EXPECT_EQ(cc_->state(), ConnState::failed);
  ASSERT_TRUE(r.done);
  EXPECT_EQ(r.st, Status::connection_failed);
}

TEST_F(OneSidedClient, AnOverflowedKeyIsAskedByMessage) {
  // Fill one neighborhood, then one more key homed there.
  std::vector<std::string> keys;
  for (int i = 0; keys.size() < proto::kNeighborhood + 1; ++i) {
    std::string k = "k" + std::to_string(i);
    if (proto::home_bucket(proto::hash64(k), kBuckets) == 5) keys.push_back(k);
  }
  for (const auto& k : keys) store_.set(k, "x");
  EXPECT_EQ(index_.stats().overflow_keys, 1u);
  Result r;
  ASSERT_EQ(get(keys.back(), r), Status::ok);
  cc_->flush();
  serve(0);
  EXPECT_EQ(link_.reads.size(), 1u);
  EXPECT_EQ(cc_->flush(), 1u);
  EXPECT_EQ(cc_->counters().onesided_fallbacks, 1u);
  EXPECT_EQ(cc_->counters().onesided_retries, 0u);
}

}  // namespace
}  // namespace rkv::kv::client
