// The one-sided GET index format: see index_format.hpp.
#include "proto/index_format.hpp"

#include <algorithm>
#include <cstring>

#include "proto/crc32c.hpp"
#include "proto/endian.hpp"
#include "proto/wire.hpp"

namespace rkv::proto {

namespace entry_off {
constexpr std::size_t version = 0;
constexpr std::size_t key_hash = 8;
constexpr std::size_t addr = 16;
constexpr std::size_t rkey = 24;
constexpr std::size_t key_len = 28;
constexpr std::size_t value_len = 32;
constexpr std::size_t data_crc = 36;
constexpr std::size_t flags = 40;
constexpr std::size_t expire_at = 44;
static_assert(expire_at + 8 == kEntryCrcOffset);
}  // namespace entry_off

std::uint64_t fmix64(std::uint64_t h) noexcept {
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ull;
  h ^= h >> 33;
  return h;
}

std::uint64_t hash64(std::string_view key) noexcept {
  std::uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a 64 offset basis
  for (const char c : key) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001b3ull;  // FNV-1a 64 prime
  }
  return fmix64(h);
}

std::array<std::byte, kBucketSize> encode_entry(const IndexEntry& e, std::span<const std::byte> inline_data) noexcept {
  std::array<std::byte, kBucketSize> out{};
  const std::span<std::byte> o{out};
  if (e.inlined() && inline_data.size() == e.data_len() && inline_data.size() <= kInlineMax) {
    std::copy(inline_data.begin(), inline_data.end(), out.begin() + kInlineOffset);
  }
  store_le(o, entry_off::version, e.version);
  store_le(o, entry_off::key_hash, e.key_hash);
  store_le(o, entry_off::addr, e.addr);
  store_le(o, entry_off::rkey, e.rkey);
  store_le(o, entry_off::key_len, e.key_len);
  store_le(o, entry_off::value_len, e.value_len);
  store_le(o, entry_off::data_crc, e.data_crc);
  store_le(o, entry_off::flags, e.flags);
  store_le(o, entry_off::expire_at, e.expire_at);
  store_le(o, kEntryCrcOffset, crc32c(out.data(), kEntryCrcOffset));
  return out;
}

IndexEntry decode_own_entry(std::span<const std::byte> b) noexcept {
  IndexEntry e;
  e.version = load_le<std::uint64_t>(b, entry_off::version);
  e.key_hash = load_le<std::uint64_t>(b, entry_off::key_hash);
  e.addr = load_le<std::uint64_t>(b, entry_off::addr);
  e.rkey = load_le<std::uint32_t>(b, entry_off::rkey);
  e.key_len = load_le<std::uint32_t>(b, entry_off::key_len);
  e.value_len = load_le<std::uint32_t>(b, entry_off::value_len);
  e.data_crc = load_le<std::uint32_t>(b, entry_off::data_crc);
  e.flags = load_le<std::uint32_t>(b, entry_off::flags);
  e.expire_at = load_le<std::uint64_t>(b, entry_off::expire_at);
  return e;
}

std::optional<IndexEntry> decode_entry(std::span<const std::byte> b) noexcept {
  b = b.first(kBucketSize);
  if (std::all_of(b.begin(), b.end(), [](std::byte x) { return x == std::byte{0}; })) return IndexEntry{};
  if (load_le<std::uint32_t>(b, kEntryCrcOffset) != crc32c(b.data(), kEntryCrcOffset)) return std::nullopt;
  const IndexEntry e = decode_own_entry(b);
  const std::size_t data = e.inlined() ? e.data_len() : 0;  // u32 + u32: no overflow in size_t
  if (data > kInlineMax) return std::nullopt;
  for (std::size_t i = kEntryCrcOffset + 4; i < kInlineOffset; ++i) {
    if (b[i] != std::byte{0}) return std::nullopt;
  }
  for (std::size_t i = kInlineOffset + data; i < kBucketSize; ++i) {
    if (b[i] != std::byte{0}) return std::nullopt;
  }
  return e;
}

std::span<const std::byte> inline_data(std::span<const std::byte> bucket, const IndexEntry& e) noexcept {
  return bucket.subspan(kInlineOffset, e.data_len());
}

std::string_view to_string(ProbeResult r) noexcept {
  switch (r) {
    case ProbeResult::found: return "found";
    case ProbeResult::not_found: return "not_found";
    case ProbeResult::torn: return "torn";
    case ProbeResult::ask_rpc: return "ask_rpc";
  }
  return "invalid";
}

ProbeResult probe_neighborhood(std::span<const std::byte> hood, std::uint64_t key_hash, std::uint32_t key_len,
                               IndexEntry& entry, std::size_t& bucket) noexcept {
  if (hood.size() < kNeighborhoodBytes) return ProbeResult::torn;
  bool torn = false;
  bool overflow = false;
  for (std::size_t i = 0; i < kNeighborhood; ++i) {
    const auto e = decode_entry(hood.subspan(i * kBucketSize, kBucketSize));
    if (!e) {
      torn = true;  // unknown contents: could be the key, or (home) the overflow flag
      continue;
    }
    if (i == 0) overflow = e->overflow();
    // A key occupies one bucket: a consistent match is authoritative even if
    // another bucket was torn.
    if (e->used() && e->key_hash == key_hash && e->key_len == key_len) {
      if (e->rpc_only()) return ProbeResult::ask_rpc;
      entry = *e;
      bucket = i;
      return ProbeResult::found;
    }
  }
  if (torn) return ProbeResult::torn;
  return overflow ? ProbeResult::ask_rpc : ProbeResult::not_found;
}

bool block_readable(const IndexEntry& e, std::uint64_t max_value) noexcept {
  const std::uint64_t limit = max_value != 0 ? max_value : kDefaultMaxValue;
  return e.value_len <= limit;
}

std::string_view to_string(BlockCheck c) noexcept {
  switch (c) {
    case BlockCheck::ok: return "ok";
    case BlockCheck::torn: return "torn";
    case BlockCheck::other_key: return "other_key";
  }
  return "invalid";
}

BlockCheck check_block(const IndexEntry& e, std::span<const std::byte> value, std::span<const std::byte> key_read,
                       std::string_view key) noexcept {
  const std::uint32_t crc = crc32c_extend(crc32c(value), key_read.data(), key_read.size());
  if (crc != e.data_crc) return BlockCheck::torn;
  if (key_read.size() != key.size() || (!key.empty() && std::memcmp(key_read.data(), key.data(), key.size()) != 0))
    return BlockCheck::other_key;
  return BlockCheck::ok;
}

}  // namespace rkv::proto
