// Recovery: see recovery.hpp.
#include "durable/recovery.hpp"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <limits>
#include <optional>
#include <span>
#include <system_error>
#include <variant>
#include <vector>

#include "durable/files.hpp"
#include "durable/record.hpp"
#include "proto/endian.hpp"
#include "reactor/fd.hpp"

namespace rkv::durable {

namespace {

using reactor::UniqueFd;

[[noreturn]] void throw_errno(const std::string& what) {
  throw std::system_error(errno, std::system_category(), what);
}

// A read-only mapping of a whole file.
class Mapped {
 public:
  explicit Mapped(const std::string& path) {
    UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd) throw_errno("open " + path);
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0) throw_errno("stat " + path);
    size_ = static_cast<std::size_t>(st.st_size);
    if (size_ == 0) return;
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd.get(), 0);
    if (p == MAP_FAILED) throw_errno("mmap " + path);
    data_ = static_cast<const std::byte*>(p);
  }
  Mapped(const Mapped&) = delete;
  Mapped& operator=(const Mapped&) = delete;
  ~Mapped() {
    if (data_ != nullptr) ::munmap(const_cast<std::byte*>(data_), size_);
  }
  [[nodiscard]] std::span<const std::byte> bytes() const noexcept { return {data_, size_}; }

 private:
  const std::byte* data_ = nullptr;
  std::size_t size_ = 0;
};

// One record at `pos`, fully checked.
struct Parsed {
  enum class Kind : std::uint8_t { ok, torn, bad } kind = Kind::bad;
  RecordHeader h{};
  std::string why;
  std::uint64_t resume = 0;  // bad: where to look for the next valid record
};

Parsed parse_at(std::span<const std::byte> b, std::uint64_t pos, std::uint64_t max_value) {
  Parsed p;
  const std::uint64_t left = b.size() - pos;
  const auto hdr = decode_header(b.subspan(pos), max_value);
  if (const auto* e = std::get_if<HeaderError>(&hdr)) {
    if (*e == HeaderError::short_header) {
      p.kind = Parsed::Kind::bad;  // resync decides torn vs middle
      p.why = fmt::format("{} bytes left, less than a header", left);
    } else {
      p.why = std::string(to_string(*e));
    }
    p.resume = pos + 1;
    return p;
  }
  p.h = std::get<RecordHeader>(hdr);
  if (p.h.record_size() > left) {  // a genuine length (header CRC ok) past the end: cut short
    p.kind = Parsed::Kind::torn;
    p.why = fmt::format("record of {} bytes, only {} left", p.h.record_size(), left);
    return p;
  }
  // The body is contiguous (key, [expire_at], value): one CRC over it all.
  const auto body = b.subspan(pos + kHeaderSize, p.h.record_size() - kHeaderSize);
  if (body_crc(body, {}) != p.h.body_crc) {
    p.why = "body CRC mismatch";
    p.resume = pos + p.h.record_size();
    return p;
  }
  p.kind = Parsed::Kind::ok;
  return p;
}

// The offset of the next fully valid record at or after `from`, if any.
std::optional<std::uint64_t> next_valid(std::span<const std::byte> b, std::uint64_t from, std::uint64_t max_value) {
  std::byte magic[4];
  proto::store_le<std::uint32_t>(magic, 0, kRecordMagic);
  for (std::uint64_t pos = from; pos + kHeaderSize <= b.size(); ++pos) {
    const void* hit = std::memchr(b.data() + pos, static_cast<int>(magic[0]), b.size() - pos);
    if (hit == nullptr) return std::nullopt;
    pos = static_cast<std::uint64_t>(static_cast<const std::byte*>(hit) - b.data());
    if (pos + kHeaderSize > b.size()) return std::nullopt;
    if (std::memcmp(b.data() + pos, magic, 4) != 0) continue;
    if (parse_at(b, pos, max_value).kind == Parsed::Kind::ok) return pos;
  }
  return std::nullopt;
}

struct FileScan {
  std::uint64_t good_end = 0;   // end of the last good record (truncate here if torn)
  std::uint64_t records = 0;
  std::uint64_t deletes = 0;  // of which DEL records
  std::uint64_t bytes = 0;
  std::uint64_t dropped = 0;
  std::uint64_t max_seq = 0;
  bool torn = false;
  bool snapshot_complete = false;
  bool repaired = false;  // --repair skipped something
};

// Scans one file, applying SET and DEL records to the store.
FileScan scan_file(const std::string& path, bool snapshot, const RecoveryOptions& opts, kv::store::Store& store) {
  Mapped m(path);
  const auto b = m.bytes();
  FileScan s;
  std::uint64_t pos = 0;
  std::uint64_t snapshot_sets = 0;
  while (pos < b.size()) {
    Parsed p = parse_at(b, pos, opts.max_value);
    if (p.kind == Parsed::Kind::ok && !snapshot && p.h.type != RecordType::snapshot_end && p.h.seq <= s.max_seq) {
      p.kind = Parsed::Kind::bad;
      p.why = fmt::format("sequence number {} after {}", p.h.seq, s.max_seq);
      p.resume = pos + p.h.record_size();
    }
    if (p.kind == Parsed::Kind::ok && p.h.type == RecordType::snapshot_end && !snapshot) {
      p.kind = Parsed::Kind::bad;
      p.why = "snapshot end record in a log";
      p.resume = pos + p.h.record_size();
    }
    if (p.kind == Parsed::Kind::ok && (p.h.type == RecordType::del || p.h.type == RecordType::expire) && snapshot) {
      p.kind = Parsed::Kind::bad;  // a snapshot holds live keys only (docs/durability.md, "Compaction")
      p.why = fmt::format("{} record in a snapshot", to_string(p.h.type));
      p.resume = pos + p.h.record_size();
    }
    if (p.kind == Parsed::Kind::ok) {
      const auto key = b.subspan(pos + kHeaderSize, p.h.key_len);
      const std::size_t at_len = p.h.type == RecordType::set_ttl ? kExpireAtSize : 0;
      const std::int64_t expire_at =
          at_len != 0 ? load_expire_at(b.subspan(pos + kHeaderSize + p.h.key_len, at_len)) : 0;
      const auto value = b.subspan(pos + kHeaderSize + p.h.key_len + at_len, p.h.value_len);
      if (p.h.type == RecordType::snapshot_end) {
        const auto count = proto::load_le<std::uint64_t>(value, 0);
        if (count != snapshot_sets) {
          throw RecoveryError(fmt::format("{}: snapshot end record at offset {} counts {} records, {} read", path,
                                          pos, count, snapshot_sets));
        }
        s.max_seq = std::max(s.max_seq, p.h.seq);
        s.snapshot_complete = true;
        pos += p.h.record_size();
        s.bytes += p.h.record_size();
        s.good_end = pos;
        if (pos != b.size()) {
          if (!opts.repair) {
            throw RecoveryError(fmt::format("{}: {} bytes after the snapshot end record; refusing to start "
                                            "(--repair ignores them)", path, b.size() - pos));
          }
          spdlog::warn("durable: {}: --repair: ignoring {} bytes after the snapshot end record", path, b.size() - pos);
          s.dropped += b.size() - pos;
          s.repaired = true;
        }
        break;
      }
      const std::string_view k(reinterpret_cast<const char*>(key.data()), key.size());
      // Replayed as of when they were written: nothing expires during the
      // replay (recover() stops the Store's clock); what has expired since
      // is dropped at the end.
      if (p.h.type == RecordType::del) {
        store.erase(k);  // a tombstone: the key was deleted (absent already is fine)
        ++s.deletes;
      } else if (p.h.type == RecordType::expire) {
        (void)store.expire(k, load_expire_at(value));  // no key: a later SET, or none, decides
      } else {
        if (!store.set(k, std::string_view(reinterpret_cast<const char*>(value.data()), value.size()), expire_at)) {
          throw RecoveryError(fmt::format(
              "{}: the recovered data does not fit the memory limit ({} bytes, kvd --max-memory) at the record "
              "at offset {} (key {}); refusing to start: raise --max-memory",
              path, store.budget()->limit(), pos, k));
        }
        ++snapshot_sets;
      }
      ++s.records;
      s.bytes += p.h.record_size();
      if (!snapshot) s.max_seq = p.h.seq;
      pos += p.h.record_size();
      s.good_end = pos;
      continue;
    }
    // Not a good record: torn tail, or damage with good records after it?
    const std::optional<std::uint64_t> next =
        p.kind == Parsed::Kind::torn ? std::nullopt : next_valid(b, p.resume, opts.max_value);
    if (!next) {
      if (snapshot) break;  // handled below: no end record
      spdlog::warn("durable: {}: torn tail at offset {} ({}): truncating {} bytes back to the last good record",
                   path, pos, p.why, b.size() - pos);
      s.torn = true;
      break;
    }
    if (!opts.repair) {
      throw RecoveryError(fmt::format(
          "{}: corrupt record at offset {} ({}); valid records follow at offset {}; refusing to start "
          "(kvd --repair drops the {} damaged bytes and keeps every good record)",
          path, pos, p.why, *next, *next - pos));
    }
    spdlog::warn("durable: {}: --repair: dropping {} damaged bytes at offset {} ({}); resuming at offset {}", path,
                 *next - pos, pos, p.why, *next);
    s.dropped += *next - pos;
    s.repaired = true;
    pos = *next;
  }
  if (snapshot && !s.snapshot_complete) {
    if (!opts.repair) {
      throw RecoveryError(fmt::format("{}: snapshot has no valid end record (damaged after offset {}); refusing to "
                                      "start (--repair keeps its {} good records)", path, s.good_end, s.records));
    }
    spdlog::warn("durable: {}: --repair: snapshot damaged after offset {}; keeping its {} good records", path,
                 s.good_end, s.records);
    s.dropped += b.size() - s.good_end;
    s.repaired = true;
  }
  return s;
}

void truncate_file(const std::string& path, std::uint64_t size) {
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
  if (!fd) throw_errno("open " + path);
  if (::ftruncate(fd.get(), static_cast<off_t>(size)) != 0) throw_errno("truncate " + path);
  if (::fsync(fd.get()) != 0) throw_errno("fsync " + path);
}

void remove_file(const std::string& path) {
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) throw_errno("unlink " + path);
}

void write_all(int fd, const std::string& path, std::span<const std::byte> a, std::span<const std::byte> b = {},
               std::span<const std::byte> c = {}, std::span<const std::byte> d = {}) {
  for (auto part : {a, b, c, d}) {
    while (!part.empty()) {
      const ssize_t n = ::write(fd, part.data(), part.size());
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) throw_errno("write " + path);
      part = part.subspan(static_cast<std::size_t>(n));
    }
  }
}

}  // namespace

RecoveryResult recover(const RecoveryOptions& opts, kv::store::Store& store) {
  const auto t0 = std::chrono::steady_clock::now();
  if (::mkdir(opts.dir.c_str(), 0755) != 0 && errno != EEXIST) throw_errno("mkdir " + opts.dir);
  const std::string dir = opts.dir + "/";
  DirListing ls = list_dir(opts.dir);
  for (const auto& t : ls.temporaries) {
    spdlog::info("durable: removing {}{} (an unfinished snapshot)", dir, t);
    remove_file(dir + t);
  }
  RecoveryResult r;
  // The records are replayed as of when they were written: the Store's clock
  // stands still before every expiry time during the replay (a SET_TTL whose
  // time has passed may be followed by an EXPIRE that made it persist), and
  // what has expired since is dropped once it is over.
  struct StoppedClock {
    kv::store::Store& store;
    kv::store::Store::Clock was;
    ~StoppedClock() { store.set_clock(was); }
  } stopped{store, store.clock()};
  store.set_clock([]() noexcept -> kv::store::ExpireAt { return 1; });
  std::uint64_t base = 0;  // newest snapshot's generation (0: none)
  bool repaired = false;
  const auto count = [&r, &repaired](const FileScan& s) {  // one file's share of the totals
    r.records += s.records;
    r.deletes += s.deletes;
    r.bytes += s.bytes;
    r.dropped_bytes += s.dropped;
    repaired = repaired || s.repaired;
    r.next_seq = std::max(r.next_seq, s.max_seq + 1);
    ++r.files;
  };
  if (!ls.snapshots.empty()) {
    base = ls.snapshots.back();
    count(scan_file(dir + snapshot_name(base), true, opts, store));
  }
  std::vector<std::uint64_t> logs;
  for (const auto g : ls.logs) {
    if (g >= base) logs.push_back(g);
  }
  r.snapshot_gen = base;
  r.first_log_gen = logs.empty() ? std::max<std::uint64_t>(base, 1) : logs.front();
  for (std::size_t i = 0; i < logs.size(); ++i) {
    const std::string path = dir + log_name(logs[i]);
    const FileScan s = scan_file(path, false, opts, store);
    if (s.max_seq != 0 && s.max_seq < r.next_seq && s.records > 0) {
      // Sequence numbers must grow across files too; one going back means a
      // stale or foreign file.
      const std::string why = fmt::format("{}: sequence numbers restart ({} after {})", path, s.max_seq, r.next_seq - 1);
      if (!opts.repair) throw RecoveryError(why + "; refusing to start");
      spdlog::warn("durable: --repair: {}", why);
      repaired = true;
    }
    if (s.torn) {
      struct stat st {};
      if (::stat(path.c_str(), &st) == 0) r.truncated_bytes += static_cast<std::uint64_t>(st.st_size) - s.good_end;
      truncate_file(path, s.good_end);
    }
    count(s);
    r.generation = logs[i];
    r.log_size = s.good_end;
  }
  store.set_clock(stopped.was);
  r.expired = store.expire_due(std::numeric_limits<std::size_t>::max());
  // Obsolete files from a finished compaction.
  for (const auto g : ls.logs) {
    if (g < base) {
      spdlog::info("durable: removing obsolete {}{}", dir, log_name(g));
      remove_file(dir + log_name(g));
    }
  }
  for (const auto g : ls.snapshots) {
    if (g < base) {
      spdlog::info("durable: removing obsolete {}{}", dir, snapshot_name(g));
      remove_file(dir + snapshot_name(g));
    }
  }
  if (logs.empty()) {  // a new directory, or a snapshot without its log: start one
    r.generation = std::max<std::uint64_t>(base, 1);
    r.log_size = 0;
    UniqueFd fd(::open((dir + log_name(r.generation)).c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644));
    if (!fd) throw_errno("create " + dir + log_name(r.generation));
    if (::fsync(fd.get()) != 0) throw_errno("fsync " + dir + log_name(r.generation));
    fsync_dir(opts.dir);
  }
  if (repaired) {  // --repair: write the repaired state so the damage is gone
    const std::uint64_t gen = r.generation + 1;
    write_snapshot_sync(opts.dir, gen, r.next_seq - 1, store);
    spdlog::warn("durable: --repair: {} damaged bytes dropped; rewrote the data as {}{}", r.dropped_bytes, dir,
                 snapshot_name(gen));
    r.generation = gen;
    r.log_size = 0;
    r.snapshot_gen = gen;
    r.first_log_gen = gen;
    r.rewritten = true;
  }
  r.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

void write_snapshot_sync(const std::string& dir_path, std::uint64_t gen, std::uint64_t last_seq,
                         const kv::store::Store& store) {
  const std::string dir = dir_path + "/";
  const std::string tmp = dir + snapshot_tmp_name(gen);
  {
    UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    if (!fd) throw_errno("create " + tmp);
    std::uint64_t count = 0;
    std::byte hdr[kHeaderSize];
    store.for_each([&](std::string_view key, const kv::store::Store::Lookup& v) {
      const auto k = std::as_bytes(std::span(key.data(), key.size()));
      const auto val = std::as_bytes(std::span(v.value.data(), v.value.size()));
      encode_header(hdr, set_header(k, val, 0, v.expire_at));
      if (v.expire_at != 0) {
        write_all(fd.get(), tmp, hdr, k, expire_bytes(v.expire_at), val);
      } else {
        write_all(fd.get(), tmp, hdr, k, val);
      }
      ++count;
    });
    const auto end = snapshot_end_record(count, last_seq);
    write_all(fd.get(), tmp, end);
    if (::fsync(fd.get()) != 0) throw_errno("fsync " + tmp);
  }
  {
    UniqueFd fd(::open((dir + log_name(gen)).c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    if (!fd) throw_errno("create " + dir + log_name(gen));
    if (::fsync(fd.get()) != 0) throw_errno("fsync " + dir + log_name(gen));
  }
  if (::rename(tmp.c_str(), (dir + snapshot_name(gen)).c_str()) != 0) throw_errno("rename " + tmp);
  fsync_dir(dir_path);
  const DirListing ls = list_dir(dir_path);
  for (const auto g : ls.logs) {
    if (g < gen) remove_file(dir + log_name(g));
  }
  for (const auto g : ls.snapshots) {
    if (g < gen) remove_file(dir + snapshot_name(g));
  }
}

}  // namespace rkv::durable
