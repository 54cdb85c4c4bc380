// onesided_e2e: one-sided GET (docs/protocol.md, "One-sided GET") against a
// kvd child process over Soft-RoCE: values read by RDMA READ are byte-exact
// (small and large), misses are answered by the index alone, keys the index
// could not place are served by the message fallback, a batch of one-sided
// GETs leaves the server's request counters unchanged, GETs at depth post
// their READs chained (mostly unsignaled) and still return every byte, a
// reader racing a writer on the same keys only ever sees values that were
// written whole, and after a DEL both GET modes answer not found (racing
// DELs included).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "kv/client/client.hpp"
#include "kvd_fixture.hpp"
#include "loopback.hpp"
#include "pattern.hpp"
#include "proto/crc32c.hpp"
#include "proto/index_format.hpp"
#include "reactor/reactor.hpp"


namespace rkv::kv::client {
namespace {

using namespace std::chrono_literals;

using test::pattern;

// RDMA READs a one-sided GET hit of `key` with this value costs: the
// neighborhood, plus the value block unless value and key fit the entry.
std::uint64_t reads_per_get(std::string_view key, std::string_view value) {
  return key.size() + value.size() <= proto::kInlineMax ? 1 : 2;
}

// A self-verifying value: [version u64][key id u32][crc32c(payload) u32] then
// a payload generated from (key id, version).
constexpr std::size_t kTag = 16;
std::string tagged(std::uint32_t key_id, std::uint64_t version, std::size_t n) {
  std::string payload = pattern(n - kTag, (std::uint64_t{key_id} << 40) ^ version);
  const std::uint32_t crc = proto::crc32c(payload);
  std::string v(kTag, '\0');
  std::memcpy(v.data(), &version, 8);
  std::memcpy(v.data() + 8, &key_id, 4);
  std::memcpy(v.data() + 12, &crc, 4);
  return v + payload;
}
// The version if `v` is exactly tagged(key_id, version, n); nullopt otherwise.
std::optional<std::uint64_t> verify_tagged(std::string_view v, std::uint32_t key_id, std::size_t n) {
  if (v.size() != n) return std::nullopt;
  std::uint64_t version = 0;
  std::uint32_t id = 0;
  std::memcpy(&version, v.data(), 8);
  std::memcpy(&id, v.data() + 8, 4);
  if (id != key_id) return std::nullopt;
  if (v != tagged(key_id, version, n)) return std::nullopt;
  return version;
}

class OneSided : public test::KvdTest {
 protected:
  std::unique_ptr<Client> open(reactor::Reactor& r, GetMode mode) {
    ClientOptions o;
    o.get_mode = mode;
    return Client::connect(r, addr_, kvd_->port(), o);
  }
};

TEST_F(OneSided, ValuesAreByteExactSmallAndLargeAndMissesNeedNoServer) {
  start();
  auto writer = open(reactor_, GetMode::rpc);
  auto reader = open(reactor_, GetMode::read);
  ASSERT_TRUE(reader->onesided());
  const std::size_t sizes[] = {1, 100, 4000, 5000, 64u << 10, 1u << 20};
  for (std::size_t n : sizes) {
    ASSERT_EQ(writer->set_sync("v-" + std::to_string(n), pattern(n, n)), Status::ok);
  }
  for (int round = 0; round < 2; ++round) {  // the second round reuses landing buffers
    for (std::size_t n : sizes) {
      SCOPED_TRACE("value of " + std::to_string(n) + " bytes");
      const std::string key = "v-" + std::to_string(n);
      Value got;
      bool found = false;
      ASSERT_EQ(reader->get_sync(key, got, found), Status::ok);
      ASSERT_TRUE(found);
      EXPECT_TRUE(got.view() == pattern(n, n)) << "value differs";
      std::string copy;
      ASSERT_EQ(reader->get_sync(key, copy, found), Status::ok);
      EXPECT_TRUE(copy == pattern(n, n));
    }
  }
  // Overwrites (small <-> large) are seen at once.
  ASSERT_EQ(writer->set_sync("v-65536", "small now"), Status::ok);
  ASSERT_EQ(writer->set_sync("v-1", pattern(70000, 9)), Status::ok);
  std::string s;
  bool found = false;
  ASSERT_EQ(reader->get_sync("v-65536", s, found), Status::ok);
  EXPECT_EQ(s, "small now");
  ASSERT_EQ(reader->get_sync("v-1", s, found), Status::ok);
  EXPECT_TRUE(s == pattern(70000, 9));
  // A miss.
  ASSERT_EQ(reader->get_sync("never-set", s, found), Status::ok);
  EXPECT_FALSE(found);
  const ClientCounters& c = reader->counters();
  std::printf("one-sided: gets %llu hits %llu misses %llu retries %llu fallbacks %llu, messages sent %llu\n",
              static_cast<unsigned long long>(c.onesided_gets), static_cast<unsigned long long>(c.onesided_hits),
              static_cast<unsigned long long>(c.onesided_misses),
              static_cast<unsigned long long>(c.onesided_retries),
              static_cast<unsigned long long>(c.onesided_fallbacks),
              static_cast<unsigned long long>(c.messages_sent));
  EXPECT_EQ(c.onesided_gets, 2 * 2 * std::size(sizes) + 3);
  EXPECT_EQ(c.onesided_hits + c.onesided_fallbacks, 2 * 2 * std::size(sizes) + 2);
  EXPECT_EQ(c.onesided_fallbacks, 0u) << "nothing here needs the server (no writer races this reader)";
  EXPECT_EQ(c.onesided_misses, 1u);
  EXPECT_EQ(c.messages_sent, 0u) << "a one-sided GET sends no message";
  EXPECT_EQ(c.gets_written + c.gets_pulled, 0u);
}

// Nothing but the TOUCH hints (docs/protocol.md "TOUCH"): one request per
// 32 hits, which the server counts as accesses and answers bare.
TEST_F(OneSided, OneSidedGetsAskTheServerNothingButTouchHints) {
  start();
  auto writer = open(reactor_, GetMode::rpc);
  auto reader = open(reactor_, GetMode::read);
  ASSERT_TRUE(reader->onesided());
  for (int i = 0; i < 8; ++i) ASSERT_EQ(writer->set_sync("k" + std::to_string(i), pattern(64 + i * 700, i)), Status::ok);
  ASSERT_EQ(writer->set_sync("big", pattern(200000, 77)), Status::ok);
  const auto before = kvd_stats();
  const ClientCounters c0 = reader->counters();
  constexpr int kBatch = 200;
  std::uint64_t want_reads = 0;
  for (int i = 0; i < kBatch; ++i) {
    const std::string key = i % 9 == 8 ? "big" : "k" + std::to_string(i % 9);
    std::string v;
    bool found = false;
    ASSERT_EQ(reader->get_sync(key, v, found), Status::ok);
    ASSERT_TRUE(found);
    ASSERT_TRUE(v == (key == "big" ? pattern(200000, 77) : pattern(64 + (i % 9) * 700, i % 9)));
    want_reads += reads_per_get(key, v);
  }
  const auto after = kvd_stats();
  const ClientCounters& c1 = reader->counters();
  for (const char* name : {"gets", "get_hits", "rdma_writes", "large_gets_pulled", "large_gets_written"}) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(before.contains(name) && after.contains(name));
    EXPECT_EQ(after.at(name), before.at(name)) << "the server saw a GET during one-sided GETs";
  }
  const std::uint64_t batches = kBatch / 32;  // ClientConn::kTouchBatch
  EXPECT_EQ(c1.touches_sent - c0.touches_sent, batches * 32);
  EXPECT_EQ(after.at("touches") - before.at("touches"), batches * 32);
  for (const char* name : {"messages_received", "sends_received", "replies_sent"}) {
    SCOPED_TRACE(name);
    EXPECT_EQ(after.at(name) - before.at(name), batches) << "one TOUCH request per 32 hits, nothing else";
  }
  EXPECT_GT(after.at("index_used"), 8u);
  EXPECT_EQ(c1.onesided_gets - c0.onesided_gets, std::uint64_t{kBatch});
  EXPECT_EQ(c1.onesided_hits - c0.onesided_hits, std::uint64_t{kBatch});
  EXPECT_EQ(c1.sends_posted - c0.sends_posted, batches);
  EXPECT_EQ(c1.rdma_reads - c0.rdma_reads, want_reads) << "one READ of the index, one of the value unless inline";
  EXPECT_EQ(c1.onesided_reads - c0.onesided_reads, want_reads);
  EXPECT_LT(want_reads, std::uint64_t{2 * kBatch}) << "k0's value is in its entry";
}

// Many GETs in flight at once (the async API, one flush): their READs go out
// as chains of several per post, most unsignaled, and every value is exact.
TEST_F(OneSided, GetsAtDepthChainTheirReadsAndReturnEveryByte) {
  start();
  auto writer = open(reactor_, GetMode::rpc);
  ClientOptions o;
  o.get_mode = GetMode::read;
  o.max_in_flight = 64;
  auto reader = Client::connect(reactor_, addr_, kvd_->port(), o);
  ASSERT_TRUE(reader->onesided());
  constexpr int kKeys = 64;
  // 32..94 bytes (inline up to kInlineMax with the key, then in a block), and some 20 KB.
  auto size_of = [](int i) { return i % 16 == 15 ? std::size_t{20000} + i : std::size_t{32} + i; };
  for (int i = 0; i < kKeys; ++i) {
    ASSERT_EQ(writer->set_sync("d" + std::to_string(i), pattern(size_of(i), i)), Status::ok);
  }
  const auto before = kvd_stats();
  const ClientCounters c0 = reader->counters();
  constexpr int kRounds = 3;
  int ok = 0, bad = 0;
  std::uint64_t want_reads = 0;
  for (int i = 0; i < kKeys; ++i) {
    want_reads += kRounds * reads_per_get("d" + std::to_string(i), std::string(size_of(i), 'x'));
  }
  for (int round = 0; round < kRounds; ++round) {
    for (int i = 0; i < kKeys; ++i) {
      ASSERT_EQ(reader->get("d" + std::to_string(i),
                            [&, i](Status st, bool found, std::span<const std::byte> v) {
                              const std::string_view got(reinterpret_cast<const char*>(v.data()), v.size());
                              if (st == Status::ok && found && got == pattern(size_of(i), i)) {
                                ++ok;
                              } else {
                                ++bad;
                              }
                            }),
                Status::ok);
    }
    ASSERT_TRUE(reader->wait_idle(60s));
  }
  EXPECT_EQ(ok, kRounds * kKeys);
  EXPECT_EQ(bad, 0);
  const ClientCounters& c1 = reader->counters();
  const std::uint64_t reads = c1.rdma_reads - c0.rdma_reads;
  const std::uint64_t posts = c1.read_posts - c0.read_posts;
  const std::uint64_t unsignaled = c1.reads_unsignaled - c0.reads_unsignaled;
  std::printf("depth %d: %llu READs in %llu posts, %llu unsignaled\n", kKeys, static_cast<unsigned long long>(reads),
              static_cast<unsigned long long>(posts), static_cast<unsigned long long>(unsignaled));
  EXPECT_EQ(reads, want_reads) << "one READ of the index, one of the value unless inline";
  EXPECT_GT(want_reads, std::uint64_t{kRounds * kKeys}) << "some values are in blocks";
  EXPECT_LT(want_reads, std::uint64_t{2 * kRounds * kKeys}) << "some are inline";
  EXPECT_EQ(c1.onesided_hits - c0.onesided_hits, std::uint64_t{kRounds * kKeys});
  EXPECT_LE(posts * 4, reads) << "READs go out chained, not one post each";
  EXPECT_GE(unsignaled * 2, reads) << "most READs make no completion of their own";
  EXPECT_LE((c1.sends_posted - c0.sends_posted) * 32, std::uint64_t{kRounds * kKeys})
      << "only TOUCH hints went by message: at most one SEND per 32 hits";
  const auto after = kvd_stats();
  EXPECT_EQ(after.at("gets"), before.at("gets")) << "no GET reached the server";
  EXPECT_EQ(reader->state(), ConnState::established);
}

TEST_F(OneSided, KeysTheIndexCouldNotPlaceAreServedByMessage) {
  start({"--index-buckets", "4"});  // 4 home buckets + 7: at most 11 keys indexed
  auto writer = open(reactor_, GetMode::rpc);
  auto reader = open(reactor_, GetMode::read);
  ASSERT_TRUE(reader->onesided());
  constexpr int kKeys = 40;
  for (int i = 0; i < kKeys; ++i) {
    ASSERT_EQ(writer->set_sync("o" + std::to_string(i), pattern(10 + i * 100, i)), Status::ok);
  }
  const auto st = kvd_stats();
  EXPECT_EQ(st.at("index_buckets"), 4u);
  EXPECT_GT(st.at("index_overflow_keys"), 0u);
  EXPECT_EQ(st.at("index_used") + st.at("index_overflow_keys"), std::uint64_t{kKeys});
  for (int i = 0; i < kKeys; ++i) {
    std::string v;
    bool found = false;
    ASSERT_EQ(reader->get_sync("o" + std::to_string(i), v, found), Status::ok);
    ASSERT_TRUE(found) << i;
    EXPECT_TRUE(v == pattern(10 + i * 100, i)) << i;
  }
  std::string v;
  bool found = true;
  ASSERT_EQ(reader->get_sync("absent", v, found), Status::ok);
  EXPECT_FALSE(found);
  const ClientCounters& c = reader->counters();
  std::printf("overflow: index_used %llu overflow_keys %llu; client hits %llu fallbacks %llu\n",
              static_cast<unsigned long long>(st.at("index_used")),
              static_cast<unsigned long long>(st.at("index_overflow_keys")),
              static_cast<unsigned long long>(c.onesided_hits),
              static_cast<unsigned long long>(c.onesided_fallbacks));
  EXPECT_GE(c.onesided_fallbacks, st.at("index_overflow_keys")) << "an overflowed key is asked by message";
  EXPECT_GT(c.onesided_hits, 0u);
  EXPECT_GT(c.messages_sent, 0u);
}

TEST_F(OneSided, ServerWithoutIndexServesReadModeByMessage) {
  start({"--index-buckets", "0"});
  auto writer = open(reactor_, GetMode::rpc);
  auto reader = open(reactor_, GetMode::read);
  EXPECT_FALSE(reader->onesided());
  ASSERT_EQ(writer->set_sync("x", "y"), Status::ok);
  std::string v;
  bool found = false;
  ASSERT_EQ(reader->get_sync("x", v, found), Status::ok);
  EXPECT_TRUE(found);
  EXPECT_EQ(v, "y");
  EXPECT_EQ(reader->counters().onesided_gets, 0u);
  EXPECT_EQ(reader->counters().messages_sent, 1u);
}

// A writer hammers a few keys (small and large values) while a one-sided
// reader reads them: every value read must be one that was written whole.
TEST_F(OneSided, ConcurrentWriterNeverYieldsATornValue) {
  start();
  const std::vector<std::size_t> sizes = {64, 1000, 3000, 20000, 64u << 10};
  std::atomic<std::uint64_t> written{0};
  std::atomic<bool> stop{false};
  std::atomic<bool> writer_ok{true};
  {
    reactor::Reactor r;
    auto seed = open(r, GetMode::rpc);
    for (std::uint32_t k = 0; k < sizes.size(); ++k) {
      ASSERT_EQ(seed->set_sync("hot" + std::to_string(k), tagged(k, 0, sizes[k])), Status::ok);
    }
  }
  std::thread writer([&] {
    try {
      reactor::Reactor r;
      auto w = open(r, GetMode::rpc);
      for (std::uint64_t version = 1; !stop.load(); ++version) {
        for (std::uint32_t k = 0; k < sizes.size(); ++k) {
          if (w->set_sync("hot" + std::to_string(k), tagged(k, version, sizes[k])) != Status::ok) {
            writer_ok = false;
            return;
          }
          ++written;
        }
      }
    } catch (const std::exception& e) {
      std::fprintf(stderr, "writer: %s\n", e.what());
      writer_ok = false;
    }
  });
  auto reader = open(reactor_, GetMode::read);
  ASSERT_TRUE(reader->onesided());
  std::uint64_t reads = 0, bad = 0;
  std::vector<std::uint64_t> last(sizes.size(), 0), changes(sizes.size(), 0);
  const std::uint64_t written_at_start = written.load();
  // Until the race was really run (enough reads, SETs and changes seen; at
  // least 2 s), not for a fixed time a loaded host may not fill; 60 s at most.
  const auto begin = std::chrono::steady_clock::now();
  const auto raced_enough = [&] {
    std::uint64_t seen = 0;
    for (auto ch : changes) seen += ch;
    return reads > 50 && written.load() - written_at_start > 50 && seen > 10 &&
           std::chrono::steady_clock::now() - begin >= 2s;
  };
  while (std::chrono::steady_clock::now() - begin < 60s && writer_ok && !raced_enough()) {
    for (std::uint32_t k = 0; k < sizes.size(); ++k) {
      Value got;
      bool found = false;
      ASSERT_EQ(reader->get_sync("hot" + std::to_string(k), got, found), Status::ok);
      ASSERT_TRUE(found);
      ++reads;
      const auto version = verify_tagged(got.view(), k, sizes[k]);
      if (!version) {
        ++bad;
        continue;
      }
      if (*version != last[k]) ++changes[k];
      EXPECT_GE(*version, last[k]) << "a one-sided GET went back in time";
      last[k] = *version;
    }
  }
  const std::uint64_t written_during = written.load() - written_at_start;
  stop = true;
  writer.join();
  EXPECT_TRUE(writer_ok.load());
  const ClientCounters& c = reader->counters();
  std::uint64_t total_changes = 0;
  for (auto ch : changes) total_changes += ch;
  std::printf("race: %llu one-sided reads, %llu SETs during them, %llu version changes seen, retries %llu, "
              "fallbacks %llu, torn values returned %llu\n",
              static_cast<unsigned long long>(reads), static_cast<unsigned long long>(written_during),
              static_cast<unsigned long long>(total_changes), static_cast<unsigned long long>(c.onesided_retries),
              static_cast<unsigned long long>(c.onesided_fallbacks), static_cast<unsigned long long>(bad));
  EXPECT_EQ(bad, 0u) << "a one-sided GET returned a value that was not written whole";
  EXPECT_GT(reads, 50u);
  EXPECT_GT(written_during, 50u) << "the writer must really race the reader";
  EXPECT_GT(total_changes, 10u) << "the reader must see the values change";
  EXPECT_EQ(c.onesided_gets, reads);
}

// Durability + index: values recovered from the log on restart (small and
// large) are published in the index, so read-mode GETs find them by RDMA
// READ with no fallback (they are not left as ask-by-message entries).
TEST_F(OneSided, RecoveredValuesAreReadOneSided) {
  char tmpl[] = "/tmp/rkv-onesided-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  const std::vector<std::string> flags = {"--data-dir", dir + "/data", "--fsync", "always"};
  const std::size_t sizes[] = {1, 300, 4000, 64u << 10, 300000};
  start(flags);
  {
    auto writer = open(reactor_, GetMode::rpc);
    for (std::size_t n : sizes) ASSERT_EQ(writer->set_sync("r-" + std::to_string(n), pattern(n, n + 5)), Status::ok);
    writer->close();
  }
  ASSERT_EQ(kvd_->stop(), 0);
  start(flags);  // recovers from the log
  EXPECT_NE(kvd_->output().find("kvd: recovered "), std::string::npos) << kvd_->output();
  auto reader = open(reactor_, GetMode::read);
  ASSERT_TRUE(reader->onesided());
  const auto before = kvd_stats();
  for (std::size_t n : sizes) {
    SCOPED_TRACE("recovered value of " + std::to_string(n) + " bytes");
    std::string v;
    bool found = false;
    ASSERT_EQ(reader->get_sync("r-" + std::to_string(n), v, found), Status::ok);
    ASSERT_TRUE(found);
    EXPECT_TRUE(v == pattern(n, n + 5));
  }
  const ClientCounters& c = reader->counters();
  EXPECT_EQ(c.onesided_hits, std::size(sizes));
  EXPECT_EQ(c.onesided_fallbacks, 0u) << "recovered keys were not published in the index";
  EXPECT_EQ(kvd_stats().at("gets"), before.at("gets"));
  EXPECT_EQ(before.at("index_rpc_only"), 0u);
  reader->close();
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

// DEL then GET, in both GET modes: not found, never the old value (the
// one-sided index entry is withdrawn before the DEL_REPLY); the key can be
// SET again and is then read one-sided again.
TEST_F(OneSided, DelThenGetIsNotFoundInBothModes) {
  start();
  auto writer = open(reactor_, GetMode::rpc);
  auto reader = open(reactor_, GetMode::read);
  ASSERT_TRUE(reader->onesided());
  const std::size_t sizes[] = {1, 3000, 5000, 64u << 10, 1u << 20};
  for (std::size_t n : sizes) ASSERT_EQ(writer->set_sync("d-" + std::to_string(n), pattern(n, n)), Status::ok);
  const auto before = kvd_stats();
  for (std::size_t n : sizes) {
    SCOPED_TRACE("value of " + std::to_string(n) + " bytes");
    const std::string key = "d-" + std::to_string(n);
    std::string v;
    bool found = false;
    ASSERT_EQ(reader->get_sync(key, v, found), Status::ok);
    ASSERT_TRUE(found && v == pattern(n, n)) << "read one-sided before the DEL";
    ASSERT_EQ(writer->del_sync(key, found), Status::ok);
    EXPECT_TRUE(found) << "the key existed";
    found = true;
    ASSERT_EQ(reader->get_sync(key, v, found), Status::ok);
    EXPECT_FALSE(found) << "a one-sided GET after the DEL returned " << v.size() << " bytes";
    found = true;
    ASSERT_EQ(writer->get_sync(key, v, found), Status::ok);
    EXPECT_FALSE(found) << "a GET by message after the DEL";
    ASSERT_EQ(writer->del_sync(key, found), Status::ok);
    EXPECT_FALSE(found) << "no such key any more";
  }
  const ClientCounters& c = reader->counters();
  EXPECT_EQ(c.onesided_misses, std::size(sizes)) << "answered not found by the index alone";
  EXPECT_EQ(c.onesided_fallbacks, 0u);
  EXPECT_EQ(c.messages_sent, 0u);
  const auto after = kvd_stats();
  EXPECT_EQ(after.at("dels") - before.at("dels"), 2 * std::size(sizes));
  EXPECT_EQ(after.at("del_hits") - before.at("del_hits"), std::size(sizes));
  EXPECT_EQ(after.at("keys"), 0u);
  EXPECT_EQ(after.at("index_used"), 0u) << "the buckets are free again";
  EXPECT_EQ(after.at("arena_used"), 0u) << "the large values' blocks went back";
  EXPECT_EQ(after.at("small_arena_used"), 0u) << "and the small ones'";
  // SET after DEL: found again, one-sided.
  ASSERT_EQ(writer->set_sync("d-5000", pattern(77, 1)), Status::ok);
  std::string v;
  bool found = false;
  ASSERT_EQ(reader->get_sync("d-5000", v, found), Status::ok);
  EXPECT_TRUE(found && v == pattern(77, 1));
  EXPECT_EQ(reader->counters().onesided_hits, std::size(sizes) + 1);  // counters() is a snapshot
}

// A writer SETs and DELs a few keys in turn while a one-sided reader reads
// them: every answer is a value written whole or not found, never a torn
// value, and never older than one the reader saw before.
TEST_F(OneSided, ConcurrentDeletesNeverYieldATornOrOlderValue) {
  start();
  const std::vector<std::size_t> sizes = {64, 3000, 20000};
  std::atomic<std::uint64_t> cycles{0};
  std::atomic<bool> stop{false};
  std::atomic<bool> writer_ok{true};
  std::thread writer([&] {
    try {
      reactor::Reactor r;
      auto w = open(r, GetMode::rpc);
      for (std::uint64_t version = 1; !stop.load(); ++version) {
        for (std::uint32_t k = 0; k < sizes.size(); ++k) {
          const std::string key = "hot" + std::to_string(k);
          bool found = false;
          if (w->set_sync(key, tagged(k, version, sizes[k])) != Status::ok ||
              w->del_sync(key, found) != Status::ok || !found) {
            writer_ok = false;
            return;
          }
        }
        ++cycles;
      }
    } catch (const std::exception& e) {
      std::fprintf(stderr, "writer: %s\n", e.what());
      writer_ok = false;
    }
  });
  auto reader = open(reactor_, GetMode::read);
  ASSERT_TRUE(reader->onesided());
  std::uint64_t reads = 0, hits = 0, bad = 0;
  std::vector<std::uint64_t> last(sizes.size(), 0);
  // At least 2 s, and on until enough happened (a loaded host runs the guest
  // slowly), but never more than 60 s.
  const auto t0 = std::chrono::steady_clock::now();
  const auto enough = [&] {
    const auto now = std::chrono::steady_clock::now();
    return now - t0 >= 60s || (now - t0 >= 2s && reads > 50 && cycles.load() > 10);
  };
  while (!enough() && writer_ok) {
    for (std::uint32_t k = 0; k < sizes.size(); ++k) {
      Value got;
      bool found = false;
      ASSERT_EQ(reader->get_sync("hot" + std::to_string(k), got, found), Status::ok);
      ++reads;
      if (!found) continue;
      ++hits;
      const auto version = verify_tagged(got.view(), k, sizes[k]);
      if (!version) {
        ++bad;
        continue;
      }
      EXPECT_GE(*version, last[k]) << "a one-sided GET went back in time";
      last[k] = *version;
    }
  }
  stop = true;
  writer.join();
  EXPECT_TRUE(writer_ok.load());
  const ClientCounters& c = reader->counters();
  std::printf("delete race: %llu one-sided reads (%llu found), %llu SET+DEL cycles, retries %llu, fallbacks %llu, "
              "torn values returned %llu\n",
              static_cast<unsigned long long>(reads), static_cast<unsigned long long>(hits),
              static_cast<unsigned long long>(cycles.load()), static_cast<unsigned long long>(c.onesided_retries),
              static_cast<unsigned long long>(c.onesided_fallbacks), static_cast<unsigned long long>(bad));
  EXPECT_EQ(bad, 0u) << "a one-sided GET returned a value that was not written whole";
  EXPECT_GT(reads, 50u);
  EXPECT_GT(cycles.load(), 10u) << "the writer must really race the reader";
  EXPECT_LT(hits, reads) << "the reader must see the keys deleted";
}

}  // namespace
}  // namespace rkv::kv::client
