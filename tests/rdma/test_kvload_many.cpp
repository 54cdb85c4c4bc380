// kvload_many: many clients and many operations in flight, against a kvd
// child process in the Soft-RoCE environment.
// - Two kvload processes at once (examples/Client1.txt, Client2.txt) at
//   --depth 32 with --verify: no errors, no mismatches; then a third client
//   GETs every key and finds one of the values the files wrote to it.
// - SETs overlap: at depth 1 the server never sees more than one request of
//   the client outstanding, at depth 32 it sees more (kvd's counters). The
//   two throughputs are printed, never compared (speed belongs in bench/).
// - 64 clients (Client objects with fibers in this process) connect, run and
//   disconnect; kvd's connection and per-connection memory counters return
//   to their idle values.
// - kvd dies mid-run: kvload accounts every operation (errors) and exits 1,
//   no hang.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "kv/client/client.hpp"
#include "kv/client/shard_set.hpp"
#include "proto/placement.hpp"
#include "kv/load/drive.hpp"
#include "kv/load/fiber.hpp"
#include "kv/load/runner.hpp"
#include "kv/load/workload.hpp"
#include "kvd_process.hpp"
#include "load_runs.hpp"
#include "loopback.hpp"  // softroce_addr()
#include "reactor/reactor.hpp"

#ifndef RKV_KVD_PATH
#error "RKV_KVD_PATH must name the kvd binary"
#endif
#ifndef RKV_KVLOAD_PATH
#error "RKV_KVLOAD_PATH must name the kvload binary"
#endif
#ifndef RKV_EXAMPLES_DIR
#error "RKV_EXAMPLES_DIR must name the examples directory"
#endif

namespace rkv::test {
namespace {

using namespace std::chrono_literals;

kv::load::ParseResult parse_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in) << path;
  return kv::load::parse_workload(in);
}

std::vector<std::string> kvload_args(const std::string& addr, std::uint16_t port, const std::string& file,
                                     unsigned depth) {
  return {RKV_KVLOAD_PATH, "--server", addr, "--port", std::to_string(port), "--file", file,
          "--depth", std::to_string(depth), "--json", "--verify"};
}

std::uint64_t stat(const std::map<std::string, std::uint64_t>& s, const std::string& name) {
  const auto it = s.find(name);
  EXPECT_NE(it, s.end()) << "kvd stats have no " << name;
  return it == s.end() ? 0 : it->second;
}

TEST(KvloadMany, TwoClientsAtDepth32VerifyAndFinalValuesMatchTheFiles) {
  const std::string addr = verbs::test::softroce_addr();
  KvdProcess kvd(RKV_KVD_PATH, addr);
  const std::string files[2] = {std::string(RKV_EXAMPLES_DIR) + "/Client1.txt",
                                std::string(RKV_EXAMPLES_DIR) + "/Client2.txt"};
  CommandResult results[2];
  {
    std::thread a([&] { results[0] = run_command(kvload_args(addr, kvd.port(), files[0], 32), {}, 120s); });
    std::thread b([&] { results[1] = run_command(kvload_args(addr, kvd.port(), files[1], 32), {}, 120s); });
    a.join();
    b.join();
  }
  // What each key may hold afterwards: any value either file SETs to it.
  std::map<std::string, std::vector<kv::load::ValueSpec>> written;
  std::set<std::string> keys;
  for (int i = 0; i < 2; ++i) {
    const auto& r = results[i];
    ASSERT_FALSE(r.timed_out) << files[i];
    EXPECT_EQ(r.exit_code, 0) << files[i] << ":\n" << r.err;
    const kv::load::ParseResult parsed = parse_file(files[i]);
    ASSERT_TRUE(parsed.ok()) << files[i];
    EXPECT_EQ(json_number(r.out, "ops"), static_cast<double>(parsed.ops.size())) << r.out;
    EXPECT_EQ(json_number(r.out, "errors"), 0) << r.out;
    EXPECT_EQ(json_number(r.out, "mismatches"), 0) << r.out;
    std::printf("%s: %s\n", files[i].c_str(), r.out.c_str());
    for (const kv::load::Op& op : parsed.ops) {
      keys.insert(op.key);
      if (op.kind == kv::load::Op::Kind::set) written[op.key].push_back(op.value);
    }
  }

  // The third client.
  reactor::Reactor reactor;
  auto client = kv::client::Client::connect(reactor, addr, kvd.port());
  std::size_t checked = 0;
  for (const std::string& key : keys) {
    std::string value;
    bool found = false;
    ASSERT_EQ(client->get_sync(key, value, found), kv::client::Status::ok) << key;
    const auto it = written.find(key);
    if (it == written.end()) {
      EXPECT_FALSE(found) << key << " was never SET but holds " << value.size() << " bytes";
      continue;
    }
    ASSERT_TRUE(found) << key;
    const auto bytes = std::as_bytes(std::span<const char>(value.data(), value.size()));
    bool any = false;
    for (const kv::load::ValueSpec& v : it->second) any = any || kv::load::matches(v, bytes);
    EXPECT_TRUE(any) << key << ": " << value.size() << " bytes, none of the " << it->second.size()
                     << " values the files SET";
    ++checked;
  }
  EXPECT_GT(checked, 50u);
  client->close();
}

TEST(KvloadMany, SetsOverlapAtDepth32) {
  const std::string addr = verbs::test::softroce_addr();
  KvdProcess kvd(RKV_KVD_PATH, addr);
  // SETs only (GET ratio 0), small values, 100 keys.
  const std::string file = "kvload_many_sets.txt";
  const auto gen = run_command({RKV_KVLOAD_PATH, "gen", "--keys", "100", "--ops", "300", "--get-ratio", "0",
                                "--sizes", "32:3,1000:1", "--seed", "5", "-o", file},
                               {}, 60s);
  ASSERT_EQ(gen.exit_code, 0) << gen.err;

  const auto d1 = run_command(kvload_args(addr, kvd.port(), file, 1), {}, 120s);
  ASSERT_FALSE(d1.timed_out);
  EXPECT_EQ(d1.exit_code, 0) << d1.err;
  const auto after_d1 = kvd.stats();
  ASSERT_TRUE(after_d1);
  EXPECT_EQ(stat(*after_d1, "max_conn_outstanding"), 1u) << "depth 1 kept more than one request outstanding";

  const auto d32 = run_command(kvload_args(addr, kvd.port(), file, 32), {}, 120s);
  ASSERT_FALSE(d32.timed_out);
  EXPECT_EQ(d32.exit_code, 0) << d32.err;
  const auto after_d32 = kvd.stats();
  ASSERT_TRUE(after_d32);
  const std::uint64_t overlap = stat(*after_d32, "max_conn_outstanding");
  EXPECT_GT(overlap, 1u) << "the server never had two requests of one client outstanding at depth 32";

  // Reported, not asserted (speed is measured in bench/, never in tests).
  std::printf("throughput (not asserted): depth 1 %.1f ops/s, depth 32 %.1f ops/s; most requests of one client "
              "outstanding at the server at depth 32: %llu\n",
              json_number(d1.out, "ops_per_s"), json_number(d32.out, "ops_per_s"),
              static_cast<unsigned long long>(overlap));
  std::remove(file.c_str());
}

TEST(KvloadMany, SixtyFourClientsConnectRunDisconnectAndCountersReturnToIdle) {
  constexpr int kClients = 64;
  const std::string addr = verbs::test::softroce_addr();
  KvdProcess kvd(RKV_KVD_PATH, addr);
  const auto idle = kvd.stats();
  ASSERT_TRUE(idle);
  ASSERT_EQ(stat(*idle, "connections"), 0u);
  ASSERT_EQ(stat(*idle, "conn_bytes"), 0u);

  // Every client: its own keys, a SET then a GET of each, three rounds.
  std::vector<std::vector<kv::load::Op>> workloads(kClients);
  for (int c = 0; c < kClients; ++c) {
    std::string text;
    for (int round = 0; round < 3; ++round) {
      for (int k = 0; k < 4; ++k) {
        const std::string key = "m" + std::to_string(c) + ":" + std::to_string(k);
        text += "SET " + key + " @" + std::to_string(16 + 40 * k) + ":" + std::to_string(c * 100 + round) + "\n";
        text += "GET " + key + "\n";
      }
    }
    workloads[c] = parse_ops(text);
  }

  reactor::Reactor reactor;
  kv::client::ClientOptions copt;
  copt.max_in_flight = 4;
  copt.send_count = 4;
  auto clients = connect_clients(reactor, addr, kvd.port(), kClients, copt);  // each over the one server
  const auto busy = kvd.stats();
  ASSERT_TRUE(busy);
  EXPECT_EQ(stat(*busy, "connections"), static_cast<std::uint64_t>(kClients));
  const std::uint64_t conn_bytes = stat(*busy, "conn_bytes");
  EXPECT_GT(conn_bytes, 0u);
  std::printf("kvd with %d clients: conn_bytes=%llu (%llu per connection)\n", kClients,
              static_cast<unsigned long long>(conn_bytes), static_cast<unsigned long long>(conn_bytes / kClients));

  {
    const LoadRuns runs = run_verified(reactor, clients, workloads, 4, 90s);
    ASSERT_TRUE(runs.finished) << "64 runs did not finish";
    const std::uint64_t ops = expect_clean(runs);
    EXPECT_EQ(ops, static_cast<std::uint64_t>(kClients) * 24u);
    EXPECT_GT(runs.most_in_flight, 1u);  // the fibers of one client did overlap
  }
  clients.clear();

  // The server tears connections down asynchronously: poll until idle.
  std::map<std::string, std::uint64_t> last;
  const auto deadline = deadline_after(60s);
  for (;;) {
    const auto s = kvd.stats();
    ASSERT_TRUE(s);
    last = *s;
    if (stat(last, "connections") == 0 && stat(last, "conn_bytes") == 0) break;
    if (std::chrono::steady_clock::now() > deadline) break;
    std::this_thread::sleep_for(200ms);
  }
  EXPECT_EQ(stat(last, "connections"), 0u);
  EXPECT_EQ(stat(last, "conn_bytes"), 0u);
  EXPECT_EQ(stat(last, "accepted"), static_cast<std::uint64_t>(kClients));
  EXPECT_EQ(stat(last, "closed"), static_cast<std::uint64_t>(kClients));
  for (const char* name : {"pinned", "transfers"}) {  // rendezvous state, when the server has it
    if (last.count(name) != 0) {
      EXPECT_EQ(last[name], 0u) << name;
    }
  }
}

TEST(KvloadMany, ServerDeathMidRunEndsEveryOperationWithAnError) {
  const std::string addr = verbs::test::softroce_addr();
  KvdProcess kvd(RKV_KVD_PATH, addr);
  const std::string file = "kvload_many_long.txt";
  const auto gen = run_command({RKV_KVLOAD_PATH, "gen", "--keys", "200", "--ops", "20000", "--get-ratio", "0.5",
                                "--sizes", "32", "--seed", "9", "-o", file},
                               {}, 60s);
  ASSERT_EQ(gen.exit_code, 0) << gen.err;
  CommandResult r;
  std::thread load([&] {
    r = run_command({RKV_KVLOAD_PATH, "--server", addr, "--port", std::to_string(kvd.port()), "--file", file,
                     "--depth", "16", "--json", "--stall-timeout", "20000"},
                    {}, 90s);
  });
  // Kill kvd once the run is well under way.
  bool under_way = false;
  const auto deadline = deadline_after(60s);
  while (!under_way && std::chrono::steady_clock::now() < deadline) {
    const auto s = kvd.stats(10s);
    under_way = s && s->count("sets") != 0 && s->at("sets") >= 500;
    if (!under_way) std::this_thread::sleep_for(100ms);
  }
  ASSERT_TRUE(under_way) << "kvload did not get going";
  ::kill(kvd.pid(), SIGKILL);
  load.join();
  ASSERT_FALSE(r.timed_out) << "kvload hung after the server died:\n" << r.err;
  EXPECT_EQ(r.exit_code, 1) << r.err;
  const double ops = json_number(r.out, "ops");
  EXPECT_EQ(ops, 20200) << r.out;  // every op accounted for (the preload adds one SET per key)
  EXPECT_GT(json_number(r.out, "errors"), 0) << r.out;
  std::printf("after the server died: %s\n", r.out.c_str());
  std::remove(file.c_str());
}

}  // namespace
}  // namespace rkv::test
