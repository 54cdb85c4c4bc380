#pragma once
// etcd's v3 JSON gateway, as bytes: the request bodies this project sends and
// strict parsers of the replies it reads (docs/cluster.md "Talking to etcd").
// The gateway is etcd's gRPC API mapped to JSON over HTTP POST: keys and
// values travel base64-encoded, 64-bit numbers as decimal strings, fields at
// their default value (0, false, empty) are left out.
//
// Pure: no I/O, so every parser here is unit-tested on hostile input
// (tests/unit/test_etcd_wire.cpp). A reply that is not what the call expects
// parses to std::nullopt with why in `error`, never an exception.
//
// Owns: nothing. Thread: any.

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace rkv::cluster {

[[nodiscard]] std::string base64_encode(std::string_view bytes);
// Strict: standard alphabet, padded to a multiple of 4, unused bits zero (so
// base64_encode gives back the same text); nullopt otherwise.
[[nodiscard]] std::optional<std::string> base64_decode(std::string_view text);

// The range_end that makes a range (or a watch) cover every key starting
// with `prefix`: the prefix with its last byte incremented (a byte of 0xff is
// dropped and the one before it incremented). `prefix` must not be empty.
[[nodiscard]] std::string prefix_end(std::string_view prefix);

// Request bodies (paths: the kPath* constants).
inline constexpr std::string_view kPathGrant = "/v3/lease/grant";
inline constexpr std::string_view kPathKeepAlive = "/v3/lease/keepalive";
inline constexpr std::string_view kPathRevoke = "/v3/lease/revoke";
inline constexpr std::string_view kPathPut = "/v3/kv/put";
inline constexpr std::string_view kPathRange = "/v3/kv/range";
inline constexpr std::string_view kPathDelete = "/v3/kv/deleterange";
inline constexpr std::string_view kPathWatch = "/v3/watch";
inline constexpr std::string_view kPathTxn = "/v3/kv/txn";

// id 0: etcd picks the lease's ID; else that ID is asked for (etcd refuses
// it if a lease of that ID exists).
[[nodiscard]] std::string grant_body(std::int64_t ttl_seconds, std::int64_t id = 0);
[[nodiscard]] std::string keepalive_body(std::int64_t lease);
[[nodiscard]] std::string revoke_body(std::int64_t lease);
// lease 0: the key lives until deleted.
[[nodiscard]] std::string put_body(std::string_view key, std::string_view value, std::int64_t lease);
// Every key starting with `prefix`.
[[nodiscard]] std::string range_prefix_body(std::string_view prefix);
[[nodiscard]] std::string delete_body(std::string_view key);
// A watch of every key starting with `prefix`, from store revision
// `start_revision` on (the first revision the watcher has not seen).
[[nodiscard]] std::string watch_prefix_body(std::string_view prefix, std::int64_t start_revision);
// A transaction that puts `value` at `key` (no lease) only if the key's
// mod_revision is still `mod_revision` (0: only if the key does not exist)
// and none of the keys in `absent` exists.
[[nodiscard]] std::string put_if_body(std::string_view key, std::string_view value, std::int64_t mod_revision,
                                      std::span<const std::string> absent = {});

struct Lease {
  std::int64_t id = 0;
  std::int64_t ttl = 0;  // seconds; 0 from a keepalive: the lease is gone
};
struct KeyValue {
  std::string key;
  std::string value;
  std::int64_t lease = 0;
  std::int64_t mod_revision = 0;
};
struct RangeResult {
  std::int64_t revision = 0;  // the store's revision the range was read at
  std::vector<KeyValue> kvs;
};

// One message of a watch stream (the gateway writes one JSON object per
// line): its creation, events, or its end.
struct WatchEvent {
  enum class Type : std::uint8_t { put, del };
  Type type = Type::put;
  KeyValue kv;  // a del carries the key (and its mod_revision) only
};
struct WatchMessage {
  std::int64_t revision = 0;  // the store's revision when it was sent
  bool created = false;       // the watch now runs
  bool canceled = false;      // the watch ended (etcd's reason in cancel_reason)
  std::int64_t compact_revision = 0;  // canceled because the start revision was compacted away
  std::string cancel_reason;
  std::vector<WatchEvent> events;
};

// Reply parsers. Each takes the HTTP body of a 200 reply.
[[nodiscard]] std::optional<Lease> parse_grant(std::string_view body, std::string& error);
// A keepalive reply: {"result": {... "ID", "TTL"}}; TTL absent or 0 means
// the lease expired or was revoked.
[[nodiscard]] std::optional<Lease> parse_keepalive(std::string_view body, std::string& error);
[[nodiscard]] std::optional<RangeResult> parse_range(std::string_view body, std::string& error);
// One line of a watch stream; an {"error": ...} line is an error.
[[nodiscard]] std::optional<WatchMessage> parse_watch(std::string_view line, std::string& error);
// A transaction's reply: whether its comparisons held (and its puts ran).
struct TxnResult {
  std::int64_t revision = 0;
  bool succeeded = false;
};
[[nodiscard]] std::optional<TxnResult> parse_txn(std::string_view body, std::string& error);
// Any reply that carries a header (put, delete, revoke): its revision.
[[nodiscard]] std::optional<std::int64_t> parse_header_revision(std::string_view body, std::string& error);
// The gateway's error body ({"error": ..., "code": N, "message": ...}), for a
// reply whose HTTP status is not 200: the message, or the body cut short.
[[nodiscard]] std::string error_message(std::string_view body);

}  // namespace rkv::cluster
