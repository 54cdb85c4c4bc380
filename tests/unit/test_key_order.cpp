// Per-key ordering: KeyOrder (pure FIFO admission per key) and KeyGate
// (the same for fibers), including a pipelined mix where async operations
// complete in reverse: per key, completions stay in arrival order, while
// different keys overtake each other. Also the `kvload gen --sizes` parser.
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "fiber_test_util.hpp"
#include "kv/load/drive.hpp"
#include "kv/load/fiber.hpp"
#include "kv/load/key_gate.hpp"
#include "kv/load/key_order.hpp"
#include "kv/load/size_mix.hpp"
#include "reactor/reactor.hpp"

namespace rkv::kv::load {
namespace {

using namespace std::chrono_literals;

TEST(KeyOrder, FirstArrivalHoldsLaterOnesQueueInOrder) {
  KeyOrder o;
  EXPECT_TRUE(o.acquire("k", 1));
  EXPECT_FALSE(o.acquire("k", 2));
  EXPECT_FALSE(o.acquire("k", 3));
  EXPECT_EQ(o.holder("k"), 1u);
  EXPECT_EQ(o.waiting(), 2u);
  EXPECT_EQ(o.release("k"), 2u);
  EXPECT_EQ(o.holder("k"), 2u);
  EXPECT_EQ(o.release("k"), 3u);
  EXPECT_EQ(o.release("k"), std::nullopt);
  EXPECT_EQ(o.holder("k"), std::nullopt);
  EXPECT_EQ(o.busy_keys(), 0u);
  EXPECT_EQ(o.waiting(), 0u);
}

TEST(KeyOrder, DifferentKeysDoNotWait) {
  KeyOrder o;
  EXPECT_TRUE(o.acquire("a", 1));
  EXPECT_TRUE(o.acquire("b", 2));
  EXPECT_TRUE(o.acquire(std::string(1024, 'x'), 3));
  EXPECT_FALSE(o.acquire("a", 4));
  EXPECT_EQ(o.busy_keys(), 3u);
  EXPECT_EQ(o.release("b"), std::nullopt);
  EXPECT_EQ(o.holder("a"), 1u);
}

TEST(KeyOrder, ReleasingAFreeKeyDoesNothing) {
  KeyOrder o;
  EXPECT_EQ(o.release("nobody"), std::nullopt);
  EXPECT_EQ(o.busy_keys(), 0u);
}

TEST(KeyOrder, AbandonLeavesTheLineOrHandsOver) {
  KeyOrder o;
  ASSERT_TRUE(o.acquire("k", 1));
  ASSERT_FALSE(o.acquire("k", 2));
  ASSERT_FALSE(o.acquire("k", 3));
  EXPECT_EQ(o.abandon("k", 2), std::nullopt);  // a waiter leaves: the holder is unchanged
  EXPECT_EQ(o.waiting(), 1u);
  EXPECT_EQ(o.abandon("k", 1), 3u);  // the holder leaves: the next one holds
  EXPECT_EQ(o.holder("k"), 3u);
  EXPECT_EQ(o.abandon("k", 99), std::nullopt);  // a stranger changes nothing
  EXPECT_EQ(o.abandon("k", 3), std::nullopt);
  EXPECT_EQ(o.busy_keys(), 0u);
}

using test::await_timer;

TEST(KeyGate, PipelinedOpsKeepPerKeyOrderAndOverlapAcrossKeys) {
  // 60 ops over 4 keys taken in "file order" by 16 workers; op i takes
  // (60 - i) ms, so left alone later ops would finish first.
  struct Op {
    std::string key;
    int index;
  };
  std::vector<Op> ops;
  for (int i = 0; i < 60; ++i) ops.push_back({"key" + std::to_string(i % 4), i});
  reactor::Reactor r;
  std::optional<Scheduler> s(std::in_place);
  KeyGate gate(*s);
  std::size_t next = 0;
  int in_flight = 0;
  int max_in_flight = 0;
  int max_same_key = 0;
  std::map<std::string, int> key_in_flight;
  std::map<std::string, std::vector<int>> completions;
  std::vector<int> global_order;
  for (int w = 0; w < 16; ++w) {
    s->spawn([&] {
      while (next < ops.size()) {
        const Op& op = ops[next++];
        const auto guard = gate.lock(op.key);
        ++in_flight;
        max_in_flight = std::max(max_in_flight, in_flight);
        max_same_key = std::max(max_same_key, ++key_in_flight[op.key]);
        await_timer(r, *s, std::chrono::milliseconds(60 - op.index));
        --key_in_flight[op.key];
        --in_flight;
        completions[op.key].push_back(op.index);
        global_order.push_back(op.index);
      }
    });
  }
  ASSERT_TRUE(drive(r, *s, [&] { return s->live() == 0; }, 60s));
  EXPECT_EQ(max_same_key, 1);    // one op per key at a time
  EXPECT_EQ(max_in_flight, 4);   // one per key, all four keys at once
  for (const auto& [key, seq] : completions) {
    ASSERT_EQ(seq.size(), 15u) << key;
    for (std::size_t i = 1; i < seq.size(); ++i) EXPECT_LT(seq[i - 1], seq[i]) << key;  // file order
  }
  bool overtaken = false;  // some op finished before an earlier op of another key
  for (std::size_t i = 1; i < global_order.size(); ++i) overtaken |= global_order[i] < global_order[i - 1];
  EXPECT_TRUE(overtaken);
  EXPECT_EQ(gate.order().busy_keys(), 0u);
  EXPECT_EQ(gate.order().waiting(), 0u);
}

TEST(KeyGate, CancelledWaitersLeaveTheLine) {
  std::optional<Scheduler> s(std::in_place);
  KeyGate gate(*s);
  int holders = 0;
  for (int i = 0; i < 5; ++i) {
    s->spawn([&] {
      const auto g = gate.lock("k");
      ++holders;
      s->suspend();  // hold the key forever
    });
  }
  s->run_ready();
  EXPECT_EQ(holders, 1);
  EXPECT_EQ(gate.order().waiting(), 4u);
  s.reset();  // unwinds the holder and the four waiters
  EXPECT_EQ(gate.order().busy_keys(), 0u);
  EXPECT_EQ(gate.order().waiting(), 0u);
}

TEST(SizeMix, ParsesSizesSuffixesAndWeights) {
  std::string err;
  const auto mix = parse_size_mix("64:8,4k:2,1m,4095", err);
  ASSERT_TRUE(mix) << err;
  ASSERT_EQ(mix->size(), 4u);
  EXPECT_EQ((*mix)[0].size, 64u);
  EXPECT_EQ((*mix)[0].weight, 8u);
  EXPECT_EQ((*mix)[1].size, 4096u);
  EXPECT_EQ((*mix)[1].weight, 2u);
  EXPECT_EQ((*mix)[2].size, 1048576u);
  EXPECT_EQ((*mix)[2].weight, 1u);
  EXPECT_EQ((*mix)[3].size, 4095u);
  EXPECT_EQ(parse_size("2M"), 2u << 20);
  EXPECT_EQ(parse_size("0"), 0u);
}

TEST(SizeMix, RejectsMalformedEntriesSayingWhich) {
  for (const char* bad : {"", "64,", "x", "4x", "k", "64:0", "64:", "64:-1", "64:1:2", " 64", "99999999999999999999"}) {
    std::string err;
    EXPECT_FALSE(parse_size_mix(bad, err)) << bad;
    EXPECT_FALSE(err.empty()) << bad;
  }
  std::string err;
  EXPECT_FALSE(parse_size_mix("64,4q:2", err));
  EXPECT_NE(err.find("4q:2"), std::string::npos) << err;
}

}  // namespace
}  // namespace rkv::kv::load
