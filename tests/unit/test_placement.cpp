// Unit tests for proto/placement: pinned rendezvous choices (the spec of
// docs/protocol.md, "Several servers"), how few keys move when a server comes
// or goes, the balance over three servers, and the server-list parser.

#include <gtest/gtest.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "proto/placement.hpp"

namespace rkv::proto {
namespace {

const std::vector<std::string> kThree = {"10.0.0.1:7471", "10.0.0.2:7471", "10.0.0.3:7471"};

std::string key_of(std::size_t i) { return "key:" + std::to_string(i); }

TEST(Placement, PinnedWeights) {
  // Any reimplementation must produce these (docs/protocol.md).
  EXPECT_EQ(placement_weight("key", "10.0.0.1:7471"), 0x787453c23c7bf4b8ull);
  EXPECT_EQ(placement_weight("key", "10.0.0.2:7471"), 0x6e6164befce514acull);
  EXPECT_EQ(placement_weight("user:42", "[fe80::1]:7472"), 0x644b11187d92f275ull);
}

TEST(Placement, PinnedChoices) {
  struct Case {
    const char* key;
    std::size_t shard;
  };
  const std::array<Case, 8> cases = {{{"key", 0}, {"a", 1}, {"b", 1}, {"user:42", 0}, {"session:9f3c", 2}, {"k0", 0}, {"k1", 0}, {"zz", 0}}};
  for (const Case& c : cases) EXPECT_EQ(place(c.key, kThree), c.shard) << c.key;
}

TEST(Placement, PinnedShards) {
  // Any reimplementation must produce these (docs/cluster.md "The shard map").
  EXPECT_EQ(shard_of("key", 64), 2u);
  EXPECT_EQ(shard_of("user:42", 64), 53u);
  EXPECT_EQ(shard_of("user:42", 4096), 2933u);
  EXPECT_EQ(shard_of("anything", 1), 0u);
  std::array<std::size_t, 64> n{};
  for (std::size_t i = 0; i < 64'000; ++i) ++n[shard_of(key_of(i), 64)];
  for (std::size_t s = 0; s < 64; ++s) {
    EXPECT_GT(n[s], 800u) << "shard " << s;
    EXPECT_LT(n[s], 1200u) << "shard " << s;
  }
}

TEST(Placement, OrderOfTheListDoesNotMatter) {
  const std::vector<std::string> reversed(kThree.rbegin(), kThree.rend());
  for (std::size_t i = 0; i < 10'000; ++i) {
    const std::string k = key_of(i);
    EXPECT_EQ(kThree[place(k, kThree)], reversed[place(k, reversed)]);
  }
}

TEST(Placement, OneServerTakesEverything) {
  const std::vector<std::string> one = {"h:1"};
  for (std::size_t i = 0; i < 100; ++i) EXPECT_EQ(place(key_of(i), one), 0u);
}

TEST(Placement, ThreeServersGetAThirdEach) {
  constexpr std::size_t kKeys = 100'000;
  std::array<std::size_t, 3> n{};
  for (std::size_t i = 0; i < kKeys; ++i) ++n[place(key_of(i), kThree)];
  for (std::size_t s = 0; s < 3; ++s) {
    const double share = static_cast<double>(n[s]) / kKeys;
    EXPECT_GT(share, 1.0 / 3 * 0.9) << "server " << s;
    EXPECT_LT(share, 1.0 / 3 * 1.1) << "server " << s;
  }
}

TEST(Placement, AddingAFourthMovesAQuarterAllToIt) {
  std::vector<std::string> four = kThree;
  four.push_back("10.0.0.4:7471");
  constexpr std::size_t kKeys = 100'000;
  std::size_t moved = 0;
  for (std::size_t i = 0; i < kKeys; ++i) {
    const std::string k = key_of(i);
    const std::size_t before = place(k, kThree);
    const std::size_t after = place(k, four);
    if (after != before) {
      ++moved;
      EXPECT_EQ(after, 3u) << k << " moved between two old servers";
    }
  }
  const double fraction = static_cast<double>(moved) / kKeys;
  EXPECT_GE(fraction, 0.20);
  EXPECT_LE(fraction, 0.30);
}

TEST(Placement, RemovingOneMovesOnlyItsKeys) {
  const std::vector<std::string> two = {kThree[0], kThree[2]};  // 10.0.0.2 gone
  constexpr std::size_t kKeys = 100'000;
  std::size_t moved = 0;
  for (std::size_t i = 0; i < kKeys; ++i) {
    const std::string k = key_of(i);
    const std::string& before = kThree[place(k, kThree)];
    const std::string& after = two[place(k, two)];
    if (before != kThree[1]) {
      EXPECT_EQ(after, before) << k << " moved though its server stayed";
    } else {
      ++moved;
    }
  }
  EXPECT_GT(moved, 0u);
}

TEST(ServerList, Parses) {
  std::vector<ServerAddr> out;
  std::string err;
  ASSERT_TRUE(parse_server_list("h1:7471,h2:7472,[fe80::1]:7473,h4,::1", 7471, out, err)) << err;
  ASSERT_EQ(out.size(), 5u);
  EXPECT_EQ(out[0].host, "h1");
  EXPECT_EQ(out[0].port, 7471);
  EXPECT_EQ(out[0].id, "h1:7471");
  EXPECT_EQ(out[1].id, "h2:7472");
  EXPECT_EQ(out[2].host, "fe80::1");
  EXPECT_EQ(out[2].port, 7473);
  EXPECT_EQ(out[2].id, "[fe80::1]:7473");
  EXPECT_EQ(out[3].id, "h4:7471");
  EXPECT_EQ(out[4].host, "::1");
  EXPECT_EQ(out[4].id, "[::1]:7471");
  ASSERT_TRUE(parse_server_list("h", 9000, out, err)) << err;
  EXPECT_EQ(out[0].id, "h:9000");
}

TEST(ServerList, RefusesBadLists) {
  std::vector<ServerAddr> out;
  for (const char* bad : {"", ",", "h1,,h2", "h1,", ",h1", "h1:", "h1:0", "h1:65536", "h1:x", "h1:7471x", ":7471",
                          "[::1", "[::1]x", "[]:7471", "h1:7471,h1:7471", "h1,h1:7471", "h1:-1"}) {
    std::string err;
    EXPECT_FALSE(parse_server_list(bad, 7471, out, err)) << "'" << bad << "'";
    EXPECT_FALSE(err.empty()) << "'" << bad << "'";
  }
  std::string many;
  for (std::size_t i = 0; i <= kMaxServers; ++i) many += (i ? ",h:" : "h:") + std::to_string(i + 1);
  std::string err;
  EXPECT_FALSE(parse_server_list(many, 7471, out, err));
}

}  // namespace
}  // namespace rkv::proto
