// One-sided GET index: hash64 vectors, entry encoding and torn-entry
// detection, neighborhood placement and overflow, in-place updates, and the
// Store's [value][key] blocks and entries (docs/protocol.md, "One-sided GET").
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kv/store/readable_index.hpp"
#include "kv/store/store.hpp"
#include "proto/crc32c.hpp"
#include "proto/index_format.hpp"

namespace rkv {
namespace {

using proto::IndexEntry;
using proto::ProbeResult;
constexpr std::size_t kBucket = proto::kBucketSize;

TEST(Hash64, FixedVectors) {
  // FNV-1a 64 + fmix64; computed independently (Python) from the definition in docs/protocol.md.
  EXPECT_EQ(proto::hash64(""), 0xefd01f60ba992926ull);
  EXPECT_EQ(proto::hash64("a"), 0x82a2a958a9bece5bull);
  EXPECT_EQ(proto::hash64("key"), 0xcf8c79838f3b3030ull);
  EXPECT_EQ(proto::hash64("hello world"), 0x7c6d8c019b6ee5d5ull);
  std::string all;
  for (int r = 0; r < 4; ++r) {
    for (int i = 0; i < 256; ++i) all.push_back(static_cast<char>(i));
  }
  EXPECT_EQ(proto::hash64(all), 0xd7108d3b43b5e94aull);
}

IndexEntry sample(std::uint64_t version) {
  IndexEntry e;
  e.version = version;
  e.key_hash = 0x1122334455667788ull;
  e.addr = 0x7f0000001000ull + version * 64;
  e.rkey = 0xabcd;
  e.key_len = 3;
  e.value_len = 100 + static_cast<std::uint32_t>(version);
  e.data_crc = 0xdeadbeef ^ static_cast<std::uint32_t>(version);
  e.flags = proto::kFlagUsed;
  e.expire_at = 1'790'000'000'000ull + version;
  return e;
}

TEST(IndexEntry, RoundTripsWithEntryCrcLast) {
  const IndexEntry e = sample(7);
  const auto bytes = proto::encode_entry(e);
  const auto back = proto::decode_entry(bytes);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(*back, e);
  std::uint64_t expire_at = 0;  // docs/protocol.md's table: expire_at at 44, entry_crc at 52, the rest zero
  std::memcpy(&expire_at, bytes.data() + 44, 8);
  EXPECT_EQ(expire_at, e.expire_at);
  std::uint32_t crc = 0;
  std::memcpy(&crc, bytes.data() + 52, 4);
  EXPECT_EQ(crc, proto::crc32c(bytes.data(), 52));
  for (std::size_t i = 56; i < kBucket; ++i) EXPECT_EQ(bytes[i], std::byte{0});
  // An all-zero bucket is empty, not torn.
  const std::array<std::byte, kBucket> zero{};
  const auto empty = proto::decode_entry(zero);
  ASSERT_TRUE(empty.has_value());
  EXPECT_FALSE(empty->used());
}

// A reader applies an entry's expiry by its own clock: live until the margin
// before it, then the server decides (by message) until the margin after
// it, then gone; no expiry is always live, and no u64 off the wire overflows.
TEST(IndexEntry, ExpiryVerdictAroundTheExpiryByTheMargin) {
  using proto::ExpiryVerdict;
  using proto::expiry_verdict;
  constexpr std::int64_t m = proto::kExpiryClockMarginMs;
  IndexEntry e = sample(1);
  const auto at = static_cast<std::int64_t>(e.expire_at);
  EXPECT_EQ(expiry_verdict(e, at - m - 1), ExpiryVerdict::live);
  EXPECT_EQ(expiry_verdict(e, at - m), ExpiryVerdict::ask_rpc);
  EXPECT_EQ(expiry_verdict(e, at), ExpiryVerdict::ask_rpc);
  EXPECT_EQ(expiry_verdict(e, at + m - 1), ExpiryVerdict::ask_rpc);
  EXPECT_EQ(expiry_verdict(e, at + m), ExpiryVerdict::expired);
  EXPECT_EQ(expiry_verdict(e, at + 3'600'000), ExpiryVerdict::expired);
  e.expire_at = 0;
  EXPECT_EQ(expiry_verdict(e, at + 3'600'000), ExpiryVerdict::live);
  e.expire_at = ~std::uint64_t{0};
  EXPECT_EQ(expiry_verdict(e, at), ExpiryVerdict::live);
  EXPECT_EQ(expiry_verdict(e, std::numeric_limits<std::int64_t>::max()), ExpiryVerdict::live);
  e.expire_at = 1;
  EXPECT_EQ(expiry_verdict(e, -5), ExpiryVerdict::ask_rpc);
  EXPECT_EQ(expiry_verdict(e, std::numeric_limits<std::int64_t>::max()), ExpiryVerdict::expired);
}

TEST(IndexEntry, EveryMixOfOldAndNewBytesIsDetectedAsTorn) {
  const auto old_bytes = proto::encode_entry(sample(1));
  const auto new_bytes = proto::encode_entry(sample(2));
  int mixes = 0;
  // A reader may see any prefix new and the rest old, or the reverse.
  for (std::size_t split = 1; split < kBucket; ++split) {
    for (int dir = 0; dir < 2; ++dir) {
      std::array<std::byte, kBucket> mix{};
      const auto& first = dir == 0 ? new_bytes : old_bytes;
      const auto& second = dir == 0 ? old_bytes : new_bytes;
      std::memcpy(mix.data(), first.data(), split);
      std::memcpy(mix.data() + split, second.data() + split, kBucket - split);
      if (mix == old_bytes || mix == new_bytes) continue;  // identical bytes: a whole entry
      ++mixes;
      EXPECT_FALSE(proto::decode_entry(mix).has_value()) << "split " << split << " dir " << dir;
    }
  }
  EXPECT_GT(mixes, 60);
  auto tail = new_bytes;
  tail[100] = std::byte{1};
  EXPECT_FALSE(proto::decode_entry(tail).has_value()) << "a non-zero tail is not an entry";
}

TEST(IndexEntry, InlineDataRoundTripsAndAnythingAfterItIsTorn) {
  const std::string data = "valuekey";  // value "value", key "key"
  IndexEntry e = sample(3);
  e.addr = 0;
  e.rkey = 0;
  e.value_len = 5;
  e.key_len = 3;
  e.data_crc = proto::crc32c(data.data(), data.size());
  e.flags = proto::kFlagUsed | proto::kFlagInline;
  const auto bytes = proto::encode_entry(e, std::as_bytes(std::span(data)));
  const auto back = proto::decode_entry(bytes);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(*back, e);
  const auto in = proto::inline_data(bytes, *back);
  EXPECT_EQ(std::string_view(reinterpret_cast<const char*>(in.data()), in.size()), data);
  EXPECT_EQ(proto::check_block(*back, in.first(5), in.subspan(5), "key"), proto::BlockCheck::ok);
  // A byte after the data (left by a longer value, mid-rewrite) is not an entry.
  auto tail = bytes;
  tail[proto::kInlineOffset + data.size()] = std::byte{'x'};
  EXPECT_FALSE(proto::decode_entry(tail).has_value());
  // Inline data longer than the bucket can hold is not an entry, even with a matching entry_crc.
  IndexEntry huge = e;
  huge.value_len = proto::kInlineMax;  // + 3 key bytes: 3 too many
  const auto hb = proto::encode_entry(huge);
  EXPECT_FALSE(proto::decode_entry(hb).has_value());
  // Inline bytes of another write fail the data CRC (check_block: torn).
  auto other = bytes;
  other[proto::kInlineOffset] = std::byte{'V'};
  const auto oe = proto::decode_entry(other);
  ASSERT_TRUE(oe.has_value()) << "the header is whole";
  const auto od = proto::inline_data(other, *oe);
  EXPECT_EQ(proto::check_block(*oe, od.first(5), od.subspan(5), "key"), proto::BlockCheck::torn);
}

// Keys whose home bucket (in an index of `buckets`) is `home`.
std::vector<std::string> keys_homed_at(std::uint64_t home, std::uint32_t buckets, std::size_t n) {
  std::vector<std::string> out;
  for (int i = 0; out.size() < n; ++i) {
    std::string k = "key" + std::to_string(i);
    if (proto::home_bucket(proto::hash64(k), buckets) == home) out.push_back(k);
  }
  return out;
}

class IndexTest : public ::testing::Test {
 protected:
  static constexpr std::uint32_t kBuckets = 16;
  std::vector<std::byte> region_ = std::vector<std::byte>(proto::index_region_bytes(kBuckets));
  kv::store::ReadableIndex index_{region_, kBuckets};

  ProbeResult probe(std::string_view key, IndexEntry& e) const {
    std::size_t at = 0;
    return probe(key, e, at);
  }
  // `at`: the bucket it was found in (index in the region).
  ProbeResult probe(std::string_view key, IndexEntry& e, std::size_t& at) const {
    const auto home = proto::home_bucket(proto::hash64(key), kBuckets);
    std::size_t i = 0;
    const auto r = proto::probe_neighborhood(
        std::span<const std::byte>(region_).subspan(home * kBucket, proto::kNeighborhoodBytes), proto::hash64(key),
        static_cast<std::uint32_t>(key.size()), e, i);
    at = home + i;
    return r;
  }
  std::span<const std::byte> bucket_bytes(std::size_t b) const {
    return std::span<const std::byte>(region_).subspan(b * kBucket, kBucket);
  }
};

TEST_F(IndexTest, RejectsBadGeometry) {
  EXPECT_THROW(kv::store::ReadableIndex(region_, 12), std::invalid_argument);
  EXPECT_THROW(kv::store::ReadableIndex(region_, 0), std::invalid_argument);
  EXPECT_THROW(kv::store::ReadableIndex(std::span<std::byte>(region_).first(100), kBuckets), std::invalid_argument);
}

TEST_F(IndexTest, NeighborhoodPlacementAndStickyOverflow) {
  const auto keys = keys_homed_at(3, kBuckets, 9);
  for (std::size_t i = 0; i < 8; ++i) {
    EXPECT_EQ(index_.claim(keys[i]), 3 + i) << "first empty bucket of the neighborhood";
    index_.publish(3 + static_cast<std::uint32_t>(i), keys[i], 0x1000 * (i + 1), 5, 10, 0x55, {}, 0);
  }
  EXPECT_EQ(index_.claim(keys[8]), kv::store::ReadableIndex::kNoBucket) << "neighborhood full";
  EXPECT_EQ(index_.stats().overflow_keys, 1u);
  EXPECT_EQ(index_.stats().overflow_buckets, 1u);
  EXPECT_EQ(index_.stats().used, 8u);
  IndexEntry e;
  EXPECT_EQ(probe(keys[8], e), ProbeResult::ask_rpc) << "overflow on the home bucket: ask by message";
  const auto other = keys_homed_at(3, kBuckets, 10)[9];
  EXPECT_EQ(probe(other, e), ProbeResult::ask_rpc) << "any key homed there may be missing";
  for (std::size_t i = 0; i < 8; ++i) {
    ASSERT_EQ(probe(keys[i], e), ProbeResult::found);
    EXPECT_EQ(e.addr, 0x1000 * (i + 1));
  }
  // Home 4's neighborhood (4..11) is partly taken by keys of home 3, has no overflow flag.
  const auto k4 = keys_homed_at(4, kBuckets, 1)[0];
  EXPECT_EQ(probe(k4, e), ProbeResult::not_found);
  EXPECT_EQ(index_.claim(k4), 11u);
  // The last home bucket's neighborhood ends in the extra buckets: no wrap.
  const auto k15 = keys_homed_at(kBuckets - 1, kBuckets, 1)[0];
  EXPECT_EQ(index_.claim(k15), kBuckets - 1);
}

TEST_F(IndexTest, InPlaceUpdateBumpsTheVersionAndWithdrawNamesNoMemory) {
  const std::uint32_t b = index_.claim("alpha");
  ASSERT_NE(b, kv::store::ReadableIndex::kNoBucket);
  IndexEntry e;
  EXPECT_EQ(probe("alpha", e), ProbeResult::ask_rpc) << "claimed, not published yet";
  const auto v1 = index_.publish(b, "alpha", 0x1000, 7, 5, 0x11, {}, 0);
  ASSERT_EQ(probe("alpha", e), ProbeResult::found);
  EXPECT_EQ(e.version, v1);
  const auto v2 = index_.publish(b, "alpha", 0x2000, 8, 6, 0x22, {}, 0);
  EXPECT_GT(v2, v1);
  ASSERT_EQ(probe("alpha", e), ProbeResult::found);
  EXPECT_EQ(e.addr, 0x2000u);
  EXPECT_EQ(e.rkey, 8u);
  EXPECT_EQ(e.value_len, 6u);
  EXPECT_EQ(e.data_crc, 0x22u);
  index_.withdraw(b, "alpha");
  EXPECT_EQ(probe("alpha", e), ProbeResult::ask_rpc);
  const auto raw = proto::decode_entry(bucket_bytes(b));
  ASSERT_TRUE(raw.has_value());
  EXPECT_EQ(raw->addr, 0u);
  EXPECT_EQ(index_.stats().rpc_only, 1u);
  index_.release(b);
  EXPECT_EQ(probe("alpha", e), ProbeResult::not_found);
}

TEST_F(IndexTest, ATornBucketMakesTheReaderReadAgain) {
  const std::uint32_t b = index_.claim("beta");
  index_.publish(b, "beta", 0x1000, 7, 5, 0x11, {}, 0);
  const auto old_bytes = std::vector<std::byte>(region_.begin() + b * kBucket, region_.begin() + (b + 1) * kBucket);
  index_.publish(b, "beta", 0x2000, 7, 5, 0x22, {}, 0);
  // What a READ racing the rewrite could see: new fields, old entry_crc.
  std::memcpy(region_.data() + b * kBucket + proto::kEntryCrcOffset, old_bytes.data() + proto::kEntryCrcOffset, 4);
  IndexEntry e;
  EXPECT_EQ(probe("beta", e), ProbeResult::torn);
}

TEST_F(IndexTest, KeysWithTheSameHashAndLengthAreNotBothIndexed) {
  const std::uint32_t b = index_.claim("gamma");
  ASSERT_NE(b, kv::store::ReadableIndex::kNoBucket);
  // Pretend another key of length 5 collided on hash64: claim() sees the
  // same (hash, length) and refuses rather than create two matching entries.
  EXPECT_EQ(index_.claim("gamma"), kv::store::ReadableIndex::kNoBucket);
  EXPECT_EQ(index_.stats().overflow_keys, 1u);
}

// Blocks from plain memory, like the server's small arena (capacity = a power of two).
struct FakeBlocks {
  std::vector<std::unique_ptr<std::byte[]>> mem;
  bool fail = false;
  std::size_t handed = 0;  // blocks given out
  std::shared_ptr<kv::store::LargeValue> operator()(std::size_t n) {
    if (fail) return nullptr;
    ++handed;
    const std::size_t cap = std::max<std::size_t>(64, std::bit_ceil(n));
    mem.push_back(std::make_unique<std::byte[]>(cap));
    auto v = std::make_shared<kv::store::LargeValue>();
    v->bytes = {mem.back().get(), n};
    v->addr = reinterpret_cast<std::uintptr_t>(mem.back().get());
    v->rkey = 42;
    v->capacity = cap;
    return v;
  }
};

class StoreIndexTest : public IndexTest {
 protected:
  void SetUp() override {
    store_.attach_index(index_, [this](std::size_t n) { return blocks_(n); });
  }
  // The bytes the entry of `key` names (its inline data, or the block it
  // points at), as a reader would check them.
  void expect_block(std::string_view key, std::string_view value) {
    IndexEntry e;
    std::size_t at = 0;
    ASSERT_EQ(probe(key, e, at), ProbeResult::found);
    ASSERT_EQ(e.value_len, value.size());
    ASSERT_EQ(e.key_len, key.size());
    const bool fits = value.size() + key.size() <= proto::kInlineMax;
    ASSERT_EQ(e.inlined(), fits) << "in the entry exactly when value and key fit it";
    const auto* block = fits ? reinterpret_cast<const char*>(proto::inline_data(bucket_bytes(at), e).data())
                             : reinterpret_cast<const char*>(e.addr);
    if (fits) {
      EXPECT_EQ(e.addr, 0u) << "an inline entry names no memory";
    }
    EXPECT_EQ(std::string_view(block, value.size()), value) << "value first";
    EXPECT_EQ(std::string_view(block + value.size(), key.size()), key) << "then the key";
    EXPECT_EQ(e.data_crc, proto::crc32c(block, value.size() + key.size()));
  }
  FakeBlocks blocks_;
  kv::store::Store store_;
};

TEST_F(StoreIndexTest, SmallValuesLiveInBlocksValueThenKey) {
  const std::string small(200, 's');  // beyond an entry's inline room
  EXPECT_TRUE(store_.set("k1", small));
  expect_block("k1", small);
  EXPECT_EQ(blocks_.handed, 1u);
  const auto hit = store_.get("k1");
  EXPECT_TRUE(hit.found);
  EXPECT_EQ(hit.value, small);
  EXPECT_FALSE(hit.large) << "a small value in a block is still answered eagerly";
  EXPECT_TRUE(store_.set("k1", std::string(3000, 'x')));  // overwrite: a fresh block, entry rewritten
  expect_block("k1", std::string(3000, 'x'));
  EXPECT_EQ(blocks_.handed, 2u);
  EXPECT_EQ(index_.stats().used, 1u);
}

// A value that travels in its entry needs no block: it is kept as without
// the index (a std::string), and its entry carries it even when no block
// could be had.
TEST_F(StoreIndexTest, ValuesThatFitTheEntryAreInlineAndCounted) {
  const std::string fits(proto::kInlineMax - 2, 'f');  // with key "k2": exactly kInlineMax
  EXPECT_TRUE(store_.set("k2", fits));
  expect_block("k2", fits);
  EXPECT_EQ(blocks_.handed, 0u) << "an inline value takes no block";
  EXPECT_EQ(store_.get("k2").value, fits);
  EXPECT_EQ(index_.stats().inline_entries, 1u);
  EXPECT_TRUE(store_.set("k2", fits + "!"));  // one byte over: the block only
  expect_block("k2", fits + "!");
  EXPECT_EQ(blocks_.handed, 1u);
  EXPECT_EQ(index_.stats().inline_entries, 0u);
  blocks_.fail = true;  // the arena exhausted: no matter for a value in the entry
  EXPECT_TRUE(store_.set("k2", "short again"));
  expect_block("k2", "short again");
  EXPECT_EQ(store_.get("k2").value, "short again");
  EXPECT_EQ(index_.stats().inline_entries, 1u);
  EXPECT_EQ(index_.stats().rpc_only, 0u);
  EXPECT_TRUE(store_.erase("k2"));
  EXPECT_EQ(index_.stats().inline_entries, 0u);
}

// The sticky overflow flag is written into a home bucket that may hold an
// inline entry: its value must stay readable.
TEST_F(StoreIndexTest, TheOverflowFlagKeepsTheHomeBucketsInlineValue) {
  const auto keys = keys_homed_at(3, kBuckets, 9);
  for (std::size_t i = 0; i < 8; ++i) EXPECT_TRUE(store_.set(keys[i], "value " + keys[i]));
  EXPECT_TRUE(store_.set(keys[8], "no room"));
  EXPECT_EQ(index_.stats().overflow_buckets, 1u);
  IndexEntry e;
  std::size_t at = 0;
  ASSERT_EQ(probe(keys[0], e, at), ProbeResult::found);
  EXPECT_EQ(at, 3u) << "the home bucket itself";
  EXPECT_TRUE(e.overflow());
  expect_block(keys[0], "value " + keys[0]);
}

// Every mix of two inline writes of one key a READ could see (any prefix of
// one, the rest of the other): the reader ends with either whole value, or
// reads again. Never a mix.
TEST_F(StoreIndexTest, EveryMixOfTwoInlineWritesIsWholeOrReadAgain) {
  EXPECT_TRUE(store_.set("mk", "first value"));
  IndexEntry e;
  std::size_t at = 0;
  ASSERT_EQ(probe("mk", e, at), ProbeResult::found);
  const auto b = bucket_bytes(at);
  const std::vector<std::byte> one(b.begin(), b.end());
  EXPECT_TRUE(store_.set("mk", "2nd value, longer"));
  const std::vector<std::byte> two(b.begin(), b.end());
  int whole = 0;
  int torn = 0;
  for (std::size_t split = 0; split <= kBucket; ++split) {
    for (int dir = 0; dir < 2; ++dir) {
      const auto& first = dir == 0 ? two : one;
      const auto& second = dir == 0 ? one : two;
      std::vector<std::byte> mix(first.begin(), first.begin() + static_cast<std::ptrdiff_t>(split));
      mix.insert(mix.end(), second.begin() + static_cast<std::ptrdiff_t>(split), second.end());
      const auto d = proto::decode_entry(mix);
      if (!d) {
        ++torn;
        continue;
      }
      ASSERT_TRUE(d->inlined());
      const auto data = proto::inline_data(mix, *d);
      const auto check = proto::check_block(*d, data.first(d->value_len), data.subspan(d->value_len), "mk");
      const std::string got(reinterpret_cast<const char*>(data.data()), d->value_len);
      if (check == proto::BlockCheck::ok) {
        EXPECT_TRUE(got == "first value" || got == "2nd value, longer") << "split " << split << ": " << got;
        ++whole;
      } else {
        EXPECT_EQ(check, proto::BlockCheck::torn) << "split " << split;
        ++torn;
      }
    }
  }
  EXPECT_GT(whole, 0);
  EXPECT_GT(torn, 100) << "most mixes are caught";
}

TEST_F(StoreIndexTest, AValueNotInABlockIsWithdrawnNeverLeftStale) {
  const std::string v1(100, '1'), v2(100, '2'), v3(100, '3');  // none fits an entry
  EXPECT_TRUE(store_.set("k", v1));
  expect_block("k", v1);
  blocks_.fail = true;  // arena exhausted: std::string fallback
  EXPECT_TRUE(store_.set("k", v2));
  EXPECT_EQ(store_.get("k").value, v2);
  IndexEntry e;
  EXPECT_EQ(probe("k", e), ProbeResult::ask_rpc) << "the entry must not name v1 any more";
  blocks_.fail = false;
  EXPECT_TRUE(store_.set("k", v3));
  expect_block("k", v3);
  store_.erase("k");
  EXPECT_EQ(probe("k", e), ProbeResult::not_found);
}

TEST_F(StoreIndexTest, LargeValuesCarryTheKeyAfterTheValue) {
  auto big = blocks_(70000 + 3);
  std::memset(big->bytes.data(), 'L', 70000);
  big->bytes = big->bytes.first(70000);  // as the server allocates it: room for the key after
  EXPECT_TRUE(store_.set_large("big", big));
  expect_block("big", std::string(70000, 'L'));
  EXPECT_TRUE(store_.get("big").large);
  // A block with no room for the key cannot be read by clients: withdrawn.
  auto tight = std::make_shared<kv::store::LargeValue>(*blocks_(8));
  tight->capacity = 8;
  tight->bytes = {tight->bytes.data(), 8};
  EXPECT_TRUE(store_.set_large("big", tight));
  IndexEntry e;
  EXPECT_EQ(probe("big", e), ProbeResult::ask_rpc);
}

// A rendezvous SET's writer sends crc32c(value): the entry carries it extended
// over the key (what readers check), not a checksum the server computed by
// reading the value through; a wrong one is published as given (readers of
// that key then fail the check and ask by message).
TEST_F(StoreIndexTest, LargeValuesPublishTheWritersChecksumExtendedOverTheKey) {
  auto big = blocks_(70000 + 3);
  std::memset(big->bytes.data(), 'L', 70000);
  big->bytes = big->bytes.first(70000);
  ASSERT_TRUE(store_.set_large("big", big, proto::crc32c(big->bytes.data(), 70000)));
  expect_block("big", std::string(70000, 'L'));  // equal to the checksum of value + key
  auto lie = blocks_(70000 + 3);
  std::memset(lie->bytes.data(), 'M', 70000);
  lie->bytes = lie->bytes.first(70000);
  ASSERT_TRUE(store_.set_large("big", lie, 0x12345678u));
  IndexEntry e;
  ASSERT_EQ(probe("big", e), ProbeResult::found);
  EXPECT_EQ(e.data_crc, proto::crc32c_extend(0x12345678u, "big", 3));
  EXPECT_NE(e.data_crc, proto::crc32c(reinterpret_cast<const char*>(e.addr), 70003));
}

// DEL (Store::erase): the entry goes, readers get NOT FOUND, the bucket can
// be claimed again, and a reader racing the removal sees a torn entry (and
// reads again), never a half-cleared one.
TEST_F(StoreIndexTest, EraseEmptiesTheBucketAndFreesTheBlock) {
  std::weak_ptr<const kv::store::LargeValue> block;
  kv::store::Store s;
  s.attach_index(index_, [this, &block](std::size_t n) {
    auto b = blocks_(n);
    block = b;
    return b;
  });
  EXPECT_TRUE(s.set("gone", std::string(100, 'v')));  // in a block (too long for the entry)
  IndexEntry e;
  ASSERT_EQ(probe("gone", e), ProbeResult::found);
  const std::uint64_t bucket = proto::home_bucket(proto::hash64("gone"), kBuckets);  // the first free one
  ASSERT_FALSE(block.expired());
  EXPECT_EQ(index_.stats().used, 1u);
  EXPECT_TRUE(s.erase("gone"));
  EXPECT_EQ(probe("gone", e), ProbeResult::not_found) << "a one-sided GET after the DEL finds nothing";
  EXPECT_TRUE(block.expired()) << "the block went back to its arena (nothing pins a small value)";
  EXPECT_EQ(index_.stats().used, 0u);
  EXPECT_EQ(index_.stats().rpc_only, 0u);
  // The bucket holds no key, no address, nothing a reader could use.
  const auto raw = proto::decode_entry(bucket_bytes(bucket));
  ASSERT_TRUE(raw.has_value());
  EXPECT_FALSE(raw->used());
  EXPECT_EQ(raw->addr, 0u);
  EXPECT_EQ(raw->key_hash, 0u);
  EXPECT_FALSE(s.erase("gone"));
  // SET after DEL: claimed and published again.
  EXPECT_TRUE(s.set("gone", "again"));
  ASSERT_EQ(probe("gone", e), ProbeResult::found);
  EXPECT_EQ(e.value_len, 5u);
  EXPECT_EQ(index_.stats().used, 1u);
  s.detach();
}

TEST_F(StoreIndexTest, AReaderRacingTheEraseSeesATornEntry) {
  EXPECT_TRUE(store_.set("racer", "value"));
  IndexEntry e;
  ASSERT_EQ(probe("racer", e), ProbeResult::found);
  const std::uint64_t bucket = proto::home_bucket(proto::hash64("racer"), kBuckets);  // the only key
  const auto old_bytes = std::vector<std::byte>(region_.begin() + bucket * kBucket, region_.begin() + (bucket + 1) * kBucket);
  EXPECT_TRUE(store_.erase("racer"));
  // Every mix of the old entry and the cleared one a READ could see: either
  // whole (old: the value as before the DEL; new: not found) or torn.
  const auto new_bytes = std::vector<std::byte>(region_.begin() + bucket * kBucket, region_.begin() + (bucket + 1) * kBucket);
  for (std::size_t split = 1; split < kBucket; ++split) {
    std::vector<std::byte> mix(new_bytes.begin(), new_bytes.begin() + split);
    mix.insert(mix.end(), old_bytes.begin() + split, old_bytes.end());
    std::memcpy(region_.data() + bucket * kBucket, mix.data(), kBucket);
    const ProbeResult r = probe("racer", e);
    if (mix == old_bytes) {
      EXPECT_EQ(r, ProbeResult::found);
    } else if (mix == new_bytes) {
      EXPECT_EQ(r, ProbeResult::not_found);
    } else {
      EXPECT_EQ(r, ProbeResult::torn) << "split " << split;
    }
  }
}

TEST_F(StoreIndexTest, EraseOfAnOverflowKeyForgetsIt) {
  const auto keys = keys_homed_at(5, kBuckets, 9);
  for (const auto& k : keys) EXPECT_TRUE(store_.set(k, "v"));
  EXPECT_EQ(index_.stats().overflow_keys, 1u);
  EXPECT_TRUE(store_.erase(keys[8]));  // the one that found no bucket
  EXPECT_EQ(index_.stats().overflow_keys, 0u);
  EXPECT_EQ(index_.stats().used, 8u);
  EXPECT_TRUE(store_.erase(keys[0]));
  EXPECT_EQ(index_.stats().used, 7u);
  IndexEntry e;
  EXPECT_EQ(probe(keys[0], e), ProbeResult::ask_rpc) << "the home bucket's overflow flag is sticky";
  EXPECT_TRUE(store_.set(keys[8], "back"));  // takes the freed bucket now
  EXPECT_EQ(index_.stats().used, 8u);
  EXPECT_EQ(index_.stats().overflow_keys, 0u);
}

// Every entry carries its key's expiry, so one-sided readers apply it
// themselves: a SET with a TTL publishes it (in the entry or in a block), an
// EXPIRE restamps the entry, a PERSIST or a SET without a TTL clears it, a
// write that keeps the expiry keeps it.
TEST_F(StoreIndexTest, EntriesCarryTheKeysExpiry) {
  using kv::store::kKeepExpiry;
  const kv::store::ExpireAt at = kv::store::wall_ms() + 60'000;
  IndexEntry e;
  ASSERT_TRUE(store_.set("inline", "v", at));
  ASSERT_EQ(probe("inline", e), ProbeResult::found);
  EXPECT_TRUE(e.inlined());
  EXPECT_EQ(e.expire_at, static_cast<std::uint64_t>(at));
  const std::string big(500, 'b');
  ASSERT_TRUE(store_.set("block", big, at + 1));
  ASSERT_EQ(probe("block", e), ProbeResult::found);
  EXPECT_FALSE(e.inlined());
  EXPECT_EQ(e.expire_at, static_cast<std::uint64_t>(at + 1));
  const std::uint64_t version = e.version;
  ASSERT_TRUE(store_.expire("block", at + 2));
  ASSERT_EQ(probe("block", e), ProbeResult::found);
  EXPECT_EQ(e.expire_at, static_cast<std::uint64_t>(at + 2));
  EXPECT_EQ(e.version, version) << "the same value: restamped, not published again";
  expect_block("block", big);
  ASSERT_TRUE(store_.set("block", big + "!", kKeepExpiry));
  ASSERT_EQ(probe("block", e), ProbeResult::found);
  EXPECT_EQ(e.expire_at, static_cast<std::uint64_t>(at + 2)) << "a write that keeps the expiry";
  ASSERT_TRUE(store_.expire("block", kv::store::kNoExpiry));  // PERSIST
  ASSERT_EQ(probe("block", e), ProbeResult::found);
  EXPECT_EQ(e.expire_at, 0u);
  ASSERT_TRUE(store_.expire("inline", at + 3));
  ASSERT_EQ(probe("inline", e), ProbeResult::found);
  EXPECT_EQ(e.expire_at, static_cast<std::uint64_t>(at + 3));
  expect_block("inline", "v");
  ASSERT_TRUE(store_.set("inline", "w"));  // a SET without a TTL clears it
  ASSERT_EQ(probe("inline", e), ProbeResult::found);
  EXPECT_EQ(e.expire_at, 0u);
}

}  // namespace
}  // namespace rkv
