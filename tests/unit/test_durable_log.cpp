// durable::Log natively (a real directory, io_uring, no RDMA): DEL records
// (tombstones) are written and acknowledged like SETs, recovery after a
// restart honours them, and compaction drops deleted keys from the snapshot
// without resurrecting any, also for DELs and SETs that run while the
// snapshot is being written (docs/durability.md, "Compaction").
#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <string>

#include "durable/files.hpp"
#include "durable/log.hpp"
#include "durable/recovery.hpp"
#include "kv/store/store.hpp"
#include "reactor/reactor.hpp"
#include "../temp_dir.hpp"

namespace rkv::durable {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using kv::store::DurableAck;
using kv::store::Store;
using test::TempDir;

// A server's view of the log: the Store, the Log, and what it acknowledged.
// Every op is applied to the Store first, then recorded (as ServerConn does),
// and mirrored in `model` (nullopt = deleted).
class Durable {
 public:
  Durable(const std::string& dir, LogOptions opt) {
    opt.dir = dir;
    const RecoveryResult rec = recover({dir}, store_);
    log_ = std::make_unique<Log>(reactor_, store_, opt, rec);
    log_->set_sink([this](std::uint64_t, std::uint32_t, bool ok) { (ok ? acked_ : failed_)++; });
  }
  void set(const std::string& k, const std::string& v) {
    EXPECT_TRUE(store_.set(k, v));
    model_[k] = v;
    expect_later(log_->record_set(k, v, {}, kv::store::kNoExpiry, 1, 1));
  }
  void del(const std::string& k) {
    store_.erase(k);
    model_[k] = std::nullopt;
    expect_later(log_->record_del(k, 1, 1));
  }
  // One reactor turn's worth: the queued records go out together.
  void flush() { log_->flush(); }
  void run_once() { reactor_.run_once(100ms); }
  bool wait_acked() {
    flush();
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while ((acked_ + failed_ < sent_ || log_->compacting()) && std::chrono::steady_clock::now() < deadline) run_once();
    return acked_ == sent_ && failed_ == 0 && !log_->compacting();
  }
  Log& log() { return *log_; }
  Store& store() { return store_; }
  const std::map<std::string, std::optional<std::string>>& model() const { return model_; }

 private:
  void expect_later(DurableAck a) {
    EXPECT_EQ(a, DurableAck::later) << "--fsync always: every record waits for its sync";
    ++sent_;
  }
  reactor::Reactor reactor_;
  Store store_;
  std::unique_ptr<Log> log_;
  std::map<std::string, std::optional<std::string>> model_;
  std::size_t sent_ = 0, acked_ = 0, failed_ = 0;
};

// The store recovered from `dir` holds exactly what `model` says.
void expect_recovers(const std::string& dir, const std::map<std::string, std::optional<std::string>>& model) {
  Store back;
  (void)recover({dir}, back);
  std::size_t live = 0;
  for (const auto& [k, v] : model) {
    const auto got = back.get(k);
    if (v) {
      ++live;
      EXPECT_TRUE(got.found && got.value == *v) << k << ": expected its last value";
    } else {
      EXPECT_FALSE(got.found) << k << ": deleted, must stay deleted";
    }
  }
  EXPECT_EQ(back.size(), live);
}

LogOptions always() {
  LogOptions o;
  o.mode = FsyncMode::always;
  o.compact_min_bytes = std::uint64_t{1} << 40;  // no compaction unless a test asks
  return o;
}

TEST(DurableLog, TombstonesAreLoggedAcknowledgedAndRecovered) {
  TempDir t{"log"};
  std::map<std::string, std::optional<std::string>> model;
  {
    Durable d(t.path(), always());
    for (int i = 0; i < 20; ++i) d.set("k" + std::to_string(i), std::string(50, static_cast<char>('a' + i)));
    ASSERT_TRUE(d.wait_acked());
    for (int i = 0; i < 20; i += 2) d.del("k" + std::to_string(i));
    d.del("never-set");                      // DEL of a missing key: a tombstone too
    d.set("k0", "back");                     // SET after DEL
    d.del("k1");                             // SET ... DEL in one batch
    ASSERT_TRUE(d.wait_acked());
    const LogStats s = d.log().stats();
    EXPECT_EQ(s.records, 20u + 10u + 1u + 1u + 1u);
    EXPECT_EQ(s.deletes, 12u);
    EXPECT_GE(s.fsyncs, 2u);
    // Every successful sync is timed once: rkv_log_fsync_duration_seconds and log_fsync_* rows.
    kv::store::StatRows rows;
    d.log().append_stats(rows);
    const std::string line = kv::store::format_stats_line(rows);
    EXPECT_NE(line.find("log_fsync_count=" + std::to_string(s.fsyncs) + " "), std::string::npos) << line;
    std::string text;
    d.log().append_histograms(text);
    EXPECT_NE(text.find("# TYPE rkv_log_fsync_duration_seconds histogram\n"), std::string::npos) << text;
    EXPECT_NE(text.find("rkv_log_fsync_duration_seconds_count " + std::to_string(s.fsyncs) + "\n"),
              std::string::npos) << text;
    expect_recovers(t.path(), d.model());
    model = d.model();
  }  // close_sync
  Durable again(t.path(), always());
  EXPECT_FALSE(again.store().get("k2").found);
  EXPECT_EQ(again.store().get("k0").value, "back");
  again.set("k2", "new");  // appended after the tombstones
  again.del("k3");
  ASSERT_TRUE(again.wait_acked());
  for (const auto& [k, v] : again.model()) model[k] = v;
  expect_recovers(t.path(), model);
}

// kvd --eviction with a log: each evicted key is a tombstone (as the Server
// hooks it: Store::on_evict -> Log::record_eviction), which no reply waits
// for, so a restart recovers exactly the keys the Store kept.
TEST(DurableLog, EvictionsAreTombstonesARestartHonours) {
  TempDir t{"log"};
  const std::size_t entry = Store::kEntryOverhead + 3 + 100;
  std::set<std::string> kept;
  {
    reactor::Reactor reactor;
    Store store(10 * entry, kv::store::Eviction::lru);
    LogOptions opt = always();
    opt.dir = t.path();
    const RecoveryResult rec = recover({t.path()}, store);
    Log log(reactor, store, opt, rec);
    std::size_t acked = 0, sent = 0;
    log.set_sink([&acked](std::uint64_t, std::uint32_t, bool ok) { acked += ok ? 1 : 0; });
    store.on_evict([&log](std::string_view k) { log.record_eviction(k); });
    for (int i = 0; i < 100; ++i) {
      const std::string k = "k" + std::to_string(i);
      ASSERT_TRUE(store.set(k, std::string(100, 'v')));
      EXPECT_EQ(log.record_set(k, std::string(100, 'v'), {}, kv::store::kNoExpiry, 1, 1), DurableAck::later);
      ++sent;
    }
    log.flush();
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (acked < sent && std::chrono::steady_clock::now() < deadline) reactor.run_once(100ms);
    EXPECT_EQ(acked, sent) << "only the SETs wait; the evictions' tombstones call no sink";
    EXPECT_GE(log.stats().deletes, 90u) << "one tombstone per evicted key";
    store.for_each([&kept](std::string_view k, const Store::Lookup&) { kept.emplace(k); });
    EXPECT_LE(kept.size(), 10u);
    store.on_evict(nullptr);
    log.close_sync();
  }
  Store back;  // no limit: whatever the log holds comes back
  (void)recover({t.path()}, back);
  EXPECT_EQ(back.size(), kept.size()) << "no evicted key came back";
  for (const auto& k : kept) EXPECT_TRUE(back.get(k).found) << k;
}

TEST(DurableLog, CompactionDropsDeletedKeysAndResurrectsNone) {
  TempDir t{"log"};
  LogOptions opt = always();
  opt.compact_min_bytes = 1;
  opt.compact_ratio = 1.5;
  opt.snapshot_chunk = 256;  // a chunk per two keys: the snapshot takes many reactor turns
  Durable d(t.path(), opt);
  const std::string v(100, 'v');
  for (int i = 0; i < 50; ++i) d.set("k" + std::to_string(i), v);
  ASSERT_TRUE(d.wait_acked());
  EXPECT_EQ(d.log().stats().compactions, 0u) << "the log is the live data: nothing to compact";
  // Deleting most keys leaves a log far larger than the live data: its
  // write's completion starts a compaction.
  for (int i = 0; i < 40; ++i) d.del("k" + std::to_string(i));
  d.flush();
  // While it runs (switch, snapshot chunks, rename, ...): DELs of keys the
  // switch listed (before or after their chunk is written), SETs of keys it
  // did not list (deleted above, or new), DEL + SET again of one key.
  int turn = 0;
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (!d.log().compacting() && std::chrono::steady_clock::now() < deadline) d.run_once();
  ASSERT_TRUE(d.log().compacting());
  while (d.log().compacting() && std::chrono::steady_clock::now() < deadline) {
    if (turn < 10) {
      d.del("k" + std::to_string(40 + turn));
      d.set("new" + std::to_string(turn), "n");
      if (turn < 5) d.set("k" + std::to_string(turn), "re-set");
      if (turn == 7) {
        d.del("new0");
        d.set("new0", "again");
      }
      d.flush();
    }
    ++turn;
    d.run_once();
  }
  ASSERT_TRUE(d.wait_acked());
  EXPECT_GE(turn, 4) << "the compaction took several turns, so ops ran while it did";
  const LogStats s = d.log().stats();
  ASSERT_GE(s.compactions, 1u);  // the ops during it may make the new log compactable again
  EXPECT_EQ(s.compaction_failures, 0u);
  expect_recovers(t.path(), d.model());
  // The snapshot alone: no key deleted before the switch is in it (only live
  // keys are written, and no tombstone: recovery would refuse one there).
  const DirListing ls = list_dir(t.path());
  ASSERT_EQ(ls.snapshots.size(), 1u);
  EXPECT_EQ(ls.logs.front(), ls.snapshots.front()) << "the logs before the snapshot are gone";
  TempDir only{"log"};
  fs::copy_file(t.path() + "/" + snapshot_name(ls.snapshots.front()), only.path() + "/" + snapshot_name(ls.snapshots.front()));
  Store snap;
  (void)recover({only.path()}, snap);
  for (int i = 5; i < 40; ++i) EXPECT_FALSE(snap.get("k" + std::to_string(i)).found) << "k" << i << " was deleted";
  // More DELs after the compaction, then a restart.
  d.del("k45");
  d.del("new1");
  ASSERT_TRUE(d.wait_acked());
  expect_recovers(t.path(), d.model());
}

}  // namespace
}  // namespace rkv::durable
