#pragma once
// The servers a client opens, from what its user wrote: a static list
// ("h1:7471,h2,[::1]:7473", proto::parse_server_list) or a cluster in etcd
// ("etcd://HOST:PORT/NAME": its members at the time of the call,
// docs/cluster.md). kv_open, kvload, rkv stats and rkv top all take their
// --server (servername) through here.
//
// Owns: nothing. Thread: any (a cluster is read on a reactor of its own).

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cluster/membership.hpp"
#include "proto/placement.hpp"

namespace rkv::kv::client {

// How long reading a cluster's members may take (etcd's reply).
inline constexpr std::chrono::milliseconds kClusterReadTimeout{5'000};

// 0 and the servers in `out`, or an errno value and why in `error`:
// EINVAL for a malformed list or cluster address; for a cluster, etcd's
// failure (ECONNREFUSED, ETIMEDOUT, EPROTO, ...) or EHOSTDOWN when it has
// no member. For a cluster, `cluster` (if given) receives what was read, for
// a client that follows the membership (ShardSetOptions::cluster); it is
// left empty for a list.
[[nodiscard]] int resolve_servers(std::string_view text, std::uint16_t default_port,
                                  std::vector<proto::ServerAddr>& out, std::string& error,
                                  std::optional<cluster::ClusterView>* cluster = nullptr);
// A member as a server to connect.
[[nodiscard]] proto::ServerAddr server_of(const cluster::Member& m);

}  // namespace rkv::kv::client
