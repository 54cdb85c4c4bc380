// Log, compaction part (docs/durability.md, "Compaction"): when the log
// exceeds compact_ratio x the live data (and compact_min_bytes), switch new
// records to a fresh log-<g+1>, write the live data as snapshot-<g+1>.tmp in
// bounded chunks (one io_uring write per reactor event), fsync it, rename it
// to snapshot-<g+1>, fsync the directory, then remove the obsolete files.
// Every step goes through the ring; a crash at any step leaves a directory
// that recovery reads completely (see the doc for why). Reactor thread only.
#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <new>

#include "durable/fault.hpp"
#include "durable/files.hpp"
#include "durable/log.hpp"
#include "durable/record.hpp"

namespace rkv::durable {

namespace {
constexpr auto kRetryDelay = std::chrono::seconds(10);  // after a failed compaction
constexpr std::size_t kSnapshotPins = 64;               // large values per snapshot write
}  // namespace

std::string_view Log::to_string(CompactStep s) noexcept {
  switch (s) {
    case CompactStep::idle: return "idle";
    case CompactStep::creating_log: return "creating_log";
    case CompactStep::syncing_dir_log: return "syncing_dir_log";
    case CompactStep::switching: return "switching";
    case CompactStep::syncing_old: return "syncing_old";
    case CompactStep::opening_tmp: return "opening_tmp";
    case CompactStep::writing: return "writing";
    case CompactStep::syncing_tmp: return "syncing_tmp";
    case CompactStep::renaming: return "renaming";
    case CompactStep::syncing_dir: return "syncing_dir";
    case CompactStep::removing: return "removing";
  }
  return "invalid";
}

void Log::maybe_compact() noexcept {
  if (step_ != CompactStep::idle || closed_ || failing_) return;
  if (offset_ < options_.compact_min_bytes) return;
  const double live = static_cast<double>(store_->bytes() + kHeaderSize * store_->size());
  if (static_cast<double>(offset_) <= options_.compact_ratio * live) return;
  if (reactor::Reactor::now() < retry_after_) return;
  new_gen_ = gen_ + 1;
  spdlog::info("durable: compacting: log {} bytes, live data ~{} bytes; starting {}", offset_,
               static_cast<std::uint64_t>(live), log_name(new_gen_));
  step_ = CompactStep::creating_log;
  const int rc = uring_.openat(dir_fd_.get(), log_name(new_gen_), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644,
                               [this](int res) {
                                 if (res < 0) return compaction_failed("creating the new log", res);
                                 new_fd_.reset(res);
                                 if (closed_) return compaction_failed("shutdown", -ECANCELED);
                                 step_ = CompactStep::syncing_dir_log;
                                 const int rc2 = uring_.fsync(dir_fd_.get(), false, [this](int r) {
                                   if (r < 0) return compaction_failed("syncing the directory", r);
                                   if (closed_) return compaction_failed("shutdown", -ECANCELED);
                                   crash_point("compact_log_created");
                                   step_ = CompactStep::switching;
                                   try_switch();
                                 });
                                 if (rc2 < 0) compaction_failed("syncing the directory", rc2);
                               });
  if (rc < 0) compaction_failed("creating the new log", rc);
}

// The writer and the periodic sync must be idle: then nothing more goes to the
// old log. In batch mode its unsynced tail is synced before it is closed, so
// the switch does not widen the loss window.
void Log::try_switch() noexcept {
  if (step_ != CompactStep::switching || writing_ || sync_inflight_) return;
  if (options_.mode == FsyncMode::batch && dirty_) {
    step_ = CompactStep::syncing_old;
    dirty_ = false;
    const int rc = uring_.fsync(fd_.get(), true, [this](int res) {
      if (res < 0) {
        ++stats_.io_errors;
        spdlog::error("durable: syncing {} before the switch: {} (its records are in the snapshot)", log_name(gen_),
                      std::strerror(-res));
      } else {
        ++stats_.fsyncs;
      }
      do_switch();
    });
    if (rc < 0) do_switch();
    return;
  }
  do_switch();
}

void Log::do_switch() noexcept {
  if (closed_) return compaction_failed("shutdown", -ECANCELED);
  try {
    keys_.clear();
    keys_.reserve(store_->size());
    store_->for_each([this](std::string_view k, const kv::store::Store::Lookup&) { keys_.emplace_back(k); });
  } catch (const std::bad_alloc&) {
    keys_.clear();
    // The new log is empty and stays unused: give up before switching.
    step_ = CompactStep::switching;
    return compaction_failed("listing the keys", -ENOMEM);
  }
  fd_ = std::move(new_fd_);  // closes the old log
  gen_ = new_gen_;
  offset_ = 0;
  stats_.log_bytes = 0;
  dirty_ = false;
  snap_seq_ = next_seq_ - 1;
  next_key_ = 0;
  snap_records_ = 0;
  snap_off_ = 0;
  snap_end_written_ = false;
  crash_point("compact_switched");
  step_ = CompactStep::opening_tmp;
  const int rc = uring_.openat(dir_fd_.get(), snapshot_tmp_name(gen_), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC,
                               0644, [this](int res) {
                                 if (res < 0) return compaction_failed("creating the snapshot", res);
                                 snap_fd_.reset(res);
                                 if (closed_) return compaction_failed("shutdown", -ECANCELED);
                                 step_ = CompactStep::writing;
                                 write_chunk();
                               });
  if (rc < 0) compaction_failed("creating the snapshot", rc);
  submit_next();  // records queued during the switch go to the new log
}

void Log::write_chunk() noexcept {
  snap_batch_ = Batch{};
  try {
    while (next_key_ < keys_.size() && snap_batch_.size < options_.snapshot_chunk &&
           snap_batch_.pins.size() < kSnapshotPins) {
      const std::string& key = keys_[next_key_++];
      // The value now (newer ones are also in the new log), read without
      // counting an access: a snapshot is not a use of every key.
      const auto v = store_->peek(key);
      if (!v.found) continue;
      snap_batch_.add(key, v.value, v.large, 0, v.expire_at);
      ++snap_records_;
    }
    if (next_key_ == keys_.size() && !snap_end_written_ && snap_batch_.size < options_.snapshot_chunk) {
      snap_batch_.add_end(snap_records_, snap_seq_);
      snap_end_written_ = true;
    }
  } catch (const std::bad_alloc&) {
    return compaction_failed("building a snapshot chunk", -ENOMEM);
  }
  if (snap_batch_.size == 0) {  // everything is written: make it durable
    step_ = CompactStep::syncing_tmp;
    const int rc = uring_.fsync(snap_fd_.get(), false, [this](int res) {
      if (res < 0) return compaction_failed("syncing the snapshot", res);
      if (closed_) return compaction_failed("shutdown", -ECANCELED);
      crash_point("compact_snapshot_synced");
      snap_fd_.reset();
      step_ = CompactStep::renaming;
      const int rc2 =
          uring_.renameat(dir_fd_.get(), snapshot_tmp_name(gen_), snapshot_name(gen_), [this](int r) {
            if (r < 0) return compaction_failed("renaming the snapshot", r);
            crash_point("compact_renamed");
            step_ = CompactStep::syncing_dir;
            const int rc3 = uring_.fsync(dir_fd_.get(), false, [this](int r2) {
              if (r2 < 0) return compaction_failed("syncing the directory after the rename", r2);
              crash_point("compact_dir_synced");
              // snapshot-<gen_> is the base now: older logs and snapshots are obsolete.
              to_remove_.clear();
              for (std::uint64_t g = first_log_gen_; g < gen_; ++g) to_remove_.push_back(log_name(g));
              if (snapshot_gen_ != 0 && snapshot_gen_ < gen_) to_remove_.push_back(snapshot_name(snapshot_gen_));
              snapshot_gen_ = gen_;
              first_log_gen_ = gen_;
              keys_.clear();
              keys_.shrink_to_fit();
              ++stats_.compactions;
              spdlog::info("durable: compaction done: {} ({} records, {} bytes); appending to {}",
                           snapshot_name(gen_), snap_records_, snap_off_, log_name(gen_));
              step_ = CompactStep::removing;
              remove_next();
            });
            if (rc3 < 0) compaction_failed("syncing the directory after the rename", rc3);
          });
      if (rc2 < 0) compaction_failed("renaming the snapshot", rc2);
    });
    if (rc < 0) compaction_failed("syncing the snapshot", rc);
    return;
  }
  std::vector<iovec> iov;
  try {
    iov = snap_batch_.iovecs();
  } catch (const std::bad_alloc&) {
    return compaction_failed("building a snapshot chunk", -ENOMEM);
  }
  const int rc = uring_.writev(snap_fd_.get(), iov, snap_off_, [this](int res) {
    if (res < 0 || static_cast<std::uint64_t>(res) != snap_batch_.size) {
      return compaction_failed("writing the snapshot", res < 0 ? res : -ENOSPC);
    }
    const bool first = snap_off_ == 0;
    snap_off_ += snap_batch_.size;
    snap_batch_ = Batch{};
    if (first) crash_point("compact_snapshot_partial");
    if (closed_) return compaction_failed("shutdown", -ECANCELED);
    write_chunk();  // the next chunk: one write per reactor event
  });
  if (rc < 0) compaction_failed("writing the snapshot", rc);
}

void Log::remove_next() noexcept {
  if (to_remove_.empty() || closed_) {
    for (const auto& f : to_remove_) (void)::unlinkat(dir_fd_.get(), f.c_str(), 0);  // shutdown: finish here
    to_remove_.clear();
    step_ = CompactStep::idle;
    return;
  }
  const std::string name = to_remove_.back();
  to_remove_.pop_back();
  const int rc = uring_.unlinkat(dir_fd_.get(), name, [this, name](int res) {
    if (res < 0 && res != -ENOENT) {
      spdlog::warn("durable: removing obsolete {}: {} (recovery removes it later)", name, std::strerror(-res));
    }
    remove_next();
  });
  if (rc < 0) remove_next();
}

void Log::compaction_failed(std::string_view what, int res) noexcept {
  const CompactStep at = step_;
  if (res != -ECANCELED) {
    ++stats_.compaction_failures;
    spdlog::error("durable: compaction failed at {} ({}): {}; the log and its data are intact, retrying in {} s",
                  to_string(at), what, std::strerror(-res), kRetryDelay.count());
  }
  snap_batch_ = Batch{};
  keys_.clear();
  snap_fd_.reset();
  // Leftovers are harmless to recovery (a .tmp is removed, an unused empty log
  // replays nothing); remove them now anyway. Synchronous: rare error path.
  if (at == CompactStep::creating_log || at == CompactStep::syncing_dir_log || at == CompactStep::switching ||
      at == CompactStep::syncing_old) {
    new_fd_.reset();
    if (new_gen_ != 0) (void)::unlinkat(dir_fd_.get(), log_name(new_gen_).c_str(), 0);
  } else if (at == CompactStep::opening_tmp || at == CompactStep::writing || at == CompactStep::syncing_tmp ||
             at == CompactStep::renaming) {
    (void)::unlinkat(dir_fd_.get(), snapshot_tmp_name(gen_).c_str(), 0);
  }
  step_ = CompactStep::idle;
  retry_after_ = reactor::Reactor::now() + kRetryDelay;
  submit_next();
}

}  // namespace rkv::durable
