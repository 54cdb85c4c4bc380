#include "proto/connect_params.hpp"

#include <bit>

#include "proto/endian.hpp"
#include "proto/index_format.hpp"

namespace rkv::proto {

namespace {

namespace params_off {
constexpr std::size_t magic = 0;
constexpr std::size_t version = 2;
constexpr std::size_t role = 3;
constexpr std::size_t credits = 4;
constexpr std::size_t features = 6;
constexpr std::size_t recv_buf_size = 8;
constexpr std::size_t max_value = 12;
constexpr std::size_t index_addr = 16;
constexpr std::size_t index_rkey = 24;
constexpr std::size_t index_buckets = 28;
constexpr std::size_t index_layout = 32;
constexpr std::size_t reserved1 = 36;
constexpr std::size_t auth = 40;
}  // namespace params_off

std::optional<Role> role_from_wire(std::uint8_t v) noexcept {
  const auto r = static_cast<Role>(v);
  switch (r) {
    case Role::client:
    case Role::server: return r;
  }
  return std::nullopt;
}

bool has_index(const ConnectParams& p) noexcept {
  return p.index_addr != 0 || p.index_rkey != 0 || p.index_buckets != 0 ||
         p.index_layout != 0;
}

// Either no index at all, or buckets and bucket size both set.
bool index_consistent(const ConnectParams& p) noexcept {
  if (!has_index(p)) return true;
  return p.index_buckets != 0 && p.index_layout != 0;
}

// Framing checks that the ConnectParams struct cannot express.
std::optional<ConnectError> check_framing(std::span<const std::byte> d, Role expected) noexcept {
  if (d.size() < kConnectParamsMinSize) return ConnectError::too_short;
  if (load_le<std::uint16_t>(d, params_off::magic) != kMagic) return ConnectError::bad_magic;
  if (load_le<std::uint8_t>(d, params_off::version) != kVersion) return ConnectError::bad_version;
  const auto role = role_from_wire(load_le<std::uint8_t>(d, params_off::role));
  if (!role || *role != expected) return ConnectError::bad_role;
  if (load_le<std::uint32_t>(d, params_off::reserved1) != 0) return ConnectError::reserved_nonzero;
  return std::nullopt;
}

}  // namespace

std::string_view to_string(Role r) noexcept {
  switch (r) {
    case Role::client: return "client";
    case Role::server: return "server";
  }
  return "unknown role";
}

std::string_view to_string(ConnectError e) noexcept {
  switch (e) {
    case ConnectError::too_short: return "connect parameters too short";
    case ConnectError::bad_magic: return "bad connect parameters magic";
    case ConnectError::bad_version: return "unsupported protocol version";
    case ConnectError::bad_role: return "unknown or unexpected role";
    case ConnectError::reserved_nonzero: return "reserved field not zero";
    case ConnectError::zero_credits: return "zero credits";
    case ConnectError::recv_buf_too_small: return "receive buffer size below minimum";
    case ConnectError::server_only_field: return "client set a server-only field";
    case ConnectError::bad_index: return "inconsistent index fields";
    case ConnectError::client_only_field: return "server set a client-only field (auth)";
    case ConnectError::unknown_feature: return "unknown feature bit";
  }
  return "unknown connect error";
}

std::optional<ConnectError> check_connect_params(const ConnectParams& p) noexcept {
  if (!role_from_wire(static_cast<std::uint8_t>(p.role))) return ConnectError::bad_role;
  if ((p.features & ~kKnownFeatures) != 0) return ConnectError::unknown_feature;
  if (p.credits == 0) return ConnectError::zero_credits;
  if (p.recv_buf_size < kMinRecvBufSize) return ConnectError::recv_buf_too_small;
  if (p.role == Role::client && (p.max_value != 0 || has_index(p)))
    return ConnectError::server_only_field;
  if (!index_consistent(p)) return ConnectError::bad_index;
  if (p.role == Role::server && auth_present(p.auth)) return ConnectError::client_only_field;
  return std::nullopt;
}

std::array<std::byte, kConnectParamsSize> encode_connect_params(const ConnectParams& p) noexcept {
  std::array<std::byte, kConnectParamsSize> out{};  // reserved fields stay zero
  const std::span<std::byte> o{out};
  store_le(o, params_off::magic, kMagic);
  store_le(o, params_off::version, kVersion);
  store_le(o, params_off::role, static_cast<std::uint8_t>(p.role));
  store_le(o, params_off::credits, p.credits);
  store_le(o, params_off::features, p.features);
  store_le(o, params_off::recv_buf_size, p.recv_buf_size);
  store_le(o, params_off::max_value, p.max_value);
  store_le(o, params_off::index_addr, p.index_addr);
  store_le(o, params_off::index_rkey, p.index_rkey);
  store_le(o, params_off::index_buckets, p.index_buckets);
  store_le(o, params_off::index_layout, p.index_layout);
  for (std::size_t i = 0; i < p.auth.size(); ++i) out[params_off::auth + i] = p.auth[i];
  return out;
}

ConnectDecodeResult decode_connect_params(std::span<const std::byte> data, Role expected) noexcept {
  if (auto e = check_framing(data, expected)) return *e;
  ConnectParams p;
  p.role = expected;
  p.credits = load_le<std::uint16_t>(data, params_off::credits);
  p.features = load_le<std::uint16_t>(data, params_off::features);
  p.recv_buf_size = load_le<std::uint32_t>(data, params_off::recv_buf_size);
  p.max_value = load_le<std::uint32_t>(data, params_off::max_value);
  p.index_addr = load_le<std::uint64_t>(data, params_off::index_addr);
  p.index_rkey = load_le<std::uint32_t>(data, params_off::index_rkey);
  p.index_buckets = load_le<std::uint32_t>(data, params_off::index_buckets);
  p.index_layout = load_le<std::uint32_t>(data, params_off::index_layout);
  if (data.size() >= params_off::auth + p.auth.size()) {  // else: an older 40-byte sender, no token
    for (std::size_t i = 0; i < p.auth.size(); ++i) p.auth[i] = data[params_off::auth + i];
  }
  if (auto e = check_connect_params(p)) return *e;
  return p;
}

std::optional<IndexGeometry> usable_index(const ConnectParams& server) noexcept {
  if (server.role != Role::server || server.index_buckets == 0 || server.index_layout != kIndexLayout ||
      !std::has_single_bit(server.index_buckets) || server.index_buckets > kMaxIndexBuckets) {
    return std::nullopt;
  }
  return IndexGeometry{server.index_addr, server.index_rkey, server.index_buckets};
}

}  // namespace rkv::proto
