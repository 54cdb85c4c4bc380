// limits_e2e: kvd's memory limit in the Soft-RoCE guest (docs/architecture.md,
// "Memory limit").
// - kvd --max-memory 64m; kvload writes 96 MiB of values to distinct keys
//   (eager 3900 B and rendezvous 250000 B, interleaved) with --ack-log: the
//   excess is refused with no_memory (a clear kvload error line, kvd's
//   no_memory counter), kvd stays up within its budget, every acknowledged SET
//   reads back byte-exactly (by message and by one-sided READ), the C API
//   returns ENOMEM for a SET over the limit, and DELs give memory back.
// - kvd --max-memory 64m --eviction lru: 160 MiB of the same mix all
//   succeed, memory_used_bytes stays within the limit, keys were evicted, and the
//   most recently written keys of both kinds read back byte-exactly (by
//   message and by one-sided READ).
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "kv/client/client.hpp"
#include "kv/client/kv.h"
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

struct SetLine {
  std::string key;
  std::uint64_t size;
  std::uint64_t seed;
};

constexpr std::uint64_t kEager = 3900;     // key + value < 4 KiB: the eager path
constexpr std::uint64_t kLarge = 250'000;  // rendezvous

// Distinct keys, `total` bytes of values: every 8th SET a rendezvous value,
// the rest eager. Line n of the file is out[n - 1].
std::vector<SetLine> make_workload(const std::string& path, std::uint64_t total) {
  std::vector<SetLine> out;
  std::ofstream f(path, std::ios::trunc);
  std::uint64_t bytes = 0;
  for (unsigned i = 0; bytes < total; ++i) {
    const bool large = i % 8 == 0;
    SetLine s{(large ? "r" : "e") + std::to_string(i), large ? kLarge : kEager, 7919ull * i + 3};
    f << "SET " << s.key << " @" << s.size << ":" << s.seed << "\n";
    bytes += s.size;
    out.push_back(std::move(s));
  }
  return out;
}

// The workload lines kvload acknowledged (--ack-log: `LINE KEY SIZE FNV`).
std::vector<unsigned> read_acks(const std::string& path) {
  std::vector<unsigned> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream w(line);
    unsigned n = 0;
    if (w >> n) out.push_back(n);
  }
  return out;
}

// GETs every acknowledged SET and compares its bytes; returns the mismatches.
std::size_t read_back(const std::string& addr, std::uint16_t port, const std::vector<SetLine>& wl,
                      const std::vector<unsigned>& acked, kv::client::GetMode mode) {
  reactor::Reactor reactor;
  kv::client::ClientOptions o;
  o.get_mode = mode;
  auto client = kv::client::Client::connect(reactor, addr, port, o);
  std::size_t bad = 0;
  for (const unsigned n : acked) {
    const SetLine& s = wl.at(n - 1);
    std::string got;
    bool found = false;
    const Status st = client->get_sync(s.key, got, found);
    const bool ok = st == Status::ok && found &&
                    kv::load::matches(kv::load::GeneratedValue{s.size, s.seed},
                                      std::as_bytes(std::span(got.data(), got.size())));
    if (!ok && ++bad <= 5) {
      ADD_FAILURE() << s.key << " (line " << n << "): acknowledged, but reads back "
                    << (st != Status::ok ? "an error" : found ? std::to_string(got.size()) + " other bytes" : "nothing");
    }
  }
  client->close();
  return bad;
}

TEST(MemoryLimitE2E, SetsBeyondTheLimitFailAndAcknowledgedOnesReadBack) {
  const std::string addr = verbs::test::softroce_addr();
  TempDir t{"limits"};
  const std::string wl_path = t.path() + "/wl.txt", acks = t.path() + "/acks";
  const auto wl = make_workload(wl_path, std::uint64_t{96} << 20);
  KvdProcess kvd(RKV_KVD_PATH, addr, {"--max-memory", "64m"});
  const auto load = run_command({RKV_KVLOAD_PATH, "--server", addr, "--port", std::to_string(kvd.port()), "--file",
                                 wl_path, "--depth", "16", "--ack-log", acks, "--json"},
                                {}, std::chrono::seconds(600));
  ASSERT_FALSE(load.timed_out);
  EXPECT_EQ(load.exit_code, 1) << "kvload reports the refused SETs as errors\n" << load.err;
  EXPECT_TRUE(contains(load.err, "no_memory: the server's memory limit is reached (kvd --max-memory)")) << load.err;

  const auto acked = read_acks(acks);
  std::uint64_t acked_bytes = 0, acked_large = 0, acked_eager = 0;
  for (const unsigned n : acked) {
    acked_bytes += wl.at(n - 1).size;
    (wl.at(n - 1).size == kLarge ? acked_large : acked_eager) += 1;
  }
  std::fprintf(stderr, "limits_e2e: %zu of %zu SETs acknowledged (%llu bytes of values: %llu eager, %llu large)\n",
               acked.size(), wl.size(), static_cast<unsigned long long>(acked_bytes),
               static_cast<unsigned long long>(acked_eager), static_cast<unsigned long long>(acked_large));
  EXPECT_LT(acked.size(), wl.size()) << "96 MiB of values cannot fit under 64 MiB";
  EXPECT_LE(acked_bytes, std::uint64_t{64} << 20);
  EXPECT_GE(acked_bytes, std::uint64_t{16} << 20) << "the limit refused far more than it had to";
  EXPECT_GT(acked_eager, 0u);
  EXPECT_GT(acked_large, 0u);

  // kvd is up, within its budget, and counted each refusal.
  const auto stats = kvd.stats();
  ASSERT_TRUE(stats) << "kvd did not answer SIGUSR1";
  EXPECT_EQ(stats->at("max_memory_bytes"), std::uint64_t{64} << 20);
  EXPECT_LE(stats->at("memory_used_bytes"), std::uint64_t{64} << 20);
  EXPECT_EQ(stats->at("no_memory"), wl.size() - acked.size()) << "every SET is acknowledged or refused no_memory";
  EXPECT_EQ(stats->at("keys"), acked.size());

  EXPECT_EQ(read_back(addr, kvd.port(), wl, acked, kv::client::GetMode::rpc), 0u);
  EXPECT_EQ(read_back(addr, kvd.port(), wl, acked, kv::client::GetMode::read), 0u);

  // The C API: ENOMEM for a SET over the limit (a value of a size class no
  // chunk was reserved for), and the memory a DEL frees is usable again.
  std::string server = addr + ":" + std::to_string(kvd.port());
  void* h = nullptr;
  ASSERT_EQ(kv_open(server.data(), &h), 0) << kv_last_error(nullptr);
  const std::string big(3u << 20, 'B');
  EXPECT_EQ(kv_set(h, "c-api-big", big.c_str()), ENOMEM) << kv_last_error(h);
  const std::string eager(kEager, 'E');
  EXPECT_EQ(kv_set(h, "c-api-eager", eager.c_str()), ENOMEM) << kv_last_error(h);
  std::size_t deleted = 0;
  for (const unsigned n : acked) {
    const SetLine& s = wl.at(n - 1);
    if (s.size != kLarge) continue;
    ASSERT_EQ(kv_del(h, s.key.data(), s.key.size()), 0) << kv_last_error(h);
    if (++deleted == 4) break;
  }
  const std::string large(kLarge, 'L');
  EXPECT_EQ(kv_set(h, "c-api-large", large.c_str()), 0) << "a DEL gave its block back: " << kv_last_error(h);
  char* v = nullptr;
  ASSERT_EQ(kv_get(h, "c-api-large", &v), 0) << kv_last_error(h);
  EXPECT_EQ(std::string(v), large);
  kv_release(v);
  EXPECT_EQ(kv_close(h), 0);
  EXPECT_NE(kvd.pid(), -1);
  EXPECT_EQ(kvd.stop(), 0) << "kvd exits cleanly";
}

TEST(MemoryLimitE2E, WithLruEveryWriteSucceedsWithinTheLimit) {
  const std::string addr = verbs::test::softroce_addr();
  TempDir t{"limits-lru"};
  const std::string wl_path = t.path() + "/wl.txt", acks = t.path() + "/acks";
  const auto wl = make_workload(wl_path, std::uint64_t{160} << 20);
  KvdProcess kvd(RKV_KVD_PATH, addr, {"--max-memory", "64m", "--eviction", "lru"});
  const auto load = run_command({RKV_KVLOAD_PATH, "--server", addr, "--port", std::to_string(kvd.port()), "--file",
                                 wl_path, "--depth", "16", "--ack-log", acks, "--json"},
                                {}, std::chrono::seconds(600));
  ASSERT_FALSE(load.timed_out);
  EXPECT_EQ(load.exit_code, 0) << "every SET succeeds: room is made by eviction\n" << load.err;
  const auto acked = read_acks(acks);
  EXPECT_EQ(acked.size(), wl.size());

  const auto stats = kvd.stats();
  ASSERT_TRUE(stats) << "kvd did not answer SIGUSR1";
  EXPECT_LE(stats->at("memory_used_bytes"), std::uint64_t{64} << 20);
  EXPECT_EQ(stats->at("no_memory"), 0u);
  EXPECT_GT(stats->at("evicted_keys"), 0u);
  EXPECT_EQ(stats->at("keys") + stats->at("evicted_keys"), wl.size()) << "every key is stored or was evicted";
  std::fprintf(stderr, "limits_e2e: lru: %zu SETs, %llu keys kept, %llu evicted, memory_used_bytes %llu\n", wl.size(),
               static_cast<unsigned long long>(stats->at("keys")),
               static_cast<unsigned long long>(stats->at("evicted_keys")),
               static_cast<unsigned long long>(stats->at("memory_used_bytes")));

  // The last writes of each kind: the newest in their pools, never the coldest sampled.
  std::vector<unsigned> recent;
  std::size_t eager = 0, large = 0;
  for (std::size_t n = wl.size(); n > 0 && (eager < 8 || large < 8); --n) {
    std::size_t& kind = wl[n - 1].size == kLarge ? large : eager;
    if (kind < 8) {
      ++kind;
      recent.push_back(static_cast<unsigned>(n));
    }
  }
  EXPECT_EQ(read_back(addr, kvd.port(), wl, recent, kv::client::GetMode::rpc), 0u);
  EXPECT_EQ(read_back(addr, kvd.port(), wl, recent, kv::client::GetMode::read), 0u);
  EXPECT_EQ(kvd.stop(), 0) << "kvd exits cleanly";
}

}  // namespace
}  // namespace rkv::test
