#pragma once
// Fault injection for the crash tests (docs/durability.md, "Testing"): with
// RKV_FAULT=crash:<point> in the environment, kvd kills itself with SIGKILL
// when it reaches <point> (no destructors, no flush: like a crash or power
// cut at that instant, minus the page cache). Points are named where they are
// called (compaction steps: compact_log_created, compact_switched,
// compact_snapshot_partial, compact_snapshot_synced, compact_renamed,
// compact_dir_synced). Without the variable this is one string compare.
//
// RKV_FAULT=fail:<point> makes fail_point(<point>) true instead: the caller
// turns the operation there into a failure (log_sync: every fdatasync of the
// log completes as if it had failed with EIO, after it ran), so a test can
// prove what kvd never does before a sync succeeded (acknowledge a SET).

#include <string_view>

namespace rkv::durable {

// Crashes the process if RKV_FAULT names this point.
void crash_point(std::string_view point) noexcept;

// True if RKV_FAULT=fail:<point> names this point.
[[nodiscard]] bool fail_point(std::string_view point) noexcept;

}  // namespace rkv::durable
