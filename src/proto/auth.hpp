#pragma once
// Access control on the wire (kvd --auth-token-file; docs/protocol.md,
// "Authentication"). A client that has the server's token sends a 16-byte
// digest of it in its connect request (ConnectParams::auth): the first 16
// bytes of SHA-256("rkv-auth-v1" NUL token). RDMA CM gives a connect request
// only 56 bytes of private data and ConnectParams take 40 of them, so the
// token itself (any length up to kMaxAuthToken) never travels, only this
// fixed-size digest. It is a password-equivalent: it stops clients that do
// not have the token, not an on-path attacker who can read or replay it (RoCE
// is not encrypted).
//
// A refused connect request carries a RejectReason in the reject's private
// data (4 bytes, nothing else), so the client can say why.
// Pure: no I/O.

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

namespace rkv::proto {

inline constexpr std::size_t kAuthDigestSize = 16;
inline constexpr std::size_t kMaxAuthToken = 4096;  // bytes of a token file (after the trailing newline)
using AuthDigest = std::array<std::byte, kAuthDigestSize>;

// SHA-256 of data (FIPS 180-4).
[[nodiscard]] std::array<std::byte, 32> sha256(std::span<const std::byte> data) noexcept;

// The digest a client sends for `token` (never all zero in practice: all
// zero means "no token").
[[nodiscard]] AuthDigest auth_digest(std::string_view token) noexcept;
// Whether d carries a token at all (not all zero).
[[nodiscard]] bool auth_present(const AuthDigest& d) noexcept;
// Constant time: the time does not depend on where a and b differ.
[[nodiscard]] bool auth_equal(const AuthDigest& a, const AuthDigest& b) noexcept;

enum class RejectReason : std::uint8_t {
  auth_required = 1,  // the server has a token; the request carried none
  auth_failed = 2,    // the request carried a wrong token
};
inline constexpr std::size_t kRejectSize = 4;  // magic u16, version u8, reason u8

[[nodiscard]] std::string_view to_string(RejectReason r) noexcept;
[[nodiscard]] std::array<std::byte, kRejectSize> encode_reject(RejectReason r) noexcept;
// nullopt: not a reject of this protocol (trailing transport padding ignored).
[[nodiscard]] std::optional<RejectReason> decode_reject(std::span<const std::byte> data) noexcept;

}  // namespace rkv::proto
