// auth_e2e: kvd --auth-token-file in the Soft-RoCE guest (docs/protocol.md,
// "Authentication").
// - Without a token and with a wrong one, kv::Client::connect, kv_open,
//   kvload and rkv stats are refused with EACCES / a message that says why;
//   kvd accepted none of them (so none got the accept that carries the
//   index's rkey), counted each in auth_failures and logged the peer.
// - With the right token every path works: eager and rendezvous SET/GET (C
//   API via RKV_AUTH_TOKEN_FILE and kv::Client), one-sided GETs by READ,
//   kvload --verify in both GET modes, rkv stats.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "kv/client/client.hpp"
#include "kv/client/kv.h"
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

std::string write_secret(const std::string& path, const std::string& text) {
  { std::ofstream(path, std::ios::trunc) << text; }
  ::chmod(path.c_str(), 0600);
  return path;
}

// kv::Client::connect's errno and message (0 and "" if it connected).
std::pair<int, std::string> try_connect(const std::string& addr, std::uint16_t port, const std::string& token) {
  reactor::Reactor reactor;
  kv::client::ClientOptions o;
  o.auth_token = token;
  try {
    auto c = kv::client::Client::connect(reactor, addr, port, o);
    c->close();
    return {0, ""};
  } catch (const kv::client::ConnectError& e) {
    return {e.code(), e.what()};
  }
}

// kv_open with RKV_AUTH_TOKEN_FILE set to `file` ("" = unset).
int c_open(const std::string& server, const std::string& file, void** h) {
  if (file.empty()) {
    ::unsetenv("RKV_AUTH_TOKEN_FILE");
  } else {
    ::setenv("RKV_AUTH_TOKEN_FILE", file.c_str(), 1);
  }
  std::string s = server;
  const int rc = kv_open(s.data(), h);
  ::unsetenv("RKV_AUTH_TOKEN_FILE");
  return rc;
}

TEST(AuthE2E, OnlyTheRightTokenGetsInAndItWorksForEveryPath) {
  const std::string addr = verbs::test::softroce_addr();
  TempDir t{"auth"};
  const std::string good = write_secret(t.path() + "/token", "correct horse battery staple\n");
  const std::string wrong = write_secret(t.path() + "/wrong", "correct horse battery stapler\n");
  KvdProcess kvd(RKV_KVD_PATH, addr, {"--auth-token-file", good});
  const std::string port = std::to_string(kvd.port());
  const std::string server = addr + ":" + port;

  // --- refused: no token, wrong token -------------------------------------
  const auto none = try_connect(addr, kvd.port(), "");
  EXPECT_EQ(none.first, EACCES) << none.second;
  EXPECT_TRUE(contains(none.second, "requires an authentication token and none was sent")) << none.second;
  const auto bad = try_connect(addr, kvd.port(), "correct horse battery stapler");
  EXPECT_EQ(bad.first, EACCES) << bad.second;
  EXPECT_TRUE(contains(bad.second, "refused the authentication token")) << bad.second;
  void* h = nullptr;
  EXPECT_EQ(c_open(server, "", &h), EACCES) << kv_last_error(nullptr);
  EXPECT_EQ(c_open(server, wrong, &h), EACCES) << kv_last_error(nullptr);
  EXPECT_STREQ(kv_strerror(EACCES), "authentication token missing or refused");
  EXPECT_EQ(c_open(server, t.path() + "/missing", &h), EINVAL);
  EXPECT_TRUE(contains(kv_last_error(nullptr), "RKV_AUTH_TOKEN_FILE")) << kv_last_error(nullptr);
  const auto load_none = run_command({RKV_KVLOAD_PATH, "--server", addr, "--port", port}, "SET k v\n");
  EXPECT_EQ(load_none.exit_code, 1);
  EXPECT_TRUE(contains(load_none.err, "requires an authentication token")) << load_none.err;
  const auto stats_bad = run_command({rkv_beside(RKV_KVD_PATH), "stats", "--server", addr, "--port", port,
                                      "--auth-token-file", wrong});
  EXPECT_EQ(stats_bad.exit_code, 1);
  EXPECT_TRUE(contains(stats_bad.err, "refused the authentication token")) << stats_bad.err;

  auto before = kvd.stats();
  ASSERT_TRUE(before);
  EXPECT_EQ(before->at("auth_failures"), 6u);
  EXPECT_EQ(before->at("rejected"), 6u);
  EXPECT_EQ(before->at("accepted"), 0u) << "no refused client got an accept (which carries the index's rkey)";
  EXPECT_EQ(before->at("keys"), 0u);
  EXPECT_TRUE(contains(kvd.output(), "authentication failed: no token")) << kvd.output();
  EXPECT_TRUE(contains(kvd.output(), "authentication failed: wrong token")) << kvd.output();
  EXPECT_TRUE(contains(kvd.output(), "rejecting " + addr)) << "the peer's address is logged\n" << kvd.output();

  // --- the right token: every path ------------------------------------------
  ASSERT_EQ(c_open(server, good, &h), 0) << kv_last_error(nullptr);
  EXPECT_EQ(kv_set(h, "eager", "small value"), 0) << kv_last_error(h);
  const std::string large(1 << 20, 'L');
  EXPECT_EQ(kv_set(h, "large", large.c_str()), 0) << kv_last_error(h);  // rendezvous: RDMA READ by kvd
  char* v = nullptr;
  ASSERT_EQ(kv_get(h, "eager", &v), 0) << kv_last_error(h);
  EXPECT_STREQ(v, "small value");
  kv_release(v);
  ASSERT_EQ(kv_get(h, "large", &v), 0) << kv_last_error(h);
  EXPECT_EQ(std::string(v), large);
  kv_release(v);
  EXPECT_EQ(kv_close(h), 0);

  {  // one-sided GETs: RDMA READs of the index whose rkey came in the accept
    reactor::Reactor reactor;
    kv::client::ClientOptions o;
    o.auth_token = "correct horse battery staple";
    o.get_mode = kv::client::GetMode::read;
    auto c = kv::client::Client::connect(reactor, addr, kvd.port(), o);
    std::string got;
    bool found = false;
    ASSERT_EQ(c->get_sync("eager", got, found), Status::ok);
    EXPECT_TRUE(found);
    EXPECT_EQ(got, "small value");
    ASSERT_EQ(c->get_sync("large", got, found), Status::ok);
    EXPECT_EQ(got, large);
    EXPECT_GE(c->counters().onesided_hits, 2u) << "the GETs went by READ";
    c->close();
  }

  const std::string wl = t.path() + "/wl.txt";
  {
    std::ofstream f(wl, std::ios::trunc);
    for (int i = 0; i < 40; ++i) {
      f << "SET k" << i << " @" << (i % 4 == 0 ? 100000 : 200) << ":" << i << "\nGET k" << i << "\n";
    }
  }
  for (const char* mode : {"rpc", "read"}) {
    const auto load = run_command({RKV_KVLOAD_PATH, "--server", addr, "--port", port, "--file", wl, "--verify",
                                   "--depth", "8", "--get-mode", mode, "--auth-token-file", good, "-q"});
    EXPECT_EQ(load.exit_code, 0) << mode << "\n" << load.err;
  }
  const auto stats = run_command({rkv_beside(RKV_KVD_PATH), "stats", "--server", addr, "--port", port,
                                  "--auth-token-file", good, "--json"});
  EXPECT_EQ(stats.exit_code, 0) << stats.err;
  EXPECT_TRUE(contains(stats.out, "\"auth_failures\": 6,")) << stats.out;
  EXPECT_TRUE(contains(stats.out, "\"large_sets\": ")) << stats.out;

  const auto after = kvd.stats();
  ASSERT_TRUE(after);
  EXPECT_EQ(after->at("auth_failures"), 6u);
  EXPECT_EQ(after->at("accepted"), 5u);  // C API, read client, two kvloads, rkv stats
  EXPECT_GE(after->at("large_sets"), 11u);
  EXPECT_EQ(after->at("protocol_errors"), 0u);
  EXPECT_EQ(kvd.stop(), 0);
}

}  // namespace
}  // namespace rkv::test
