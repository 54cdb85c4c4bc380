#pragma once
// Names of the files in a data directory (docs/durability.md):
//   log-<gen>            a log: SET records appended in sequence order
//   snapshot-<gen>       the live data when log-<gen> was started (complete:
//                        written, fsynced, then renamed to this name)
//   snapshot-<gen>.tmp   a snapshot being written (ignored and removed at start)
// <gen> is 16 lowercase hex digits. Recovery loads the newest snapshot G (if
// any) and replays every log with gen >= G in order; older files are obsolete.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace rkv::durable {

[[nodiscard]] std::string log_name(std::uint64_t gen);
[[nodiscard]] std::string snapshot_name(std::uint64_t gen);
[[nodiscard]] std::string snapshot_tmp_name(std::uint64_t gen);

struct DirListing {
  std::vector<std::uint64_t> logs;       // ascending
  std::vector<std::uint64_t> snapshots;  // ascending
  std::vector<std::string> temporaries;  // snapshot-*.tmp
};

// Lists `dir` (throws std::system_error if it cannot be read). Other files are ignored.
[[nodiscard]] DirListing list_dir(const std::string& dir);

// Parses "<prefix><16 hex digits><suffix>"; nullopt if `name` is not one.
[[nodiscard]] std::optional<std::uint64_t> parse_gen(std::string_view name, std::string_view prefix,
                                                     std::string_view suffix = {});

// fsync(2) of a directory, synchronously (startup and tests only). Throws std::system_error.
void fsync_dir(const std::string& dir);

}  // namespace rkv::durable
