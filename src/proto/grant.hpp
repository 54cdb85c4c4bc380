#pragma once
// A SET by grant (docs/protocol.md "SET by grant"): the client RDMA WRITEs
// WITH IMMEDIATE (immediate = the grant's id) into the landing space an ok
// SET_REPLY granted it (wire.hpp kFlagGrant, GrantDesc), in one operation:
//
//   value (value_len B) | key (key_len B) | trailer (kGrantTrailerSize B)
//
// from the start of the grant: the value where a stored block keeps it, the
// key right after it (what a one-sided GET's checks cover), and the trailer,
// which the server reads from the end of what was written (the WRITE's
// length) and which lies beyond what is stored. Trailer, little-endian:
//   req_id    u32  matches the reply to the request, as any req_id
//   key_len   u16
//   flags     u16  kFlagTtl and kFlagEpoch only: the ttl / epoch fields hold a value
//   value_crc u32  crc32c of the value bytes (published in the one-sided index)
//   reserved  u32  0
//   ttl       u64  the SET's time to live in ms with kFlagTtl (never 0), else 0
//   epoch     u64  a replication record's shard epoch with kFlagEpoch (never 0), else 0
// One spelling per SET: unused fields are 0.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <variant>

#include "proto/validate.hpp"
#include "proto/wire.hpp"

namespace rkv::proto {

inline constexpr std::size_t kGrantTrailerSize = 32;

namespace trailer_off {
inline constexpr std::size_t req_id = 0;
inline constexpr std::size_t key_len = 4;
inline constexpr std::size_t flags = 6;
inline constexpr std::size_t value_crc = 8;
inline constexpr std::size_t reserved = 12;
inline constexpr std::size_t ttl = 16;
inline constexpr std::size_t epoch = 24;
}  // namespace trailer_off
static_assert(trailer_off::epoch + kEpochSize == kGrantTrailerSize);

// One SET as written into a grant. Views borrow the written bytes.
struct GrantedSet {
  std::uint32_t req_id = 0;
  std::string_view key;
  std::span<const std::byte> value;
  std::uint32_t value_crc = 0;
  std::optional<std::uint64_t> ttl;
  std::optional<std::uint64_t> epoch;
};

// Bytes a SET of this key and value takes in a grant.
[[nodiscard]] constexpr std::uint64_t granted_set_size(std::size_t key_len, std::uint64_t value_len) noexcept {
  return value_len + key_len + kGrantTrailerSize;
}

// The trailer of `s` (its key's length, flags and fields; value and key
// themselves are the caller's to place before it).
void write_grant_trailer(std::span<std::byte, kGrantTrailerSize> out, const GrantedSet& s) noexcept;

// Why `s` could not be written into a grant of `capacity` bytes under these
// limits (the rules read_granted_set applies), nullopt if it can.
[[nodiscard]] std::optional<Reason> check_granted_set(const GrantedSet& s, std::uint64_t capacity,
                                                      const Limits& limits = {}) noexcept;

// The SET in `written` (a grant's first bytes, as long as the WRITE was), or
// why it is malformed: truncated_payload (shorter than a trailer and its
// key), bad_key_len, value_too_large, bad_grant_trailer, bad_ttl, bad_epoch.
[[nodiscard]] std::variant<GrantedSet, Reason> read_granted_set(std::span<const std::byte> written,
                                                                const Limits& limits = {}) noexcept;

}  // namespace rkv::proto
