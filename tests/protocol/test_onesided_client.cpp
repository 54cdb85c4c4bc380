// protocol suite: ClientConn's one-sided GET (client_onesided.cpp) through
// FakeLink + FakeRegistrar against a "server memory" in this process (a
// ReadableIndex + Store with plain-memory blocks): what it READs, that it
// sends no message, and how it handles torn entries, stale blocks, misses,
// overflow and exhausted retries (docs/protocol.md, "One-sided GET"); and at
// depth, how the READs of many GETs are posted: chained, mostly unsignaled,
// and what a failed READ or post in the middle of a chain does.
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

constexpr std::uint32_t kBuckets = 256;
constexpr std::size_t kBucket = proto::kBucketSize;

// A value too long to travel in its entry (value + key > kInlineMax): its
// GET READs the neighborhood, then the value block.
std::string blk(std::string_view v) { return std::string(v) + std::string(proto::kInlineMax, '.'); }

class OneSidedClient : public ::testing::Test {
 protected:
  OneSidedClient() {
    store_.attach_index(index_, [this](std::size_t n) { return block(n); });
    connect(4);
  }
  // A new connection with `depth` request slots (and receive buffers).
  void connect(std::uint32_t depth) {
    cc_.reset();
    link_ = FakeLink{};
    recv_ = std::make_unique<BufferPool>(depth, 8192);
    send_ = std::make_unique<BufferPool>(4, 8192);
    RdvOptions o;
    o.landing_size = 16384;
    o.landing_spares = 1;
    cc_ = std::make_unique<ClientConn>(link_, *recv_, *send_, &reg_, o);
    EXPECT_EQ(cc_->post_receives(), 0);
    cc_->on_accepted();
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
  // Serves READ i as the responder would: copies the remote bytes (plain
  // pointers here) into its local element(s). A signaled READ then completes,
  // and the owner flushes at the end of that CQ pass, as Client does; an
  // unsignaled one makes no completion (a later READ's completes it).
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
    if (!p.signaled) return;
    cc_->on_completion(FakeLink::complete(p, verbs::CompletionOpcode::rdma_read));
    cc_->flush();
  }
  // Serves READs [from, to).
  void serve_range(std::size_t from, std::size_t to) {
    for (std::size_t i = from; i < to; ++i) serve(i);
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
      const auto e = proto::decode_entry(std::span<const std::byte>(region_).subspan(b * kBucket, kBucket));
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
  std::unique_ptr<BufferPool> recv_, send_;
  std::unique_ptr<ClientConn> cc_;
};

TEST_F(OneSidedClient, AHitIsTwoReadsAndNoMessage) {
  EXPECT_TRUE(store_.set("key", blk("value bytes")));
  Result r;
  ASSERT_EQ(get("key", r), Status::ok);
  EXPECT_EQ(cc_->flush(), 0u) << "no SEND";
  ASSERT_EQ(link_.reads.size(), 1u);
  const auto home = proto::home_bucket(proto::hash64("key"), kBuckets);
  EXPECT_EQ(link_.reads[0].remote_addr, reinterpret_cast<std::uintptr_t>(region_.data()) + home * kBucket);
  EXPECT_EQ(link_.reads[0].rkey, 77u);
  EXPECT_EQ(link_.reads[0].target.size(), proto::kNeighborhoodBytes) << "the whole neighborhood in one READ";
  EXPECT_TRUE(link_.reads[0].signaled) << "alone in its chain: signaled";
  serve(0);
  ASSERT_EQ(link_.reads.size(), 2u);
  ASSERT_EQ(link_.reads[1].scatter.size(), 2u) << "value and key scattered";
  EXPECT_EQ(link_.reads[1].scatter[0].size(), blk("value bytes").size());
  EXPECT_EQ(link_.reads[1].scatter[1].size(), 3u);
  EXPECT_EQ(link_.reads[1].rkey, 99u);
  serve(1);
  ASSERT_TRUE(r.done);
  EXPECT_EQ(r.st, Status::ok);
  EXPECT_TRUE(r.found);
  EXPECT_EQ(r.value, blk("value bytes"));
  EXPECT_TRUE(link_.sends.empty());
  const auto& c = cc_->counters();
  EXPECT_EQ(c.onesided_gets, 1u);
  EXPECT_EQ(c.onesided_hits, 1u);
  EXPECT_EQ(c.messages_sent, 0u);
  EXPECT_EQ(c.rdma_reads, 2u);
  EXPECT_EQ(c.onesided_reads, 2u);
  EXPECT_EQ(c.read_posts, 2u);
  EXPECT_EQ(c.reads_unsignaled, 0u);
  EXPECT_EQ(cc_->in_flight(), 0u);
  EXPECT_EQ(cc_->outstanding_work(), 4u) << "only the receives";
}

// A value whose value and key bytes fit kInlineMax travels in its entry:
// the neighborhood READ is the whole GET.
TEST_F(OneSidedClient, AnInlineValueIsOneReadAndNoMessage) {
  const std::string v(proto::kInlineMax - 3, 'i');  // with the 3-byte key: exactly the inline room
  EXPECT_TRUE(store_.set("key", v));
  Result r;
  ASSERT_EQ(get("key", r), Status::ok);
  EXPECT_EQ(cc_->flush(), 0u) << "no SEND";
  ASSERT_EQ(link_.reads.size(), 1u);
  EXPECT_EQ(link_.reads[0].target.size(), proto::kNeighborhoodBytes);
  serve(0);
  ASSERT_TRUE(r.done) << "answered from the neighborhood READ";
  EXPECT_EQ(r.st, Status::ok);
  EXPECT_TRUE(r.found);
  EXPECT_EQ(r.value, v);
  EXPECT_EQ(link_.reads.size(), 1u) << "no value READ";
  EXPECT_TRUE(link_.sends.empty());
  const auto& c = cc_->counters();
  EXPECT_EQ(c.onesided_hits, 1u);
  EXPECT_EQ(c.onesided_reads, 1u);
  EXPECT_EQ(c.rdma_reads, 1u);
  // One byte more and the value lives only in its block: two READs.
  EXPECT_TRUE(store_.set("key", v + "+"));
  Result r2;
  ASSERT_EQ(get("key", r2), Status::ok);
  cc_->flush();
  serve(1);
  ASSERT_EQ(link_.reads.size(), 3u);
  EXPECT_EQ(link_.reads[2].scatter.size(), 2u) << "the block READ";
  serve(2);
  ASSERT_TRUE(r2.done);
  EXPECT_EQ(r2.value, v + "+");
  EXPECT_EQ(cc_->counters().onesided_reads, 3u);
}

// A READ that saw the entry's fields of one write and its inline bytes of
// another (the server rewrites the bucket in place) fails the data CRC: read
// again, never returned.
TEST_F(OneSidedClient, InlineBytesOfAnotherWriteAreReadAgain) {
  EXPECT_TRUE(store_.set("key", "v1"));
  Result r;
  ASSERT_EQ(get("key", r), Status::ok);
  cc_->flush();
  const std::size_t value_at = bucket_of("key") * kBucket + proto::kInlineOffset;
  region_[value_at + 1] = std::byte{'9'};  // "v9": the header still says "v1"'s checksum
  serve(0);
  EXPECT_FALSE(r.done) << "bytes that fail the data CRC are never returned";
  ASSERT_EQ(link_.reads.size(), 2u) << "the neighborhood again";
  EXPECT_TRUE(link_.reads[1].scatter.empty());
  region_[value_at + 1] = std::byte{'1'};  // the rewrite finished
  serve(1);
  ASSERT_TRUE(r.done);
  EXPECT_EQ(r.value, "v1");
  EXPECT_EQ(cc_->counters().onesided_retries, 1u);
  EXPECT_EQ(cc_->counters().onesided_reads, 2u);
}

TEST_F(OneSidedClient, GetsAtDepthOfInlineValuesAreOneReadEachInOnePost) {
  constexpr std::size_t kDepth = 20;
  connect(kDepth);
  std::vector<std::string> keys;
  for (std::size_t i = 0; i < kDepth; ++i) {
    keys.push_back("n" + std::to_string(i));
    EXPECT_TRUE(store_.set(keys.back(), "small " + keys.back()));
  }
  std::vector<Result> res(kDepth);
  for (std::size_t i = 0; i < kDepth; ++i) ASSERT_EQ(get(keys[i], res[i]), Status::ok);
  cc_->flush();
  serve_range(0, kDepth);
  for (std::size_t i = 0; i < kDepth; ++i) {
    ASSERT_TRUE(res[i].done) << i;
    EXPECT_EQ(res[i].value, "small " + keys[i]);
  }
  const auto& c = cc_->counters();
  EXPECT_EQ(c.onesided_reads, kDepth) << "one READ per GET";
  EXPECT_EQ(c.read_posts, 1u);
  EXPECT_EQ(c.onesided_hits, kDepth);
  EXPECT_EQ(cc_->outstanding_work(), kDepth) << "only the receives";
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
  EXPECT_TRUE(store_.set("key", blk("v1")));
  Result r;
  ASSERT_EQ(get("key", r), Status::ok);
  cc_->flush();
  // The READ saw the entry mid-rewrite: one field changed, entry_crc not yet.
  const std::size_t b = bucket_of("key");
  region_[b * kBucket + 16] ^= std::byte{0x40};
  serve(0);
  EXPECT_FALSE(r.done);
  ASSERT_EQ(link_.reads.size(), 2u) << "the neighborhood is read again";
  EXPECT_TRUE(link_.reads[1].scatter.empty());
  region_[b * kBucket + 16] ^= std::byte{0x40};  // the rewrite finished
  serve(1);
  serve(2);
  ASSERT_TRUE(r.done);
  EXPECT_EQ(r.value, blk("v1"));
  EXPECT_EQ(cc_->counters().onesided_retries, 1u);
}

TEST_F(OneSidedClient, AReusedBlockFailsTheDataCrcAndTheNewValueIsRead) {
  EXPECT_TRUE(store_.set("key", blk("old value")));
  Result r;
  ASSERT_EQ(get("key", r), Status::ok);
  cc_->flush();
  serve(0);  // entry names the old block
  const auto* old_block = reinterpret_cast<char*>(link_.reads[1].remote_addr);
  EXPECT_TRUE(store_.set("key", blk("new value!")));  // the entry now names a new block...
  std::memcpy(const_cast<char*>(old_block), "REUSED!!!", 9);  // ...and the old one was reused
  serve(1);
  EXPECT_FALSE(r.done) << "bytes that fail the data CRC are never returned";
  ASSERT_EQ(link_.reads.size(), 3u);
  serve(2);
  serve(3);
  ASSERT_TRUE(r.done);
  EXPECT_EQ(r.value, blk("new value!"));
  EXPECT_EQ(cc_->counters().onesided_retries, 1u);
}

TEST_F(OneSidedClient, RetriesAreBoundedThenTheGetGoesByMessage) {
  EXPECT_TRUE(store_.set("key", "v"));
  Result r;
  ASSERT_EQ(get("key", r), Status::ok);
  cc_->flush();
  region_[bucket_of("key") * kBucket + 8] ^= std::byte{1};  // torn for good
  for (unsigned i = 0; i < proto::kOneSidedAttempts; ++i) serve(i);
  EXPECT_EQ(link_.reads.size(), proto::kOneSidedAttempts);
  EXPECT_FALSE(r.done);
  ASSERT_EQ(link_.sends.size(), 1u) << "the fallback GET message, sent by the flush after that pass";
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
  EXPECT_TRUE(store_.set("key", blk("value")));
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
  for (const auto& k : keys) EXPECT_TRUE(store_.set(k, "x"));
  EXPECT_EQ(index_.stats().overflow_keys, 1u);
  Result r;
  ASSERT_EQ(get(keys.back(), r), Status::ok);
  cc_->flush();
  serve(0);
  EXPECT_EQ(link_.reads.size(), 1u);
  EXPECT_EQ(link_.sends.size(), 1u) << "the GET by message";
  EXPECT_EQ(cc_->counters().onesided_fallbacks, 1u);
  EXPECT_EQ(cc_->counters().onesided_retries, 0u);
}


// --- at depth: chained posts ---------------------------------------------

// The value set_keys gives `key` (too long for its entry: two READs a GET).
std::string value_of(const std::string& key) { return blk("value of " + key); }

// n keys set in the store (values from value_of).
std::vector<std::string> set_keys(Store& store, std::size_t n, std::string_view prefix) {
  std::vector<std::string> keys;
  for (std::size_t i = 0; i < n; ++i) {
    keys.push_back(std::string(prefix) + std::to_string(i));
    EXPECT_TRUE(store.set(keys.back(), value_of(keys.back())));
  }
  return keys;
}

// Which READs of post call `i` are signaled (their positions in the chain).
std::vector<std::size_t> signaled_in(const FakeLink& link, std::size_t i) {
  std::vector<std::size_t> out;
  const auto chain = link.chain(i);
  for (std::size_t k = 0; k < chain.size(); ++k) {
    if (chain[k]->signaled) out.push_back(k);
  }
  return out;
}

TEST_F(OneSidedClient, GetsAtDepthPostTheirReadsAsChainsWithFewSignaled) {
  constexpr std::size_t kDepth = 20;
  connect(kDepth);
  const auto keys = set_keys(store_, kDepth, "d");
  ASSERT_EQ(index_.stats().overflow_keys, 0u);
  std::vector<Result> res(kDepth);
  for (std::size_t i = 0; i < kDepth; ++i) ASSERT_EQ(get(keys[i], res[i]), Status::ok);
  EXPECT_EQ(cc_->flush(), 0u) << "no SEND";
  ASSERT_EQ(link_.read_posts, std::vector<std::size_t>{kDepth}) << "every index READ in one post";
  const std::size_t iv = ClientConn::kReadSignalInterval;
  static_assert(ClientConn::kReadSignalInterval < kDepth);
  EXPECT_EQ(signaled_in(link_, 0), (std::vector<std::size_t>{iv - 1, kDepth - 1}));
  for (std::size_t i = 0; i < kDepth; ++i) {
    EXPECT_EQ(link_.reads[i].target.size(), proto::kNeighborhoodBytes);
    EXPECT_EQ(link_.reads[i].id.kind(), verbs::WrKind::rdma_read);
  }
  // The first signaled READ's completion completes the unsignaled ones before
  // it: their value READs go out together, in one post.
  serve_range(0, iv);
  ASSERT_EQ(link_.read_posts, (std::vector<std::size_t>{kDepth, iv}));
  EXPECT_EQ(signaled_in(link_, 1), std::vector<std::size_t>{iv - 1});
  for (const Post* p : link_.chain(1)) EXPECT_EQ(p->scatter.size(), 2u) << "value and key";
  EXPECT_EQ(cc_->outstanding_work(), kDepth + (kDepth - iv) + iv) << "receives + READs posted";
  serve_range(iv, kDepth);
  ASSERT_EQ(link_.read_posts, (std::vector<std::size_t>{kDepth, iv, kDepth - iv}));
  for (const auto& r : res) EXPECT_FALSE(r.done) << "nothing answered before its value READ";
  serve_range(kDepth, 2 * kDepth);
  for (std::size_t i = 0; i < kDepth; ++i) {
    ASSERT_TRUE(res[i].done) << i;
    EXPECT_EQ(res[i].st, Status::ok);
    EXPECT_TRUE(res[i].found);
    EXPECT_EQ(res[i].value, value_of(keys[i]));
  }
  const auto& c = cc_->counters();
  EXPECT_EQ(c.rdma_reads, 2 * kDepth);
  EXPECT_EQ(c.read_posts, 3u);
  EXPECT_EQ(c.reads_unsignaled, 2 * kDepth - 4) << "signaled: 2 of the index READs, the last of each value chain";
  EXPECT_EQ(c.onesided_hits, kDepth);
  EXPECT_TRUE(link_.sends.empty());
  EXPECT_EQ(cc_->outstanding_work(), kDepth) << "only the receives";
}

TEST_F(OneSidedClient, MoreReadsThanOneChainHoldsArePostedAsSeveralEachEndingSignaled) {
  constexpr std::size_t kDepth = verbs::QueuePair::kMaxChain + 6;
  connect(kDepth);
  const auto keys = set_keys(store_, kDepth, "m");
  ASSERT_EQ(index_.stats().overflow_keys, 0u);
  std::vector<Result> res(kDepth);
  for (std::size_t i = 0; i < kDepth; ++i) ASSERT_EQ(get(keys[i], res[i]), Status::ok);
  cc_->flush();
  ASSERT_EQ(link_.read_posts, (std::vector<std::size_t>{verbs::QueuePair::kMaxChain, 6}));
  EXPECT_TRUE(link_.chain(0).back()->signaled);
  EXPECT_TRUE(link_.chain(1).back()->signaled);
  serve_range(0, kDepth);
  serve_range(kDepth, link_.reads.size());
  ASSERT_EQ(link_.reads.size(), 2 * kDepth);
  for (std::size_t i = 0; i < kDepth; ++i) {
    ASSERT_TRUE(res[i].done) << i;
    EXPECT_EQ(res[i].value, value_of(keys[i]));
  }
}

TEST_F(OneSidedClient, ATornEntryInAChainIsReadAgainWithTheOthersValueReads) {
  constexpr std::size_t kDepth = 5;
  connect(kDepth);
  const auto keys = set_keys(store_, kDepth - 1, "t");
  std::vector<Result> res(kDepth);
  for (std::size_t i = 0; i + 1 < kDepth; ++i) ASSERT_EQ(get(keys[i], res[i]), Status::ok);
  ASSERT_EQ(get("absent", res[kDepth - 1]), Status::ok);
  cc_->flush();
  ASSERT_EQ(link_.read_posts, std::vector<std::size_t>{kDepth});
  EXPECT_EQ(signaled_in(link_, 0), std::vector<std::size_t>{kDepth - 1}) << "a short chain: only its last";
  const std::size_t torn = bucket_of(keys[2]);
  region_[torn * kBucket + 16] ^= std::byte{0x40};
  serve_range(0, kDepth);
  EXPECT_TRUE(res[kDepth - 1].done) << "the miss is answered by its index READ";
  EXPECT_FALSE(res[kDepth - 1].found);
  const auto chain = link_.chain(1);
  ASSERT_EQ(chain.size(), kDepth - 1) << "3 value READs and the torn key's index READ again, one post";
  EXPECT_EQ(chain[2]->id, link_.reads[2].id);
  EXPECT_TRUE(chain[2]->scatter.empty()) << "the neighborhood again";
  EXPECT_EQ(chain[2]->target.size(), proto::kNeighborhoodBytes);
  for (std::size_t k : {0u, 1u, 3u}) EXPECT_EQ(chain[k]->scatter.size(), 2u);
  region_[torn * kBucket + 16] ^= std::byte{0x40};  // the rewrite finished
  serve_range(kDepth, link_.reads.size());
  serve_range(2 * kDepth - 1, link_.reads.size());  // the torn key's value READ
  for (std::size_t i = 0; i + 1 < kDepth; ++i) {
    ASSERT_TRUE(res[i].done) << i;
    EXPECT_EQ(res[i].value, value_of(keys[i]));
  }
  EXPECT_EQ(cc_->counters().onesided_retries, 1u);
  EXPECT_EQ(cc_->counters().onesided_misses, 1u);
  EXPECT_TRUE(link_.sends.empty());
}

TEST_F(OneSidedClient, AKeyTornForGoodInAChainFallsBackToAMessageWhileTheOthersHit) {
  constexpr std::size_t kDepth = 3;
  connect(kDepth);
  const auto keys = set_keys(store_, kDepth, "g");
  std::vector<Result> res(kDepth);
  for (std::size_t i = 0; i < kDepth; ++i) ASSERT_EQ(get(keys[i], res[i]), Status::ok);
  cc_->flush();
  region_[bucket_of(keys[1]) * kBucket + 8] ^= std::byte{1};  // torn for good
  // Serve whatever is posted, in order, until nothing new comes.
  for (std::size_t served = 0; served < link_.reads.size();) serve(served++);
  EXPECT_EQ(res[0].value, value_of(keys[0]));
  EXPECT_EQ(res[2].value, value_of(keys[2]));
  EXPECT_FALSE(res[1].done);
  const auto& c = cc_->counters();
  EXPECT_EQ(c.onesided_retries, proto::kOneSidedAttempts - 1);
  EXPECT_EQ(c.onesided_fallbacks, 1u);
  EXPECT_EQ(c.rdma_reads, 2 * 2 + proto::kOneSidedAttempts);
  ASSERT_EQ(link_.sends.size(), 1u) << "the torn key's GET by message";
  const auto m = test::decode(link_.sends[0].bytes);
  ASSERT_EQ(m.size(), 2u) << "the GET, and the two hits' TOUCH hints riding with it";
  EXPECT_EQ(m[0].key, keys[1]);
  EXPECT_EQ(m[1].opcode(), proto::Opcode::touch);
  const std::string hint0 = std::string{static_cast<char>(keys[0].size()), '\0'} + keys[0];
  const std::string hint2 = std::string{static_cast<char>(keys[2].size()), '\0'} + keys[2];
  EXPECT_EQ(m[1].value_text(), hint0 + hint2);
  EXPECT_EQ(cc_->counters().touches_sent, 2u);
  cc_->on_completion(FakeLink::deliver(link_.recvs[0], test::pack({proto::msg::get_reply_found(
                                                          m[0].header.req_id, 1, proto::as_bytes(std::string_view("v1")))})));
  ASSERT_TRUE(res[1].done);
  EXPECT_EQ(res[1].value, "v1");
}

TEST_F(OneSidedClient, AFailedUnsignaledReadInAChainFailsTheConnectionAndTrustsNoReadBeforeIt) {
  constexpr std::size_t kDepth = 5;
  connect(kDepth);
  const auto keys = set_keys(store_, kDepth, "f");
  std::vector<Result> res(kDepth);
  for (std::size_t i = 0; i < kDepth; ++i) ASSERT_EQ(get(keys[i], res[i]), Status::ok);
  cc_->flush();
  serve_range(0, kDepth);  // the index READs
  ASSERT_EQ(link_.read_posts, (std::vector<std::size_t>{kDepth, kDepth}));
  // The value READs of GETs 0 and 1 land (unsignaled: no completion)...
  serve(kDepth);
  serve(kDepth + 1);
  ASSERT_FALSE(link_.reads[kDepth + 2].signaled);
  // ...then the third fails: an error completion comes even unsignaled.
  cc_->on_completion(FakeLink::failed(link_.reads[kDepth + 2], verbs::CompletionStatus::remote_access_error));
  EXPECT_EQ(cc_->state(), ConnState::failed);
  for (std::size_t i = 0; i < kDepth; ++i) {
    ASSERT_TRUE(res[i].done) << i;
    EXPECT_EQ(res[i].st, Status::connection_failed) << i << ": no GET answered from a chain that failed";
  }
  EXPECT_EQ(cc_->counters().onesided_hits, 0u);
  EXPECT_EQ(link_.read_posts.size(), 2u) << "nothing posted after the failure";
  // The last two value READs are still on the send queue: teardown waits for their flushes.
  EXPECT_EQ(cc_->outstanding_work(), kDepth + 2);
  cc_->on_completion(FakeLink::failed(link_.reads[kDepth + 3], verbs::CompletionStatus::flushed));
  cc_->on_completion(FakeLink::failed(link_.reads[kDepth + 4], verbs::CompletionStatus::flushed));
  EXPECT_EQ(cc_->outstanding_work(), kDepth);
}

TEST_F(OneSidedClient, AChainTheSendQueueTakesOnlyPartlyFailsTheConnectionAndThePostedPartDrains) {
  constexpr std::size_t kDepth = 5;
  connect(kDepth);
  const auto keys = set_keys(store_, kDepth, "p");
  std::vector<Result> res(kDepth);
  for (std::size_t i = 0; i < kDepth; ++i) ASSERT_EQ(get(keys[i], res[i]), Status::ok);
  link_.fail_reads_errno = ENOMEM;
  link_.fail_reads_after = 3;
  cc_->flush();
  EXPECT_EQ(cc_->state(), ConnState::failed);
  EXPECT_NE(cc_->failure().find("post_send failed: Cannot allocate memory"), std::string::npos) << cc_->failure();
  for (const auto& r : res) {
    ASSERT_TRUE(r.done);
    EXPECT_EQ(r.st, Status::connection_failed);
  }
  EXPECT_EQ(cc_->counters().rdma_reads, 3u) << "the READs the post took";
  EXPECT_EQ(cc_->outstanding_work(), kDepth + 3);
  // All three are unsignaled; each flushes with an error completion.
  for (std::size_t i = 0; i < 3; ++i) {
    cc_->on_completion(FakeLink::failed(link_.reads[i], verbs::CompletionStatus::flushed));
  }
  EXPECT_EQ(cc_->outstanding_work(), kDepth);
}

TEST_F(OneSidedClient, ARepeatedCompletionOfAReadAlreadyCompletedByALaterOneIsStale) {
  constexpr std::size_t kDepth = 3;
  connect(kDepth);
  const auto keys = set_keys(store_, kDepth, "s");
  std::vector<Result> res(kDepth);
  for (std::size_t i = 0; i < kDepth; ++i) ASSERT_EQ(get(keys[i], res[i]), Status::ok);
  cc_->flush();
  serve_range(0, kDepth);
  serve_range(kDepth, 2 * kDepth);
  for (const auto& r : res) ASSERT_TRUE(r.done);
  // A completion for the (unsignaled, long done) first value READ: its slot is gone.
  cc_->on_completion(FakeLink::complete(link_.reads[kDepth], verbs::CompletionOpcode::rdma_read));
  EXPECT_EQ(cc_->state(), ConnState::established);
  EXPECT_EQ(cc_->counters().stale_reads, 1u);
}

}  // namespace
}  // namespace rkv::kv::client
