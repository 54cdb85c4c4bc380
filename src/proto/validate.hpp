#pragma once
// The wire rules, shared by the decoder (to reject) and the encoder (to never
// produce what the decoder would reject).

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "proto/wire.hpp"

namespace rkv::proto {

// Receiver-side limits. max_key above kMaxKey is clamped to kMaxKey.
struct Limits {
  std::size_t max_key = kMaxKey;
  std::uint64_t max_value = kDefaultMaxValue;  // eager and RDV value_len alike
};

// Why a message is malformed. Each rule has its own reason.
enum class Reason : std::uint8_t {
  truncated_header,      // fewer than 24 bytes left, but more than zero
  bad_magic,             // magic != kMagic
  bad_version,           // version != kVersion
  unknown_opcode,        // opcode not in Opcode
  reserved_flags,        // flag bits other than FOUND|RDV set
  status_in_request,     // request with nonzero status
  credits_in_request,    // request with nonzero credits
  unknown_status,        // reply status not in Status
  payload_on_error,      // non-ok reply carrying flags or a value
  found_not_allowed,     // FOUND on anything but GET_REPLY and DEL_REPLY
  rdv_not_allowed,       // RDV on an opcode (or not-found GET_REPLY) that forbids it
  bad_key_len,           // SET/GET/DEL key_len 0 or above the limit
  key_not_allowed,       // nonzero key_len on STATS or a reply
  value_not_allowed,     // eager value on a message that carries none
  value_too_large,       // value_len above Limits::max_value
  eager_too_large,       // eager SET with key + value >= kEagerLimit
  truncated_payload,     // key, value or descriptor runs past the buffer
  rdv_reserved_nonzero,  // descriptor value_crc != 0 outside a SET request
  pull_not_allowed,      // PULL on anything but a GET_REPLY carrying RDV|FOUND or a CALL_REPLY carrying RDV
  bad_call_op,           // CALL key_len not kCallOpSize (the key is the user opcode)
  rdv_without_pull,      // GET_REPLY or CALL_REPLY with RDV but not PULL (a written value's reply is its WRITE's immediate)
  ttl_not_allowed,       // TTL flag where it is refused, or missing where it is required (EXPIRE, found TTL_REPLY)
  bad_ttl,               // TTL field out of range: 0 on a SET, above kMaxTtlMs (a TTL_REPLY may say kNoTtl)
  epoch_not_allowed,     // EPOCH flag on anything but a SET, DEL or EXPIRE request
  bad_epoch,             // epoch field 0
  backup_read_not_allowed,  // BACKUP_READ flag on anything but a GET request
  grant_not_allowed,     // GRANT flag on anything but an ok SET_REPLY
  bad_grant,             // grant capacity (value_len) or id 0
  bad_grant_trailer,     // a granted SET's trailer: reserved bits or fields not 0, or flags other than TTL|EPOCH
};

[[nodiscard]] std::string_view to_string(Reason r) noexcept;

// Every rule that can be judged from the 24 header bytes alone.
[[nodiscard]] std::optional<Reason> check_header(const RawHeader& h, const Limits& limits) noexcept;

// The rule for the TTL field's value, judged once the body is read.
[[nodiscard]] std::optional<Reason> check_ttl(Opcode op, std::uint64_t ttl) noexcept;
// The rule for the epoch field's value (never 0), judged once the body is read.
[[nodiscard]] constexpr std::optional<Reason> check_epoch(std::uint64_t epoch) noexcept {
  return epoch == 0 ? std::optional{Reason::bad_epoch} : std::nullopt;
}

// Precondition: check_header(h, ...) returned nullopt.
[[nodiscard]] Header to_header(const RawHeader& h) noexcept;

}  // namespace rkv::proto
