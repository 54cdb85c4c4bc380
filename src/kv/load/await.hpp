#pragma once
// Awaiting kv::client::ShardSet operations from a fiber: submit with a callback that
// records the outcome and wakes the fiber, then suspend until it ran. Many
// fibers awaiting at once = many requests in flight on one connection.
//
// Lifetime: the Scheduler must outlive every callback of an op it awaits, i.e.
// close (or destroy) the ShardSet before the Scheduler. A fiber cancelled while
// it waits (~Scheduler) detaches from its op, whose callback then only
// records; but a SET's value bytes are the fiber's, so close the ShardSet
// (completing its ops) before cancelling fibers with SETs in flight.
// Large SET values are registered through the Client's pin-down cache: reuse
// the buffer, and ShardSet::forget() it before freeing it.
//
// Thread: the reactor's (= the scheduler's) thread.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "kv/client/client.hpp"
#include "kv/client/shard_set.hpp"
#include "kv/load/fiber.hpp"

namespace rkv::kv::load {

using client::ShardSet;
using client::Status;

struct OpResult {
  Status status = Status::ok;    // no_memory also if a GET's bytes could not be copied here
  bool found = false;            // GET: a value came back; DEL, EXPIRE, TTL: the key existed
  std::uint64_t size = 0;        // GET: value bytes received
  std::vector<std::byte> value;  // GET with keep_value, CALL: the bytes
};

// Fiber only. A refused submit returns at once with its status.
// `value` must stay alive and unchanged until this returns.
// Each goes to server `shard`: the key's (ShardSet::shard_of, computed once
// by the caller; one server: its one Client). A keyed op a cluster member
// refuses not_owner, or whose primary in a cluster went down or answered
// moved (its shard moved before the write was replicated), is placed
// again and resent after a pause (ShardSet::place_again, not_owner_pause);
// `shard` is then where it went last.
// ttl_ms: the SET's time to live (0: none).
[[nodiscard]] OpResult await_set(Scheduler& s, ShardSet& c, std::size_t& shard, std::string_view key,
                                 std::span<const std::byte> value, std::uint64_t ttl_ms = 0);
[[nodiscard]] OpResult await_get(Scheduler& s, ShardSet& c, std::size_t& shard, std::string_view key,
                                 bool keep_value);
[[nodiscard]] OpResult await_del(Scheduler& s, ShardSet& c, std::size_t& shard, std::string_view key);
// EXPIRE (0: persist): found = the key existed.
[[nodiscard]] OpResult await_expire(Scheduler& s, ShardSet& c, std::size_t& shard, std::string_view key,
                                    std::uint64_t ttl_ms);
// TTL: found = the key exists; value = its remaining ms (ClientConn::ttl_of).
[[nodiscard]] OpResult await_ttl(Scheduler& s, ShardSet& c, std::size_t& shard, std::string_view key);
// CALL of user opcode `op` (docs/protocol.md "CALL"): `request` alive until
// this returns; the reply's bytes in value (found: status ok). On server `shard`.
[[nodiscard]] OpResult await_call(Scheduler& s, ShardSet& c, std::size_t shard, std::uint16_t op,
                                  std::span<const std::byte> request);

}  // namespace rkv::kv::load
