#pragma once
// Wire constants, opcodes, flags, status codes and the 24-byte message header.
//
// Message = header (24 B) | key (key_len B) | [ttl (8 B)] | [epoch (8 B)] | payload
//   ttl     = with kFlagTtl only: u64 milliseconds (a SET's time to live, an
//             EXPIRE's new one, a TTL_REPLY's remaining time)
//   epoch   = with kFlagEpoch only: u64 shard epoch of a replication record
//             (a SET, DEL or EXPIRE a shard's primary sends its backups,
//             docs/cluster.md "Replication records")
//   payload = value bytes (value_len B, "eager")
//          or, with kFlagRdv, a 16-byte rendezvous descriptor {addr, rkey, 0}
//             naming value_len bytes in registered memory
//          or, with kFlagGrant (an ok SET_REPLY only), a 16-byte grant
//             descriptor {addr, rkey, id}: value_len bytes of landing space
//             the client may WRITE one SET into (grant.hpp).
// Several messages may be packed back to back in one SEND, no padding.
// All integers are little-endian.

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

namespace rkv::proto {

inline constexpr std::uint16_t kMagic = 0x4B56;
inline constexpr std::uint8_t kVersion = 1;
inline constexpr std::size_t kHeaderSize = 24;
inline constexpr std::size_t kMaxKey = 1024;
inline constexpr std::size_t kRdvDescSize = 16;
inline constexpr std::size_t kGrantDescSize = 16;
inline constexpr std::size_t kTtlSize = 8;
inline constexpr std::size_t kEpochSize = 8;
// How long after its time to live ran out the server withdraws an expired
// key from its index, while its reactor runs (docs/protocol.md "Time to
// live"). One-sided readers apply the expiry the entry carries themselves
// (index_format.hpp, expiry_verdict); this bounds what a reader whose clock
// is behind the server's by more than kExpiryClockMarginMs can see.
inline constexpr std::uint64_t kOneSidedExpiryLagMs = 250;
// Largest time to live a SET or EXPIRE may ask for (about 100 years, so an
// absolute expiry time in milliseconds never overflows).
inline constexpr std::uint64_t kMaxTtlMs = std::uint64_t{100} * 365 * 24 * 3600 * 1000;
// key + value of an eager SET must be strictly below this.
inline constexpr std::size_t kEagerLimit = 4096;
inline constexpr std::uint64_t kDefaultMaxValue = std::uint64_t{256} << 20;
// Largest eager SET request on the wire (a replication record's, with TTL
// and epoch): servers size receive buffers >= this.
inline constexpr std::size_t kMaxEagerSetSize = kHeaderSize + kTtlSize + kEpochSize + kEagerLimit - 1;

// Byte offsets of the header fields.
namespace hdr_off {
inline constexpr std::size_t magic = 0;
inline constexpr std::size_t version = 2;
inline constexpr std::size_t opcode = 3;
inline constexpr std::size_t flags = 4;
inline constexpr std::size_t status = 6;
inline constexpr std::size_t credits = 8;
inline constexpr std::size_t key_len = 10;
inline constexpr std::size_t req_id = 12;
inline constexpr std::size_t value_len = 16;
}  // namespace hdr_off

// Byte offsets inside the grant descriptor.
namespace grant_off {
inline constexpr std::size_t addr = 0;
inline constexpr std::size_t rkey = 8;
inline constexpr std::size_t id = 12;
}  // namespace grant_off

// Byte offsets inside the rendezvous descriptor.
namespace rdv_off {
inline constexpr std::size_t addr = 0;
inline constexpr std::size_t rkey = 8;
inline constexpr std::size_t value_crc = 12;
}  // namespace rdv_off

enum class Opcode : std::uint8_t {
  set = 0x01,
  get = 0x02,
  stats = 0x03,
  // Rendezvous: the client is done RDMA READing the value a GET_REPLY with
  // kFlagPull pinned for it; req_id names that GET. Header only, no reply.
  release = 0x04,
  // Removes the key: header + key, no value, no flags.
  del = 0x05,
  // A user-defined operation (docs/protocol.md "CALL"): the key is the 2-byte
  // user opcode (u16 LE), the payload the request bytes, eager or RDV like a
  // SET's value.
  call = 0x06,
  // Sets (TTL field > 0) or clears (0: persist) the key's time to live:
  // header + key + the TTL field, no value.
  expire = 0x07,
  // The key's remaining time to live: header + key.
  ttl = 0x08,
  // Access hints (docs/protocol.md "TOUCH"): keys the client read by
  // one-sided RDMA READ, so the server's eviction sees them used. No key;
  // the eager payload is the keys, each as u16 LE length + bytes.
  touch = 0x09,
  set_reply = 0x81,
  get_reply = 0x82,
  stats_reply = 0x83,
  // kFlagFound: the key existed and was removed; clear: there was no such key.
  del_reply = 0x85,
  // The handler's reply bytes: eager, or RDV|PULL (server memory to READ,
  // then RELEASE, as a pulled GET).
  call_reply = 0x86,
  // kFlagFound: the key exists (and its TTL was set or cleared); clear: no such key.
  expire_reply = 0x87,
  // kFlagFound|kFlagTtl: the key exists; the TTL field is its remaining time
  // in ms, or all ones (-1 as i64) for "no expiry". Clear: no such key.
  ttl_reply = 0x88,
  // Header only: the hints were taken (it carries credits back, as every reply).
  touch_reply = 0x89,
};

// GET_REPLY: the key existed (the value follows). DEL_REPLY: the key existed
// and was removed.
inline constexpr std::uint16_t kFlagFound = 1u << 0;
// Payload after the key is a rendezvous descriptor instead of value bytes.
inline constexpr std::uint16_t kFlagRdv = 1u << 1;
// GET_REPLY with RDV|FOUND, or CALL_REPLY with RDV: the descriptor names
// server memory the client must RDMA READ and then free with a RELEASE (req_id
// of this GET or CALL). Without it an RDV GET_REPLY means "already RDMA
// WRITTEN into the buffer you offered" (a CALL_REPLY's RDV always pulls).
inline constexpr std::uint16_t kFlagPull = 1u << 2;
// The 8-byte TTL field follows the key: optional on SET (it expires after
// that many ms; without it a SET clears the key's TTL), required on EXPIRE
// and on a found TTL_REPLY, refused elsewhere.
inline constexpr std::uint16_t kFlagTtl = 1u << 3;
// The 8-byte shard epoch follows the key (and the TTL field): the request
// is a replication record from the primary of the key's shard, which a
// backup applies only if its shard map gives the shard that epoch
// (docs/cluster.md "Replication records"). Optional on SET, DEL and EXPIRE
// requests, refused elsewhere; never 0.
inline constexpr std::uint16_t kFlagEpoch = 1u << 4;
// A GET a backup of the key's shard may answer if the backup is in sync in
// its shard map (a client's --read-from backups, docs/cluster.md "Reads
// from backups"); without it a backup answers `not_owner`. Optional on GET
// requests, refused elsewhere.
inline constexpr std::uint16_t kFlagBackupRead = 1u << 5;
// The payload of an ok SET_REPLY is a grant descriptor (GrantDesc): landing
// space of value_len bytes (never 0) in the server's memory, which the
// client may RDMA WRITE WITH IMMEDIATE one SET into (docs/protocol.md "SET
// by grant", grant.hpp). Refused elsewhere.
inline constexpr std::uint16_t kFlagGrant = 1u << 6;
inline constexpr std::uint16_t kKnownFlags =
    kFlagFound | kFlagRdv | kFlagPull | kFlagTtl | kFlagEpoch | kFlagBackupRead | kFlagGrant;
// A TTL_REPLY's field for "the key has no expiry".
inline constexpr std::uint64_t kNoTtl = ~std::uint64_t{0};

// A large GET's reply folded into the RDMA WRITE of its value (docs/protocol.md
// "GET large"): the WRITE's 32-bit immediate carries the low 16 bits of the
// GET's req_id and the receive credits returned; the value's length is the
// length written. A client keeps those 16 bits unique among its requests in
// flight.
struct WrittenReply {
  std::uint16_t req_low = 0;  // req_id & 0xFFFF
  std::uint16_t credits = 0;
};
[[nodiscard]] constexpr std::uint32_t pack_written_reply(std::uint32_t req_id, std::uint16_t credits) noexcept {
  return ((req_id & 0xFFFFu) << 16) | credits;
}
[[nodiscard]] constexpr WrittenReply unpack_written_reply(std::uint32_t imm) noexcept {
  return {static_cast<std::uint16_t>(imm >> 16), static_cast<std::uint16_t>(imm & 0xFFFFu)};
}
static_assert(unpack_written_reply(pack_written_reply(0x1234ABCDu, 7)).req_low == 0xABCD);
static_assert(unpack_written_reply(pack_written_reply(0x1234ABCDu, 7)).credits == 7);

// Reply status. A GET of a missing key is `ok` with kFlagFound clear.
enum class Status : std::uint16_t {
  ok = 0,
  too_large = 1,      // key or value exceeds what the server accepts
  bad_request = 2,    // well-formed on the wire but refused by the server
  no_memory = 3,      // store is full
  internal = 4,       // server-side bug or unexpected failure
  remote_access = 5,  // server's RDMA READ/WRITE on the client's descriptor failed
  io_error = 6,       // SET/DEL/CALL: the server could not make it durable (disk error); not acknowledged
  no_handler = 7,     // CALL: no handler is registered for this user opcode
  handler_failed = 8, // CALL: the handler threw; what it wrote to the store stays (and is durable)
  refused = 9,        // CALL: the handler refused the request (e.g. INCR of a value that is not an integer)
  not_owner = 10,     // cluster: the key's shard is not this server's to answer for now (docs/cluster.md "Fencing"); nothing was done
  moved = 11,         // cluster: SET/DEL/CALL applied here, but the key's shard moved to another primary before every
                      // backup had it (docs/cluster.md "Replication"); not acknowledged: it may or may not last
};

// CALL's user opcodes (docs/protocol.md "CALL"). The key of a CALL is its
// opcode, kCallOpSize bytes little-endian. 0x0000..0x00FF are reserved (the
// built-in opcodes' space: no handler may take them); 0x0100..0x0FFF are the
// operations shipped with kvd (INCR, CAS); 0x1000..0xFFFF are for programs
// that embed the server with their own handlers.
inline constexpr std::size_t kCallOpSize = 2;
inline constexpr std::uint16_t kFirstCallOp = 0x0100;
inline constexpr std::uint16_t kFirstUserOp = 0x1000;

[[nodiscard]] std::string_view to_string(Opcode op) noexcept;
[[nodiscard]] std::string_view to_string(Status s) noexcept;

// Wire value -> enum, nullopt for values this version does not know (inline:
// every message's validation asks).
[[nodiscard]] constexpr std::optional<Opcode> opcode_from_wire(std::uint8_t v) noexcept {
  const auto op = static_cast<Opcode>(v);
  switch (op) {
    case Opcode::set:
    case Opcode::get:
    case Opcode::stats:
    case Opcode::release:
    case Opcode::del:
    case Opcode::call:
    case Opcode::expire:
    case Opcode::ttl:
    case Opcode::touch:
    case Opcode::set_reply:
    case Opcode::get_reply:
    case Opcode::stats_reply:
    case Opcode::del_reply:
    case Opcode::call_reply:
    case Opcode::expire_reply:
    case Opcode::ttl_reply:
    case Opcode::touch_reply: return op;
  }
  return std::nullopt;
}
[[nodiscard]] constexpr std::optional<Status> status_from_wire(std::uint16_t v) noexcept {
  const auto s = static_cast<Status>(v);
  switch (s) {
    case Status::ok:
    case Status::too_large:
    case Status::bad_request:
    case Status::no_memory:
    case Status::internal:
    case Status::remote_access:
    case Status::io_error:
    case Status::no_handler:
    case Status::handler_failed:
    case Status::refused:
    case Status::not_owner:
    case Status::moved: return s;
  }
  return std::nullopt;
}

[[nodiscard]] constexpr bool is_request(Opcode op) noexcept {
  return (static_cast<std::uint8_t>(op) & 0x80u) == 0;
}
[[nodiscard]] constexpr bool is_reply(Opcode op) noexcept { return !is_request(op); }

// Reply opcode that answers `op` (a reply maps to itself).
[[nodiscard]] constexpr Opcode reply_opcode(Opcode op) noexcept {
  return static_cast<Opcode>(static_cast<std::uint8_t>(op) | 0x80u);
}

// Whether key + value may travel eagerly (inline in the SEND).
[[nodiscard]] constexpr bool eager_fits(std::size_t key_len, std::uint64_t value_len) noexcept {
  return key_len < kEagerLimit && value_len < kEagerLimit - key_len;
}

// Validated header, magic and version implied.
struct Header {
  Opcode opcode = Opcode::set;
  std::uint16_t flags = 0;
  Status status = Status::ok;
  std::uint16_t credits = 0;  // replies: receive buffers returned to the client
  std::uint16_t key_len = 0;
  std::uint32_t req_id = 0;
  std::uint64_t value_len = 0;  // eager bytes, or the length behind the descriptor

  [[nodiscard]] bool found() const noexcept { return (flags & kFlagFound) != 0; }
  [[nodiscard]] bool rdv() const noexcept { return (flags & kFlagRdv) != 0; }
  [[nodiscard]] bool pull() const noexcept { return (flags & kFlagPull) != 0; }
  [[nodiscard]] bool has_ttl() const noexcept { return (flags & kFlagTtl) != 0; }
  [[nodiscard]] bool has_epoch() const noexcept { return (flags & kFlagEpoch) != 0; }
  [[nodiscard]] bool backup_read() const noexcept { return (flags & kFlagBackupRead) != 0; }
  [[nodiscard]] bool grant() const noexcept { return (flags & kFlagGrant) != 0; }
  friend bool operator==(const Header&, const Header&) = default;
};

// The key bytes of a CALL of user opcode `op`.
[[nodiscard]] constexpr std::array<char, kCallOpSize> call_op_key(std::uint16_t op) noexcept {
  return {static_cast<char>(op & 0xFFu), static_cast<char>(op >> 8)};
}
// The user opcode a CALL's key names (a validated CALL's key is kCallOpSize bytes).
[[nodiscard]] constexpr std::uint16_t call_op(std::string_view key) noexcept {
  if (key.size() != kCallOpSize) return 0;
  return static_cast<std::uint16_t>(static_cast<std::uint8_t>(key[0]) |
                                    (static_cast<std::uint16_t>(static_cast<std::uint8_t>(key[1])) << 8));
}

// Registered memory the peer may RDMA READ/WRITE; its length is Header::value_len.
// value_crc: in a SET request, crc32c of the value bytes the descriptor names
// (the writer's checksum: the server publishes it in the one-sided index
// instead of reading the value through again, docs/protocol.md); 0 in every
// other message.
struct RdvDesc {
  std::uint64_t addr = 0;
  std::uint32_t rkey = 0;
  std::uint32_t value_crc = 0;
  friend bool operator==(const RdvDesc&, const RdvDesc&) = default;
};

// Landing space the server grants a connection (kFlagGrant): value_len
// bytes at addr, writable by this connection's peer under rkey (a memory
// window's key) until one WRITE WITH IMMEDIATE whose immediate is id has
// used it. id names the grant among the connection's (never 0).
struct GrantDesc {
  std::uint64_t addr = 0;
  std::uint32_t rkey = 0;
  std::uint32_t id = 0;
  friend bool operator==(const GrantDesc&, const GrantDesc&) = default;
};

// Header fields exactly as on the wire, unvalidated. Used by the codec and
// handy for tests that need to forge malformed headers.
struct RawHeader {
  std::uint16_t magic = kMagic;
  std::uint8_t version = kVersion;
  std::uint8_t opcode = 0;
  std::uint16_t flags = 0;
  std::uint16_t status = 0;
  std::uint16_t credits = 0;
  std::uint16_t key_len = 0;
  std::uint32_t req_id = 0;
  std::uint64_t value_len = 0;
  friend bool operator==(const RawHeader&, const RawHeader&) = default;
};

[[nodiscard]] RawHeader read_raw_header(std::span<const std::byte, kHeaderSize> in) noexcept;
void write_raw_header(std::span<std::byte, kHeaderSize> out, const RawHeader& h) noexcept;
[[nodiscard]] RawHeader to_raw(const Header& h) noexcept;

// Writes {addr, rkey, reserved = 0}.
void write_rdv_desc(std::span<std::byte, kRdvDescSize> out, const RdvDesc& d) noexcept;
// Writes {addr, rkey, id}.
void write_grant_desc(std::span<std::byte, kGrantDescSize> out, const GrantDesc& d) noexcept;

// Byte views of text, for STATS_REPLY blobs and keys.
[[nodiscard]] inline std::span<const std::byte> as_bytes(std::string_view s) noexcept {
  return std::as_bytes(std::span<const char>(s.data(), s.size()));
}
[[nodiscard]] inline std::string_view as_string_view(std::span<const std::byte> b) noexcept {
  return {reinterpret_cast<const char*>(b.data()), b.size()};
}

}  // namespace rkv::proto
