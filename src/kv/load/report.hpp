#pragma once
// kvload's summary: per (operation kind x size class) counts, rates and
// latency percentiles, as an aligned text table or one JSON object.
//
// Conventions (the caller records, these functions only add up):
// - count includes failed operations; errors counts those.
// - bytes (key + value moved) and latency cover successful operations only.
// - Rates divide by the run's wall time (Report::seconds) for every class, so
//   per-class ops/s add up to the total. MB = 10^6 bytes. A run of 0 s (or a
//   non-finite time) reports rates of 0.

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kv/load/histogram.hpp"
#include "kv/load/workload.hpp"

namespace rkv::kv::load {

// How the value travels: eager when key + value < 4096 (proto::kEagerLimit),
// rendezvous otherwise.
enum class SizeClass { eager, rendezvous };

[[nodiscard]] std::string_view to_string(SizeClass c) noexcept;
[[nodiscard]] SizeClass size_class(std::size_t key_len, std::uint64_t value_len) noexcept;

struct ClassStats {
  std::uint64_t count = 0;   // completed operations, failed ones included
  std::uint64_t errors = 0;  // of which failed
  std::uint64_t bytes = 0;   // key + value bytes of successful operations
  Histogram latency;         // successful operations, nanoseconds
};

// One server of a kvload run over several (--server a,b,c): the operations
// its keys took (placement, proto/placement.hpp). A CALL counts on shard 0.
struct ShardStats {
  std::string server;            // its identity ("host:port")
  std::uint64_t ops = 0;         // completed, failed ones included
  std::uint64_t errors = 0;      // of which failed (shard_down included)
  std::uint64_t shard_down = 0;  // of which failed because the server was down (Status::shard_down)
};

struct Report {
  static constexpr std::size_t kClasses = 12;

  std::string name;              // free-form label, e.g. the workload file
  double seconds = 0.0;          // wall time of the run
  std::uint64_t mismatches = 0;  // --verify: GETs that returned other bytes (or a value after a DEL), DELs that found what they should not
  // Successful GETs by outcome (a cache's hit ratio: get_hits / GETs): found
  // the key, or found nothing. Failed GETs are neither (they are errors).
  std::uint64_t get_hits = 0;
  std::uint64_t get_misses = 0;
  std::array<ClassStats, kClasses> classes;  // indexed by index(kind, size)
  // Per server, in the order of the list (empty: not recorded). Operations
  // that failed because their server was down are errors like any other,
  // and also counted here and in shard_down.
  std::vector<ShardStats> shards;
  std::uint64_t shard_down = 0;         // operations that ended with Status::shard_down
  std::uint64_t shard_down_max_ns = 0;  // the longest of them took, submit -> failure
  // The client's counters by name (kvload fills them from the client's one
  // counter table; to_json prints them as "client"; merge adds them by name).
  std::vector<std::pair<std::string, std::uint64_t>> client;

  // get/eager, get/rendezvous, set/eager, set/rendezvous, del/eager,
  // del/rendezvous (a DEL moves no value: it is recorded as eager, and
  // del/rendezvous stays empty; kept so every kind has both classes),
  // call/eager, call/rendezvous (by the request's size), expire/eager,
  // expire/rendezvous, ttl/eager, ttl/rendezvous (eager only, as DEL).
  [[nodiscard]] static std::size_t index(Op::Kind k, SizeClass c) noexcept;
  [[nodiscard]] ClassStats& at(Op::Kind k, SizeClass c) noexcept { return classes[index(k, c)]; }
  [[nodiscard]] const ClassStats& at(Op::Kind k, SizeClass c) const noexcept {
    return classes[index(k, c)];
  }

  // One completed operation. A failed one only bumps count and errors.
  void record(Op::Kind k, SizeClass c, std::uint64_t bytes, std::uint64_t latency_ns, bool ok) noexcept;
  // One successful GET: it found the key (hit) or not (miss).
  void record_get_found(bool found) noexcept { ++(found ? get_hits : get_misses); }
  // One completed operation on shard `i` (< shards.size(), else ignored).
  void record_shard(std::size_t i, bool ok, bool down, std::uint64_t latency_ns) noexcept;
  // Adds another client's report; seconds becomes the longer of the two
  // (clients run in parallel). Shards add up by position.
  void merge(const Report& other);

  [[nodiscard]] std::uint64_t ops() const noexcept;
  [[nodiscard]] std::uint64_t errors() const noexcept;
  [[nodiscard]] double ops_per_s() const noexcept;
};

// Aligned table, one row per class that saw operations, then a totals line,
// then (when there were successful GETs) "gets: H hits, M misses (hit ratio P %)".
[[nodiscard]] std::string to_text(const Report& r);

// One JSON object (no trailing newline):
// {"name":..., "ops":N, "errors":N, "seconds":S, "ops_per_s":R, "mismatches":N,
//  "get_hits":N, "get_misses":N,
//  "latency_ns":{"min":N, "mean":R, "p50":N, "p99":N, "p99_9":N, "max":N},
//  "classes":[{"op":"get"|"set"|"del"|"call"|"expire"|"ttl", "size_class":"eager"|"rendezvous", "count":N,
//    "errors":N, "bytes":N, "ops_per_s":R, "mb_per_s":R,
//    "latency_ns":{...the same six fields...}}, ...],
//  "shard_down":N, "shard_down_max_ns":N,
//  "shards":[{"server":"host:port", "ops":N, "errors":N, "shard_down":N}, ...]}
// The top-level latency_ns covers every successful operation of the run (all
// classes together). All twelve classes are always present, in index() order;
// a class (or a run) without successful operations has all latency fields 0.
[[nodiscard]] std::string to_json(const Report& r);

// JSON string contents for `s` (no quotes). Invalid UTF-8 becomes U+FFFD so
// the output is always valid JSON.
[[nodiscard]] std::string json_escape(std::string_view s);

}  // namespace rkv::kv::load
