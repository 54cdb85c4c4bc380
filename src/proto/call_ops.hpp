#pragma once
// The request and reply bytes of the CALL operations kvd ships (INCR, CAS;
// docs/protocol.md "CALL"), shared by kvd's handlers (apps/kvd_ops.cpp) and
// the clients that call them (the C API's kv_incr/kv_cas, kvload). Pure
// byte layout, little-endian, like the rest of the wire format.
//
//   INCR  request: key_len u16 | key | delta i64        reply: the new value, i64
//   CAS   request: key_len u16 | key | expected_len u32 | expected | new value (the rest)
//                                                       reply: u8, 1 = set, 0 = the value differed
//
// INCR's value is the key's value as decimal text ("-12"); a missing key
// counts as 0. CAS sets only if the key exists and its value equals
// `expected` byte for byte.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "proto/wire.hpp"

namespace rkv::proto::ops {

inline constexpr std::uint16_t kIncr = 0x0100;
inline constexpr std::uint16_t kCas = 0x0101;

[[nodiscard]] std::string incr_request(std::string_view key, std::int64_t delta);
struct IncrRequest {
  std::string_view key;
  std::int64_t delta = 0;
};
// nullopt: not an INCR request (lengths do not add up, key empty or too long).
[[nodiscard]] std::optional<IncrRequest> parse_incr(std::span<const std::byte> in) noexcept;
inline constexpr std::size_t kIncrReplySize = 8;
[[nodiscard]] std::string incr_reply(std::int64_t value);
[[nodiscard]] std::optional<std::int64_t> parse_incr_reply(std::span<const std::byte> in) noexcept;

[[nodiscard]] std::string cas_request(std::string_view key, std::string_view expected, std::string_view value);
struct CasRequest {
  std::string_view key;
  std::string_view expected;
  std::string_view value;
};
[[nodiscard]] std::optional<CasRequest> parse_cas(std::span<const std::byte> in) noexcept;
inline constexpr std::size_t kCasReplySize = 1;
// 1 (set) or 0 (differed); nullopt for anything else.
[[nodiscard]] std::optional<bool> parse_cas_reply(std::span<const std::byte> in) noexcept;

// The integer a value's decimal text holds: an optional '-' and 1..19 digits,
// nothing else, within int64. nullopt otherwise.
[[nodiscard]] std::optional<std::int64_t> parse_decimal(std::string_view text) noexcept;
[[nodiscard]] std::string to_decimal(std::int64_t v);

}  // namespace rkv::proto::ops
