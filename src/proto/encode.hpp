#pragma once
// Encoding: describe a message with a MessageSpec (usually built by a msg::
// helper), then append it into a caller-provided buffer. No allocation, no
// exceptions; a message that would break a wire rule is refused, never sent.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "proto/validate.hpp"
#include "proto/wire.hpp"

namespace rkv::proto {

// A message to encode. key_len/value_len/flags are derived from the fields.
struct MessageSpec {
  Opcode opcode = Opcode::set;
  std::uint32_t req_id = 0;
  Status status = Status::ok;
  std::uint16_t credits = 0;
  bool found = false;                 // GET_REPLY hit; DEL_REPLY: the key was removed
  bool pull = false;                  // GET_REPLY, CALL_REPLY: rdv names server memory to READ, then RELEASE
  std::string_view key;               // SET/GET/DEL; CALL: its user opcode (call_op_key)
  std::span<const std::byte> value;   // eager value bytes (empty with rdv)
  std::optional<RdvDesc> rdv;         // set: RDV flag, payload is the descriptor
  std::optional<GrantDesc> grant;     // set: GRANT flag (ok SET_REPLY), payload is the grant
  std::uint64_t rdv_len = 0;          // value_len sent with rdv (its length) or grant (its capacity)
  std::optional<std::uint64_t> ttl;   // set: TTL flag, the 8-byte field after the key
  std::optional<std::uint64_t> epoch; // set: EPOCH flag, the 8-byte shard epoch after the TTL field
  bool backup_read = false;           // GET: BACKUP_READ flag (an in-sync backup may answer)
};

// Builders for the common messages.
namespace msg {
// Client -> server.
MessageSpec set_request(std::uint32_t req_id, std::string_view key,
                        std::span<const std::byte> value) noexcept;
// Server RDMA READs value_len bytes at desc, then replies.
MessageSpec set_request_rdv(std::uint32_t req_id, std::string_view key, RdvDesc desc,
                            std::uint64_t value_len) noexcept;
MessageSpec get_request(std::uint32_t req_id, std::string_view key) noexcept;
// Offers a client buffer of buf_len bytes the server may RDMA WRITE the value into.
MessageSpec get_request_rdv(std::uint32_t req_id, std::string_view key, RdvDesc buf,
                            std::uint64_t buf_len) noexcept;
MessageSpec stats_request(std::uint32_t req_id) noexcept;
// Removes `key` (header + key, nothing else).
MessageSpec del_request(std::uint32_t req_id, std::string_view key) noexcept;
// CALL of user opcode `op_key` (call_op_key(op); the caller keeps it alive
// until encoded) with the request bytes eagerly, or by descriptor (the server
// RDMA READs len bytes at desc, as for a large SET).
MessageSpec call_request(std::uint32_t req_id, std::string_view op_key, std::span<const std::byte> request) noexcept;
MessageSpec call_request_rdv(std::uint32_t req_id, std::string_view op_key, RdvDesc desc,
                             std::uint64_t len) noexcept;
// Sets the key's time to live to ttl_ms (0: clears it, the key persists).
MessageSpec expire_request(std::uint32_t req_id, std::string_view key, std::uint64_t ttl_ms) noexcept;
// Asks for the key's remaining time to live.
MessageSpec ttl_request(std::uint32_t req_id, std::string_view key) noexcept;
// Access hints: `keys` is the packed list (u16 LE length + bytes each).
MessageSpec touch(std::uint32_t req_id, std::span<const std::byte> keys) noexcept;
// The client finished READing the value the reply to GET (or CALL) `req_id` pinned.
MessageSpec release(std::uint32_t req_id) noexcept;

// Server -> client.
MessageSpec set_reply(std::uint32_t req_id, std::uint16_t credits,
                      Status status = Status::ok) noexcept;
// An ok SET_REPLY carrying a grant of `capacity` bytes of landing space.
MessageSpec set_reply_grant(std::uint32_t req_id, std::uint16_t credits, GrantDesc grant,
                            std::uint64_t capacity) noexcept;
MessageSpec get_reply_found(std::uint32_t req_id, std::uint16_t credits,
                            std::span<const std::byte> value) noexcept;
// (A value written into the client's offered buffer has no reply message:
// its WRITE's immediate is the reply, proto::pack_written_reply.)
// Value of value_len bytes is in server memory at desc, pinned until the
// client's RELEASE(req_id) (or its disconnect).
MessageSpec get_reply_pull(std::uint32_t req_id, std::uint16_t credits, RdvDesc desc,
                           std::uint64_t value_len) noexcept;
MessageSpec get_reply_missing(std::uint32_t req_id, std::uint16_t credits) noexcept;
MessageSpec stats_reply(std::uint32_t req_id, std::uint16_t credits,
                        std::string_view text) noexcept;
// found: the key existed and was removed (FOUND flag); false: no such key.
MessageSpec del_reply(std::uint32_t req_id, std::uint16_t credits, bool found) noexcept;
// The handler's reply bytes, eagerly.
MessageSpec call_reply(std::uint32_t req_id, std::uint16_t credits, std::span<const std::byte> reply) noexcept;
// The reply bytes are len bytes of server memory at desc, pinned until the
// client's RELEASE(req_id) (or its disconnect).
MessageSpec call_reply_pull(std::uint32_t req_id, std::uint16_t credits, RdvDesc desc, std::uint64_t len) noexcept;
// found: the key exists and its TTL was set or cleared.
MessageSpec expire_reply(std::uint32_t req_id, std::uint16_t credits, bool found) noexcept;
MessageSpec touch_reply(std::uint32_t req_id, std::uint16_t credits) noexcept;
// nullopt: no such key; kNoTtl: the key has no expiry; else its remaining ms.
MessageSpec ttl_reply(std::uint32_t req_id, std::uint16_t credits, std::optional<std::uint64_t> ttl) noexcept;
// Bare non-ok reply answering `request` (SET/GET/STATS/DEL or its reply opcode).
MessageSpec error_reply(Opcode request, std::uint32_t req_id, std::uint16_t credits,
                        Status status) noexcept;
}  // namespace msg

enum class EncodeStatus : std::uint8_t {
  ok,
  no_space,  // does not fit in the buffer after offset; nothing written
  invalid,   // breaks a wire rule (see check_message); nothing written
};

[[nodiscard]] std::string_view to_string(EncodeStatus s) noexcept;

struct EncodeResult {
  EncodeStatus status = EncodeStatus::ok;
  std::size_t offset = 0;  // new end offset when ok, the input offset otherwise
  [[nodiscard]] bool ok() const noexcept { return status == EncodeStatus::ok; }
};

// Bytes the message occupies on the wire.
[[nodiscard]] std::size_t encoded_size(const MessageSpec& m) noexcept;

// Why the decoder (with these limits) would reject m, nullopt if valid.
[[nodiscard]] std::optional<Reason> check_message(const MessageSpec& m,
                                                  const Limits& limits = {}) noexcept;

// Where a message to encode comes from. outside: a caller's request, built
// from what a user gave; encode() checks every rule of check_message and
// refuses (invalid) one that breaks any. built: made by this process from
// what it checked already (the server's replies: proto::msg's constructors
// from a request the decoder checked and from what the Store holds; the
// server sizes each against the peer's buffer first); written as it is,
// checked only where assertions are on (the test builds, -Db_ndebug off),
// where it is refused the same way. The reply's check was ~90 instructions
// of the server's ~1,250-2,700 per request (docs/performance.md).
enum class Origin : std::uint8_t { outside, built };

// Appends m at buf[offset..]. Writes nothing unless it returns ok. The bytes
// of an eager value it copies are added to *value_account (if not null).
[[nodiscard]] EncodeResult encode(std::span<std::byte> buf, std::size_t offset,
                                  const MessageSpec& m, const Limits& limits = {},
                                  std::uint64_t* value_account = nullptr, Origin origin = Origin::outside) noexcept;

// Packs messages back to back into one buffer (one SEND).
class Encoder {
 public:
  explicit Encoder(std::span<std::byte> buf, std::size_t offset = 0, Limits limits = {}) noexcept
      : buf_(buf), pos_(offset <= buf.size() ? offset : buf.size()), limits_(limits) {}

  [[nodiscard]] EncodeStatus append(const MessageSpec& m) noexcept;

  [[nodiscard]] std::size_t size() const noexcept { return pos_; }
  [[nodiscard]] std::size_t remaining() const noexcept { return buf_.size() - pos_; }
  [[nodiscard]] bool fits(const MessageSpec& m) const noexcept {
    return encoded_size(m) <= remaining();
  }
  // Everything written so far, from the start of the buffer.
  [[nodiscard]] std::span<const std::byte> bytes() const noexcept { return buf_.first(pos_); }
  void reset() noexcept { pos_ = 0; }

 private:
  std::span<std::byte> buf_;
  std::size_t pos_;
  Limits limits_;
};

}  // namespace rkv::proto
