#pragma once
// The remotely readable index of one-sided GET (docs/protocol.md, "One-sided
// GET"): the bytes a client RDMA READs and how it checks them. Pure: shared by
// the server (kv::store::ReadableIndex writes entries) and the client (decodes them).
//
// Region: buckets + kNeighborhood - 1 buckets of kBucketSize bytes. A key's
// home bucket is hash64(key) & (buckets - 1); it lives in one of the
// kNeighborhood buckets home .. home + 7 (the extra buckets at the end mean a
// neighborhood never wraps), so one READ of kNeighborhoodBytes finds it.
//
// Entry (one bucket, little-endian):
//    0 version   u64   global SET sequence number of the value it names
//    8 key_hash  u64   hash64(key)
//   16 addr      u64   value block: [value_len value bytes][key_len key bytes]
//                      (0 when INLINE)
//   24 rkey      u32   of the block's registration (remote_read only; 0 when INLINE)
//   28 key_len   u32
//   32 value_len u32
//   36 data_crc  u32   crc32c(value bytes followed by key bytes)
//   40 flags     u32   kFlagUsed | kFlagOverflow | kFlagRpcOnly | kFlagInline
//   44 expire_at u64   the key's absolute expiry, ms since the Unix epoch by
//                      the server's wall clock (0: none); readers apply it
//                      with expiry_verdict
//   52 entry_crc u32   crc32c(bytes 0..51)
//   56 .. 127          INLINE: [value_len value bytes][key_len key bytes]
//                      (at most kInlineMax), then zero; otherwise all zero
// An all-zero bucket is empty (and has no overflow). Any other bucket whose
// entry_crc does not match, or whose bytes after the inline data are not
// zero, was read while the server rewrote it (torn). Inline bytes that do not
// match data_crc were too (check_block, as for a value block).

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

namespace rkv::proto {

inline constexpr std::size_t kBucketSize = 128;
// The entry layout below: 1 since entries carry expire_at (0: the 48-byte
// header before it). With the bucket size it makes the index layout a server
// announces (ConnectParams::index_layout); a client reads only its own.
inline constexpr std::uint32_t kEntryFormat = 1;
inline constexpr std::uint32_t kIndexLayout = kEntryFormat << 16 | static_cast<std::uint32_t>(kBucketSize);
inline constexpr std::size_t kNeighborhood = 8;
inline constexpr std::size_t kNeighborhoodBytes = kBucketSize * kNeighborhood;
inline constexpr std::size_t kEntryCrcOffset = 52;
// Values whose value and key bytes together fit here travel in the entry:
// a one-sided GET of them is ONE READ (the neighborhood), not two.
inline constexpr std::size_t kInlineOffset = 56;
inline constexpr std::size_t kInlineMax = kBucketSize - kInlineOffset;
static_assert(kInlineOffset >= kEntryCrcOffset + 4 && kInlineMax > 0);
// Most buckets an index may have (the count travels as a u32 power of two).
inline constexpr std::uint32_t kMaxIndexBuckets = 1u << 30;
// A one-sided GET re-reads at most this many times before asking by message.
inline constexpr unsigned kOneSidedAttempts = 8;

inline constexpr std::uint32_t kFlagUsed = 1u << 0;      // the bucket holds a key
inline constexpr std::uint32_t kFlagOverflow = 1u << 1;  // a key homed HERE may be missing: ask by message
inline constexpr std::uint32_t kFlagRpcOnly = 1u << 2;   // used, but the value is not readable: ask by message
inline constexpr std::uint32_t kFlagInline = 1u << 3;    // the value and key bytes are in the bucket (no block)

// MurmurHash3's 64-bit finalizer (fmix64): every output bit depends on
// every input bit. Used by hash64 and by placement (placement.hpp).
[[nodiscard]] std::uint64_t fmix64(std::uint64_t h) noexcept;

// hash64: FNV-1a 64 over the key bytes, then fmix64 (so the low bits, which
// pick the bucket, depend on every byte).
// Fixed forever: clients and servers of any build must agree.
[[nodiscard]] std::uint64_t hash64(std::string_view key) noexcept;

struct IndexEntry {
  std::uint64_t version = 0;
  std::uint64_t key_hash = 0;
  std::uint64_t addr = 0;
  std::uint32_t rkey = 0;
  std::uint32_t key_len = 0;
  std::uint32_t value_len = 0;
  std::uint32_t data_crc = 0;
  std::uint32_t flags = 0;
  std::uint64_t expire_at = 0;  // ms since the Unix epoch, server's wall clock (0: none)
  [[nodiscard]] bool used() const noexcept { return (flags & kFlagUsed) != 0; }
  [[nodiscard]] bool overflow() const noexcept { return (flags & kFlagOverflow) != 0; }
  [[nodiscard]] bool rpc_only() const noexcept { return (flags & kFlagRpcOnly) != 0; }
  [[nodiscard]] bool inlined() const noexcept { return (flags & kFlagInline) != 0; }
  // Bytes of [value][key]: the block's or the inline data's length.
  [[nodiscard]] std::size_t data_len() const noexcept { return std::size_t{value_len} + key_len; }
  friend bool operator==(const IndexEntry&, const IndexEntry&) = default;
};

// The whole bucket for `e` (entry_crc computed): `inline_data` (e.data_len()
// bytes, at most kInlineMax) at kInlineOffset if e.inlined(), else nothing;
// the rest zero. Precondition: inline_data.size() == (e.inlined() ? e.data_len() : 0).
[[nodiscard]] std::array<std::byte, kBucketSize> encode_entry(const IndexEntry& e,
                                                              std::span<const std::byte> inline_data = {}) noexcept;
// nullopt: torn (entry_crc mismatch, inline data longer than kInlineMax, or a
// non-zero byte after the inline data). An all-zero bucket decodes as an
// empty entry (flags 0). Precondition: bucket.size() >= kBucketSize.
[[nodiscard]] std::optional<IndexEntry> decode_entry(std::span<const std::byte> bucket) noexcept;
// The [value][key] bytes of a decoded INLINE entry within its bucket.
// Precondition: e came from decode_entry(bucket) and e.inlined().
[[nodiscard]] std::span<const std::byte> inline_data(std::span<const std::byte> bucket, const IndexEntry& e) noexcept;
// The fields of a bucket its one writer wrote itself (the server reading its
// own entries back): no checks, an all-zero bucket is an empty entry. Never
// for bytes that came over the network.
[[nodiscard]] IndexEntry decode_own_entry(std::span<const std::byte> bucket) noexcept;

// How far a reader's wall clock may be from the server's for a one-sided
// GET to apply a key's expiry exactly (docs/protocol.md "Time to live").
inline constexpr std::int64_t kExpiryClockMarginMs = 50;
// What a one-sided reader does with a found entry, by its own wall clock
// `now_ms` (ms since the Unix epoch): live (use it), expired (the key is
// gone: NOT FOUND, without asking the server) or ask_rpc (within
// kExpiryClockMarginMs of its expiry, where clocks that differ that much
// could disagree: the server's answer by message decides).
enum class ExpiryVerdict : std::uint8_t { live, expired, ask_rpc };
[[nodiscard]] constexpr ExpiryVerdict expiry_verdict(const IndexEntry& e, std::int64_t now_ms) noexcept {
  if (e.expire_at == 0) return ExpiryVerdict::live;
  const std::uint64_t at = e.expire_at;  // any u64 (bytes off the network): no arithmetic that overflows
  const std::uint64_t now = now_ms < 0 ? 0 : static_cast<std::uint64_t>(now_ms);
  constexpr auto margin = static_cast<std::uint64_t>(kExpiryClockMarginMs);
  if (now >= at) return now - at >= margin ? ExpiryVerdict::expired : ExpiryVerdict::ask_rpc;
  return at - now <= margin ? ExpiryVerdict::ask_rpc : ExpiryVerdict::live;
}

// Home bucket of a hash in an index of `buckets` (a power of two).
[[nodiscard]] constexpr std::uint64_t home_bucket(std::uint64_t hash, std::uint32_t buckets) noexcept {
  return hash & (std::uint64_t{buckets} - 1);
}
// Bytes of the whole region for `buckets` buckets (before page rounding).
[[nodiscard]] constexpr std::size_t index_region_bytes(std::uint32_t buckets) noexcept {
  return (std::size_t{buckets} + kNeighborhood - 1) * kBucketSize;
}

// What a client concludes from one READ of a key's neighborhood.
enum class ProbeResult : std::uint8_t {
  found,      // `entry` names the key's value block (key bytes still to be checked)
  not_found,  // definitely absent: no entry, no overflow flag on the home bucket
  torn,       // an entry was read mid-update: read again
  ask_rpc,    // the index cannot answer (overflow, or an rpc-only entry)
};
[[nodiscard]] std::string_view to_string(ProbeResult r) noexcept;

// Scans a neighborhood (kNeighborhoodBytes, home bucket first) for key_hash
// and key_len. Any torn bucket -> torn (its contents are unknown). On found,
// `entry` and `bucket` (its position in the neighborhood, 0..7) are set.
[[nodiscard]] ProbeResult probe_neighborhood(std::span<const std::byte> hood, std::uint64_t key_hash,
                                             std::uint32_t key_len, IndexEntry& entry, std::size_t& bucket) noexcept;

// Whether a client may READ the block a found entry names: its value_len is
// within the server's announced max_value (0: unknown, then kDefaultMaxValue,
// the client decoder's limit). Anything larger is an entry the server could
// not have written: the GET goes by message instead of sizing a buffer for it.
[[nodiscard]] bool block_readable(const IndexEntry& e, std::uint64_t max_value) noexcept;

// What a client concludes from the READ of a value block or from an INLINE
// entry's data (`value`: the entry's value_len bytes, `key_read`: its key_len
// bytes, as read).
enum class BlockCheck : std::uint8_t {
  ok,         // data CRC matches and the key bytes are `key`: `value` is the value
  torn,       // data CRC mismatch: the block was reused or half rewritten, read the entry again
  other_key,  // a whole, consistent block of another key with the same hash: ask by message
};
[[nodiscard]] std::string_view to_string(BlockCheck c) noexcept;
// Precondition: value.size() == e.value_len and key_read.size() == e.key_len.
[[nodiscard]] BlockCheck check_block(const IndexEntry& e, std::span<const std::byte> value,
                                     std::span<const std::byte> key_read, std::string_view key) noexcept;

}  // namespace rkv::proto
