// durable_e2e: kvd --data-dir end to end in the Soft-RoCE guest.
// - kvload SETs (small and 64 KiB+ rendezvous values, depth 16) against kvd
//   --fsync always; kvd is SIGKILLed mid-run; restarted on the same directory
//   it has every acknowledged SET with its exact bytes (kvload --ack-log).
// - The same with DELs: every acknowledged DEL stays deleted after the
//   SIGKILL and restart; keys never deleted are all there.
// - A crash at each step of compaction (RKV_FAULT=crash:<step>) loses nothing
//   acknowledged; a compaction that completes leaves a snapshot and restarts clean.
// - Every fdatasync failing (RKV_FAULT=fail:log_sync): no SET or DEL is ever
//   answered ok, at depth too; none of them is in the log after a restart.
// - ENOSPC on a small tmpfs: SETs fail with io_error (never a false ack), GETs
//   work, the condition clears when space returns; failed SETs are not replayed.
// - A torn tail is truncated with a log line; a corrupt record in the middle
//   makes kvd refuse to start (exit 1) unless --repair, which keeps the rest.
// (kvd's bad flags need no device: test_cli.cpp, natively.)
// Data directories live in the guest's /tmp (tmpfs: it survives a kvd restart
// within this test process, but fsync there is nearly free: the crash here is
// a process crash, not a power cut).
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mount.h>
#include <sys/wait.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "kv/client/client.hpp"
#include "kv/load/workload.hpp"
#include "../temp_dir.hpp"
#include "kvd_process.hpp"
#include "loopback.hpp"  // softroce_addr()
#include "reactor/reactor.hpp"

#ifndef RKV_KVD_PATH
#error "RKV_KVD_PATH must name the kvd binary"
#endif
#ifndef RKV_KVLOAD_PATH
#error "RKV_KVLOAD_PATH must name the kvload binary"
#endif

namespace rkv::test {
namespace {

namespace fs = std::filesystem;
using kv::client::Status;

// One SET line of a workload: `SET key @size:seed`.
struct SetLine {
  unsigned line;
  std::string key;
  std::uint64_t size;
  std::uint64_t seed;
};

// rounds x keys SETs, round-robin over the keys; every `large_every`-th key
// gets 64 KiB + a bit (rendezvous), the others 100..300 bytes (eager).
std::vector<SetLine> make_workload(const std::string& path, unsigned keys, unsigned rounds, unsigned large_every) {
  std::vector<SetLine> out;
  std::ofstream f(path, std::ios::trunc);
  unsigned line = 0;
  for (unsigned r = 0; r < rounds; ++r) {
    for (unsigned k = 0; k < keys; ++k) {
      ++line;
      const bool large = large_every != 0 && k % large_every == 0;
      const std::uint64_t size = large ? (64 << 10) + 512 * (r % 5) : 100 + (r * 7 + k) % 200;
      SetLine s{line, "key" + std::to_string(k), size, 1000ull * line + 7};
      f << "SET " << s.key << " @" << s.size << ":" << s.seed << "\n";
      out.push_back(std::move(s));
    }
  }
  return out;
}

// key -> the highest acknowledged workload line of that key.
std::map<std::string, unsigned> read_acks(const std::string& path) {
  std::map<std::string, unsigned> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream w(line);
    unsigned n = 0;
    std::string key;
    if (!(w >> n >> key)) continue;  // a line kvload was writing when it died: cannot happen with write(2), but be strict
    auto& v = out[key];
    v = std::max(v, n);
  }
  return out;
}

std::size_t count_lines(const std::string& path) {
  std::ifstream in(path);
  std::size_t n = 0;
  std::string line;
  while (std::getline(in, line)) ++n;
  return n;
}

pid_t spawn(std::vector<std::string> args) {
  auto argv = detail::argv_of(args);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::execv(args[0].c_str(), argv.data());
    ::_exit(127);
  }
  return pid;
}

// For every key of the workload, GETs it from kvd and checks the value is
// exactly the last acknowledged SET of it, or the next SET of that key in the
// file (the one that may have been in flight, unacknowledged, at the crash;
// kvload runs one operation per key at a time). A key never acknowledged may
// be missing or hold its first SET. Returns how many keys held an in-flight value.
std::size_t verify(const std::string& addr, std::uint16_t port, const std::vector<SetLine>& wl,
                   const std::map<std::string, unsigned>& acks) {
  std::map<std::string, std::vector<const SetLine*>> by_key;
  for (const auto& s : wl) by_key[s.key].push_back(&s);
  reactor::Reactor reactor;
  auto client = kv::client::Client::connect(reactor, addr, port, {});
  std::size_t in_flight_values = 0;
  for (const auto& [key, sets] : by_key) {
    const auto it = acks.find(key);
    const SetLine* acked = nullptr;
    const SetLine* next = nullptr;
    for (std::size_t i = 0; i < sets.size(); ++i) {
      if (it != acks.end() && sets[i]->line == it->second) {
        acked = sets[i];
        next = i + 1 < sets.size() ? sets[i + 1] : nullptr;
      }
    }
    if (it != acks.end()) {
      EXPECT_NE(acked, nullptr) << key << ": acked line " << it->second << " is not a SET of it";
    } else {
      next = sets.front();
    }
    std::string got;
    bool found = false;
    EXPECT_EQ(client->get_sync(key, got, found), Status::ok) << key;
    const auto bytes = std::as_bytes(std::span(got.data(), got.size()));
    const auto is = [&](const SetLine* s) {
      return s != nullptr && found && kv::load::matches(kv::load::GeneratedValue{s->size, s->seed}, bytes);
    };
    if (is(acked)) continue;
    if (is(next)) {
      ++in_flight_values;
      continue;
    }
    if (acked == nullptr && !found) continue;
    ADD_FAILURE() << key << ": after the restart it holds " << (found ? std::to_string(got.size()) + " bytes" : "nothing")
                  << " that are neither its last acknowledged SET (line " << (acked ? acked->line : 0)
                  << ") nor the next one";
  }
  client->close();
  return in_flight_values;
}

TEST(DurableE2E, AcknowledgedSetsSurviveSigkill) {
  const std::string addr = verbs::test::softroce_addr();
  TempDir t{"durable"};
  const std::string data = t.path() + "/data", wl_path = t.path() + "/wl.txt", acks = t.path() + "/acks";
  const auto wl = make_workload(wl_path, 40, 60, 4);  // 2400 SETs, a quarter of them 64 KiB+
  std::size_t acked = 0;
  {
    KvdProcess kvd(RKV_KVD_PATH, addr, {"--data-dir", data, "--fsync", "always"});
    const pid_t load = spawn({RKV_KVLOAD_PATH, "--server", addr, "--port", std::to_string(kvd.port()), "--file",
                              wl_path, "--depth", "16", "--ack-log", acks, "-q"});
    const auto deadline = deadline_after(std::chrono::seconds(240));
    while (count_lines(acks) < 300 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    const int st = kvd.kill_hard();  // mid-run
    EXPECT_TRUE(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
    const int ls = wait_exit(load, std::chrono::seconds(120));
    ASSERT_NE(ls, -1) << "kvload did not exit after kvd died";
    EXPECT_TRUE(WIFEXITED(ls) && WEXITSTATUS(ls) != 0) << "kvload finished the whole workload before the kill";
    acked = count_lines(acks);
    ASSERT_GE(acked, 300u);
    ASSERT_LT(acked, wl.size());
  }
  KvdProcess kvd(RKV_KVD_PATH, addr, {"--data-dir", data, "--fsync", "always"});
  EXPECT_TRUE(contains(kvd.output(), "kvd: recovered ")) << kvd.output();
  const auto a = read_acks(acks);
  const std::size_t in_flight = verify(addr, kvd.port(), wl, a);
  std::fprintf(stderr, "durable_e2e: %zu SETs acknowledged before the kill over %zu keys; %zu keys hold the "
               "unacknowledged SET that was in flight\n", acked, a.size(), in_flight);
  EXPECT_LE(in_flight, 16u) << "at most depth SETs were in flight";
  const auto stats = kvd.stats();
  ASSERT_TRUE(stats);
  EXPECT_EQ(stats->at("log_failing"), 0u);
}

// kvd --fsync always, keys SET, then DELs of half of them (with SETs of new
// keys between) by kvload at depth 16 with --ack-log; kvd is SIGKILLed
// mid-run. After the restart every DEL that was acknowledged stays deleted
// (its tombstone was on disk), every key never deleted holds its value, every
// acknowledged new key is there. The preload and the check run in-process,
// pipelined (one process start less, no round trip per key).
TEST(DurableE2E, AcknowledgedDeletesSurviveSigkill) {
  const std::string addr = verbs::test::softroce_addr();
  TempDir t{"durable"};
  const std::string data = t.path() + "/data", wl = t.path() + "/wl.txt", acks = t.path() + "/acks";
  constexpr unsigned kKeys = 400;
  const auto old_value = [](unsigned k) { return kv::load::GeneratedValue{100 + k % 50, k}; };
  const auto new_value = [](unsigned k) { return kv::load::GeneratedValue{200, 1000 + k}; };
  const auto bytes_of = [](const kv::load::GeneratedValue& g) {
    std::string v(g.size, '\0');
    kv::load::write_value(g, std::as_writable_bytes(std::span(v.data(), v.size())));
    return v;
  };
  {
    std::ofstream w(wl, std::ios::trunc);
    for (unsigned k = 0; k < kKeys; k += 2) {
      w << "DEL key" << k << "\n";
      w << "SET new" << k << " @" << new_value(k).size << ":" << new_value(k).seed << "\n";
    }
  }
  const std::vector<std::string> flags = {"--data-dir", data, "--fsync", "always"};
  std::size_t acked = 0;
  {
    KvdProcess kvd(RKV_KVD_PATH, addr, flags);
    {
      reactor::Reactor reactor;
      auto client = kv::client::Client::connect(reactor, addr, kvd.port(), {});
      std::vector<std::string> values;
      values.reserve(kKeys);
      std::size_t ok = 0;
      for (unsigned k = 0; k < kKeys; ++k) {
        values.push_back(bytes_of(old_value(k)));
        ASSERT_EQ(client->set("key" + std::to_string(k), values.back(),
                              [&ok](Status st, bool, std::span<const std::byte>) { ok += st == Status::ok; }),
                  Status::ok);
      }
      ASSERT_TRUE(client->wait_idle(std::chrono::seconds(120)));
      ASSERT_EQ(ok, kKeys);
      client->close();
    }
    const pid_t load = spawn({RKV_KVLOAD_PATH, "--server", addr, "--port", std::to_string(kvd.port()), "--file", wl,
                              "--depth", "16", "--ack-log", acks, "-q"});
    const auto deadline = deadline_after(std::chrono::seconds(120));
    while (count_lines(acks) < 100 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    const int st = kvd.kill_hard();  // mid-run
    EXPECT_TRUE(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
    // No reply can arrive any more: what kvload logged is every ack it saw
    // (one write(2) each); it need not notice the failure itself.
    ::kill(load, SIGKILL);
    ASSERT_NE(wait_exit(load, std::chrono::seconds(60)), -1);
    acked = count_lines(acks);
    ASSERT_GE(acked, 100u);
    EXPECT_LT(acked, kKeys) << "kvload finished the whole workload before the kill";
  }
  std::map<std::string, bool> acked_del, acked_set;
  {
    std::ifstream in(acks);
    std::string line;
    while (std::getline(in, line)) {
      std::istringstream w(line);
      unsigned n = 0;
      std::string key, kind;
      ASSERT_TRUE(w >> n >> key >> kind) << line;
      (kind == "DEL" ? acked_del : acked_set)[key] = true;
    }
  }
  EXPECT_GT(acked_del.size(), 10u);
  KvdProcess kvd(RKV_KVD_PATH, addr, flags);
  EXPECT_TRUE(contains(kvd.output(), "kvd: recovered ")) << kvd.output();
  // Every key's GET, pipelined.
  struct Got {
    bool done = false, found = false;
    std::string value;
  };
  std::map<std::string, Got> got;
  {
    reactor::Reactor reactor;
    auto client = kv::client::Client::connect(reactor, addr, kvd.port(), {});
    for (unsigned k = 0; k < kKeys; ++k) {
      for (const std::string& key : {"key" + std::to_string(k), "new" + std::to_string(k)}) {
        Got* g = &got[key];
        ASSERT_EQ(client->get(key, [g](Status st, bool f, std::span<const std::byte> v) {
          g->done = st == Status::ok;
          g->found = f;
          g->value.assign(reinterpret_cast<const char*>(v.data()), v.size());
        }),
                  Status::ok);
      }
    }
    ASSERT_TRUE(client->wait_idle(std::chrono::seconds(120)));
    client->close();
  }
  const auto holds = [&](const std::string& key, const kv::load::GeneratedValue& v) {
    const Got& g = got.at(key);
    EXPECT_TRUE(g.done) << key;
    return g.found && kv::load::matches(v, std::as_bytes(std::span(g.value.data(), g.value.size())));
  };
  std::size_t deleted_unacked = 0;
  for (unsigned k = 0; k < kKeys; ++k) {
    const std::string key = "key" + std::to_string(k);
    const bool found = got.at(key).found;
    const bool old = holds(key, old_value(k));
    if (acked_del.contains(key)) {
      EXPECT_FALSE(found) << key << ": its DEL was acknowledged, yet it is back after the restart";
    } else if (k % 2 == 1) {
      EXPECT_TRUE(old) << key << ": never deleted, must hold its value";
    } else {
      EXPECT_TRUE(old || !found) << key << ": holds neither its value nor nothing";
      if (!found) ++deleted_unacked;  // its DEL was in flight (or its ack not yet logged)
    }
    const std::string nk = "new" + std::to_string(k);
    if (acked_set.contains(nk)) {
      EXPECT_TRUE(holds(nk, new_value(k))) << nk << ": acknowledged SET lost";
    }
  }
  std::fprintf(stderr, "durable_e2e: %zu DELs and %zu SETs acknowledged before the kill; %zu unacknowledged DELs "
               "applied anyway\n", acked_del.size(), acked_set.size(), deleted_unacked);
  EXPECT_LE(deleted_unacked, 16u) << "at most depth requests were in flight";
  const auto stats = kvd.stats();
  ASSERT_TRUE(stats);
  EXPECT_EQ(stats->at("log_failing"), 0u);
}

// Group commit: at depth 32 under --fsync always, fsyncs stay well below SETs.
TEST(DurableE2E, GroupCommitSharesFsyncs) {
  const std::string addr = verbs::test::softroce_addr();
  TempDir t{"durable"};
  const std::string wl_path = t.path() + "/wl.txt";
  const auto wl = make_workload(wl_path, 200, 3, 0);  // 600 small SETs
  KvdProcess kvd(RKV_KVD_PATH, addr, {"--data-dir", t.path() + "/data", "--fsync", "always"});
  const auto r = run_command({RKV_KVLOAD_PATH, "--server", addr, "--port", std::to_string(kvd.port()), "--file",
                              wl_path, "--depth", "32", "-q"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto s = kvd.stats();
  ASSERT_TRUE(s);
  EXPECT_EQ(s->at("log_records"), wl.size());
  EXPECT_GE(s->at("log_fsyncs"), 1u);
  EXPECT_LT(s->at("log_fsyncs"), wl.size() / 2) << "every SET got its own fsync: no group commit";
  EXPECT_EQ(s->at("durable_waits"), 0u);
}

// Acknowledged means on disk (issue 16, 5b), by fault injection: kvd
// --fsync always with RKV_FAULT=fail:log_sync, so every fdatasync of the log
// runs and then completes as failed (EIO). A SET, DEL or large SET whose reply
// went out before the sync covering its record completed would be answered
// ok; every one must be answered io_error, also pipelined at depth 16
// (kvload: SETs sharing group commits). After a restart without the fault
// none of them is there (the log was truncated back to its last good record).
TEST(DurableE2E, NoReplyIsOkBeforeItsSyncCompleted) {
  const std::string addr = verbs::test::softroce_addr();
  TempDir t{"durable"};
  const std::string data = t.path() + "/data", wl_path = t.path() + "/wl.txt";
  const auto wl = make_workload(wl_path, 40, 5, 4);  // 200 SETs, a quarter of them 64 KiB+
  {
    ::setenv("RKV_FAULT", "fail:log_sync", 1);
    KvdProcess kvd(RKV_KVD_PATH, addr, {"--data-dir", data, "--fsync", "always"});
    ::unsetenv("RKV_FAULT");
    reactor::Reactor reactor;
    auto c = kv::client::Client::connect(reactor, addr, kvd.port(), {});
    EXPECT_EQ(c->set_sync("eager", "v"), Status::io_error);
    EXPECT_EQ(c->set_sync("large", std::string(100 << 10, 'L')), Status::io_error);
    bool found = false;
    EXPECT_EQ(c->del_sync("eager", found), Status::io_error);
    c->close();
    const auto r = run_command({RKV_KVLOAD_PATH, "--server", addr, "--port", std::to_string(kvd.port()), "--file",
                                wl_path, "--depth", "16", "--json"});
    EXPECT_EQ(r.exit_code, 1) << r.err;
    // Every operation failed: "errors" equals "ops" (no SET was acknowledged).
    const auto field = [&](const std::string& name) {
      const auto at = r.out.find("\"" + name + "\":");
      return at == std::string::npos ? -1.0 : std::stod(r.out.substr(at + name.size() + 3));
    };
    EXPECT_EQ(field("ops"), static_cast<double>(wl.size())) << r.out;
    EXPECT_EQ(field("errors"), static_cast<double>(wl.size())) << r.out;
    const auto s = kvd.stats();
    ASSERT_TRUE(s);
    EXPECT_EQ(s->at("log_fsyncs"), 0u);
    EXPECT_EQ(s->at("log_failing"), 1u);
    EXPECT_GE(s->at("io_errors"), wl.size() + 3);
    EXPECT_EQ(s->at("durable_waits"), 0u);
  }
  KvdProcess kvd(RKV_KVD_PATH, addr, {"--data-dir", data, "--fsync", "always"});
  reactor::Reactor reactor;
  auto c = kv::client::Client::connect(reactor, addr, kvd.port(), {});
  for (const std::string k : {"eager", "large", "key0", "key1", "key39"}) {
    std::string v;
    bool found = true;
    ASSERT_EQ(c->get_sync(k, v, found), Status::ok);
    EXPECT_FALSE(found) << k << " was answered io_error but is in the log";
  }
  c->close();
}

// Runs the compaction workload against kvd (env RKV_FAULT as given), then
// restarts kvd on the directory and verifies every acknowledged SET.
void compaction_run(const std::string& fault) {
  const std::string addr = verbs::test::softroce_addr();
  TempDir t{"durable"};
  const std::string data = t.path() + "/data", wl_path = t.path() + "/wl.txt", acks = t.path() + "/acks";
  const auto wl = make_workload(wl_path, 20, 40, 5);  // 800 SETs over 20 keys: the log outgrows the live data
  const std::vector<std::string> flags = {"--data-dir", data, "--fsync", "always", "--compact-min-bytes", "65536",
                                          "--compact-ratio", "1.5"};
  {
    if (!fault.empty()) ::setenv("RKV_FAULT", ("crash:" + fault).c_str(), 1);
    KvdProcess kvd(RKV_KVD_PATH, addr, flags);
    ::unsetenv("RKV_FAULT");
    const auto r = run_command({RKV_KVLOAD_PATH, "--server", addr, "--port", std::to_string(kvd.port()), "--file",
                                wl_path, "--depth", "8", "--ack-log", acks, "-q", "--stall-timeout", "20000"});
    if (fault.empty()) {
      EXPECT_EQ(r.exit_code, 0) << r.err;
      const auto s = kvd.stats();
      ASSERT_TRUE(s);
      EXPECT_GE(s->at("compactions"), 1u);
      EXPECT_EQ(s->at("compaction_failures"), 0u);
      (void)kvd.kill_hard();
    } else {
      const int st = kvd.wait(std::chrono::seconds(60));
      ASSERT_NE(st, -1) << "kvd never reached " << fault;
      EXPECT_TRUE(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL) << fault;
      EXPECT_TRUE(contains(kvd.output(), "RKV_FAULT: crashing at " + fault)) << kvd.output();
    }
  }
  KvdProcess kvd(RKV_KVD_PATH, addr, flags);
  const auto a = read_acks(acks);
  EXPECT_GT(a.size(), 0u);
  (void)verify(addr, kvd.port(), wl, a);
  if (fault.empty()) {
    bool snapshot = false;
    for (const auto& e : fs::directory_iterator(data)) snapshot = snapshot || contains(e.path().filename(), "snapshot-");
    EXPECT_TRUE(snapshot) << "a finished compaction leaves a snapshot";
  }
}

TEST(DurableE2E, CompactionCompletesAndRestartsClean) { compaction_run(""); }

class CompactionCrash : public ::testing::TestWithParam<const char*> {};
TEST_P(CompactionCrash, LosesNothingAcknowledged) { compaction_run(GetParam()); }
INSTANTIATE_TEST_SUITE_P(DurableE2E, CompactionCrash,
                         ::testing::Values("compact_log_created", "compact_switched", "compact_snapshot_partial",
                                           "compact_snapshot_synced", "compact_renamed", "compact_dir_synced"));

// A small tmpfs mounted for the test (the guest runs as root).
class SmallFs {
 public:
  explicit SmallFs(const std::string& dir) : dir_(dir) {
    if (::mount("tmpfs", dir.c_str(), "tmpfs", 0, "size=2m") != 0) {
      throw std::runtime_error("mount tmpfs on " + dir + ": " + std::strerror(errno));
    }
  }
  ~SmallFs() { ::umount2(dir_.c_str(), MNT_DETACH); }
  SmallFs(const SmallFs&) = delete;
  SmallFs& operator=(const SmallFs&) = delete;
  // Fills the file system up with `file`.
  void fill(const std::string& file) const {
    std::FILE* f = std::fopen(file.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::string chunk(4096, 'f');
    while (std::fwrite(chunk.data(), 1, chunk.size(), f) == chunk.size() && std::fflush(f) == 0) {
    }
    std::fclose(f);
  }

 private:
  std::string dir_;
};

TEST(DurableE2E, EnospcFailsSetsKeepsGetsAndClears) {
  const std::string addr = verbs::test::softroce_addr();
  TempDir t{"durable"};
  const std::string mnt = t.path() + "/mnt";
  fs::create_directory(mnt);
  SmallFs small(mnt);
  const std::string data = mnt + "/data";
  const std::string big(100 << 10, 'B');
  std::vector<std::pair<std::string, Status>> small_status;
  {
    KvdProcess kvd(RKV_KVD_PATH, addr, {"--data-dir", data, "--fsync", "always"});
    reactor::Reactor reactor;
    auto c = kv::client::Client::connect(reactor, addr, kvd.port(), {});
    for (int i = 0; i < 10; ++i) ASSERT_EQ(c->set_sync("before" + std::to_string(i), "v" + std::to_string(i)), Status::ok);
    small.fill(mnt + "/filler");
    // A 100 KiB record needs new pages: ENOSPC, answered io_error.
    EXPECT_EQ(c->set_sync("fail-large", big), Status::io_error);
    std::string v;
    bool found = false;
    ASSERT_EQ(c->get_sync("before3", v, found), Status::ok);  // GETs keep working
    EXPECT_TRUE(found);
    EXPECT_EQ(v, "v3");
    auto s = kvd.stats();
    ASSERT_TRUE(s);
    EXPECT_EQ(s->at("log_failing"), 1u);
    EXPECT_GE(s->at("io_errors"), 1u);
    const std::string out = kvd.output();
    std::size_t logged = 0;
    for (auto p = out.find("SETs fail with io_error"); p != std::string::npos; p = out.find("SETs fail with io_error", p + 1)) {
      ++logged;
    }
    EXPECT_EQ(logged, 1u) << "the condition is logged once";
    // Small records may still fit the log's last page (tmpfs allocates whole
    // pages): each SET waits for its own write; keep going until one fails.
    // Those answered ok must survive the restart, those answered io_error not.
    for (int i = 0; i < 64; ++i) {
      const std::string k = "small" + std::to_string(i);
      const Status st = c->set_sync(k, std::string(1000, static_cast<char>('a' + i % 26)));
      ASSERT_TRUE(st == Status::ok || st == Status::io_error) << kv::client::to_string(st);
      small_status.emplace_back(k, st);
      if (st == Status::io_error) break;
    }
    ASSERT_EQ(small_status.back().second, Status::io_error) << "64 KiB of small SETs all fitted a full disk";
    fs::remove(mnt + "/filler");  // the disk recovers
    EXPECT_EQ(c->set_sync("after", "ok"), Status::ok);
    EXPECT_EQ(c->set_sync("after-large", big), Status::ok);
    s = kvd.stats();
    ASSERT_TRUE(s);
    EXPECT_EQ(s->at("log_failing"), 0u);
    EXPECT_TRUE(contains(kvd.output(), "disk error cleared")) << kvd.output();
    c->close();
    (void)kvd.kill_hard();
  }
  KvdProcess kvd(RKV_KVD_PATH, addr, {"--data-dir", data, "--fsync", "always"});
  reactor::Reactor reactor;
  auto c = kv::client::Client::connect(reactor, addr, kvd.port(), {});
  std::string v;
  bool found = false;
  for (int i = 0; i < 10; ++i) {
    ASSERT_EQ(c->get_sync("before" + std::to_string(i), v, found), Status::ok);
    EXPECT_TRUE(found && v == "v" + std::to_string(i));
  }
  ASSERT_EQ(c->get_sync("after-large", v, found), Status::ok);
  EXPECT_TRUE(found && v == big);
  ASSERT_EQ(c->get_sync("fail-large", v, found), Status::ok);
  EXPECT_FALSE(found) << "a SET answered io_error is not in the log";
  for (std::size_t i = 0; i < small_status.size(); ++i) {
    const auto& [k, st] = small_status[i];
    ASSERT_EQ(c->get_sync(k, v, found), Status::ok);
    if (st == Status::ok) {
      EXPECT_TRUE(found && v == std::string(1000, static_cast<char>('a' + i % 26))) << k;
    } else {
      EXPECT_FALSE(found) << k << " was answered io_error";
    }
  }
  c->close();
}

// Writes three SETs through kvd, stops it; returns the log file's path.
std::string three_records(const std::string& addr, const std::string& data) {
  KvdProcess kvd(RKV_KVD_PATH, addr, {"--data-dir", data, "--fsync", "always"});
  reactor::Reactor reactor;
  auto c = kv::client::Client::connect(reactor, addr, kvd.port(), {});
  EXPECT_EQ(c->set_sync("one", "first value"), Status::ok);
  EXPECT_EQ(c->set_sync("two", std::string(70000, '2')), Status::ok);  // rendezvous, logged from the arena
  EXPECT_EQ(c->set_sync("three", "third value"), Status::ok);
  c->close();
  EXPECT_EQ(kvd.stop(), 0);
  for (const auto& e : fs::directory_iterator(data)) {
    if (contains(e.path().filename(), "log-")) return e.path();
  }
  ADD_FAILURE() << "no log file in " << data;
  return {};
}

TEST(DurableE2E, TornTailIsTruncatedWithALogLine) {
  const std::string addr = verbs::test::softroce_addr();
  TempDir t{"durable"};
  const std::string data = t.path() + "/data";
  const std::string log = three_records(addr, data);
  const auto good = fs::file_size(log);
  {
    std::ofstream f(log, std::ios::binary | std::ios::app);
    f << std::string("\x52\x4b\x4c\x31\x01\x00\x05\x00half a record", 21);
  }
  KvdProcess kvd(RKV_KVD_PATH, addr, {"--data-dir", data});
  EXPECT_TRUE(contains(kvd.output(), "torn tail")) << kvd.output();
  EXPECT_TRUE(contains(kvd.output(), "recovered 3 records")) << kvd.output();
  EXPECT_EQ(fs::file_size(log), good);
  reactor::Reactor reactor;
  auto c = kv::client::Client::connect(reactor, addr, kvd.port(), {});
  std::string v;
  bool found = false;
  ASSERT_EQ(c->get_sync("two", v, found), Status::ok);  // a recovered large value, served by rendezvous
  EXPECT_TRUE(found && v == std::string(70000, '2'));
  c->close();
}

TEST(DurableE2E, CorruptMiddleRefusesToStartUnlessRepair) {
  const std::string addr = verbs::test::softroce_addr();
  TempDir t{"durable"};
  const std::string data = t.path() + "/data";
  const std::string log = three_records(addr, data);
  {
    // Record 2 starts after record 1 (32-byte header + "one" + "first value").
    std::fstream f(log, std::ios::binary | std::ios::in | std::ios::out);
    f.seekp(32 + 3 + 11 + 32 + 3 + 1000);
    f.put('X');  // inside the 70000-byte value
  }
  const auto r = run_command({RKV_KVD_PATH, "--bind", addr, "--port", "0", "--data-dir", data}, {}, std::chrono::seconds(120));
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_TRUE(contains(r.err, "refusing to start")) << r.err;
  EXPECT_TRUE(contains(r.err, "--repair")) << r.err;
  KvdProcess kvd(RKV_KVD_PATH, addr, {"--data-dir", data, "--repair"});
  EXPECT_TRUE(contains(kvd.output(), "dropping")) << kvd.output();
  reactor::Reactor reactor;
  auto c = kv::client::Client::connect(reactor, addr, kvd.port(), {});
  std::string v;
  bool found = false;
  ASSERT_EQ(c->get_sync("one", v, found), Status::ok);
  EXPECT_TRUE(found && v == "first value");
  ASSERT_EQ(c->get_sync("three", v, found), Status::ok);  // the good record after the damage is kept
  EXPECT_TRUE(found && v == "third value");
  ASSERT_EQ(c->get_sync("two", v, found), Status::ok);
  EXPECT_FALSE(found);
  c->close();
}

}  // namespace
}  // namespace rkv::test
