#pragma once
// ReadableIndex: the server's side of the one-sided GET index
// (docs/protocol.md, "One-sided GET"; wire layout in proto/index_format.hpp).
//
// It writes entries into a region of plain memory it is given: in kvd that
// region is registered remote_read only (kv::server::Server), in the unit suite it is
// a vector. The Store is its only writer (Store::attach_index): it claims one
// bucket per new key, publishes/withdraws that key's entry on every SET and
// releases it on a DEL.
//
// A new key takes the first empty bucket of its neighborhood (home .. home+7).
// If there is none, or a bucket there already holds another key with the same
// hash and length, the key is not indexed and the home bucket gets the sticky
// overflow flag ("a key homed here may be missing: ask by message"). A
// bucket stays its key's until the key is deleted (DEL: Store::erase ->
// release()); it is then empty again (the overflow flag stays) and a new key
// may claim it. The value block goes back to its arena when its last
// reference goes, as after an overwrite: readers holding the old entry fail
// the data_crc check if it was reused (docs/protocol.md).
//
// A value whose value and key bytes fit proto::kInlineMax is also copied
// into its entry (INLINE): a reader then needs one READ, not two.
//
// Every write rewrites the whole bucket in place: everything but entry_crc
// first, entry_crc last, so a reader that sees a mix fails the entry_crc
// check (the header) or the data_crc check (inline bytes) and re-reads.
// Reactor thread only (one writer).

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "proto/index_format.hpp"

namespace rkv::kv::store {

struct IndexStats {
  std::uint32_t buckets = 0;          // home buckets (the region has 7 more)
  std::uint64_t used = 0;             // buckets holding a key
  std::uint64_t overflow_keys = 0;    // keys that found no bucket (served by message)
  std::uint64_t overflow_buckets = 0; // home buckets with the overflow flag
  std::uint64_t rpc_only = 0;         // indexed keys whose value is not readable now
  std::uint64_t publishes = 0;        // entry writes naming a value
  std::uint64_t inline_entries = 0;   // indexed keys whose value is in the entry (one READ)
};

class ReadableIndex {
 public:
  static constexpr std::uint32_t kNoBucket = 0xFFFFFFFFu;

  // `region`: at least proto::index_region_bytes(buckets) bytes, all zero;
  // buckets: a power of two, 1 .. proto::kMaxIndexBuckets. Throws
  // std::invalid_argument otherwise.
  ReadableIndex(std::span<std::byte> region, std::uint32_t buckets);

  // A bucket for a key not indexed before, or kNoBucket (overflow flagged).
  [[nodiscard]] std::uint32_t claim(std::string_view key) noexcept;
  // The key in `bucket` now has this value block: [value_len value bytes]
  // [key bytes] at addr/rkey, data_crc = crc32c of those bytes. `block`:
  // those bytes as the server holds them; when they fit proto::kInlineMax
  // the entry carries them (INLINE, no address). `expire_at`: the key's
  // absolute expiry (ms since the Unix epoch, 0: none), which readers apply
  // themselves. Returns the entry's version (global SET sequence number).
  std::uint64_t publish(std::uint32_t bucket, std::string_view key, std::uint64_t addr, std::uint32_t rkey,
                        std::uint32_t value_len, std::uint32_t data_crc, std::span<const std::byte> block,
                        std::uint64_t expire_at) noexcept;
  // The key in `bucket` has a new expiry (EXPIRE, PERSIST) and the same
  // value: its entry is rewritten with it (an rpc-only one names none).
  void set_expiry(std::uint32_t bucket, std::uint64_t expire_at) noexcept;
  // The key in `bucket` has no readable value (e.g. it is kept in ordinary
  // memory): readers must ask by message. The entry names no memory.
  void withdraw(std::uint32_t bucket, std::string_view key) noexcept;
  // The key in `bucket` went away (Store::erase): the bucket is empty again
  // (its overflow flag stays), so readers get NOT FOUND.
  void release(std::uint32_t bucket) noexcept;
  // The entry of `bucket` is about to be published or withdrawn (Store's
  // probes): both of its cache lines (an inline value runs into the second).
  void prefetch(std::uint32_t bucket) const noexcept {
    const std::byte* b = region_.data() + std::size_t{bucket} * proto::kBucketSize;
    __builtin_prefetch(b, 1);
    __builtin_prefetch(b + proto::kBucketSize / 2, 1);
  }
  // `key` is about to be written: its home bucket, where a key mostly lives
  // (found from the key alone, so this needs no load of the Store's node).
  void prefetch_home(std::string_view key) const noexcept {
    prefetch(static_cast<std::uint32_t>(proto::home_bucket(proto::hash64(key), buckets_)));
  }
  // A key that got kNoBucket from claim() went away (Store::erase).
  void forget_overflow_key() noexcept {
    if (stats_.overflow_keys > 0) --stats_.overflow_keys;
  }

  [[nodiscard]] std::uint32_t buckets() const noexcept { return buckets_; }
  [[nodiscard]] std::span<const std::byte> region() const noexcept { return region_; }
  [[nodiscard]] const IndexStats& stats() const noexcept { return stats_; }

 private:
  [[nodiscard]] proto::IndexEntry read(std::uint64_t bucket) const noexcept;
  // The inline bytes `bucket` holds for its entry `e` (empty unless INLINE).
  [[nodiscard]] std::span<const std::byte> inline_of(std::uint64_t bucket, const proto::IndexEntry& e) const noexcept;
  void write(std::uint64_t bucket, const proto::IndexEntry& e, std::span<const std::byte> inline_data = {}) noexcept;
  // Keeps stats_.inline_entries as an entry that `was` INLINE is rewritten as one that is `now`.
  void count_inline(bool was, bool now) noexcept;

  std::span<std::byte> region_;
  std::uint32_t buckets_;
  std::uint64_t version_ = 0;
  IndexStats stats_;
};

}  // namespace rkv::kv::store
