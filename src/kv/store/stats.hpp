#pragma once
// StatRow: one line of kvd's statistics (name, value, help). The server's
// counter table (kv/server/counters.hpp) and the gauges of the Store, the
// arena, the index and the Durability all become rows of one list, and every
// output (the SIGUSR1 line, the STATS reply on the wire, JSON) is formatted
// from that list by the functions below: a counter is declared once and
// printed everywhere from there. Header only, pure.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace rkv::kv::store {

struct StatRow {
  std::string_view name;  // [a-z0-9_]+, unique in a list
  std::uint64_t value = 0;
  std::string_view help;  // one line, for people
};

using StatRows = std::vector<StatRow>;

// "name=value name=value ..." (kvd's SIGUSR1 and final stats line).
[[nodiscard]] std::string format_stats_line(const StatRows& rows);
// "name value\n" per row (the STATS reply's text, docs/protocol.md).
[[nodiscard]] std::string format_stats_lines(const StatRows& rows);
// {"name": value, ...} on one line (kvd --stats-json). Names need no escaping.
[[nodiscard]] std::string format_stats_json(const StatRows& rows);

}  // namespace rkv::kv::store
