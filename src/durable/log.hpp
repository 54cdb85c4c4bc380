#pragma once
// Log: the durability log writer behind kv::store::Durability (docs/durability.md).
//
// Every SET becomes a record (record.hpp) appended to DIR/log-<gen>, every
// DEL a tombstone record (key only). Records
// queue in batches; one batch is written at a time (one writev through
// io_uring at an explicit offset) and everything queued meanwhile goes in the
// next one: group commit. Large values are not copied: the batch's iovec
// points at the arena block, pinned (LargeRef) until the write completed.
//
// Acknowledgement (FsyncMode):
//   always  the write is linked to an fdatasync in the same submission; the
//           SETs and DELs of the batch are acknowledged (sink) when the sync
//           completed.
//   batch   SETs are acknowledged at once; an fdatasync runs at most every
//           `interval` when something was written since the last one.
//   never   SETs are acknowledged at once; the OS writes back when it likes.
// Disk errors: a failed or short write (ENOSPC, EIO) or a failed sync fails
// the SETs waiting for that batch (io_error through the sink), truncates the
// file back to the last good record (synchronously: error path only) and puts
// the log in the `failing` state, logged once. While failing, every SET (any
// mode) waits for its own write, so none is acknowledged falsely; the first
// write that succeeds clears the state (logged once).
//
// Compaction (log_compact.cpp) runs on the same reactor through the same ring.
// Thread: the reactor's. I/O callbacks are routed by the Uring's slot table.

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "durable/recovery.hpp"
#include "kv/store/durability.hpp"
#include "kv/store/histogram.hpp"
#include "kv/store/store.hpp"
#include "reactor/fd.hpp"
#include "reactor/reactor.hpp"
#include "reactor/uring.hpp"

struct iovec;

namespace rkv::durable {

enum class FsyncMode : std::uint8_t { always, batch, never };

[[nodiscard]] constexpr std::string_view to_string(FsyncMode m) noexcept {
  switch (m) {
    case FsyncMode::always: return "always";
    case FsyncMode::batch: return "batch";
    case FsyncMode::never: return "never";
  }
  return "invalid";
}

struct LogOptions {
  std::string dir;
  FsyncMode mode = FsyncMode::batch;
  std::chrono::milliseconds interval{1000};          // batch: fdatasync at most this often
  double compact_ratio = 2.0;                        // compact when log > ratio x live data ...
  std::uint64_t compact_min_bytes = std::uint64_t{64} << 20;  // ... and log >= this
  std::size_t batch_bytes = std::size_t{4} << 20;    // one write's size (a batch closes beyond it)
  std::size_t snapshot_chunk = std::size_t{1} << 20;  // compaction write size
};

struct LogStats {
  std::uint64_t records = 0;        // SET and DEL records queued
  std::uint64_t deletes = 0;        // of which DEL records (tombstones)
  std::uint64_t bytes_written = 0;  // record bytes written successfully (all logs)
  std::uint64_t writes = 0;         // log writes completed
  std::uint64_t fsyncs = 0;         // log syncs completed
  std::uint64_t io_errors = 0;      // failed writes/syncs
  std::uint64_t failed_sets = 0;    // SETs and DELs answered io_error
  std::uint64_t compactions = 0;
  std::uint64_t compaction_failures = 0;
  std::uint64_t log_bytes = 0;      // current log's length
  std::uint64_t generation = 0;     // current log's generation
  bool failing = false;
};

// (conn_token, wait, ok) for a SET or DEL that was answered DurableAck::later.
using DurableSink = std::function<void(std::uint64_t conn_token, std::uint32_t wait, bool ok)>;

class Log final : public kv::store::Durability {
 public:
  // Opens DIR and the log recovery chose (synchronous: start-up). Throws
  // std::system_error on failure.
  Log(reactor::Reactor& reactor, kv::store::Store& store, LogOptions options, const RecoveryResult& recovered);
  ~Log() override;  // close_sync() if not done

  void set_sink(DurableSink sink) { sink_ = std::move(sink); }

  [[nodiscard]] kv::store::DurableAck record_set(std::string_view key, std::string_view value,
                                                 const kv::store::LargeRef& large, kv::store::ExpireAt expire_at,
                                                 std::uint64_t conn_token, std::uint32_t wait) noexcept override;
  [[nodiscard]] kv::store::DurableAck record_expire(std::string_view key, kv::store::ExpireAt expire_at,
                                                    std::uint64_t conn_token, std::uint32_t wait) noexcept override;
  [[nodiscard]] kv::store::DurableAck record_del(std::string_view key, std::uint64_t conn_token,
                                                 std::uint32_t wait) noexcept override;
  void record_eviction(std::string_view key) noexcept override;
  void flush() noexcept override;
  void append_stats(kv::store::StatRows& rows) const override;
  // rkv_log_fsync_duration_seconds: each successful fdatasync of the log,
  // from its submission (--fsync batch) or its write's completion (the sync
  // linked to a write: --fsync always, or while failing) to its completion.
  void append_histograms(std::string& out) const override;

  // Shutdown: stops compaction, waits for I/O in flight, writes what is
  // queued and syncs, synchronously. No sink calls after it starts.
  void close_sync() noexcept;

  [[nodiscard]] LogStats stats() const noexcept;
  [[nodiscard]] const LogOptions& options() const noexcept { return options_; }
  [[nodiscard]] bool compacting() const noexcept { return step_ != CompactStep::idle; }

 private:
  struct Waiter {
    std::uint64_t token;
    std::uint32_t wait;
  };
  // Records to write with one writev.
  struct Batch {
    struct Piece {
      std::size_t off;          // in buf (ext == nullptr)
      std::size_t len;
      const std::byte* ext;     // a pinned large value
    };
    std::vector<std::byte> buf;  // headers, keys, small values
    std::vector<Piece> pieces;
    std::vector<kv::store::LargeRef> pins;
    std::vector<Waiter> waiters;
    std::uint64_t size = 0;
    std::uint64_t records = 0;
    // A SET record (SET_TTL with expire_at != 0).
    void add(std::string_view key, std::string_view value, const kv::store::LargeRef& large, std::uint64_t seq,
             kv::store::ExpireAt expire_at = kv::store::kNoExpiry);
    void add_del(std::string_view key, std::uint64_t seq);
    void add_expire(std::string_view key, kv::store::ExpireAt expire_at, std::uint64_t seq);
    void add_piece(std::size_t off, std::size_t len);  // buf[off, off + len) joins the write
    void add_end(std::uint64_t count, std::uint64_t seq);
    [[nodiscard]] std::vector<iovec> iovecs() const;
  };
  // Compaction steps (docs/durability.md, "Compaction").
  enum class CompactStep : std::uint8_t {
    idle,
    creating_log,     // openat log-<gen+1>
    syncing_dir_log,  // fsync DIR so the new log's name is durable
    switching,        // waiting for the writer to be idle (then: sync the old log if batch)
    syncing_old,      // fdatasync of the old log before it is closed
    opening_tmp,      // openat snapshot-<gen+1>.tmp
    writing,          // chunks of the live data
    syncing_tmp,      // fsync the snapshot
    renaming,         // snapshot-<gen>.tmp -> snapshot-<gen>
    syncing_dir,      // fsync DIR: the rename is durable
    removing,         // unlink the obsolete logs and snapshot
  };
  static std::string_view to_string(CompactStep s) noexcept;

  // What record() appends.
  enum class Kind : std::uint8_t { set, del, expire };
  // record_set/record_del/record_expire/record_eviction: value and large
  // only for a set, expire_at for a set or an expire; `waits`: a reply waits
  // for it (not an eviction's).
  [[nodiscard]] kv::store::DurableAck record(Kind kind, std::string_view key, std::string_view value,
                                             const kv::store::LargeRef& large, kv::store::ExpireAt expire_at,
                                             std::uint64_t conn_token, std::uint32_t wait,
                                             bool waits = true) noexcept;
  void submit_next() noexcept;
  void finish_batch(int write_res, int sync_res) noexcept;
  void on_tick() noexcept;
  void set_failing(bool failing, int err) noexcept;
  [[nodiscard]] bool writer_blocked() const noexcept {
    return step_ == CompactStep::switching || step_ == CompactStep::syncing_old;
  }
  // --- compaction (log_compact.cpp) ---
  void maybe_compact() noexcept;
  void try_switch() noexcept;
  void do_switch() noexcept;
  void write_chunk() noexcept;
  void remove_next() noexcept;
  void compaction_failed(std::string_view what, int res) noexcept;

  reactor::Reactor* reactor_;
  kv::store::Store* store_;
  LogOptions options_;
  DurableSink sink_;
  reactor::UniqueFd dir_fd_;
  reactor::UniqueFd fd_;           // current log
  std::uint64_t gen_ = 1;
  std::uint64_t offset_ = 0;       // end of the last good record in the current log
  std::uint64_t next_seq_ = 1;
  std::deque<Batch> queue_;
  Batch inflight_;
  bool writing_ = false;
  bool inflight_synced_ = false;  // the batch in flight is written with an fsync linked to it
  int write_res_ = 0;              // always: the write's result until the sync's arrives
  bool dirty_ = false;             // batch: written since the last sync
  bool sync_inflight_ = false;     // batch: the periodic sync
  bool failing_ = false;
  bool closed_ = false;
  LogStats stats_;
  kv::store::Histogram fsync_time_;
  kv::store::QuantileRows fsync_rows_{"log_fsync", "the log's fsyncs"};
  std::chrono::steady_clock::time_point linked_sync_started_;  // the linked sync's write completed
  std::chrono::steady_clock::time_point tick_sync_started_;    // the periodic sync was submitted
  reactor::Timer tick_;

  // Compaction state.
  CompactStep step_ = CompactStep::idle;
  std::uint64_t snapshot_gen_ = 0;   // newest complete snapshot (0: none)
  std::uint64_t first_log_gen_ = 1;  // oldest log still on disk
  std::uint64_t new_gen_ = 0;
  reactor::UniqueFd new_fd_;
  reactor::UniqueFd snap_fd_;
  std::vector<std::string> keys_;    // live keys at the switch
  std::size_t next_key_ = 0;
  std::uint64_t snap_records_ = 0;
  std::uint64_t snap_off_ = 0;
  std::uint64_t snap_seq_ = 0;
  bool snap_end_written_ = false;
  Batch snap_batch_;
  std::vector<std::string> to_remove_;
  reactor::Reactor::Clock::time_point retry_after_{};

  reactor::Uring uring_;  // last: destroyed first (waits for the kernel)
};

}  // namespace rkv::durable
