#pragma once
// StatRow: one line of kvd's statistics (name, value, kind, help). The
// server's counter table (kv/server/counters.hpp) and the gauges of the
// Store, the arena, the index and the Durability all become rows of one list,
// and every output (the SIGUSR1 line, the STATS reply on the wire, JSON, the
// Prometheus exposition of kvd --metrics) is formatted from that list by the
// functions below: a counter is declared once and printed everywhere from
// there. Pure.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace rkv::kv::store {

// What a row's value is, as Prometheus types it.
enum class StatKind : std::uint8_t {
  counter,  // only grows while kvd runs (a total)
  gauge,    // a value now: may go down
  untyped,  // not known: rows read back from a STATS reply, which carries no kind
  derived,  // computed from a metric exported in full (the latency quantiles from their histogram): shown by
            // rkv stats and SIGUSR1, left out of the Prometheus exposition (which gets the histogram itself)
};
[[nodiscard]] std::string_view to_string(StatKind k) noexcept;  // "counter", "gauge", "untyped", "derived"

struct StatRow {
  // Every row names its kind: a constructor, so a row without one does not compile.
  constexpr StatRow(std::string_view n, std::uint64_t v, StatKind k, std::string_view h) noexcept
      : name(n), value(v), kind(k), help(h) {}
  std::string_view name;  // [a-z0-9_]+, unique in a list
  std::uint64_t value = 0;
  StatKind kind = StatKind::untyped;
  std::string_view help;  // one line, for people
};

using StatRows = std::vector<StatRow>;

// "name=value name=value ..." (kvd's SIGUSR1 and final stats line).
[[nodiscard]] std::string format_stats_line(const StatRows& rows);
// "name value\n" per row (the STATS reply's text, docs/protocol.md).
[[nodiscard]] std::string format_stats_lines(const StatRows& rows);
// {"name": value, ...} on one line (kvd --stats-json). Names need no escaping.
[[nodiscard]] std::string format_stats_json(const StatRows& rows);

// The Prometheus name of a row: "rkv_" + name, and for a counter "_total"
// after it unless the name already ends so (sets -> rkv_sets_total,
// bytes_copied_total -> rkv_bytes_copied_total, keys -> rkv_keys).
[[nodiscard]] std::string prometheus_name(const StatRow& row);
// The Prometheus text exposition format 0.0.4 (kvd --metrics, /metrics): per
// row "# HELP", "# TYPE" and one sample, in list order (derived rows left
// out); help text escaped as the format wants (backslash, newline).
[[nodiscard]] std::string format_prometheus(const StatRows& rows);

}  // namespace rkv::kv::store
