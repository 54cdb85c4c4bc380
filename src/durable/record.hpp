#pragma once
// The durability log's record format (docs/durability.md). Pure encode/decode.
//
// A record is a 32-byte header, then key_len key bytes, then value_len value
// bytes; all integers little endian:
//   0  u32 magic        0x314C4B52 ("RKL1")
//   4  u8  type         1 = SET, 2 = SNAPSHOT_END (last record of a snapshot),
//                       3 = DEL (a tombstone: the key was deleted; logs only),
//                       4 = SET_TTL (a SET whose key expires: the body is key,
//                           u64 expire_at, value),
//                       5 = EXPIRE (the key's expiry changed; logs only: the
//                           value is the u64 expire_at, 0 = it persists)
//                       expire_at: ms since the Unix epoch (absolute, so it
//                       means the same after a restart)
//   5  u8  reserved     0
//   6  u16 key_len      SET, SET_TTL, DEL, EXPIRE: 1..1024; SNAPSHOT_END: 0
//   8  u64 seq          SET/DEL in a log: strictly increasing; SET in a snapshot: 0;
//                       SNAPSHOT_END: the last sequence number the snapshot covers
//  16  u64 value_len    DEL: 0; EXPIRE: 8; SNAPSHOT_END: 8 (the value is the u64 count of
//                       SET and SET_TTL records); SET_TTL: the value's bytes (the 8 of
//                       expire_at come on top)
//  24  u32 body_crc     CRC32C of the body (key, [expire_at], value)
//  28  u32 header_crc   CRC32C of bytes 0..27
// The separate header CRC lets recovery tell a damaged length field (corruption)
// from a record cut short by a crash (a torn tail).

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <variant>

namespace rkv::durable {

inline constexpr std::uint32_t kRecordMagic = 0x314C4B52;
inline constexpr std::size_t kHeaderSize = 32;
inline constexpr std::size_t kMaxKeyLen = 1024;

// Type 3 came with DEL, 4 and 5 with TTLs; logs written before hold only the
// older types and read as ever.
enum class RecordType : std::uint8_t { set = 1, snapshot_end = 2, del = 3, set_ttl = 4, expire = 5 };
// SET_TTL's expire_at, between its key and its value.
inline constexpr std::size_t kExpireAtSize = 8;

[[nodiscard]] constexpr std::string_view to_string(RecordType t) noexcept {
  switch (t) {
    case RecordType::set: return "set";
    case RecordType::snapshot_end: return "snapshot_end";
    case RecordType::del: return "del";
    case RecordType::set_ttl: return "set_ttl";
    case RecordType::expire: return "expire";
  }
  return "invalid";
}

struct RecordHeader {
  RecordType type = RecordType::set;
  std::uint16_t key_len = 0;
  std::uint64_t seq = 0;
  std::uint64_t value_len = 0;
  std::uint32_t body_crc = 0;
  [[nodiscard]] std::uint64_t record_size() const noexcept {
    return kHeaderSize + key_len + (type == RecordType::set_ttl ? kExpireAtSize : 0) + value_len;
  }
};

enum class HeaderError : std::uint8_t { short_header, bad_magic, bad_header_crc, bad_field };

[[nodiscard]] constexpr std::string_view to_string(HeaderError e) noexcept {
  switch (e) {
    case HeaderError::short_header: return "short header";
    case HeaderError::bad_magic: return "bad magic";
    case HeaderError::bad_header_crc: return "header CRC mismatch";
    case HeaderError::bad_field: return "invalid header field";
  }
  return "invalid";
}

// CRC32C of key then value (the body_crc field).
[[nodiscard]] std::uint32_t body_crc(std::span<const std::byte> key, std::span<const std::byte> value) noexcept;
// Writes the header (computing header_crc). out.size() >= kHeaderSize.
void encode_header(std::span<std::byte> out, const RecordHeader& h) noexcept;
// Header of a SET record for key/value (computes body_crc); with expire_at
// != 0 a SET_TTL record, whose body carries `expire_at` (the 8 bytes
// expire_bytes() gives) between key and value.
[[nodiscard]] RecordHeader set_header(std::span<const std::byte> key, std::span<const std::byte> value,
                                      std::uint64_t seq, std::int64_t expire_at = 0) noexcept;
[[nodiscard]] std::array<std::byte, kExpireAtSize> expire_bytes(std::int64_t expire_at) noexcept;
[[nodiscard]] std::int64_t load_expire_at(std::span<const std::byte> in) noexcept;
// Header of an EXPIRE record: its value is expire_bytes(expire_at).
[[nodiscard]] RecordHeader expire_header(std::span<const std::byte> key, std::int64_t expire_at,
                                         std::uint64_t seq) noexcept;
// Header of a DEL record (tombstone) for key: no value, body_crc = CRC32C of the key.
[[nodiscard]] RecordHeader del_header(std::span<const std::byte> key, std::uint64_t seq) noexcept;
// A whole SNAPSHOT_END record (header + the u64 count) ending a snapshot of
// `count` SET records that covers sequence numbers up to `seq`.
inline constexpr std::size_t kSnapshotEndSize = kHeaderSize + 8;
[[nodiscard]] std::array<std::byte, kSnapshotEndSize> snapshot_end_record(std::uint64_t count,
                                                                          std::uint64_t seq) noexcept;
// Parses and checks a header (magic, header CRC, type, key_len range,
// value_len <= max_value). Does not look at the body.
[[nodiscard]] std::variant<RecordHeader, HeaderError> decode_header(std::span<const std::byte> in,
                                                                    std::uint64_t max_value) noexcept;

}  // namespace rkv::durable
