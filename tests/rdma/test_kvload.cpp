// kvload_e2e: the kvload binary against a kvd child process. A malformed
// workload reports FILE:LINE for every bad line and exits nonzero without
// connecting; a good one runs and --json has the summary keys; --expect
// checks GETs against another file's SETs (and DELs); DEL lines run in
// order and --verify checks them; interactive mode answers SET/GET/DEL;
// --wait-start holds a connected run until SIGUSR1. (Bad flags and `kvload gen` need no device: test_cli.cpp.)
#include <gtest/gtest.h>

#include <cctype>
#include <csignal>
#include <cstdio>
#include <map>
#include <optional>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "kv/client/client.hpp"
#include "reactor/reactor.hpp"
#include "kvd_process.hpp"
#include "loopback.hpp"  // softroce_addr()

#ifndef RKV_KVD_PATH
#error "RKV_KVD_PATH must name the kvd binary"
#endif
#ifndef RKV_KVLOAD_PATH
#error "RKV_KVLOAD_PATH must name the kvload binary"
#endif

namespace rkv::test {
namespace {

// A scratch file in the current directory (the guest's /tmp is private; the
// build directory is shared and writable).
std::string write_file(const std::string& name, const std::string& text) {
  const std::string path = "kvload_test_" + name;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  return path;
}

// A flat JSON object of unsigned integers, {"name": 1, "b": 2}, strictly;
// nullopt for anything else.
std::optional<std::map<std::string, std::uint64_t>> parse_flat_json(const std::string& text) {
  std::map<std::string, std::uint64_t> out;
  std::size_t i = 0;
  const auto ws = [&] { while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i; };
  const auto eat = [&](char c) { ws(); if (i < text.size() && text[i] == c) { ++i; return true; } return false; };
  if (!eat('{')) return std::nullopt;
  if (eat('}')) return out;
  do {
    if (!eat('"')) return std::nullopt;
    const auto end = text.find('"', i);
    if (end == std::string::npos) return std::nullopt;
    std::string name = text.substr(i, end - i);
    i = end + 1;
    if (!eat(':')) return std::nullopt;
    ws();
    std::uint64_t v = 0;
    const std::size_t digits = i;
    while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) v = v * 10 + static_cast<std::uint64_t>(text[i++] - '0');
    if (i == digits || !out.emplace(std::move(name), v).second) return std::nullopt;
  } while (eat(','));
  if (!eat('}')) return std::nullopt;
  ws();
  if (i != text.size()) return std::nullopt;
  return out;
}

TEST(KvloadE2E, MalformedFileReportsEveryLineAndSendsNothing) {
  const std::string addr = verbs::test::softroce_addr();
  const std::string file = write_file("bad.txt",
                                      "# comment\n"
                                      "SET ok value\n"
                                      "SET missing_value\n"  // line 3
                                      "GET\n"                // line 4
                                      "GET fine\n"
                                      "FROB x\n");  // line 6
  // Port 1: nothing listens there. Had kvload tried to connect, it would
  // report a refused connection; it must stop at the parse errors instead.
  const auto r = run_command({RKV_KVLOAD_PATH, "--server", addr, "--port", "1", "--file", file}, {}, 120s);
  std::remove(file.c_str());
  ASSERT_FALSE(r.timed_out);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(contains(r.err, file + ":3:")) << r.err;
  EXPECT_TRUE(contains(r.err, file + ":4:")) << r.err;
  EXPECT_TRUE(contains(r.err, file + ":6:")) << r.err;
  EXPECT_FALSE(contains(r.err, file + ":2:")) << r.err;
  EXPECT_FALSE(contains(r.err, file + ":5:")) << r.err;
  EXPECT_FALSE(contains(r.err, "connect")) << "kvload tried to connect: " << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
}

TEST(KvloadE2E, GoodFileRunsAndJsonHasTheKeys) {
  const std::string addr = verbs::test::softroce_addr();
  KvdProcess kvd(RKV_KVD_PATH, addr);
  const std::string file = write_file("good.txt",
                                      "SET alpha first value\n"
                                      "SET beta @3000:7\n"
                                      "GET alpha\n"
                                      "GET beta\n"
                                      "GET never-set\n"
                                      "SET alpha second\n"
                                      "GET alpha\n");
  const auto port = std::to_string(kvd.port());
  auto r = run_command({RKV_KVLOAD_PATH, "--server", addr, "--port", port, "--file", file, "--json", "--verify"},
                       {}, 300s);
  ASSERT_FALSE(r.timed_out);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  for (const char* key : {"\"ops\":7", "\"errors\":0", "\"seconds\":", "\"ops_per_s\":", "\"mismatches\":0"}) {
    EXPECT_TRUE(contains(r.out, key)) << "missing " << key << " in " << r.out;
  }
  // Text summary too.
  r = run_command({RKV_KVLOAD_PATH, "--server", addr, "--port", port, "--file", file, "-q"}, {}, 300s);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "7 ops")) << r.out;
  // --expect: GETs of what another run SET are checked against that file's
  // last values (alpha = "second", beta = @3000:7); a wrong one is a mismatch.
  const std::string gets = write_file("gets.txt", "GET alpha\nGET beta\nGET never-set\n");
  const std::string wrong = write_file("wrong.txt", "SET alpha second\nSET beta @3000:8\n");
  r = run_command({RKV_KVLOAD_PATH, "--server", addr, "--port", port, "--file", gets, "--expect", file, "--json",
                   "--get-mode", "read"}, {}, 300s);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "\"mismatches\":0")) << r.out;
  r = run_command({RKV_KVLOAD_PATH, "--server", addr, "--port", port, "--file", gets, "--expect", wrong, "--json"},
                  {}, 300s);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_TRUE(contains(r.out, "\"mismatches\":1")) << r.out;
  EXPECT_TRUE(contains(r.err, gets + ":2: get beta")) << r.err;
  for (const auto& f : {file, gets, wrong}) std::remove(f.c_str());
}

// DEL lines: run in file order with the SETs and GETs of their key,
// --verify expects nothing after a DEL (and checks what each DEL finds), the
// report counts them (and the GETs' hits and misses); --expect honours DEL
// lines, and a key that should be gone but is there is a mismatch.
TEST(KvloadE2E, DelLinesRunInOrderAndVerify) {
  const std::string addr = verbs::test::softroce_addr();
  KvdProcess kvd(RKV_KVD_PATH, addr);
  const std::string file = write_file("del.txt",
                                      "SET a first\n"
                                      "SET big @70000:3\n"
                                      "SET c x\n"
                                      "DEL a\n"
                                      "GET a\n"
                                      "DEL a\n"
                                      "SET a again\n"
                                      "GET a\n"
                                      "DEL big\n"
                                      "GET big\n"
                                      "DEL never-set\n"
                                      "GET c\n");
  const auto port = std::to_string(kvd.port());
  for (const char* mode : {"rpc", "read"}) {
    SCOPED_TRACE(mode);
    const auto r = run_command({RKV_KVLOAD_PATH, "--server", addr, "--port", port, "--file", file, "--json",
                                "--verify", "--depth", "8", "--get-mode", mode},
                               {}, 300s);
    ASSERT_FALSE(r.timed_out);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    // GETs: a after its DEL and big after its DEL find nothing, a after its new SET and c find a value.
    for (const char* key : {"\"ops\":12", "\"errors\":0", "\"mismatches\":0",
                            "\"get_hits\":2,\"get_misses\":2",
                            "{\"op\":\"del\",\"size_class\":\"eager\",\"count\":4,\"errors\":0",
                            "{\"op\":\"del\",\"size_class\":\"rendezvous\",\"count\":0"}) {
      EXPECT_TRUE(contains(r.out, key)) << "missing " << key << " in " << r.out;
    }
  }
  // What the server holds now: a = "again", big deleted, c = "x".
  const std::string gets = write_file("del_gets.txt", "GET a\nGET big\nGET c\n");
  auto r = run_command({RKV_KVLOAD_PATH, "--server", addr, "--port", port, "--file", gets, "--expect", file,
                        "--json", "--get-mode", "read"},
                       {}, 300s);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "\"mismatches\":0")) << r.out;
  EXPECT_TRUE(contains(r.out, "\"get_hits\":2,\"get_misses\":1")) << r.out;  // a and c found, big not
  const std::string wrong = write_file("del_wrong.txt", "SET a again\nSET c x\nDEL c\n");  // c is not gone
  r = run_command({RKV_KVLOAD_PATH, "--server", addr, "--port", port, "--file", gets, "--expect", wrong, "--json"},
                  {}, 300s);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_TRUE(contains(r.out, "\"mismatches\":1")) << r.out;
  EXPECT_TRUE(contains(r.err, gets + ":3: get c: returned 1 bytes, expected nothing")) << r.err;
  for (const auto& f : {file, gets, wrong}) std::remove(f.c_str());
}

// --verify holds GETs by RDMA READ to a key's expiry as it holds GETs by
// message (no extra allowance since the reader applies the expiry itself,
// docs/protocol.md "Time to live"): keys SET with a 300 ms TTL (one in its
// index entry, one in a block), then read again and again at depth 1 by
// one-sided GETs, every answer checked against the expiry window. Passing
// does not depend on speed. Where the GETs straddle the expiry (in the
// Soft-RoCE guest they do) a window misjudged either way fails it; the
// reader's own check is cache_e2e's (kvd SIGSTOPped), since here kvd also
// removes the expired keys lazily on the TOUCH hints of the hits.
TEST(KvloadE2E, VerifyHoldsOneSidedGetsToTheExpiry) {
  const std::string addr = verbs::test::softroce_addr();
  KvdProcess kvd(RKV_KVD_PATH, addr);
  std::string lines = "SET t v PX 300\nSET b @300:1 PX 300\nSET p kept\n";
  for (int i = 0; i < 1500; ++i) lines += "GET t\nGET b\n";
  lines += "GET p\n";
  const std::string file = write_file("ttl_read.txt", lines);
  const auto r = run_command({RKV_KVLOAD_PATH, "--server", addr, "--port", std::to_string(kvd.port()), "--file",
                              file, "--json", "--verify", "--depth", "1", "--get-mode", "read"},
                             {}, 300s);
  ASSERT_FALSE(r.timed_out);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "\"errors\":0")) << r.out;
  EXPECT_TRUE(contains(r.out, "\"mismatches\":0")) << r.out << r.err;
  const auto at = r.out.find("\"get_hits\"");
  std::printf("kvload_e2e: one-sided GETs across a 300 ms TTL: %s\n",
              at == std::string::npos ? "?" : r.out.substr(at, 36).c_str());
  std::remove(file.c_str());
}

// rkv stats: the kvd's table over the wire, as JSON that parses, whose
// counters move by exactly the operations a kvload run sent; the text form
// has the same names. A malformed address exits 1 with a message.
TEST(KvloadE2E, RkvStatsJsonParsesAndCountersMove) {
  const std::string addr = verbs::test::softroce_addr();
  KvdProcess kvd(RKV_KVD_PATH, addr);
  const auto port = std::to_string(kvd.port());
  const auto stats = [&] {
    const auto r = run_command({rkv_beside(RKV_KVD_PATH), "stats", "--server", addr, "--port", port, "--json"}, {}, 120s);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    auto parsed = parse_flat_json(r.out);
    EXPECT_TRUE(parsed.has_value()) << "not a flat JSON object: " << r.out;
    return parsed.value_or(std::map<std::string, std::uint64_t>{});
  };
  auto before = stats();
  for (const char* name : {"uptime_seconds", "rss_bytes", "connections", "sets", "gets", "stats", "get_hits",
                           "large_sets", "keys"}) {
    EXPECT_EQ(before.count(name), 1u) << "no " << name;
  }
  EXPECT_GT(before["rss_bytes"], 0u);
  const std::string file = write_file("stats.txt",
                                      "SET a 1\nSET b @5000:1\nGET a\nGET b\nGET missing\nSET a 2\n");
  const auto r = run_command({RKV_KVLOAD_PATH, "--server", addr, "--port", port, "--file", file, "-q"}, {}, 300s);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto after = stats();
  EXPECT_EQ(after["sets"] - before["sets"], 3u);
  EXPECT_EQ(after["large_sets"] - before["large_sets"], 1u);
  EXPECT_EQ(after["gets"] - before["gets"], 3u);
  EXPECT_EQ(after["get_hits"] - before["get_hits"], 2u);
  EXPECT_EQ(after["stats"] - before["stats"], 1u);  // the first `rkv stats`
  EXPECT_EQ(after["keys"], 2u);
  EXPECT_EQ(after["accepted"] - before["accepted"], 2u);  // kvload and the second rkv stats
  const auto text = run_command({rkv_beside(RKV_KVD_PATH), "stats", "--server", addr, "--port", port}, {}, 120s);
  EXPECT_EQ(text.exit_code, 0) << text.err;
  EXPECT_TRUE(contains(text.out, "\nsets ")) << text.out;
  const auto refused = run_command({rkv_beside(RKV_KVD_PATH), "stats", "--server", addr, "--port", "1"}, {}, 120s);
  EXPECT_EQ(refused.exit_code, 1);
  EXPECT_TRUE(contains(refused.err, "rkv stats:")) << refused.err;
  std::remove(file.c_str());
}

// The three ways to find completions (reactor.hpp "Spin, then block"), on
// both sides: --poll-us 0 (events only), the default spin budget, and
// --busy-poll. The same workload (eager and rendezvous values) runs and
// verifies in each, and kvd's counters show the mode while a connection is
// open and idle: in the first two, CQs armed before sleeping and no poll
// pass (kvd sleeps); with --busy-poll nothing armed (it never sleeps) and
// poll passes climbing.
TEST(KvloadE2E, PollModesBothSidesRunAndVerify) {
  const std::string addr = verbs::test::softroce_addr();
  const std::string file = write_file("busy.txt",
                                      "SET small @100:1\n"
                                      "SET big @200000:2\n"
                                      "GET small\n"
                                      "GET big\n"
                                      "SET small @3000:3\n"
                                      "GET small\n");
  enum class Mode { events, adaptive, busy };
  for (const Mode mode : {Mode::events, Mode::adaptive, Mode::busy}) {
    std::vector<std::string> flags;
    switch (mode) {
      case Mode::events: flags = {"--poll-us", "0"}; break;
      case Mode::adaptive: break;  // the default
      case Mode::busy: flags = {"--busy-poll"}; break;
    }
    SCOPED_TRACE(flags.empty() ? std::string("default") : flags[0]);
    KvdProcess kvd(RKV_KVD_PATH, addr, flags);
    std::vector<std::string> argv = {RKV_KVLOAD_PATH, "--server", addr, "--port", std::to_string(kvd.port()),
                                     "--file", file, "--json", "--verify", "--depth", "4"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    const auto r = run_command(argv, {}, 300s);
    ASSERT_FALSE(r.timed_out);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    for (const char* key : {"\"ops\":6", "\"errors\":0", "\"mismatches\":0"}) {
      EXPECT_TRUE(contains(r.out, key)) << "missing " << key << " in " << r.out;
    }
    // One connection that did a SET and now idles (its reactor is not run).
    reactor::Reactor reactor;
    kv::client::ClientOptions copt;
    copt.poll = 0us;
    auto client = kv::client::Client::connect(reactor, addr, kvd.port(), copt);
    ASSERT_EQ(client->set_sync("idle", "x"), kv::client::Status::ok);
    // The mode's idle behaviour is an event waited for with a generous
    // deadline, never a fixed sleep then a check (a descheduled guest can
    // stretch the spin budget past any sleep): asleep = two samples 300 ms
    // apart with no poll pass between them (a kvd that kept polling never
    // shows one); busy = poll passes climbing between two samples while
    // nothing is sent.
    const bool want_polls = mode == Mode::busy;
    auto s1 = kvd.stats();
    ASSERT_TRUE(s1.has_value());
    auto s2 = s1;
    bool seen = false;
    for (const auto deadline = deadline_after(60s);
         !seen && std::chrono::steady_clock::now() < deadline;) {
      std::this_thread::sleep_for(300ms);
      s1 = s2;
      s2 = kvd.stats();
      ASSERT_TRUE(s2.has_value());
      seen = (s2->at("cq_polls") != s1->at("cq_polls")) == want_polls;
    }
    EXPECT_TRUE(seen) << (want_polls ? "no poll pass while idle" : "poll passes never stopped while idle")
                      << ": cq_polls " << s2->at("cq_polls");
    EXPECT_EQ(s2->at("sets"), 4u);
    EXPECT_EQ(s2->at("connections"), 1u);
    EXPECT_GT(s2->at("completions"), 0u);
    switch (mode) {
      case Mode::events:
      case Mode::adaptive:
        EXPECT_GT(s2->at("cq_wakeups"), 0u);
        EXPECT_GT(s2->at("cq_arms"), 0u);
        break;
      case Mode::busy:
        EXPECT_EQ(s2->at("cq_arms"), 0u);  // never about to sleep
        break;
    }
  }
  std::remove(file.c_str());
}

TEST(KvloadE2E, InteractiveMode) {
  const std::string addr = verbs::test::softroce_addr();
  KvdProcess kvd(RKV_KVD_PATH, addr);
  const auto r = run_command({RKV_KVLOAD_PATH, "--server", addr, "--port", std::to_string(kvd.port())},
                             "SET k hello there\nget k\nGET nope\ndel k\nDEL k\nGET k\nquit\nGET k\n", 300s);
  ASSERT_FALSE(r.timed_out);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  // No prompt: stdin is not a terminal. Nothing after quit.
  EXPECT_EQ(r.out, "OK\n\"hello there\"\n(not found)\n(deleted)\n(not found)\n(not found)\n") << r.err;
}

// kvload --grants on (docs/protocol.md "SET by grant"): SETs of 4 KiB to
// 1 MiB written into grants, their sizes changing under each key, every GET
// checked (--verify) and read by message and one-sided both.
TEST(KvloadE2E, GrantedSetsOfEverySizeVerify) {
  const std::string addr = verbs::test::softroce_addr();
  KvdProcess kvd(RKV_KVD_PATH, addr);
  const std::size_t sizes[] = {4096, 5000, 16384, 65536, 262144, 1048576};
  std::string text;
  for (int i = 0; i < 72; ++i) {
    const std::string key = "g" + std::to_string(i % 6);
    text += "SET " + key + " @" + std::to_string(sizes[(i / 6 + i) % 6]) + ":" + std::to_string(i) + "\n";
    text += "GET " + key + "\n";
  }
  const std::string file = write_file("granted.txt", text);
  const auto port = std::to_string(kvd.port());
  for (const char* mode : {"rpc", "read"}) {
    SCOPED_TRACE(mode);
    auto r = run_command({RKV_KVLOAD_PATH, "--server", addr, "--port", port, "--file", file, "--json", "--verify",
                          "--depth", "8", "--grants", "on", "--get-mode", mode},
                         {}, 600s);
    ASSERT_FALSE(r.timed_out);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(json_number(r.out, "errors"), 0) << r.out;
    EXPECT_EQ(json_number(r.out, "mismatches"), 0) << r.out;
    EXPECT_GT(json_number(r.out, "sets_granted"), 0) << "no SET went into a grant: " << r.out;
  }
  const auto st = kvd.stats();
  ASSERT_TRUE(st);
  EXPECT_GT(st->at("granted_sets"), 0u);
  EXPECT_EQ(st->at("protocol_errors"), 0u);
  std::remove(file.c_str());
}

// --wait-start FILE (bench/run and bench/profile start several processes'
// runs together with it): the process connects, writes its pid to FILE and
// sends nothing until SIGUSR1; without the signal it gives up after
// --stall-timeout, exit 1, still having sent nothing.
TEST(KvloadE2E, WaitStartRunsOnlyOnTheSignal) {
  const std::string addr = verbs::test::softroce_addr();
  KvdProcess kvd(RKV_KVD_PATH, addr);
  const auto port = std::to_string(kvd.port());
  std::string text;
  for (int i = 0; i < 20; ++i) text += "SET w" + std::to_string(i) + " v" + std::to_string(i) + "\nGET w" + std::to_string(i) + "\n";
  const std::string file = write_file("wait.txt", text);
  const std::string ready = "kvload_test_ready";
  std::remove(ready.c_str());
  CommandResult r;
  std::thread run([&] {
    r = run_command({RKV_KVLOAD_PATH, "--server", addr, "--port", port, "--file", file, "--json", "--verify",
                     "--wait-start", ready}, {}, 600s);
  });
  // Its pid in the file once it is connected.
  pid_t pid = 0;
  const auto deadline = deadline_after(300s);
  while (pid == 0 && std::chrono::steady_clock::now() < deadline) {
    std::ifstream in(ready);
    long v = 0;
    if (in >> v) pid = static_cast<pid_t>(v);
    if (pid == 0) std::this_thread::sleep_for(50ms);
  }
  if (pid > 0) {
    std::this_thread::sleep_for(1s);  // room for a run that did not wait to show itself
    const auto st = kvd.stats();
    ASSERT_TRUE(st);
    EXPECT_EQ(st->at("sets"), 0u) << "the run started before its signal";
    EXPECT_EQ(st->at("gets"), 0u);
    EXPECT_EQ(::kill(pid, SIGUSR1), 0);
  }
  run.join();
  ASSERT_GT(pid, 0) << "no pid in " << ready << ": " << r.err;
  ASSERT_FALSE(r.timed_out);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(json_number(r.out, "ops"), 40) << r.out;
  EXPECT_EQ(json_number(r.out, "mismatches"), 0) << r.out;
  auto st = kvd.stats();
  ASSERT_TRUE(st);
  EXPECT_EQ(st->at("sets"), 20u);

  // No signal: it gives up at --stall-timeout, having sent nothing.
  std::remove(ready.c_str());
  r = run_command({RKV_KVLOAD_PATH, "--server", addr, "--port", port, "--file", file, "--wait-start", ready,
                   "--stall-timeout", "500"}, {}, 300s);
  ASSERT_FALSE(r.timed_out);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_TRUE(contains(r.err, "kvload: --wait-start: no SIGUSR1 within 500 ms")) << r.err;
  st = kvd.stats();
  ASSERT_TRUE(st);
  EXPECT_EQ(st->at("sets"), 20u);
  EXPECT_EQ(st->at("gets"), 20u);
  // A file it cannot write: refused before anything is sent.
  r = run_command({RKV_KVLOAD_PATH, "--server", addr, "--port", port, "--file", file, "--wait-start",
                   "no-such-dir/ready"}, {}, 300s);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_TRUE(contains(r.err, "kvload: --wait-start no-such-dir/ready: No such file or directory")) << r.err;
  for (const auto& f : {file, ready}) std::remove(f.c_str());
}

}  // namespace
}  // namespace rkv::test
