// Durability log, pure parts: the record format (encode/decode, CRCs) and
// recovery from files written here byte by byte: a clean log, a torn tail
// (cut mid-record, garbage, zeros), corruption in the middle (refused;
// --repair keeps every good record before and after), snapshots (complete,
// missing end record, newer than the logs), obsolete and temporary files,
// DEL records (tombstones): applied in order, refused in a snapshot.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "durable/files.hpp"
#include "durable/record.hpp"
#include "durable/recovery.hpp"
#include "kv/store/store.hpp"
#include "proto/crc32c.hpp"
#include "proto/endian.hpp"

namespace rkv::durable {
namespace {

namespace fs = std::filesystem;

std::span<const std::byte> b(std::string_view s) { return {reinterpret_cast<const std::byte*>(s.data()), s.size()}; }

std::string record(std::string_view key, std::string_view value, std::uint64_t seq) {
  std::string out(kHeaderSize, '\0');
  encode_header(std::as_writable_bytes(std::span(out.data(), out.size())), set_header(b(key), b(value), seq));
  return out + std::string(key) + std::string(value);
}

// A SET_TTL record: the key expires at `at` (ms since the epoch).
std::string record_ttl(std::string_view key, std::string_view value, std::uint64_t seq, std::int64_t at) {
  std::string out(kHeaderSize, '\0');
  encode_header(std::as_writable_bytes(std::span(out.data(), out.size())), set_header(b(key), b(value), seq, at));
  const auto a = expire_bytes(at);
  return out + std::string(key) + std::string(reinterpret_cast<const char*>(a.data()), a.size()) + std::string(value);
}

std::string expire_record(std::string_view key, std::uint64_t seq, std::int64_t at) {
  std::string out(kHeaderSize, '\0');
  encode_header(std::as_writable_bytes(std::span(out.data(), out.size())), expire_header(b(key), at, seq));
  const auto a = expire_bytes(at);
  return out + std::string(key) + std::string(reinterpret_cast<const char*>(a.data()), a.size());
}

std::string tombstone(std::string_view key, std::uint64_t seq) {
  std::string out(kHeaderSize, '\0');
  encode_header(std::as_writable_bytes(std::span(out.data(), out.size())), del_header(b(key), seq));
  return out + std::string(key);
}

std::string snapshot_end(std::uint64_t count, std::uint64_t seq) {
  const auto rec = snapshot_end_record(count, seq);
  return {reinterpret_cast<const char*>(rec.data()), rec.size()};
}

class RecoveryDir {
 public:
  RecoveryDir() {
    char tmpl[] = "/tmp/rkv-recovery-XXXXXX";
    path_ = ::mkdtemp(tmpl);
  }
  ~RecoveryDir() { fs::remove_all(path_); }
  [[nodiscard]] const std::string& path() const { return path_; }
  void write(const std::string& name, const std::string& bytes) const {
    std::ofstream(path_ + "/" + name, std::ios::binary | std::ios::trunc) << bytes;
  }
  [[nodiscard]] std::string read(const std::string& name) const {
    std::ifstream in(path_ + "/" + name, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), {}};
  }
  [[nodiscard]] bool exists(const std::string& name) const { return fs::exists(path_ + "/" + name); }

 private:
  std::string path_;
};

std::string get(const kv::store::Store& s, std::string_view key) {
  const auto v = s.peek(key);
  return v.found ? std::string(v.value) : std::string("<missing>");
}

TEST(DurableRecord, RoundTripAndChecks) {
  const std::string r = record("key", "value", 7);
  ASSERT_EQ(r.size(), kHeaderSize + 3 + 5);
  const auto h = decode_header(b(r), 1 << 20);
  ASSERT_TRUE(std::holds_alternative<RecordHeader>(h));
  const auto& hh = std::get<RecordHeader>(h);
  EXPECT_EQ(hh.type, RecordType::set);
  EXPECT_EQ(hh.key_len, 3);
  EXPECT_EQ(hh.seq, 7u);
  EXPECT_EQ(hh.value_len, 5u);
  EXPECT_EQ(hh.body_crc, body_crc(b("key"), b("value")));
  for (std::size_t i = 0; i < kHeaderSize; ++i) {  // any damaged header byte is detected
    std::string bad = r;
    bad[i] = static_cast<char>(bad[i] ^ 0x10);
    EXPECT_TRUE(std::holds_alternative<HeaderError>(decode_header(b(bad), 1 << 20))) << "byte " << i;
  }
  EXPECT_EQ(std::get<HeaderError>(decode_header(b(r).first(10), 1 << 20)), HeaderError::short_header);
  EXPECT_EQ(std::get<HeaderError>(decode_header(b(record("k", "0123456789", 1)), 4)), HeaderError::bad_field);
}

TEST(DurableRecovery, NewDirectoryIsCreatedWithAnEmptyLog) {
  RecoveryDir t;
  const std::string dir = t.path() + "/data";
  kv::store::Store s;
  const auto r = recover({dir}, s);
  EXPECT_EQ(r.records, 0u);
  EXPECT_EQ(r.generation, 1u);
  EXPECT_EQ(r.next_seq, 1u);
  EXPECT_TRUE(fs::exists(dir + "/" + log_name(1)));
}

TEST(DurableRecovery, CleanLogReplaysInOrderLastWriteWins) {
  RecoveryDir t;
  t.write(log_name(1), record("a", "1", 1) + record("b", "2", 2) + record("a", "3", 3));
  kv::store::Store s;
  const auto r = recover({t.path()}, s);
  EXPECT_EQ(r.records, 3u);
  EXPECT_EQ(r.next_seq, 4u);
  EXPECT_EQ(r.log_size, t.read(log_name(1)).size());
  EXPECT_EQ(r.truncated_bytes, 0u);
  EXPECT_EQ(get(s, "a"), "3");
  EXPECT_EQ(get(s, "b"), "2");
}

// A record cut short by a crash, garbage, or zeros after the last good
// record: truncated back to it, everything before kept.
TEST(DurableRecovery, TornTailIsTruncatedToTheLastGoodRecord) {
  const std::string good = record("a", "1", 1) + record("b", std::string(5000, 'x'), 2);
  const std::string next = record("c", "333", 3);
  for (const std::string& tail : {next.substr(0, 10), next.substr(0, kHeaderSize + 2),
                                  next.substr(0, next.size() - 1), std::string(100, '\0'),
                                  std::string("garbage after the end")}) {
    RecoveryDir t;
    t.write(log_name(1), good + tail);
    kv::store::Store s;
    const auto r = recover({t.path()}, s);
    EXPECT_EQ(r.records, 2u);
    EXPECT_EQ(r.truncated_bytes, tail.size());
    EXPECT_EQ(t.read(log_name(1)), good) << "the file is cut back to the last good record";
    EXPECT_EQ(get(s, "b"), std::string(5000, 'x'));
    EXPECT_EQ(get(s, "c"), "<missing>");
    EXPECT_EQ(r.next_seq, 3u);
  }
}

TEST(DurableRecovery, DamagedLastRecordBodyIsATornTail) {
  RecoveryDir t;
  std::string last = record("c", "333", 3);
  last.back() = '4';  // body CRC fails, nothing valid after it
  t.write(log_name(1), record("a", "1", 1) + last);
  kv::store::Store s;
  const auto r = recover({t.path()}, s);
  EXPECT_EQ(r.records, 1u);
  EXPECT_EQ(get(s, "a"), "1");
}

// Corruption with good records after it: refuse to start, touch nothing.
TEST(DurableRecovery, CorruptMiddleRecordRefusesWithoutRepair) {
  for (const std::size_t flip : {std::size_t{3}, kHeaderSize + 1}) {  // header byte, body byte
    RecoveryDir t;
    std::string mid = record("b", "2222", 2);
    mid[flip] = static_cast<char>(mid[flip] ^ 0x40);
    const std::string file = record("a", "1", 1) + mid + record("c", "3", 3);
    t.write(log_name(1), file);
    kv::store::Store s;
    try {
      (void)recover({t.path()}, s);
      ADD_FAILURE() << "recover() accepted a corrupt middle record";
    } catch (const RecoveryError& e) {
      EXPECT_NE(std::string(e.what()).find("refusing to start"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("offset"), std::string::npos) << e.what();
    }
    EXPECT_EQ(t.read(log_name(1)), file) << "nothing is truncated when refusing";
  }
}

TEST(DurableRecovery, RepairKeepsEveryGoodRecordAndRewritesTheDirectory) {
  RecoveryDir t;
  std::string mid = record("b", "2222", 2);
  mid[kHeaderSize + 2] = 'X';
  t.write(log_name(1), record("a", "1", 1) + mid + record("c", "3", 3) + record("a", "4", 4));
  kv::store::Store s;
  const auto r = recover({t.path(), true}, s);
  EXPECT_EQ(r.records, 3u);
  EXPECT_EQ(r.dropped_bytes, mid.size());
  EXPECT_TRUE(r.rewritten);
  EXPECT_EQ(get(s, "a"), "4");
  EXPECT_EQ(get(s, "b"), "<missing>");
  EXPECT_EQ(get(s, "c"), "3");
  // The next start is clean and sees the same data.
  EXPECT_FALSE(t.exists(log_name(1)));
  kv::store::Store again;
  const auto r2 = recover({t.path()}, again);
  EXPECT_EQ(r2.dropped_bytes, 0u);
  EXPECT_EQ(get(again, "a"), "4");
  EXPECT_EQ(get(again, "c"), "3");
  EXPECT_EQ(again.size(), 2u);
  EXPECT_GE(r2.next_seq, 5u);
}

TEST(DurableRecovery, SequenceGoingBackwardsInTheMiddleIsCorruption) {
  RecoveryDir t;
  t.write(log_name(1), record("a", "1", 5) + record("b", "2", 3) + record("c", "3", 6));
  kv::store::Store s;
  EXPECT_THROW((void)recover({t.path()}, s), RecoveryError);
}

TEST(DurableRecovery, SnapshotThenNewerLogsObsoleteFilesRemoved) {
  RecoveryDir t;
  t.write(log_name(1), record("old", "x", 1));  // covered by snapshot 2: obsolete
  t.write(snapshot_name(2), record("a", "1", 0) + record("b", "2", 0) + snapshot_end(2, 1));
  t.write(log_name(2), record("a", "10", 2));
  t.write(log_name(3), record("c", "30", 3));  // a compaction crashed after starting log 3
  t.write(snapshot_tmp_name(3), record("junk", "j", 0));
  kv::store::Store s;
  const auto r = recover({t.path()}, s);
  EXPECT_EQ(get(s, "a"), "10");
  EXPECT_EQ(get(s, "b"), "2");
  EXPECT_EQ(get(s, "c"), "30");
  EXPECT_EQ(get(s, "old"), "<missing>");  // only in the obsolete log, not in the snapshot
  EXPECT_EQ(get(s, "junk"), "<missing>");
  EXPECT_EQ(r.generation, 3u);
  EXPECT_EQ(r.next_seq, 4u);
  EXPECT_FALSE(t.exists(log_name(1)));
  EXPECT_FALSE(t.exists(snapshot_tmp_name(3)));
  EXPECT_TRUE(t.exists(log_name(2)));
}

TEST(DurableRecovery, SnapshotWithoutEndRecordIsRefused) {
  RecoveryDir t;
  t.write(snapshot_name(2), record("a", "1", 0) + record("b", "2", 0));
  t.write(log_name(2), "");
  kv::store::Store s;
  EXPECT_THROW((void)recover({t.path()}, s), RecoveryError);
  kv::store::Store repaired;
  const auto r = recover({t.path(), true}, repaired);
  EXPECT_EQ(get(repaired, "a"), "1");
  EXPECT_EQ(get(repaired, "b"), "2");
  EXPECT_TRUE(r.rewritten);
}

TEST(DurableRecovery, WriteSnapshotSyncRoundTrips) {
  RecoveryDir t;
  kv::store::Store s;
  EXPECT_TRUE(s.set("k1", "v1"));
  EXPECT_TRUE(s.set("k2", std::string(70000, 'z')));
  write_snapshot_sync(t.path(), 5, 41, s);
  kv::store::Store back;
  const auto r = recover({t.path()}, back);
  EXPECT_EQ(r.records, 2u);
  EXPECT_EQ(r.next_seq, 42u);
  EXPECT_EQ(r.generation, 5u);
  EXPECT_EQ(get(back, "k2"), std::string(70000, 'z'));
}

TEST(DurableRecovery, DataOverTheMemoryLimitRefusesToStart) {
  RecoveryDir t;
  kv::store::Store s;
  EXPECT_TRUE(s.set("k1", std::string(1000, 'a')));
  EXPECT_TRUE(s.set("k2", std::string(1000, 'b')));
  write_snapshot_sync(t.path(), 5, 41, s);
  kv::store::Store small(kv::store::Store::kEntryOverhead + 2 + 1000);  // room for one of them
  try {
    (void)recover({t.path()}, small);
    ADD_FAILURE() << "recovered more than the limit holds";
  } catch (const RecoveryError& e) {
    EXPECT_NE(std::string(e.what()).find("does not fit the memory limit"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("raise --max-memory"), std::string::npos) << e.what();
  }
  kv::store::Store enough(2 * (kv::store::Store::kEntryOverhead + 2 + 1000));
  EXPECT_EQ(recover({t.path()}, enough).records, 2u);
}

TEST(DurableRecord, TombstoneRoundTripAndChecks) {
  const std::string r = tombstone("gone", 9);
  ASSERT_EQ(r.size(), kHeaderSize + 4);
  const auto h = decode_header(b(r), 1 << 20);
  ASSERT_TRUE(std::holds_alternative<RecordHeader>(h));
  const auto& hh = std::get<RecordHeader>(h);
  EXPECT_EQ(hh.type, RecordType::del);
  EXPECT_EQ(to_string(hh.type), "del");
  EXPECT_EQ(static_cast<int>(hh.type), 3) << "the on-disk type byte";
  EXPECT_EQ(hh.key_len, 4);
  EXPECT_EQ(hh.seq, 9u);
  EXPECT_EQ(hh.value_len, 0u);
  EXPECT_EQ(hh.body_crc, body_crc(b("gone"), {}));
  EXPECT_EQ(hh.record_size(), kHeaderSize + 4);
  for (std::size_t i = 0; i < kHeaderSize; ++i) {
    std::string bad = r;
    bad[i] = static_cast<char>(bad[i] ^ 0x10);
    EXPECT_TRUE(std::holds_alternative<HeaderError>(decode_header(b(bad), 1 << 20))) << "byte " << i;
  }
  // A tombstone carries a key and no value: anything else is a bad field
  // (re-encoded with a valid header CRC, so only the field check can catch it).
  const auto forged = [](RecordHeader x) {
    std::string out(kHeaderSize, '\0');
    encode_header(std::as_writable_bytes(std::span(out.data(), out.size())), x);
    return out;
  };
  RecordHeader with_value = hh;
  with_value.value_len = 1;
  EXPECT_EQ(std::get<HeaderError>(decode_header(b(forged(with_value)), 1 << 20)), HeaderError::bad_field);
  RecordHeader no_key = hh;
  no_key.key_len = 0;
  EXPECT_EQ(std::get<HeaderError>(decode_header(b(forged(no_key)), 1 << 20)), HeaderError::bad_field);
  RecordHeader long_key = hh;
  long_key.key_len = kMaxKeyLen + 1;
  EXPECT_EQ(std::get<HeaderError>(decode_header(b(forged(long_key)), 1 << 20)), HeaderError::bad_field);
  std::string type6 = forged(hh);
  type6[4] = 6;  // a type this version does not know, header CRC fixed up
  proto::store_le<std::uint32_t>(std::as_writable_bytes(std::span(type6.data(), type6.size())), 28,
                                 proto::crc32c(std::as_bytes(std::span(type6.data(), 28))));
  EXPECT_EQ(std::get<HeaderError>(decode_header(b(type6), 1 << 20)), HeaderError::bad_field);
}

TEST(DurableRecovery, TombstonesAreReplayedInOrder) {
  RecoveryDir t;
  t.write(log_name(1), record("a", "1", 1) + record("b", "2", 2) + tombstone("a", 3) +  // SET then DEL: absent
                           tombstone("c", 4) + record("c", "3", 5) +                     // DEL then SET: present
                           tombstone("never", 6) +                                      // DEL of a missing key
                           record("d", "4", 7) + tombstone("d", 8) + record("d", "5", 9));
  kv::store::Store s;
  const auto r = recover({t.path()}, s);
  EXPECT_EQ(r.records, 9u);
  EXPECT_EQ(r.deletes, 4u);
  EXPECT_EQ(r.next_seq, 10u);
  EXPECT_EQ(get(s, "a"), "<missing>");
  EXPECT_EQ(get(s, "b"), "2");
  EXPECT_EQ(get(s, "c"), "3");
  EXPECT_EQ(get(s, "never"), "<missing>");
  EXPECT_EQ(get(s, "d"), "5");
  EXPECT_EQ(s.size(), 3u);
}

TEST(DurableRecovery, TombstonesInANewerLogDeleteSnapshotKeys) {
  RecoveryDir t;
  t.write(snapshot_name(2), record("a", "1", 0) + record("b", "2", 0) + snapshot_end(2, 4));
  t.write(log_name(2), tombstone("a", 5) + record("c", "3", 6));
  t.write(log_name(3), tombstone("c", 7));
  kv::store::Store s;
  const auto r = recover({t.path()}, s);
  EXPECT_EQ(get(s, "a"), "<missing>");
  EXPECT_EQ(get(s, "b"), "2");
  EXPECT_EQ(get(s, "c"), "<missing>");
  EXPECT_EQ(r.next_seq, 8u);
}

TEST(DurableRecovery, TombstoneSequenceNumbersAreChecked) {
  RecoveryDir t;
  t.write(log_name(1), record("a", "1", 5) + tombstone("a", 3) + record("c", "3", 6));
  kv::store::Store s;
  EXPECT_THROW((void)recover({t.path()}, s), RecoveryError);
}

TEST(DurableRecovery, ATornTombstoneAtTheTailIsCut) {
  RecoveryDir t;
  const std::string good = record("a", "1", 1);
  const std::string del = tombstone("a", 2);
  t.write(log_name(1), good + del.substr(0, del.size() - 1));
  kv::store::Store s;
  const auto r = recover({t.path()}, s);
  EXPECT_EQ(get(s, "a"), "1") << "the DEL never completed its write: not acknowledged, not applied";
  EXPECT_EQ(r.truncated_bytes, del.size() - 1);
  EXPECT_EQ(t.read(log_name(1)), good);
}

TEST(DurableRecovery, ATombstoneInASnapshotIsCorruption) {
  RecoveryDir t;
  t.write(snapshot_name(2), record("a", "1", 0) + tombstone("a", 0) + record("b", "2", 0) + snapshot_end(2, 3));
  t.write(log_name(2), "");
  kv::store::Store s;
  EXPECT_THROW((void)recover({t.path()}, s), RecoveryError) << "a snapshot holds live keys only";
}

TEST(DurableRecovery, ExpiryTimesAreAbsoluteAndExpiredKeysStayGone) {
  RecoveryDir t;
  const std::int64_t now = kv::store::wall_ms();
  const std::int64_t hour = 3'600'000;
  t.write(log_name(1), record_ttl("live", "1", 1, now + hour) +     // expires later: back, with its time
                           record_ttl("dead", "2", 2, now - 1) +     // expired while down: not back
                           record("was", "3", 3) + expire_record("was", 4, now - 1) +  // EXPIRE in the past
                           record_ttl("kept", "4", 5, now + hour) + expire_record("kept", 6, 0) +  // persisted
                           record_ttl("reset", "5", 7, now - 1) + record("reset", "6", 8) +  // SET after: lives
                           expire_record("missing", 9, now + hour) +  // of no key: nothing
                           // Persisted before it expired (the records replay as of when they were written).
                           record_ttl("saved", "7", 10, now - 1) + expire_record("saved", 11, 0));
  kv::store::Store s;
  const auto r = recover({t.path()}, s);
  EXPECT_EQ(r.records, 11u);
  EXPECT_EQ(r.expired, 2u) << "dead, was";
  EXPECT_EQ(get(s, "saved"), "7");
  EXPECT_EQ(get(s, "live"), "1");
  EXPECT_EQ(s.peek("live").expire_at, now + hour) << "the absolute time, as written";
  EXPECT_EQ(get(s, "dead"), "<missing>");
  EXPECT_EQ(get(s, "was"), "<missing>");
  EXPECT_EQ(get(s, "kept"), "4");
  EXPECT_EQ(s.peek("kept").expire_at, kv::store::kNoExpiry);
  EXPECT_EQ(get(s, "reset"), "6");
  EXPECT_EQ(get(s, "missing"), "<missing>");
  EXPECT_EQ(s.size(), 4u);
  EXPECT_EQ(s.expiring(), 1u);

  // A damaged expiry time is a damaged body: the CRC covers it.
  RecoveryDir t2;
  std::string bad = record_ttl("k", "v", 1, now + hour);
  bad[kHeaderSize + 1] = static_cast<char>(bad[kHeaderSize + 1] ^ 1);
  t2.write(log_name(1), bad);
  kv::store::Store s2;
  (void)recover({t2.path()}, s2);
  EXPECT_EQ(s2.size(), 0u) << "the damaged record is a torn tail, cut";
}

TEST(DurableRecovery, SnapshotsKeepExpiryTimes) {
  RecoveryDir t;
  kv::store::Store s;
  const std::int64_t at = kv::store::wall_ms() + 3'600'000;
  EXPECT_TRUE(s.set("k1", "v1", at));
  EXPECT_TRUE(s.set("k2", std::string(70000, 'z'), at + 1));
  EXPECT_TRUE(s.set("k3", "v3"));
  write_snapshot_sync(t.path(), 5, 41, s);
  kv::store::Store back;
  const auto r = recover({t.path()}, back);
  EXPECT_EQ(r.records, 3u);
  EXPECT_EQ(back.peek("k1").expire_at, at);
  EXPECT_EQ(back.peek("k2").expire_at, at + 1);
  EXPECT_EQ(get(back, "k2"), std::string(70000, 'z'));
  EXPECT_EQ(back.peek("k3").expire_at, kv::store::kNoExpiry);
}

TEST(DurableRecovery, AnExpireRecordInASnapshotIsCorruption) {
  RecoveryDir t;
  t.write(snapshot_name(1), record("a", "1", 0) + expire_record("a", 0, 5) + snapshot_end(1, 1));
  kv::store::Store s;
  EXPECT_THROW((void)recover({t.path()}, s), RecoveryError);
}

}  // namespace
}  // namespace rkv::durable
