// Log writer: see log.hpp. Reactor thread only.
#include "durable/log.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <new>
#include <system_error>

#include "durable/fault.hpp"
#include "durable/files.hpp"
#include "durable/record.hpp"
#include "proto/copy.hpp"
#include "proto/endian.hpp"

namespace rkv::durable {

namespace {

constexpr std::size_t kMaxPins = 256;  // large values per write (iovec count stays far below IOV_MAX)

std::span<const std::byte> as_bytes(std::string_view s) noexcept {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

}  // namespace

// --- Batch ----------------------------------------------------------------------

void Log::Batch::add(std::string_view key, std::string_view value, const kv::store::LargeRef& large, std::uint64_t seq,
                     kv::store::ExpireAt expire_at) {
  const RecordHeader h = set_header(as_bytes(key), as_bytes(value), seq, expire_at);
  const std::size_t at_len = expire_at != kv::store::kNoExpiry ? kExpireAtSize : 0;
  const std::size_t off = buf.size();
  const std::size_t inline_len = kHeaderSize + key.size() + at_len + (large ? 0 : value.size());
  buf.resize(off + inline_len);
  encode_header(std::span(buf).subspan(off), h);
  proto::copy_bytes(buf.data() + off + kHeaderSize, key.data(), key.size());
  if (at_len != 0) {
    const auto at = expire_bytes(expire_at);
    proto::copy_bytes(buf.data() + off + kHeaderSize + key.size(), at.data(), at.size());
  }
  if (!large) proto::copy_bytes(buf.data() + off + kHeaderSize + key.size() + at_len, value.data(), value.size());
  if (!pieces.empty() && pieces.back().ext == nullptr && pieces.back().off + pieces.back().len == off) {
    pieces.back().len += inline_len;
  } else {
    pieces.push_back({off, inline_len, nullptr});
  }
  if (large) {
    pieces.push_back({0, value.size(), reinterpret_cast<const std::byte*>(value.data())});  // zero copy
    pins.push_back(large);
  }
  size += h.record_size();
  ++records;
}

void Log::Batch::add_piece(std::size_t off, std::size_t len) {
  if (!pieces.empty() && pieces.back().ext == nullptr && pieces.back().off + pieces.back().len == off) {
    pieces.back().len += len;
  } else {
    pieces.push_back({off, len, nullptr});
  }
  size += len;
}

void Log::Batch::add_del(std::string_view key, std::uint64_t seq) {
  const std::size_t off = buf.size();
  buf.resize(off + kHeaderSize + key.size());
  encode_header(std::span(buf).subspan(off), del_header(as_bytes(key), seq));
  proto::copy_bytes(buf.data() + off + kHeaderSize, key.data(), key.size());
  add_piece(off, kHeaderSize + key.size());
  ++records;
}

void Log::Batch::add_expire(std::string_view key, kv::store::ExpireAt expire_at, std::uint64_t seq) {
  const std::size_t off = buf.size();
  buf.resize(off + kHeaderSize + key.size() + kExpireAtSize);
  encode_header(std::span(buf).subspan(off), expire_header(as_bytes(key), expire_at, seq));
  proto::copy_bytes(buf.data() + off + kHeaderSize, key.data(), key.size());
  const auto at = expire_bytes(expire_at);
  proto::copy_bytes(buf.data() + off + kHeaderSize + key.size(), at.data(), at.size());
  add_piece(off, kHeaderSize + key.size() + kExpireAtSize);
  ++records;
}

void Log::Batch::add_end(std::uint64_t count, std::uint64_t seq) {
  const auto rec = snapshot_end_record(count, seq);
  const std::size_t off = buf.size();
  buf.insert(buf.end(), rec.begin(), rec.end());
  add_piece(off, rec.size());
}

std::vector<iovec> Log::Batch::iovecs() const {
  std::vector<iovec> v;
  v.reserve(pieces.size());
  for (const auto& p : pieces) {
    const std::byte* base = p.ext != nullptr ? p.ext : buf.data() + p.off;
    v.push_back({const_cast<std::byte*>(base), p.len});
  }
  return v;
}

// --- Log --------------------------------------------------------------------------

Log::Log(reactor::Reactor& reactor, kv::store::Store& store, LogOptions options, const RecoveryResult& recovered)
    : reactor_(&reactor),
      store_(&store),
      options_(std::move(options)),
      gen_(recovered.generation),
      offset_(recovered.log_size),
      next_seq_(recovered.next_seq),
      snapshot_gen_(recovered.snapshot_gen),
      first_log_gen_(recovered.first_log_gen),
      uring_(reactor) {
  dir_fd_.reset(::open(options_.dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dir_fd_) throw std::system_error(errno, std::system_category(), "open " + options_.dir);
  fd_.reset(::openat(dir_fd_.get(), log_name(gen_).c_str(), O_WRONLY | O_CLOEXEC));
  if (!fd_) throw std::system_error(errno, std::system_category(), "open " + options_.dir + "/" + log_name(gen_));
  stats_.log_bytes = offset_;
  if (options_.mode == FsyncMode::batch) tick_ = reactor_->every(options_.interval, [this] { on_tick(); });
  spdlog::info("durable: appending to {}/{} at offset {} (fsync {}{})", options_.dir, log_name(gen_), offset_,
               durable::to_string(options_.mode),
               options_.mode == FsyncMode::batch ? fmt::format(", every {} ms", options_.interval.count()) : "");
}

Log::~Log() { close_sync(); }

kv::store::DurableAck Log::record_set(std::string_view key, std::string_view value, const kv::store::LargeRef& large,
                                      kv::store::ExpireAt expire_at, std::uint64_t conn_token,
                                      std::uint32_t wait) noexcept {
  return record(Kind::set, key, value, large, expire_at, conn_token, wait);
}

kv::store::DurableAck Log::record_del(std::string_view key, std::uint64_t conn_token, std::uint32_t wait) noexcept {
  return record(Kind::del, key, {}, {}, kv::store::kNoExpiry, conn_token, wait);
}

kv::store::DurableAck Log::record_expire(std::string_view key, kv::store::ExpireAt expire_at,
                                         std::uint64_t conn_token, std::uint32_t wait) noexcept {
  return record(Kind::expire, key, {}, {}, expire_at, conn_token, wait);
}

void Log::record_eviction(std::string_view key) noexcept {
  // `now` or `failed` (counted): nobody to tell
  (void)record(Kind::del, key, {}, {}, kv::store::kNoExpiry, 0, 0, false);
}

kv::store::DurableAck Log::record(Kind kind, std::string_view key, std::string_view value,
                                  const kv::store::LargeRef& large, kv::store::ExpireAt expire_at,
                                  std::uint64_t conn_token, std::uint32_t wait, bool waits) noexcept {
  if (closed_) return kv::store::DurableAck::failed;
  try {
    if (queue_.empty() || queue_.back().size >= options_.batch_bytes ||
        (large && queue_.back().pins.size() >= kMaxPins)) {
      queue_.emplace_back();
    }
    Batch& b = queue_.back();
    const bool defer = waits && (options_.mode == FsyncMode::always || failing_);
    if (defer) b.waiters.reserve(b.waiters.size() + 1);  // no throw after the record is in
    switch (kind) {
      case Kind::set: b.add(key, value, large, next_seq_++, expire_at); break;
      case Kind::del:
        b.add_del(key, next_seq_++);
        ++stats_.deletes;
        break;
      case Kind::expire: b.add_expire(key, expire_at, next_seq_++); break;
    }
    ++stats_.records;
    if (!defer) return kv::store::DurableAck::now;
    b.waiters.push_back({conn_token, wait});
    return kv::store::DurableAck::later;
  } catch (const std::bad_alloc&) {
    ++stats_.failed_sets;
    return kv::store::DurableAck::failed;
  }
}

void Log::flush() noexcept { submit_next(); }

void Log::submit_next() noexcept {
  if (writing_ || closed_ || queue_.empty() || writer_blocked()) return;
  inflight_ = std::move(queue_.front());
  queue_.pop_front();
  writing_ = true;
  std::vector<iovec> iov;
  try {
    iov = inflight_.iovecs();
  } catch (const std::bad_alloc&) {
    finish_batch(-ENOMEM, -ENOMEM);
    return;
  }
  int rc;
  // While failing, batch and never modes sync too: a SET then waits for its
  // own write (record_set) and the error clears only once a write AND an
  // fsync succeed (after a failed fsync the kernel may have dropped pages).
  inflight_synced_ = options_.mode == FsyncMode::always || failing_;
  if (inflight_synced_) {
    rc = uring_.writev_then_sync(
        fd_.get(), iov, offset_, true,
        [this](int res) {
          write_res_ = res;
          linked_sync_started_ = std::chrono::steady_clock::now();
        },
        [this](int res) {
          if (fail_point("log_sync")) res = -EIO;
          if (res >= 0) fsync_time_.record(std::chrono::steady_clock::now() - linked_sync_started_);
          finish_batch(write_res_, res);
        });
  } else {
    rc = uring_.writev(fd_.get(), iov, offset_, [this](int res) { finish_batch(res, 0); });
  }
  if (rc < 0) finish_batch(rc, rc);
}

void Log::set_failing(bool failing, int err) noexcept {
  if (failing == failing_) return;
  failing_ = failing;
  if (failing) {
    spdlog::error("durable: {}/{}: {}; SETs fail with io_error until a write and its fsync succeed (each SET "
                  "waits for its own, whatever --fsync says)",
                  options_.dir, log_name(gen_), std::strerror(err));
  } else {
    spdlog::warn("durable: {}/{}: a write and fsync succeeded again; disk error cleared", options_.dir,
                 log_name(gen_));
  }
}

void Log::finish_batch(int write_res, int sync_res) noexcept {
  writing_ = false;
  const bool wrote = write_res >= 0 && static_cast<std::uint64_t>(write_res) == inflight_.size;
  const bool ok = wrote && sync_res >= 0;
  if (write_res >= 0) ++stats_.writes;
  if (inflight_synced_ && sync_res >= 0) ++stats_.fsyncs;
  if (ok) {
    offset_ += inflight_.size;
    stats_.bytes_written += inflight_.size;
    stats_.log_bytes = offset_;
    if (options_.mode == FsyncMode::batch) dirty_ = true;
    set_failing(false, 0);
  } else {
    ++stats_.io_errors;
    stats_.failed_sets += inflight_.waiters.size();
    const int err = write_res < 0 ? -write_res : !wrote ? ENOSPC : sync_res == -ECANCELED ? EIO : -sync_res;
    set_failing(true, err);
    // Nothing of this batch may stay after the last good record: a later
    // batch is written at offset_, and stale records behind it would replay.
    if (!closed_ && ::ftruncate(fd_.get(), static_cast<off_t>(offset_)) != 0) {
      spdlog::error("durable: truncating {}/{} back to {} after a failed write: {}", options_.dir, log_name(gen_),
                    offset_, std::strerror(errno));
    }
  }
  std::vector<Waiter> waiters = std::move(inflight_.waiters);
  inflight_ = Batch{};  // unpins the large values
  if (sink_) {
    for (const auto& w : waiters) sink_(w.token, w.wait, ok);
  }
  if (step_ == CompactStep::switching) try_switch();
  maybe_compact();
  submit_next();
}

void Log::on_tick() noexcept {
  if (!dirty_ || sync_inflight_ || closed_ || writer_blocked()) return;
  dirty_ = false;
  sync_inflight_ = true;
  tick_sync_started_ = std::chrono::steady_clock::now();
  const int rc = uring_.fsync(fd_.get(), true, [this](int res) {
    sync_inflight_ = false;
    if (fail_point("log_sync")) res = -EIO;
    if (res < 0) {
      ++stats_.io_errors;
      dirty_ = true;  // try again next tick
      set_failing(true, -res);
    } else {
      ++stats_.fsyncs;
      fsync_time_.record(std::chrono::steady_clock::now() - tick_sync_started_);
    }
    if (step_ == CompactStep::switching) try_switch();
  });
  if (rc < 0) {
    sync_inflight_ = false;
    dirty_ = true;
  }
}

LogStats Log::stats() const noexcept {
  LogStats s = stats_;
  s.failing = failing_;
  s.generation = gen_;
  return s;
}

void Log::append_stats(kv::store::StatRows& rows) const {
  const LogStats s = stats();
  rows.insert(rows.end(), {
      {"log_records", s.records, kv::store::StatKind::counter, "SET and DEL records queued for the log"},
      {"log_deletes", s.deletes, kv::store::StatKind::counter, "DEL records (tombstones) queued for the log"},
      {"log_bytes_written", s.bytes_written, kv::store::StatKind::counter, "record bytes written successfully (all logs)"},
      {"log_writes", s.writes, kv::store::StatKind::counter, "log writes completed"},
      {"log_fsyncs", s.fsyncs, kv::store::StatKind::counter, "fdatasyncs completed"},
      {"log_io_errors", s.io_errors, kv::store::StatKind::counter, "failed writes and syncs"},
      {"log_failed_sets", s.failed_sets, kv::store::StatKind::counter, "SETs and DELs answered io_error by the log"},
      {"log_failing", s.failing ? 1u : 0u, kv::store::StatKind::gauge, "1 while the log is in its disk-error state"},
      {"compactions", s.compactions, kv::store::StatKind::counter, "compactions completed"},
      {"compaction_failures", s.compaction_failures, kv::store::StatKind::counter, "compactions abandoned after an error"},
      {"log_bytes", s.log_bytes, kv::store::StatKind::gauge, "bytes in the current log file"},
      {"log_generation", s.generation, kv::store::StatKind::gauge, "current log file generation"},
  });
  fsync_rows_.append(rows, fsync_time_);
}

void Log::append_histograms(std::string& out) const {
  constexpr std::string_view kName = "rkv_log_fsync_duration_seconds";
  kv::store::Histogram::append_family(
      out, kName, "time of a successful fdatasync of the log (from its write's completion when linked to one)");
  fsync_time_.append_prometheus(out, kName, "");
}

void Log::close_sync() noexcept {
  if (closed_) return;
  closed_ = true;
  sink_ = nullptr;
  tick_.reset();
  try {
    if (!uring_.wait_idle(std::chrono::seconds(30))) {
      spdlog::error("durable: I/O still in flight at shutdown");
    }
  } catch (const std::exception& e) {
    spdlog::error("durable: waiting for I/O at shutdown: {}", e.what());
  }
  if (writing_) return;  // the kernel still has it: nothing more is safe to write
  std::uint64_t bytes = 0;
  for (const Batch& b : queue_) {
    const auto iov = b.iovecs();
    std::uint64_t done = 0;
    while (done < b.size) {
      // The iovec array is small; rebuild it past what was written.
      std::vector<iovec> rest;
      std::uint64_t skip = done;
      for (const auto& v : iov) {
        if (skip >= v.iov_len) {
          skip -= v.iov_len;
          continue;
        }
        rest.push_back({static_cast<std::byte*>(v.iov_base) + skip, v.iov_len - skip});
        skip = 0;
      }
      const ssize_t n = ::pwritev(fd_.get(), rest.data(), static_cast<int>(rest.size()),
                                  static_cast<off_t>(offset_ + done));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        spdlog::error("durable: writing queued records at shutdown: {}", std::strerror(n < 0 ? errno : ENOSPC));
        (void)::ftruncate(fd_.get(), static_cast<off_t>(offset_));
        queue_.clear();
        return;
      }
      done += static_cast<std::uint64_t>(n);
    }
    offset_ += b.size;
    bytes += b.size;
  }
  queue_.clear();
  if (options_.mode != FsyncMode::never || bytes > 0) {
    if (::fdatasync(fd_.get()) != 0) spdlog::error("durable: sync at shutdown: {}", std::strerror(errno));
  }
  spdlog::info("durable: closed {}/{} at offset {}", options_.dir, log_name(gen_), offset_);
}

}  // namespace rkv::durable
