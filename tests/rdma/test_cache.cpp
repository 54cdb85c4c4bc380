// cache_e2e: kvd as a cache over Soft-RoCE (docs/protocol.md "Time to live"
// and "TOUCH"; docs/architecture.md "Memory limit").
// - A key SET with a 500 ms TTL reads back before it and is gone after it, by
//   message at once, by one-sided GET once the entry's expiry passed by the
//   reader's clock or kvd withdrew it (the lag is measured and printed),
//   small and rendezvous-sized values alike.
// - With kvd stopped (SIGSTOP) past a TTL, one-sided GETs find the expired
//   keys gone from their entries' expiry alone, without a message.
// - EXPIRE / TTL / persist, through the C++ client and the C API (sync and
//   async), "no key" and "no expiry" told apart.
// - With --data-dir, kill -9 and a restart: a key whose TTL ran out while kvd
//   was down is not recovered, a longer one is with its absolute expiry.
// - kvd --eviction lru: a key read only by one-sided GETs (seen by the server
//   through the readers' TOUCH hints) survives a fill that evicts keys written
//   after it and never read.
// - Readers racing a writer that forces continuous eviction and expiry:
//   >= 100,000 one-sided GETs, every value found is whole and its key's, and
//   after a DEL or an expiry (plus the lag) a one-sided GET finds nothing.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "../temp_dir.hpp"
#include "kv/client/client.hpp"
#include "kv/client/kv.h"
#include "kvd_fixture.hpp"
#include "pattern.hpp"
#include "proto/crc32c.hpp"
#include "proto/index_format.hpp"
#include "proto/wire.hpp"
#include "reactor/reactor.hpp"

namespace rkv::kv::client {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// The server reads a coarse wall clock in whole ms: a margin on top of every deadline.
constexpr auto kSlop = 20ms;
// How long a one-sided reader may go on finding an expired key before the
// test calls it a hang. The reader itself finds it gone once its clock is
// proto::kExpiryClockMarginMs past the expiry (asking kvd by message just
// before that); the lag is measured and printed, never asserted (only this
// deadline is): a loaded TCG guest can deschedule the test itself.
constexpr auto kGoneDeadline = 20s;

// From `due` on, polls `done` every `period` until it holds: how long after
// `due` that was, or nullopt if it still did not hold at due + kGoneDeadline.
// The one wait of these tests (a Client's GET, the C API's, kvd's stats).
template <class Done>
std::optional<std::chrono::milliseconds> poll_until(Clock::time_point due, std::chrono::milliseconds period,
                                                    Done done) {
  std::this_thread::sleep_until(due);
  while (!done()) {
    if (Clock::now() > due + kGoneDeadline) return std::nullopt;
    std::this_thread::sleep_for(period);
  }
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - due);
}

// A self-verifying value of `n` bytes: [key id u32][version u32][crc32c of
// the rest u32][pad u32] then bytes drawn from (key id, version).
std::string cache_tagged(std::uint32_t key_id, std::uint32_t version, std::size_t n) {
  std::string v(n, '\0');
  test::fill_pattern(v.data() + 16, n - 16, std::uint64_t{key_id} << 32 | version);
  const std::uint32_t crc = proto::crc32c(v.data() + 16, n - 16);
  std::memcpy(v.data(), &key_id, 4);
  std::memcpy(v.data() + 4, &version, 4);
  std::memcpy(v.data() + 8, &crc, 4);
  return v;
}
// Whether `v` is a whole tagged value of key_id: its id, and its bytes
// against the CRC it carries (a value torn between two writes, or another
// key's bytes, fail it but with probability 2^-32). Checked by CRC rather
// than by regenerating the value: 100,000 reads of that in an ASan build
// would cost the guest more than the race itself.
bool is_tagged(std::span<const std::byte> v, std::uint32_t key_id) {
  if (v.size() < 16) return false;
  std::uint32_t id = 0, crc = 0;
  std::memcpy(&id, v.data(), 4);
  std::memcpy(&crc, v.data() + 8, 4);
  return id == key_id && crc == proto::crc32c(v.data() + 16, v.size() - 16);
}

// Writes with `depth` SETs in flight on `c` (driven on `r`) until next()
// returns false: next(slot) fills in the slot's key, value and TTL. The
// values live in their slots until their SET completes; a slot's old value
// is forgotten (Client::forget: its registration may be cached) before
// next() replaces it. Returns the first failure's status (ok if none), after
// everything in flight completed.
struct SetSlot {
  std::string key;
  std::string value;
  std::uint64_t ttl = 0;
  bool busy = false;
};
Status pipeline_sets(reactor::Reactor& r, Client& c, unsigned depth, const std::function<bool(SetSlot&)>& next) {
  std::vector<SetSlot> slots(depth);
  Status failed = Status::ok;
  unsigned busy = 0;
  bool more = true;
  for (;;) {
    for (auto& s : slots) {
      if (s.busy || !more || failed != Status::ok) continue;
      c.forget(std::as_bytes(std::span(s.value.data(), s.value.size())));
      if (!(more = next(s))) break;
      const Status st = c.set(s.key, s.value, [&s, &busy, &failed](Status st2, bool, std::span<const std::byte>) {
        s.busy = false;
        --busy;
        if (st2 != Status::ok && failed == Status::ok) {
          std::fprintf(stderr, "writer: SET %s (%zu bytes): %s\n", s.key.c_str(), s.value.size(),
                       std::string(to_string(st2)).c_str());
          failed = st2;
        }
      }, s.ttl);
      if (st != Status::ok) return st;
      s.busy = true;
      ++busy;
    }
    if (busy == 0 && (!more || failed != Status::ok)) {
      for (auto& s : slots) c.forget(std::as_bytes(std::span(s.value.data(), s.value.size())));
      return failed;
    }
    r.run_once(100ms);
  }
}

class Cache : public test::KvdTest {
 protected:
  std::unique_ptr<Client> open_mode(reactor::Reactor& r, GetMode mode) {
    ClientOptions o;
    o.get_mode = mode;
    return Client::connect(r, addr_, kvd_->port(), o);
  }
  static bool found(Client& c, const std::string& key) {
    std::string v;
    bool f = false;
    EXPECT_EQ(c.get_sync(key, v, f), Status::ok);
    return f;
  }
  // From `due` (a key's expiry) on, GETs of `c` until one finds nothing:
  // how long after `due` that was, or nullopt if still found at kGoneDeadline.
  static std::optional<std::chrono::milliseconds> wait_gone(Client& c, const std::string& key,
                                                            Clock::time_point due) {
    return poll_until(due, 5ms, [&] { return !found(c, key); });
  }
};

TEST_F(Cache, TtlInBothGetModesSmallAndLarge) {
  start();
  auto rpc = open_mode(reactor_, GetMode::rpc);
  auto read = open_mode(reactor_, GetMode::read);
  ASSERT_TRUE(read->onesided());
  std::chrono::milliseconds worst_lag{0};
  for (const std::size_t size : {std::size_t{100}, std::size_t{100'000}}) {
    SCOPED_TRACE("value of " + std::to_string(size) + " bytes");
    const std::string key = "ttl" + std::to_string(size);
    const std::string value(size, 'v');
    const auto t0 = Clock::now();
    ASSERT_EQ(rpc->set_sync(key, value, 500), Status::ok);
    const auto acked = Clock::now();
    // Before: both modes find it (checked only while surely before, however slow the guest).
    const bool msg_hit = found(*rpc, key), read_hit = found(*read, key);
    if (Clock::now() + kSlop < t0 + 500ms) {
      EXPECT_TRUE(msg_hit) << "by message, before its TTL ran out";
      EXPECT_TRUE(read_hit) << "one-sided, before its TTL ran out";
    } else {
      std::printf("cache_e2e: the guest was too slow to read before 500 ms (%s)\n", key.c_str());
    }
    std::int64_t left = 0;
    bool exists = false;
    ASSERT_EQ(rpc->ttl_sync(key, left, exists), Status::ok);
    if (exists) {
      EXPECT_LE(left, 500);
    }
    // One-sided first (a message GET would remove the key itself, lazily):
    // waited for, gone by the reader's own check of the entry's expiry, or
    // earlier by kvd's timer or the lookup of the reader's TOUCH
    // (TheExpiryTimerRemovesAKeyNobodyReads checks the timer alone,
    // AOneSidedReaderSeesAKeyExpireWhileKvdIsStopped the reader alone).
    const auto lag = wait_gone(*read, key, acked + 500ms);
    ASSERT_TRUE(lag.has_value()) << "one-sided GETs still found the key " << kGoneDeadline.count()
                                 << " s after its expiry";
    worst_lag = std::max(worst_lag, *lag);
    std::printf("cache_e2e: %zu-byte value: one-sided GETs stopped finding it %lld ms after its expiry\n", size,
                static_cast<long long>(lag->count()));
    EXPECT_FALSE(found(*read, key)) << "one-sided, once gone: gone for good";
    // By message: gone at once (a second key, so the timer has not removed it yet).
    const std::string key2 = key + "m";
    ASSERT_EQ(rpc->set_sync(key2, value, 500), Status::ok);
    const auto acked2 = Clock::now();
    std::this_thread::sleep_until(acked2 + 500ms + kSlop);
    EXPECT_FALSE(found(*rpc, key2)) << "a GET by message never returns an expired value";
  }
  const auto stats = kvd_stats();
  EXPECT_EQ(stats.at("expired_keys"), 4u);
  EXPECT_EQ(stats.at("keys"), 0u);
  std::printf("cache_e2e: worst one-sided expiry lag %lld ms (the reader's clock margin %lld ms; kvd's timer %llu ms)\n",
              static_cast<long long>(worst_lag.count()), static_cast<long long>(proto::kExpiryClockMarginMs),
              static_cast<unsigned long long>(proto::kOneSidedExpiryLagMs));
}

// The expiry timer alone removes a key nobody looks up (no GET, no TOUCH:
// the lookups that expire lazily): kvd's expired_keys rises without a
// request naming the key, and a one-sided GET then finds nothing. Waited
// for; only the deadline fails.
TEST_F(Cache, TheExpiryTimerRemovesAKeyNobodyReads) {
  start();
  auto rpc = open_mode(reactor_, GetMode::rpc);
  ASSERT_EQ(rpc->set_sync("unread", std::string(100, 'u'), 100), Status::ok);
  ASSERT_EQ(rpc->set_sync("kept", "k"), Status::ok);
  std::map<std::string, std::uint64_t> stats;
  const auto lag = poll_until(Clock::now() + 100ms + kSlop, 10ms, [&] {
    stats = kvd_stats();
    return stats.at("expired_keys") != 0;
  });
  ASSERT_TRUE(lag.has_value()) << "the timer did not remove the key in " << kGoneDeadline.count() << " s";
  ASSERT_EQ(stats.at("expired_keys"), 1u);
  std::printf("cache_e2e: an unread key seen removed by the timer %lld ms after its TTL (stats polled every 10 ms)\n",
              static_cast<long long>(lag->count()));
  EXPECT_EQ(stats.at("keys"), 1u);
  EXPECT_EQ(stats.at("gets"), 0u) << "nothing looked it up";
  EXPECT_EQ(stats.at("touches"), 0u);
  auto read = open_mode(reactor_, GetMode::read);
  ASSERT_TRUE(read->onesided());
  EXPECT_FALSE(found(*read, "unread"));
  EXPECT_TRUE(found(*read, "kept"));
}

// A one-sided reader applies the expiry its index entry carries by its own
// clock, so an expired key is gone for it even while kvd does not run (the
// lag of kvd's timer, proto::kOneSidedExpiryLagMs, no longer matters):
// with kvd stopped (SIGSTOP) past a TTL plus the clock margin, one-sided GETs
// of the expired keys (one in its entry, one in a block) answer not found
// without a message, and a key without a TTL is still read. Were the reader
// to ask kvd, its GET would wait for kvd: the watchdog's SIGCONT after
// kGoneDeadline bounds that hang, and the test fails on it.
TEST_F(Cache, AOneSidedReaderSeesAKeyExpireWhileKvdIsStopped) {
  start();
  auto rpc = open_mode(reactor_, GetMode::rpc);
  auto read = open_mode(reactor_, GetMode::read);
  ASSERT_TRUE(read->onesided());
  constexpr std::uint64_t kTtl = 2000;
  ASSERT_EQ(rpc->set_sync("kept", std::string(100, 'k')), Status::ok);
  ASSERT_EQ(rpc->set_sync("tiny", "t", kTtl), Status::ok);                     // in its entry
  ASSERT_EQ(rpc->set_sync("blocky", std::string(300, 'b'), kTtl), Status::ok);  // in a block
  const auto due = Clock::now() + std::chrono::milliseconds(kTtl);             // at or after kvd's expiry
  ASSERT_TRUE(found(*read, "tiny"));
  ASSERT_TRUE(found(*read, "blocky"));
  ASSERT_TRUE(found(*read, "kept"));

  const pid_t pid = kvd_->pid();
  ASSERT_EQ(::kill(pid, SIGSTOP), 0);
  std::atomic<bool> resumed{false};
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::thread watchdog([&] {
    std::unique_lock lock(mu);
    if (!cv.wait_for(lock, kGoneDeadline + std::chrono::milliseconds(kTtl), [&] { return done; })) {
      resumed = true;
      ::kill(pid, SIGCONT);
    }
  });
  std::this_thread::sleep_until(due + std::chrono::milliseconds(proto::kExpiryClockMarginMs) + kSlop);
  const auto before = read->counters();
  const bool tiny = found(*read, "tiny");
  const bool blocky = found(*read, "blocky");
  const bool kept = found(*read, "kept");
  const auto after = read->counters();
  {
    std::lock_guard lock(mu);
    done = true;
  }
  cv.notify_one();
  watchdog.join();
  if (!resumed) {
    ASSERT_EQ(::kill(pid, SIGCONT), 0);
  }
  EXPECT_FALSE(resumed.load()) << "a GET waited for the stopped kvd";
  EXPECT_FALSE(tiny) << "expired by the reader's clock";
  EXPECT_FALSE(blocky) << "expired by the reader's clock";
  EXPECT_TRUE(kept);
  EXPECT_EQ(after.messages_sent, before.messages_sent) << "answered from the index alone";
  EXPECT_EQ(after.onesided_misses, before.onesided_misses + 2);
  EXPECT_EQ(after.onesided_fallbacks, before.onesided_fallbacks);
  // kvd, running again, removes both (its timer) and still serves the rest.
  std::map<std::string, std::uint64_t> stats;
  EXPECT_TRUE(poll_until(Clock::now(), 10ms, [&] {
    stats = kvd_stats();
    return stats.at("expired_keys") == 2;
  }).has_value());
  EXPECT_TRUE(found(*rpc, "kept"));
}

TEST_F(Cache, ExpireTtlAndPersistInTheClientAndTheCApi) {
  start();
  auto c = open_mode(reactor_, GetMode::rpc);
  std::int64_t left = 0;
  bool exists = false;
  ASSERT_EQ(c->set_sync("k", "v"), Status::ok);
  ASSERT_EQ(c->ttl_sync("k", left, exists), Status::ok);
  EXPECT_TRUE(exists);
  EXPECT_EQ(left, -1) << "no expiry";
  ASSERT_EQ(c->ttl_sync("nope", left, exists), Status::ok);
  EXPECT_FALSE(exists) << "no key: a different answer";
  ASSERT_EQ(c->expire_sync("k", 600'000, exists), Status::ok);
  EXPECT_TRUE(exists);
  ASSERT_EQ(c->ttl_sync("k", left, exists), Status::ok);
  EXPECT_GT(left, 590'000);
  EXPECT_LE(left, 600'000);
  ASSERT_EQ(c->expire_sync("k", 0, exists), Status::ok);  // persist
  ASSERT_EQ(c->ttl_sync("k", left, exists), Status::ok);
  EXPECT_EQ(left, -1);
  ASSERT_EQ(c->expire_sync("nope", 10, exists), Status::ok);
  EXPECT_FALSE(exists);
  // A SET with no TTL clears one.
  ASSERT_EQ(c->set_sync("k", "v", 600'000), Status::ok);
  ASSERT_EQ(c->set_sync("k", "w"), Status::ok);
  ASSERT_EQ(c->ttl_sync("k", left, exists), Status::ok);
  EXPECT_EQ(left, -1);
  c->close();

  // The C API, read mode (the TTL calls go by message in both modes).
  const std::string server = addr_ + ":" + std::to_string(kvd_->port());
  void* h = nullptr;
  ASSERT_EQ(kv_open_opts(const_cast<char*>(server.c_str()), "read", nullptr, &h), 0) << kv_last_error(nullptr);
  const std::string big(50'000, 'B');
  ASSERT_EQ(kv_set_ttl(h, "c1", 2, big.data(), big.size(), 600'000), 0) << kv_last_error(h);
  std::int64_t ttl = 0;
  ASSERT_EQ(kv_ttl(h, "c1", 2, &ttl), 0) << kv_last_error(h);
  EXPECT_GT(ttl, 590'000);
  EXPECT_EQ(kv_expire(h, "c1", 2, 0), 0) << kv_last_error(h);
  ASSERT_EQ(kv_ttl(h, "c1", 2, &ttl), 0);
  EXPECT_EQ(ttl, -1);
  EXPECT_EQ(kv_expire(h, "zz", 2, 5), ENOENT);
  EXPECT_EQ(kv_ttl(h, "zz", 2, &ttl), ENOENT);
  EXPECT_EQ(kv_set_ttl(h, "c2", 2, "x", 1, proto::kMaxTtlMs + 1), EINVAL) << "over the largest TTL";
  EXPECT_EQ(kv_ttl(h, "c1", 2, nullptr), EINVAL);
  // Async: a SET whose key expires in 100 ms.
  ASSERT_EQ(kv_set_ttl_async(h, "c3", 2, big.data(), big.size(), 100, 42), 0) << kv_last_error(h);
  kv_completion done[4];
  int n = 0;
  for (int i = 0; i < 100 && n == 0; ++i) n = kv_poll(h, done, 4, 100);
  ASSERT_EQ(n, 1);
  EXPECT_EQ(done[0].tag, 42u);
  EXPECT_EQ(done[0].status, 0);
  // One-sided: gone once kvd's timer removes it (waited for; kGoneDeadline fails a hang).
  int rc = 0;
  poll_until(Clock::now() + 100ms + kSlop, 5ms, [&] {
    void* v = nullptr;
    std::size_t len = 0;
    rc = kv_get_bin(h, "c3", 2, &v, &len);
    if (rc == 0) kv_release(static_cast<char*>(v));
    return rc != 0;
  });
  EXPECT_EQ(rc, ENOENT) << "expired (one-sided, once kvd's timer removed it)";
  EXPECT_EQ(kv_close(h), 0);
}

TEST_F(Cache, ExpiredKeysAreNotRecoveredAfterKill9) {
  test::TempDir dir{"cache-durable"};
  start({"--data-dir", dir.path(), "--fsync", "always"});
  {
    auto c = open_mode(reactor_, GetMode::rpc);
    ASSERT_EQ(c->set_sync("short", "s", 300), Status::ok);
    ASSERT_EQ(c->set_sync("long", std::string(100'000, 'L'), 600'000), Status::ok);
    ASSERT_EQ(c->set_sync("plain", "p"), Status::ok);
    ASSERT_EQ(c->set_sync("expired", "e"), Status::ok);
    bool exists = false;
    ASSERT_EQ(c->expire_sync("expired", 300, exists), Status::ok);
    ASSERT_TRUE(exists);
    ASSERT_EQ(c->set_sync("kept", "k", 300), Status::ok);
    ASSERT_EQ(c->expire_sync("kept", 0, exists), Status::ok);  // persisted: survives
    c->close();
  }
  kvd_->kill_hard();
  std::this_thread::sleep_for(300ms + kSlop);
  start({"--data-dir", dir.path(), "--fsync", "always"});
  EXPECT_NE(kvd_->output().find("had expired"), std::string::npos) << kvd_->output();
  for (const GetMode mode : {GetMode::rpc, GetMode::read}) {
    auto c = open_mode(reactor_, mode);
    EXPECT_FALSE(found(*c, "short")) << "its TTL ran out while kvd was down";
    EXPECT_FALSE(found(*c, "expired"));
    EXPECT_TRUE(found(*c, "long"));
    EXPECT_TRUE(found(*c, "plain"));
    EXPECT_TRUE(found(*c, "kept"));
    std::int64_t left = 0;
    bool exists = false;
    ASSERT_EQ(c->ttl_sync("long", left, exists), Status::ok);
    EXPECT_TRUE(exists);
    EXPECT_GT(left, 0);
    EXPECT_LE(left, 600'000) << "the absolute expiry came back, not a fresh TTL";
    ASSERT_EQ(c->ttl_sync("kept", left, exists), Status::ok);
    EXPECT_EQ(left, -1);
    c->close();
  }
}

TEST_F(Cache, AKeyHotOnlyByOneSidedGetsSurvivesAFill) {
  // A small index (1 MiB) so the limit is mostly values and a short fill passes it.
  start({"--max-memory", "16m", "--eviction", "lru", "--index-buckets", "16384"});
  const std::size_t kValue = 3000;  // eager: the hot key and the fill share a block size class
  {
    auto w = open_mode(reactor_, GetMode::rpc);
    ASSERT_EQ(w->set_sync("hot", cache_tagged(0, 0, kValue)), Status::ok);
    for (std::uint32_t i = 0; i < 16; ++i) {  // written after it, never read
      ASSERT_EQ(w->set_sync("cold" + std::to_string(i), cache_tagged(i + 1, 0, kValue)), Status::ok);
    }
    w->close();
  }
  // The fill: 24 MiB of values in a thread, while this thread reads "hot" one-sided.
  std::atomic<bool> done{false}, writer_ok{true};
  std::atomic<std::uint64_t> filled{0};
  std::thread writer([&] {
    try {
      reactor::Reactor r;
      auto w = open_mode(r, GetMode::rpc);
      const std::string v = cache_tagged(99, 1, kValue);
      const std::uint64_t n = (std::uint64_t{24} << 20) / kValue;
      if (pipeline_sets(r, *w, 8, [&](SetSlot& s) {
            if (filled.load() == n) return false;
            s.key = "fill" + std::to_string(filled++);
            s.value = v;
            return true;
          }) != Status::ok) {
        writer_ok = false;
      }
      w->close();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "writer: %s\n", e.what());
      writer_ok = false;
    }
    done = true;
  });
  auto reader = open_mode(reactor_, GetMode::read);
  ASSERT_TRUE(reader->onesided());
  std::uint64_t reads = 0, misses = 0;
  while (!done.load()) {
    Value got;
    bool f = false;
    ASSERT_EQ(reader->get_sync("hot", got, f), Status::ok);
    ++reads;
    if (!f) ++misses;
    std::this_thread::sleep_for(1ms);
  }
  writer.join();
  ASSERT_TRUE(writer_ok.load());
  const ClientCounters rc = reader->counters();
  const auto stats = kvd_stats();
  std::printf("cache_e2e: fill of %llu SETs, %llu keys evicted; hot read %llu times one-sided (%llu touches "
              "sent, %llu misses, %llu by message)\n",
              static_cast<unsigned long long>(filled.load()), static_cast<unsigned long long>(stats.at("evicted_keys")),
              static_cast<unsigned long long>(reads), static_cast<unsigned long long>(rc.touches_sent),
              static_cast<unsigned long long>(misses), static_cast<unsigned long long>(rc.onesided_fallbacks));
  EXPECT_GT(stats.at("evicted_keys"), 1000u) << "the fill did not force eviction";
  EXPECT_EQ(stats.at("gets"), rc.onesided_fallbacks) << "the hot key was read one-sided only";
  EXPECT_GT(rc.touches_sent, 0u);
  EXPECT_GE(stats.at("touched_keys"), rc.touches_sent - rc.touches_sent / 8) << "the server saw the hints";
  EXPECT_EQ(misses, 0u) << "the hot key was never evicted";
  auto check = open_mode(reactor_, GetMode::rpc);
  std::size_t cold_left = 0;
  for (std::uint32_t i = 0; i < 16; ++i) cold_left += found(*check, "cold" + std::to_string(i)) ? 1 : 0;
  EXPECT_EQ(cold_left, 0u) << "keys written after the hot one and never read were evicted";
  Value got;
  bool f = false;
  ASSERT_EQ(check->get_sync("hot", got, f), Status::ok);
  ASSERT_TRUE(f) << "the key read only by one-sided GETs survived the fill";
  EXPECT_TRUE(is_tagged(std::as_bytes(std::span(got.view().data(), got.view().size())), 0));
}

// Readers race a writer that keeps the store over its limit (eviction) and
// gives a third of its keys a short TTL (expiry), and DELs some: every value a
// one-sided GET returns must be whole and its own key's.
TEST_F(Cache, OneSidedReadersRaceEvictionAndExpiry) {
  // A small index (1 MiB): the limit is mostly values.
  start({"--max-memory", "48m", "--eviction", "lru", "--index-buckets", "16384"});
  constexpr std::uint32_t kKeys = 8000;
  // ~6 KB average: 47 MB of keys, over what the index and the arenas leave of
  // the limit; one size of each path (in the one-sided area, in a landing buffer).
  const std::vector<std::size_t> sizes = {64, 600, 3000, 20'000};
  auto size_of = [&](std::uint32_t k, std::uint32_t version) { return sizes[(k + version) % sizes.size()]; };
  std::atomic<bool> stop{false}, writer_ok{true}, filled{false};
  std::atomic<std::uint64_t> sets{0}, dels{0};
  std::thread writer([&] {
    try {
      reactor::Reactor r;
      auto w = open_mode(r, GetMode::rpc);
      std::mt19937 rng(1);
      std::uint32_t version = 1, k = 0;
      // Every key in turn, again and again, a third with a short TTL; every
      // 500th SET a DEL of a key the readers may be reading. The first pass
      // fills the store at full speed; after it, with the store over its
      // limit, one SET per 2 ms keeps eviction and expiry going without
      // taking the guest's CPU from the readers.
      while (!stop.load() && writer_ok.load()) {
        if (pipeline_sets(r, *w, 8, [&](SetSlot& s) {
              if (stop.load() || sets.load() % 500 == 499) return false;
              if (version > 1) std::this_thread::sleep_for(2ms);
              s.key = "r" + std::to_string(k);
              s.value = cache_tagged(k, version, size_of(k, version));
              s.ttl = k % 3 == 0 ? 20 + rng() % 200 : 0;
              ++sets;
              if (++k == kKeys) {
                k = 0;
                ++version;
                filled = true;
              }
              return true;
            }) != Status::ok) {
          writer_ok = false;
          return;
        }
        if (stop.load()) break;
        bool f = false;
        if (w->del_sync("r" + std::to_string(rng() % kKeys), f) != Status::ok) {
          writer_ok = false;
          return;
        }
        ++dels;
        ++sets;  // past the 499 mark
      }
    } catch (const std::exception& e) {
      std::fprintf(stderr, "writer: %s\n", e.what());
      writer_ok = false;
    }
  });
  auto reader = open_mode(reactor_, GetMode::read);
  ASSERT_TRUE(reader->onesided());
  // The readers start once the first pass has filled the store (alone, the
  // pass fills it sooner): from then on SETs evict and a third of the keys
  // expire. Only a stall ends the wait early: 120 s without one more SET.
  {
    std::uint64_t seen_sets = sets.load();
    auto set_at = Clock::now();
    while (!filled.load() && writer_ok.load() && Clock::now() - set_at < 120s) {
      std::this_thread::sleep_for(50ms);
      if (sets.load() != seen_sets) {
        seen_sets = sets.load();
        set_at = Clock::now();
      }
    }
  }
  if (!filled.load()) {
    stop = true;
    writer.join();
    FAIL() << "the writer did not fill the store (" << sets.load() << " SETs, writer ok: " << writer_ok.load() << ")";
  }
  constexpr std::uint64_t kReads = 20'000;
  constexpr unsigned kDepth = 32;
  std::uint64_t issued = 0, completed = 0, hits = 0, wrong = 0, errors = 0;
  std::mt19937 rng(2);
  const auto begin = Clock::now();
  std::function<void()> issue = [&] {
    const auto k = static_cast<std::uint32_t>(rng() % kKeys);
    ++issued;
    const Status st = reader->get("r" + std::to_string(k), [&, k](Status s, bool f, std::span<const std::byte> v) {
      ++completed;
      if (s != Status::ok) {
        ++errors;
      } else if (f) {
        ++hits;
        if (!is_tagged(v, k) && ++wrong <= 5) {
          std::uint32_t id = 0, version = 0;
          if (v.size() >= 8) {
            std::memcpy(&id, v.data(), 4);
            std::memcpy(&version, v.data() + 4, 4);
          }
          ADD_FAILURE() << "r" << k << ": a value not whole or not its own (" << v.size() << " bytes, tagged "
                        << id << "/" << version << ")";
        }
      }
      if (issued < kReads && writer_ok.load()) issue();
    });
    if (st != Status::ok) {
      ++completed;
      ++errors;
    }
  };
  for (unsigned i = 0; i < kDepth; ++i) issue();
  // No bound on the whole run (how long the READs take is the machine's
  // speed: a 600 s bound once failed a slow guest); only a stall ends it
  // early: 120 s in which not one GET completed is a hang, and fails below.
  auto progress_at = Clock::now();
  std::uint64_t seen = 0;
  while (completed < issued && Clock::now() - progress_at < 120s) {
    reactor_.run_once(100ms);
    if (completed != seen) {
      seen = completed;
      progress_at = Clock::now();
    }
  }
  const double secs = std::chrono::duration<double>(Clock::now() - begin).count();
  const std::uint64_t sets_during = sets.load();
  stop = true;
  writer.join();
  ASSERT_TRUE(writer_ok.load());
  const auto stats = kvd_stats();
  const ClientCounters rc = reader->counters();
  std::printf("cache_e2e: race: %llu one-sided GETs in %.1f s (%llu hits, %llu retries, %llu fallbacks), %llu wrong; "
              "writer %llu SETs, %llu DELs; kvd evicted %llu, expired %llu\n",
              static_cast<unsigned long long>(completed), secs, static_cast<unsigned long long>(hits),
              static_cast<unsigned long long>(rc.onesided_retries), static_cast<unsigned long long>(rc.onesided_fallbacks),
              static_cast<unsigned long long>(wrong), static_cast<unsigned long long>(sets_during),
              static_cast<unsigned long long>(dels.load()), static_cast<unsigned long long>(stats.at("evicted_keys")),
              static_cast<unsigned long long>(stats.at("expired_keys")));
  EXPECT_EQ(wrong, 0u);
  EXPECT_EQ(errors, 0u);
  EXPECT_GE(completed, kReads);
  EXPECT_GE(rc.onesided_gets, kReads);
  EXPECT_GT(hits, kReads / 10) << "the readers must really find values";
  EXPECT_GT(stats.at("evicted_keys"), 0u) << "the writer must force eviction";
  EXPECT_GT(stats.at("expired_keys"), 0u) << "the writer must force expiry";
  EXPECT_LE(stats.at("memory_used_bytes"), std::uint64_t{48} << 20);

  // After a DEL, and after an expiry plus the lag, a one-sided GET finds nothing.
  auto w = open_mode(reactor_, GetMode::rpc);
  for (std::uint32_t i = 0; i < 20; ++i) {
    const std::string key = "d" + std::to_string(i);
    ASSERT_EQ(w->set_sync(key, cache_tagged(i, 1, sizes[i % sizes.size()])), Status::ok);
    bool f = false;
    ASSERT_EQ(w->del_sync(key, f), Status::ok);
    EXPECT_FALSE(found(*reader, key)) << key << ": found after its DEL";
  }
  for (std::uint32_t i = 0; i < 5; ++i) {
    const std::string key = "x" + std::to_string(i);
    ASSERT_EQ(w->set_sync(key, cache_tagged(i, 1, sizes[i % sizes.size()]), 50), Status::ok);
    const auto lag = wait_gone(*reader, key, Clock::now() + 50ms + kSlop);
    ASSERT_TRUE(lag.has_value()) << key << ": still found " << kGoneDeadline.count() << " s after its TTL";
    std::printf("cache_e2e: %s gone for one-sided GETs %lld ms after its TTL\n", key.c_str(),
                static_cast<long long>(lag->count()));
  }
}

}  // namespace
}  // namespace rkv::kv::client
