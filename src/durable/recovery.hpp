#pragma once
// Recovery: at start, before any client is accepted, rebuild the Store from a
// data directory (docs/durability.md, "Recovery"). Synchronous: nothing else
// runs yet.
//
// - Missing directory: created. Leftover snapshot-*.tmp files: removed.
// - The newest snapshot G (if any) is loaded, then every log with gen >= G in
//   order: a SET record stores its value, a DEL record (tombstone) removes the
//   key, a SET_TTL stores its value with its absolute expiry time, an EXPIRE
//   changes it, all as of when they were written; then the keys whose expiry
//   time has passed since are dropped. Files older than G are obsolete (a compaction finished) and removed.
// - A record that does not check out (bad magic/CRC, a length running past the
//   end, a sequence number that does not increase) is a TORN TAIL when no
//   valid record follows it in that file: the file is truncated back to the
//   last good record (logged with offset and byte count) and fsynced.
// - If a valid record follows, it is CORRUPTION IN THE MIDDLE: recover()
//   throws RecoveryError (kvd refuses to start), unless `repair`: then the bad
//   bytes are skipped (logged), every good record before and after them is
//   kept, and the directory is rewritten (fresh snapshot + empty log) so the
//   damage is gone for the next start. A snapshot without its end record, or
//   with a damaged one, is corruption too.

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <string_view>

#include "kv/store/store.hpp"

namespace rkv::durable {

class RecoveryError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct RecoveryOptions {
  std::string dir;
  bool repair = false;
  std::uint64_t max_value = 0xFFFFFFFFu;  // larger value_len fields are corruption
};

struct RecoveryResult {
  std::uint64_t records = 0;        // SET and DEL records applied (snapshot + logs)
  std::uint64_t deletes = 0;        // of which DEL records (tombstones)
  std::uint64_t expired = 0;        // keys whose time to live ran out while kvd was down (not brought back)
  std::uint64_t bytes = 0;          // bytes of good records read
  std::uint64_t files = 0;          // snapshot + log files read
  std::uint64_t next_seq = 1;       // first sequence number for new records
  std::uint64_t generation = 1;     // the log new records go to
  std::uint64_t log_size = 0;       // its length (end of its last good record)
  std::uint64_t snapshot_gen = 0;   // the snapshot loaded (0: none)
  std::uint64_t first_log_gen = 1;  // the oldest log still in the directory
  std::uint64_t truncated_bytes = 0;  // torn tails cut off
  std::uint64_t dropped_bytes = 0;    // corrupt bytes skipped by --repair
  bool rewritten = false;           // --repair rewrote the directory
  double ms = 0;                    // wall time
};

// Rebuilds `store` (which should be empty) from opts.dir. Throws
// RecoveryError when it refuses (corruption without repair, unreadable
// files) and std::system_error on I/O failures.
[[nodiscard]] RecoveryResult recover(const RecoveryOptions& opts, kv::store::Store& store);

// Writes the whole store as snapshot-<gen> plus an empty log-<gen>, durably
// (tmp file, fsync, rename, fsync dir), then removes older files.
// Synchronous: for start-up (--repair) only. Throws std::system_error.
void write_snapshot_sync(const std::string& dir, std::uint64_t gen, std::uint64_t last_seq, const kv::store::Store& store);

}  // namespace rkv::durable
