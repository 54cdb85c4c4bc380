#pragma once
// A cluster's place in etcd (docs/cluster.md "The keyspace"): the
// `etcd://HOST:PORT/NAME` address every tool takes, the keys under
// /rkv/NAME/, and the member record each kvd keeps there under its lease.
//
// Pure: no I/O (tests/unit/test_etcd_wire.cpp).
//
// Owns: nothing. Thread: any.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "proto/placement.hpp"

namespace rkv::cluster {

inline constexpr std::string_view kScheme = "etcd://";
inline constexpr std::uint16_t kDefaultEtcdPort = 2379;

// "etcd://HOST[:PORT][,HOST[:PORT]...]/NAME": where etcd's client API
// listens (one member of an etcd cluster, or several: requests go to one,
// and to the next when it cannot be reached) and the cluster's name. HOST:
// a name or address of [A-Za-z0-9.-] ("[v6]": hex, ':' and '%'); NAME: 1
// to 64 of [A-Za-z0-9_.-].
struct ClusterUrl {
  std::vector<proto::ServerAddr> etcd;  // as written ("[v6]" hosts without their brackets), at least one
  std::string name;

  [[nodiscard]] std::vector<std::string> endpoints() const;  // "http://HOST:PORT" of each, for the HTTP client
  [[nodiscard]] std::string prefix() const;          // "/rkv/NAME/"
  [[nodiscard]] std::string members_prefix() const;  // "/rkv/NAME/members/"
  [[nodiscard]] std::string map_key() const;         // "/rkv/NAME/map" (shard_map.hpp)
  [[nodiscard]] std::string text() const;            // "etcd://HOST:PORT[,HOST:PORT...]/NAME"
};

// True if `text` names a cluster (starts with etcd://), whether or not it parses.
[[nodiscard]] bool is_cluster_url(std::string_view text) noexcept;
// False (and why in `error`) for anything but the form above.
[[nodiscard]] bool parse_cluster_url(std::string_view text, ClusterUrl& out, std::string& error);

// What a kvd publishes about itself: where clients connect (`host` as they
// must write it, see proto::ServerAddr) and its memory limit. The key is
// members_prefix() + proto::server_id(host, port).
struct Member {
  std::string host;
  std::uint16_t port = 0;
  std::uint64_t capacity = 0;  // bytes: kvd's --max-memory
  // Leaving: the planner moves its primaries to other members first
  // (plan_map's `draining`); in the record only when true.
  bool draining = false;
  // The etcd lease its record is under (etcd's, not in the record's value;
  // 0 until read from etcd). A kvd that joins again, or restarts, has a new
  // one: it is another incarnation of the same id, and the shard map tells
  // them apart (shard_map.hpp, ShardMap::leases).
  std::int64_t lease = 0;

  [[nodiscard]] std::string id() const;  // proto::server_id(host, port)
  bool operator==(const Member&) const = default;
};
[[nodiscard]] std::string member_key(const ClusterUrl& url, const Member& m);
[[nodiscard]] std::string member_value(const Member& m);  // one JSON object
// A member record; nullopt (and why) if it is not one (another version's
// record, or a key someone wrote by hand).
[[nodiscard]] std::optional<Member> parse_member(std::string_view value, std::string& error);

}  // namespace rkv::cluster
