// cli: what kvd and kvload do with their command lines before any RDMA: bad
// flags exit 2, and `kvload gen` writes a workload the parser accepts. No
// device is needed, so these run natively (unit suite) instead of in the
// Soft-RoCE guest, where every start of an ASan kvd or kvload costs seconds.
#include <gtest/gtest.h>

#include <sstream>
#include <string>

#include "kv/load/workload.hpp"
#include "kvd_process.hpp"  // run_command()

#ifndef RKV_KVD_PATH
#error "RKV_KVD_PATH must name the kvd binary"
#endif
#ifndef RKV_KVLOAD_PATH
#error "RKV_KVLOAD_PATH must name the kvload binary"
#endif

namespace rkv::test {
namespace {

bool contains(const std::string& hay, const std::string& needle) { return hay.find(needle) != std::string::npos; }

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
}

TEST(RkvStatsCli, BadFlagsExitTwo) {
  const std::string kvd = RKV_KVD_PATH;
  const std::string rkv = kvd.substr(0, kvd.rfind('/') + 1) + "rkv";
  EXPECT_EQ(run_command({rkv, "stats"}, {}, 60s).exit_code, 2);  // --server missing
  EXPECT_EQ(run_command({rkv, "stats", "--server", "x", "--port", "70000"}, {}, 60s).exit_code, 2);
  const auto help = run_command({rkv, "stats", "--help"}, {}, 60s);
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_TRUE(contains(help.out, "--json")) << help.out;
}

}  // namespace
}  // namespace rkv::test
