// cli: what kvd and kvload do with their command lines before any RDMA: bad
// flags exit 2, --version, `kvload gen` writes a workload the parser accepts,
// and without an RDMA device every tool and the C API say so. No device is
// needed, so these run natively (unit suite) instead of in the Soft-RoCE
// guest, where every start of an ASan kvd or kvload costs seconds.
#include <gtest/gtest.h>

#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "kv/load/workload.hpp"
#include "kvd_process.hpp"  // run_command()

#ifndef RKV_KVD_PATH
#error "RKV_KVD_PATH must name the kvd binary"
#endif
#ifndef RKV_KVLOAD_PATH
#error "RKV_KVLOAD_PATH must name the kvload binary"
#endif
#ifndef RKV_OPEN_HELPER_PATH
#error "RKV_OPEN_HELPER_PATH must name the open_helper binary"
#endif
#ifndef RKV_VERSION
#error "RKV_VERSION must be the project version"
#endif

namespace rkv::test {
namespace {

TEST(KvloadCli, BadFlagsExitTwo) {
  EXPECT_EQ(run_command({RKV_KVLOAD_PATH}, {}, 60s).exit_code, 2);  // --server missing
  EXPECT_EQ(run_command({RKV_KVLOAD_PATH, "--server", "x", "--depth", "0"}, {}, 60s).exit_code, 2);
  EXPECT_EQ(run_command({RKV_KVLOAD_PATH, "--server", "x", "--bogus"}, {}, 60s).exit_code, 2);
  EXPECT_EQ(run_command({RKV_KVLOAD_PATH, "--server", "x", "--depth", "100000"}, {}, 60s).exit_code, 2);
  const auto bad_mix = run_command({RKV_KVLOAD_PATH, "gen", "--sizes", "64,4q"}, {}, 60s);
  EXPECT_EQ(bad_mix.exit_code, 2);
  EXPECT_TRUE(contains(bad_mix.err, "4q")) << bad_mix.err;
  EXPECT_EQ(run_command({RKV_KVLOAD_PATH, "gen", "--get-ratio", "1.5"}, {}, 60s).exit_code, 2);
}

TEST(KvloadCli, GenWritesAParsableWorkload) {
  const auto r = run_command({RKV_KVLOAD_PATH, "gen", "--keys", "10", "--ops", "30", "--get-ratio", "0.3",
                              "--sizes", "16:3,4k:1,1m:1", "--seed", "4"},
                             {}, 60s);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::istringstream in(r.out);
  const kv::load::ParseResult parsed = kv::load::parse_workload(in);
  ASSERT_TRUE(parsed.ok()) << r.out;
  EXPECT_EQ(parsed.ops.size(), 40u);  // 10 preload SETs + 30 random ops
  const auto again = run_command({RKV_KVLOAD_PATH, "gen", "--keys", "10", "--ops", "30", "--get-ratio", "0.3",
                                  "--sizes", "16:3,4k:1,1m:1", "--seed", "4"},
                                 {}, 60s);
  EXPECT_EQ(again.out, r.out);  // deterministic
}

TEST(KvdCli, BadFlagsExitTwo) {
  EXPECT_EQ(run_command({RKV_KVD_PATH, "--fsync", "always"}, {}, 60s).exit_code, 2);  // needs --data-dir
  EXPECT_EQ(run_command({RKV_KVD_PATH, "--data-dir", "/tmp/x", "--fsync", "sometimes"}, {}, 60s).exit_code, 2);
  EXPECT_EQ(run_command({RKV_KVD_PATH, "--data-dir", "/tmp/x", "--compact-ratio", "0.5"}, {}, 60s).exit_code, 2);
  EXPECT_EQ(run_command({RKV_KVD_PATH, "--data-dir", "/tmp/x", "--fsync-interval-ms", "0"}, {}, 60s).exit_code, 2);
  for (const char* bad : {"0", "-5m", "12x", "m", "1.5q"}) {
    const auto r = run_command({RKV_KVD_PATH, "--max-memory", bad}, {}, 60s);
    EXPECT_EQ(r.exit_code, 2) << bad;
    EXPECT_TRUE(contains(r.err, "must be a size in bytes")) << bad << ": " << r.err;
  }
  for (const char* bad : {"9464", "127.0.0.1", "127.0.0.1:", ":9464", "127.0.0.1:70000", "::1:9464", "[::1]",
                          "127.0.0.1:94x"}) {
    const auto r = run_command({RKV_KVD_PATH, "--metrics", bad}, {}, 60s);
    EXPECT_EQ(r.exit_code, 2) << bad;
    EXPECT_TRUE(contains(r.err, "must be ADDR:PORT")) << bad << ": " << r.err;
  }
  // The cluster's flags: refused before etcd is tried (nothing listens on port 1).
  EXPECT_EQ(run_command({RKV_KVD_PATH, "--drain-timeout", "5"}, {}, 60s).exit_code, 2);  // needs --cluster
  EXPECT_EQ(run_command({RKV_KVD_PATH, "--lease-ttl", "5"}, {}, 60s).exit_code, 2);      // needs --cluster
  for (const char* bad : {"-1", "3601", "x"}) {
    const auto r = run_command({RKV_KVD_PATH, "--bind", "127.0.0.1", "--cluster", "etcd://127.0.0.1:1/x",
                                "--drain-timeout", bad}, {}, 60s);
    EXPECT_EQ(r.exit_code, 2) << bad << ": " << r.err;
  }
  for (const char* bad : {"1", "601"}) {
    const auto r = run_command({RKV_KVD_PATH, "--bind", "127.0.0.1", "--cluster", "etcd://127.0.0.1:1/x",
                                "--lease-ttl", bad}, {}, 60s);
    EXPECT_EQ(r.exit_code, 2) << bad << ": " << r.err;
  }
}

TEST(RkvTopCli, BadFlagsExitTwo) {
  const std::string rkv = rkv_beside(RKV_KVD_PATH);
  EXPECT_EQ(run_command({rkv, "top"}, {}, 60s).exit_code, 2);  // --server missing
  EXPECT_EQ(run_command({rkv, "top", "--server", "x", "--interval-ms", "5"}, {}, 60s).exit_code, 2);
  EXPECT_EQ(run_command({rkv, "top", "--server", "x:0"}, {}, 60s).exit_code, 2);
  const auto help = run_command({rkv, "top", "--help"}, {}, 60s);
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_TRUE(contains(help.out, "--interval-ms")) << help.out;
}

TEST(RkvStatsCli, BadFlagsExitTwo) {
  const std::string rkv = rkv_beside(RKV_KVD_PATH);
  EXPECT_EQ(run_command({rkv, "stats"}, {}, 60s).exit_code, 2);  // --server missing
  EXPECT_EQ(run_command({rkv, "stats", "--server", "x", "--port", "70000"}, {}, 60s).exit_code, 2);
  const auto help = run_command({rkv, "stats", "--help"}, {}, 60s);
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_TRUE(contains(help.out, "--json")) << help.out;
}

TEST(Version, EveryToolPrintsVersionAndGitDescribe) {
  const std::vector<std::vector<std::string>> tools = {
      {RKV_KVD_PATH, "--version"},   {RKV_KVLOAD_PATH, "--version"},         {rkv_beside(RKV_KVD_PATH), "--version"},
      {rkv_beside(RKV_KVD_PATH), "stats", "--version"}, {RKV_KVLOAD_PATH, "gen", "--version"},
  };
  for (const auto& argv : tools) {
    const auto r = run_command(argv, {}, 60s);
    EXPECT_EQ(r.exit_code, 0) << argv[0] << " " << argv[1] << ": " << r.err;
    // `NAME (rkv) VERSION, git DESCRIBE`: a describe (a hash at least) or "unknown", never empty.
    EXPECT_TRUE(contains(r.out, std::string(" (rkv) ") + RKV_VERSION + ", git ")) << r.out;
    const auto git = r.out.substr(r.out.find(", git ") + 6);
    EXPECT_GT(git.size(), 1u) << r.out;
  }
  // --version beats a missing required flag (kvload needs --server otherwise).
  EXPECT_TRUE(contains(run_command({RKV_KVLOAD_PATH, "--version"}, {}, 60s).out, "kvload (rkv) "));
}

// Runs argv where there is no RDMA device. On a host without one (this CI
// host: no /dev/infiniband, `ibv_devices` lists nothing) that is just running
// it. On a host with a device the program is run without it: in a private
// mount namespace (unshare --user --map-root-user --mount: no root needed
// where user namespaces are allowed) with an empty tmpfs over
// /dev/infiniband, so libibverbs and librdmacm find no device node, which is
// what they see on a host without RDMA. Checked in the Soft-RoCE guest (rxe0
// present): there `ibv_devices` then lists nothing and
// rdma_create_event_channel fails with ENODEV, the same call and errno as on
// a host without RDMA. If the namespace cannot be made, the test fails with
// unshare's message: it never passes without having seen the condition.
CommandResult run_without_rdma_device(std::vector<std::string> argv) {
  if (!std::filesystem::exists("/dev/infiniband")) {
    std::cout << "no /dev/infiniband on this host: running " << argv[0] << " as it is\n";
    return run_command(std::move(argv), {}, 120s);
  }
  std::cout << "/dev/infiniband exists: running " << argv[0] << " with an empty /dev/infiniband (unshare)\n";
  std::vector<std::string> wrapped = {
      "/bin/sh", "-c",
      "exec unshare --user --map-root-user --mount sh -c 'mount -t tmpfs none /dev/infiniband && exec \"$@\"' sh "
      "\"$@\"",
      "sh"};
  wrapped.insert(wrapped.end(), argv.begin(), argv.end());
  return run_command(std::move(wrapped), {}, 120s);
}

// The message the user gets: it names the condition and the way out.
void expect_no_device_message(const std::string& text) {
  EXPECT_TRUE(contains(text, "no RDMA device found")) << text;
  EXPECT_TRUE(contains(text, "scripts/softroce run")) << text;
  EXPECT_FALSE(contains(text, "ERROR: AddressSanitizer")) << text;
}

TEST(NoRdmaDevice, KvdSaysSoAndExitsOne) {
  const auto r = run_without_rdma_device({RKV_KVD_PATH, "--port", "0"});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_TRUE(contains(r.err, "kvd: no RDMA device found")) << r.err;
  expect_no_device_message(r.err);
  EXPECT_FALSE(contains(r.out, "listening")) << r.out;
}

TEST(NoRdmaDevice, KvdOnEveryAddressWithoutATokenWarns) {
  const auto r = run_without_rdma_device({RKV_KVD_PATH, "--port", "0"});  // --bind 0.0.0.0 by default
  EXPECT_TRUE(contains(r.out + r.err, "bound to every address (0.0.0.0) without an auth token")) << r.out << r.err;
  const auto one = run_without_rdma_device({RKV_KVD_PATH, "--port", "0", "--bind", "127.0.0.1"});
  EXPECT_FALSE(contains(one.out + one.err, "without an auth token")) << one.out << one.err;
}

TEST(AuthTokenFile, BadFilesAreClearErrors) {
  const std::string empty = "cli_test_empty_token", big = "cli_test_big_token";
  { std::ofstream(empty, std::ios::trunc) << "\n"; }
  { std::ofstream(big, std::ios::trunc) << std::string(5000, 't'); }
  for (const std::string& f : {empty, big}) {
    const auto kvd = run_command({RKV_KVD_PATH, "--auth-token-file", f}, {}, 60s);
    EXPECT_EQ(kvd.exit_code, 2) << kvd.err;
    EXPECT_TRUE(contains(kvd.err, "kvd: auth token file " + f + ": the token is")) << kvd.err;
    const auto load = run_command({RKV_KVLOAD_PATH, "--server", "127.0.0.1", "--auth-token-file", f}, {}, 60s);
    EXPECT_EQ(load.exit_code, 2) << load.err;
    EXPECT_TRUE(contains(load.err, "kvload: auth token file " + f)) << load.err;
    const auto stats =
        run_command({rkv_beside(RKV_KVD_PATH), "stats", "--server", "127.0.0.1", "--auth-token-file", f}, {}, 60s);
    EXPECT_EQ(stats.exit_code, 2) << stats.err;
    EXPECT_TRUE(contains(stats.err, "rkv stats: auth token file " + f)) << stats.err;
    const auto top =
        run_command({rkv_beside(RKV_KVD_PATH), "top", "--server", "127.0.0.1", "--auth-token-file", f}, {}, 60s);
    EXPECT_EQ(top.exit_code, 2) << top.err;
    EXPECT_TRUE(contains(top.err, "rkv top: auth token file " + f)) << top.err;
  }
  EXPECT_EQ(run_command({RKV_KVD_PATH, "--auth-token-file", "/nonexistent/token"}, {}, 60s).exit_code, 2);
  std::remove(empty.c_str());
  std::remove(big.c_str());
}

TEST(NoRdmaDevice, KvloadAndRkvStatsSaySoAndExitOne) {
  const auto load = run_without_rdma_device({RKV_KVLOAD_PATH, "--server", "127.0.0.1", "--port", "7471"});
  EXPECT_EQ(load.exit_code, 1) << load.out << load.err;
  EXPECT_TRUE(contains(load.err, "kvload: connect to 127.0.0.1:7471: no RDMA device found")) << load.err;
  expect_no_device_message(load.err);
  const auto stats = run_without_rdma_device({rkv_beside(RKV_KVD_PATH), "stats", "--server", "127.0.0.1"});
  EXPECT_EQ(stats.exit_code, 1) << stats.out << stats.err;
  expect_no_device_message(stats.err);
}

TEST(NoRdmaDevice, CApiReturnsEnodevWithTheMessage) {
  const auto r = run_without_rdma_device({RKV_OPEN_HELPER_PATH, "127.0.0.1"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, "rc=" + std::to_string(ENODEV) + "\n")) << r.out;
  EXPECT_TRUE(contains(r.out, "strerror=no RDMA device\n")) << r.out;
  EXPECT_TRUE(contains(r.out, "last_error=connect to 127.0.0.1:7471: no RDMA device found")) << r.out;
  expect_no_device_message(r.out);
  EXPECT_EQ(r.err, "");  // the library itself prints nothing: the message is the caller's to show
}

}  // namespace
}  // namespace rkv::test
