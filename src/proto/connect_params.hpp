#pragma once
// Connection parameters carried in rdma_cm private data (connect and accept).
//
// Wire layout (56 bytes, little-endian):
//   0 magic u16 (kMagic)          2 version u8        3 role u8
//   4 credits u16                 6 features u16 (kFeature*; other bits 0)
//   8 recv_buf_size u32          12 max_value u32
//  16 index_addr u64             24 index_rkey u32   28 index_buckets u32
//  32 index_layout u32 (bucket size | entry format << 16)  36 reserved u32 = 0
//  40 auth [16 bytes]: client: proto::auth_digest(token), all zero = none
//                      (proto/auth.hpp); server: all zero
//
// 56 bytes is all of what RDMA CM carries in a connect request. A sender of
// the first 40 bytes only (no auth) is accepted as "no token". rdma_cm may
// hand the receiver more private data than was sent (transport padding), so
// trailing bytes after the 56 are ignored.

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <variant>

#include "proto/auth.hpp"
#include "proto/wire.hpp"

namespace rkv::proto {

inline constexpr std::size_t kConnectParamsSize = 56;
// Shortest valid private data: everything up to the auth digest.
inline constexpr std::size_t kConnectParamsMinSize = 40;
// rdma_cm's limit for RC connect private data (accept allows more).
inline constexpr std::size_t kMaxConnectPrivateData = 56;
static_assert(kConnectParamsSize <= kMaxConnectPrivateData);
// Smallest receive buffer either side may announce: must hold a max-key RDV
// SET with a TTL and an epoch (a replication record).
inline constexpr std::uint32_t kMinRecvBufSize = kHeaderSize + kMaxKey + kTtlSize + kEpochSize + kRdvDescSize;

// Features a peer takes part in (ConnectParams::features). A client sets a
// bit to ask for it, the server to say it does it on this connection; an
// unknown bit is refused.
// grants: a client WRITEs a SET into landing space the server granted it
// (docs/protocol.md "SET by grant"); the server grants. Planned: no
// program sets it yet.
inline constexpr std::uint16_t kFeatureGrants = 1u << 0;
inline constexpr std::uint16_t kKnownFeatures = kFeatureGrants;

enum class Role : std::uint8_t {
  client = 1,  // rdma_connect private data
  server = 2,  // rdma_accept private data
};

struct ConnectParams {
  Role role = Role::client;
  // client: receive buffers it posted for replies = its max requests in flight;
  // server: receive buffers posted for this client = the client's initial
  //         send credits (one per SEND, however many messages it packs).
  std::uint16_t credits = 0;
  // kFeature* bits: what the client asks for / the server does.
  std::uint16_t features = 0;
  // Size of each receive buffer the sender posted: the peer must never send a
  // SEND (all packed messages together) larger than this.
  std::uint32_t recv_buf_size = 0;
  // server: largest value_len it accepts (0 = unspecified); client: 0.
  std::uint32_t max_value = 0;
  // server: remotely readable index (later feature); all zero = none.
  // client: all zero.
  std::uint64_t index_addr = 0;
  std::uint32_t index_rkey = 0;
  std::uint32_t index_buckets = 0;
  // The index's layout: bucket size in the low 16 bits, entry format in the
  // high 16 (proto::kIndexLayout; a build before entry formats sent the
  // bucket size alone, 128, so the two never mistake each other's entries).
  std::uint32_t index_layout = 0;
  // client: digest of its token (proto/auth.hpp), all zero = none; server: all zero.
  AuthDigest auth{};

  friend bool operator==(const ConnectParams&, const ConnectParams&) = default;
};

enum class ConnectError : std::uint8_t {
  too_short,           // fewer than kConnectParamsMinSize bytes
  bad_magic,           // magic != kMagic
  bad_version,         // version != kVersion
  bad_role,            // unknown role, or not the role the receiver expects
  reserved_nonzero,    // a reserved field is not zero
  zero_credits,        // credits == 0
  recv_buf_too_small,  // recv_buf_size < kMinRecvBufSize
  server_only_field,   // a client set max_value or index fields
  bad_index,           // index fields inconsistent (buckets without size or vice versa)
  client_only_field,   // a server set the auth digest
  unknown_feature,     // a features bit this version does not know
};

[[nodiscard]] std::string_view to_string(Role r) noexcept;
[[nodiscard]] std::string_view to_string(ConnectError e) noexcept;

// Semantic rules for p (role included); nullopt if valid.
[[nodiscard]] std::optional<ConnectError> check_connect_params(const ConnectParams& p) noexcept;

// Encodes p as is; run check_connect_params first if p is not trusted.
[[nodiscard]] std::array<std::byte, kConnectParamsSize> encode_connect_params(
    const ConnectParams& p) noexcept;

// Strict decode; `expected` is the role the peer must have (the server
// expects Role::client, the client expects Role::server).
using ConnectDecodeResult = std::variant<ConnectParams, ConnectError>;
[[nodiscard]] ConnectDecodeResult decode_connect_params(std::span<const std::byte> data,
                                                        Role expected) noexcept;

// The server's readable index as a client may use it for one-sided GETs.
struct IndexGeometry {
  std::uint64_t addr = 0;
  std::uint32_t rkey = 0;
  std::uint32_t buckets = 0;  // a power of two, at most kMaxIndexBuckets
  friend bool operator==(const IndexGeometry&, const IndexGeometry&) = default;
};
// From a server's decoded parameters: the index if it is announced and has a
// shape this client can probe (buckets a nonzero power of two no larger than
// kMaxIndexBuckets, layout kIndexLayout); nullopt otherwise (GETs then go
// by message). Pure: what a hostile server's accept data can make the client
// do with the index goes through here (tests/fuzz/fuzz_connect_params.cpp).
[[nodiscard]] std::optional<IndexGeometry> usable_index(const ConnectParams& server) noexcept;

}  // namespace rkv::proto
