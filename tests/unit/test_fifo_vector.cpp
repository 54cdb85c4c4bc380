// FifoVector (kv/conn/fifo_vector.hpp): the in-order queue of posted receive
// buffers, SENDs in flight and sealed send buffers; and complete_transfers
// (kv/conn/msg_channel.hpp), which closes the transfers posted unsignaled
// before a signaled one from such a queue.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <vector>

#include "kv/conn/fifo_vector.hpp"
#include "kv/conn/msg_channel.hpp"
#include "verbs/completion.hpp"
#include "verbs/wr_id.hpp"

namespace {

using rkv::kv::conn::FifoVector;
using rkv::verbs::Completion;
using rkv::verbs::CompletionOpcode;
using rkv::verbs::CompletionStatus;
using rkv::verbs::WrId;
using rkv::verbs::WrKind;

std::vector<std::uint32_t> fifo_contents(const FifoVector<std::uint32_t>& q) {
  std::vector<std::uint32_t> out;
  q.for_each([&](std::uint32_t v) { out.push_back(v); });
  return out;
}

TEST(FifoVector, TakesInPushOrderAcrossCompactions) {
  FifoVector<std::uint32_t> q;
  std::deque<std::uint32_t> model;
  std::uint32_t next = 0;
  // Push 3, take 2, many times over: the taken prefix is dropped while
  // making room again and again; the order must survive every time.
  for (int round = 0; round < 200; ++round) {
    ASSERT_TRUE(q.make_room(3));
    for (int i = 0; i < 3; ++i) {
      q.push(next);
      model.push_back(next++);
    }
    for (int i = 0; i < 2; ++i) {
      ASSERT_EQ(q.at(0), model.front());
      ASSERT_EQ(q.pop_front(), model.front());
      model.pop_front();
    }
    ASSERT_EQ(q.size(), model.size());
    ASSERT_EQ(q.at(q.size() - 1), model.back());
  }
  EXPECT_EQ(fifo_contents(q), std::vector<std::uint32_t>(model.begin(), model.end()));
}

TEST(FifoVector, RemovesOldestOrAnyAndRefusesAbsent) {
  FifoVector<std::uint32_t> q;
  ASSERT_TRUE(q.make_room(4));
  for (std::uint32_t v : {10u, 11u, 12u, 13u}) q.push(v);
  EXPECT_TRUE(q.remove(10));   // the oldest
  EXPECT_TRUE(q.remove(12));   // one in the middle
  EXPECT_FALSE(q.remove(12));  // gone already
  EXPECT_FALSE(q.remove(99));
  EXPECT_EQ(fifo_contents(q), (std::vector<std::uint32_t>{11, 13}));
  EXPECT_TRUE(q.remove(11));
  EXPECT_TRUE(q.remove(13));
  EXPECT_TRUE(q.empty());
  ASSERT_TRUE(q.make_room());
  q.push(7);
  EXPECT_EQ(q.pop_front(), 7u);
  EXPECT_TRUE(q.empty());
}

// Room made once for twice the most it holds: however pushes and takes
// interleave, make_room never grows the vector again (the client's posted
// READs rely on it: no allocation on the data path).
TEST(FifoVector, RoomForTwiceTheMostNeverGrows) {
  constexpr std::size_t kMost = 32;
  FifoVector<std::uint32_t> q;
  ASSERT_TRUE(q.make_room(2 * kMost));
  const std::size_t capacity = q.capacity();
  std::deque<std::uint32_t> model;
  std::uint32_t next = 0;
  std::uint64_t rng = 0x2545F4914F6CDD1Dull;
  const auto below = [&](std::size_t n) {  // xorshift: the same sequence every run
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return n == 0 ? std::size_t{0} : static_cast<std::size_t>(rng % n);
  };
  for (int step = 0; step < 20000; ++step) {
    const std::size_t push = below(kMost - model.size() + 1);
    ASSERT_TRUE(q.make_room(push));
    ASSERT_EQ(q.capacity(), capacity) << "grew at step " << step;
    for (std::size_t i = 0; i < push; ++i) {
      q.push(next);
      model.push_back(next++);
    }
    for (std::size_t take = below(model.size() + 1); take > 0; --take) {
      ASSERT_EQ(q.pop_front(), model.front());
      model.pop_front();
    }
  }
  EXPECT_EQ(fifo_contents(q), std::vector<std::uint32_t>(model.begin(), model.end()));
}

TEST(FifoVector, HoldsStructsAndClears) {
  struct Sealed {
    std::uint32_t index;
    std::size_t size;
  };
  FifoVector<Sealed> q;
  for (std::uint32_t i = 0; i < 40; ++i) {
    ASSERT_TRUE(q.make_room());
    q.push({i, i * 100u});
  }
  EXPECT_EQ(q.pop_front().index, 0u);
  EXPECT_EQ(q.at(1).size, 200u);
  q.clear();
  EXPECT_EQ(q.size(), 0u);
  EXPECT_TRUE(q.empty());
}

struct Done {
  std::uint32_t slot;
  CompletionStatus status;
  CompletionOpcode opcode;
  friend bool operator==(const Done&, const Done&) = default;
};

// Posted in this order: READ 1, WRITE 2, READ 3, WRITE 4 (generation 9).
FifoVector<WrId> four_posted() {
  FifoVector<WrId> q;
  EXPECT_TRUE(q.make_room(4));
  q.push(WrId(1, 9, WrKind::rdma_read));
  q.push(WrId(2, 9, WrKind::rdma_write));
  q.push(WrId(3, 9, WrKind::rdma_read));
  q.push(WrId(4, 9, WrKind::rdma_write));
  return q;
}

Completion completion_of(WrId id, CompletionStatus status) {
  Completion c;
  c.wr_id = id;
  c.status = status;
  c.opcode = id.kind() == WrKind::rdma_write ? CompletionOpcode::rdma_write : CompletionOpcode::rdma_read;
  return c;
}

TEST(CompleteTransfers, ASignaledOneClosesTheEarlierOnesFirstInPostOrder) {
  FifoVector<WrId> q = four_posted();
  std::vector<Done> done;
  const auto record = [&](const Completion& c) { done.push_back({c.wr_id.slot(), c.status, c.opcode}); };
  ASSERT_TRUE(complete_transfers(q, completion_of(WrId(3, 9, WrKind::rdma_read), CompletionStatus::success), record));
  const std::vector<Done> want{{1, CompletionStatus::success, CompletionOpcode::rdma_read},
                               {2, CompletionStatus::success, CompletionOpcode::rdma_write},
                               {3, CompletionStatus::success, CompletionOpcode::rdma_read}};
  EXPECT_EQ(done, want);
  ASSERT_EQ(q.size(), 1U);  // only the one posted after it is left
  EXPECT_EQ(q.at(0), WrId(4, 9, WrKind::rdma_write));
  // Its completion again, or one of those it closed: stale, nothing runs.
  done.clear();
  EXPECT_FALSE(complete_transfers(q, completion_of(WrId(3, 9, WrKind::rdma_read), CompletionStatus::success), record));
  EXPECT_FALSE(complete_transfers(q, completion_of(WrId(1, 9, WrKind::rdma_read), CompletionStatus::success), record));
  EXPECT_TRUE(done.empty());
  EXPECT_EQ(q.size(), 1U);
}

TEST(CompleteTransfers, AfterAnErrorItRunsFirstAndTheEarlierOnesCloseAsFlushed) {
  FifoVector<WrId> q = four_posted();
  std::vector<Done> done;
  const auto record = [&](const Completion& c) { done.push_back({c.wr_id.slot(), c.status, c.opcode}); };
  ASSERT_TRUE(complete_transfers(
      q, completion_of(WrId(3, 9, WrKind::rdma_read), CompletionStatus::remote_access_error), record));
  const std::vector<Done> want{{3, CompletionStatus::remote_access_error, CompletionOpcode::rdma_read},
                               {1, CompletionStatus::flushed, CompletionOpcode::rdma_read},
                               {2, CompletionStatus::flushed, CompletionOpcode::rdma_write}};
  EXPECT_EQ(done, want);
  EXPECT_EQ(q.size(), 1U);
  // The last one's own (flushed) completion still closes it.
  done.clear();
  ASSERT_TRUE(complete_transfers(q, completion_of(WrId(4, 9, WrKind::rdma_write), CompletionStatus::flushed), record));
  EXPECT_EQ(done, (std::vector<Done>{{4, CompletionStatus::flushed, CompletionOpcode::rdma_write}}));
  EXPECT_EQ(q.size(), 0U);
}

}  // namespace
