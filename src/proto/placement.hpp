#pragma once
// Placement: which kvd of a server list holds a key (docs/protocol.md,
// "Several servers: placement"). Rendezvous (highest random weight) hashing
// over the key bytes and each server's identity string; plus the parser of
// the server lists every client takes ("h1:7471,h2:7472,[::1]:7473").
//
// Pure, fixed forever: every client of any build, in any language, must pick
// the same server for a key from the same list. The unit suite pins outputs.
//
// Owns: nothing. Thread: any.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace rkv::proto {

// One server of a list. `id` is its identity for placement: the host exactly
// as written (no name resolution, no case folding; an IPv6 address without
// its brackets) then ':' and the port in decimal, no leading zeros; an IPv6
// host is written "[addr]:port". So "h1" and "h1:7471" (default port 7471)
// are the same server, and "h1" and "10.0.0.1" are not, even if the name
// resolves to that address: write the list the same way on every client.
struct ServerAddr {
  std::string host;  // as written, for connecting
  std::uint16_t port = 0;
  std::string id;    // placement identity (above)
};

// The identity of host:port (see ServerAddr::id).
[[nodiscard]] std::string server_id(std::string_view host, std::uint16_t port);

// Parses one entry: "host", "host:port", "[v6]:port", "[v6]" or a bare IPv6
// address; `default_port` when none is written. False (and why in `error`)
// for an empty host, an empty or non-numeric port, port 0 or over 65535.
[[nodiscard]] bool parse_server(std::string_view text, std::uint16_t default_port, ServerAddr& out,
                                std::string& error);

// Parses a comma-separated list of entries (at most kMaxServers). False (and
// why in `error`) for an empty list, an empty entry ("a,,b", a trailing
// comma), a bad entry, or two entries with the same identity.
inline constexpr std::size_t kMaxServers = 64;
[[nodiscard]] bool parse_server_list(std::string_view text, std::uint16_t default_port,
                                     std::vector<ServerAddr>& out, std::string& error);

// The rendezvous weight of `key` on the server of identity `id`:
// fmix64(hash64(key) ^ hash64(id)), with hash64 of index_format.hpp (FNV-1a
// 64, then MurmurHash3's fmix64) and fmix64 that same finalizer.
[[nodiscard]] std::uint64_t placement_weight(std::string_view key, std::string_view id) noexcept;

// The index in `ids` of the server that holds `key`: the highest weight;
// equal weights go to the identity that compares smaller bytewise (so the
// order of the list does not matter). `ids` must not be empty.
[[nodiscard]] std::size_t place(std::string_view key, std::span<const std::string> ids) noexcept;

// The shard of `key` in a cluster's shard map of `shards` shards
// (docs/cluster.md "The shard map"): fmix64(hash64(key) ^ kShardSalt) modulo
// `shards`. Salted so that a server's keys, a few shards' worth, still fill
// every home bucket of its index (which takes hash64's low bits). `shards`
// must not be 0.
inline constexpr std::uint64_t kShardSalt = 0x7368617264736c74ull;  // "shardslt"
[[nodiscard]] std::uint32_t shard_of(std::string_view key, std::uint32_t shards) noexcept;

// A server's part in one shard of a cluster's map (docs/cluster.md): its
// primary answers the shard's requests; a backup applies the replication
// records the primary of the shard's epoch sends (wire.hpp kFlagEpoch).
enum class ShardRole : std::uint8_t { none, primary, backup };
struct ShardPart {
  ShardRole role = ShardRole::none;
  std::uint64_t epoch = 0;  // the shard's epoch in the map: when its primary last changed
  bool in_sync = false;     // a backup the map lists in the shard's in_sync (a primary always is)
  friend bool operator==(const ShardPart&, const ShardPart&) = default;
};

}  // namespace rkv::proto
