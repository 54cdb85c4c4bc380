// ReadableIndex: see readable_index.hpp.
#include "kv/store/readable_index.hpp"

#include <atomic>
#include <cassert>
#include <bit>
#include <stdexcept>
#include <string>

#include "proto/copy.hpp"

namespace rkv::kv::store {

using proto::kBucketSize;
using proto::kEntryCrcOffset;
using proto::kNeighborhood;

ReadableIndex::ReadableIndex(std::span<std::byte> region, std::uint32_t buckets)
    : region_(region), buckets_(buckets) {
  if (buckets == 0 || !std::has_single_bit(buckets) || buckets > proto::kMaxIndexBuckets) {
    throw std::invalid_argument("index buckets must be a power of two, 1.." +
                                std::to_string(proto::kMaxIndexBuckets));
  }
  if (region.size() < proto::index_region_bytes(buckets)) {
    throw std::invalid_argument("index region smaller than its buckets");
  }
  stats_.buckets = buckets;
}

std::span<const std::byte> ReadableIndex::inline_of(std::uint64_t bucket, const proto::IndexEntry& e) const noexcept {
  if (!e.inlined()) return {};
  return proto::inline_data(region_.subspan(bucket * kBucketSize, kBucketSize), e);
}

proto::IndexEntry ReadableIndex::read(std::uint64_t bucket) const noexcept {
  // Only this (the one writer) reads its own entries here: never torn, no
  // check needed (an all-zero bucket reads as an empty entry).
  return proto::decode_own_entry(region_.subspan(bucket * kBucketSize, kBucketSize));
}

void ReadableIndex::write(std::uint64_t bucket, const proto::IndexEntry& e,
                          std::span<const std::byte> inline_data) noexcept {
  const auto bytes = proto::encode_entry(e, inline_data);
  std::byte* dst = region_.data() + bucket * kBucketSize;
  // Fields and inline bytes first, entry_crc last: a reader sees old bytes,
  // new bytes or a mix; a mix fails the entry_crc check (fields) or, for
  // inline bytes, the data_crc check or the zero-tail check. The fences keep
  // the compiler (and, on weakly ordered CPUs, the hardware) from moving the
  // crc store up.
  constexpr std::size_t kCrcEnd = kEntryCrcOffset + 4;
  proto::copy_bytes(dst, bytes.data(), kEntryCrcOffset);
  proto::copy_bytes(dst + kCrcEnd, bytes.data() + kCrcEnd, kBucketSize - kCrcEnd);
  std::atomic_thread_fence(std::memory_order_release);
  proto::copy_bytes(dst + kEntryCrcOffset, bytes.data() + kEntryCrcOffset, 4);
  std::atomic_thread_fence(std::memory_order_release);
}

void ReadableIndex::count_inline(bool was, bool now) noexcept {
  if (was && stats_.inline_entries > 0) --stats_.inline_entries;
  if (now) ++stats_.inline_entries;
}

std::uint32_t ReadableIndex::claim(std::string_view key) noexcept {
  const std::uint64_t hash = proto::hash64(key);
  const std::uint64_t home = proto::home_bucket(hash, buckets_);
  std::uint64_t free_bucket = kNoBucket;
  for (std::uint64_t b = home; b < home + kNeighborhood; ++b) {
    const proto::IndexEntry e = read(b);
    if (!e.used()) {
      if (free_bucket == kNoBucket) free_bucket = b;
      continue;
    }
    if (e.key_hash == hash && e.key_len == key.size()) {
      free_bucket = kNoBucket;  // a reader could not tell the two keys apart by their entries
      break;
    }
  }
  if (free_bucket != kNoBucket) {
    proto::IndexEntry e = read(free_bucket);  // keeps an overflow flag the bucket may carry
    e.flags = (e.flags & proto::kFlagOverflow) | proto::kFlagUsed | proto::kFlagRpcOnly;
    e.key_hash = hash;
    e.key_len = static_cast<std::uint32_t>(key.size());
    write(free_bucket, e);  // rpc-only until the Store publishes the value
    ++stats_.used;
    ++stats_.rpc_only;
    return static_cast<std::uint32_t>(free_bucket);
  }
  proto::IndexEntry h = read(home);
  if (!h.overflow()) {
    h.flags |= proto::kFlagOverflow;
    write(home, h, inline_of(home, h));  // a key there keeps its value
    ++stats_.overflow_buckets;
  }
  ++stats_.overflow_keys;
  return kNoBucket;
}

std::uint64_t ReadableIndex::publish(std::uint32_t bucket, std::string_view key, std::uint64_t addr,
                                     std::uint32_t rkey, std::uint32_t value_len, std::uint32_t data_crc,
                                     std::span<const std::byte> block, std::uint64_t expire_at) noexcept {
  proto::IndexEntry e = read(bucket);
  if (e.rpc_only() && stats_.rpc_only > 0) --stats_.rpc_only;
  const bool was_inline = e.inlined();
  e.version = ++version_;
  // claim() wrote this key's hash and length into the bucket, and only
  // release() clears them (and the Store then forgets the bucket).
  assert(e.used() && e.key_hash == proto::hash64(key) && e.key_len == key.size());
  e.key_len = static_cast<std::uint32_t>(key.size());
  e.value_len = value_len;
  e.data_crc = data_crc;
  e.expire_at = expire_at;
  e.flags = (e.flags & proto::kFlagOverflow) | proto::kFlagUsed;
  const bool inlined = block.size() == e.data_len() && block.size() <= proto::kInlineMax;
  e.addr = inlined ? 0 : addr;
  e.rkey = inlined ? 0 : rkey;
  if (inlined) e.flags |= proto::kFlagInline;
  write(bucket, e, inlined ? block : std::span<const std::byte>{});
  count_inline(was_inline, inlined);
  ++stats_.publishes;
  return e.version;
}

void ReadableIndex::set_expiry(std::uint32_t bucket, std::uint64_t expire_at) noexcept {
  proto::IndexEntry e = read(bucket);
  if (!e.used() || e.rpc_only() || e.expire_at == expire_at) return;
  e.expire_at = expire_at;
  write(bucket, e, inline_of(bucket, e));
}

void ReadableIndex::withdraw(std::uint32_t bucket, [[maybe_unused]] std::string_view key) noexcept {
  proto::IndexEntry e = read(bucket);
  if (!e.rpc_only()) ++stats_.rpc_only;
  count_inline(e.inlined(), false);
  e.version = ++version_;
  assert(e.used() && e.key_hash == proto::hash64(key) && e.key_len == key.size());  // as publish()
  e.addr = 0;
  e.rkey = 0;
  e.value_len = 0;
  e.data_crc = 0;
  e.expire_at = 0;
  e.flags = (e.flags & proto::kFlagOverflow) | proto::kFlagUsed | proto::kFlagRpcOnly;
  write(bucket, e);
}

void ReadableIndex::release(std::uint32_t bucket) noexcept {
  proto::IndexEntry e = read(bucket);
  if (!e.used()) return;
  if (e.rpc_only() && stats_.rpc_only > 0) --stats_.rpc_only;
  count_inline(e.inlined(), false);
  proto::IndexEntry empty;
  empty.version = ++version_;
  empty.flags = e.flags & proto::kFlagOverflow;
  write(bucket, empty);
  --stats_.used;
}

}  // namespace rkv::kv::store
