// verbs_qp_flush: after QueuePair::to_error() every receive still posted
// comes back as `flushed` (exactly posted - consumed of them), and a flush
// for a slot that was freed and reused meanwhile is recognised as stale by
// its WrId generation.
#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <set>
#include <vector>

#include "loopback.hpp"
#include "verbs/mr.hpp"
#include "verbs/wr_id.hpp"

namespace rkv::verbs::test {
namespace {

constexpr std::uint32_t kRecvs = 16;
constexpr std::uint32_t kSends = 5;
constexpr std::size_t kFlushMsgSize = 64;
constexpr std::uint32_t kReusedSlot = 10;

TEST(VerbsQpFlush, OutstandingReceivesFlushAndStaleGenerationIsDetected) {
  const std::string addr = softroce_addr();

  std::vector<std::byte> recv_buf(kRecvs * kFlushMsgSize);
  std::vector<std::byte> send_buf(kFlushMsgSize);
  std::optional<MemoryRegion> recv_mr;
  std::optional<MemoryRegion> send_mr;
  // The owner's slot table: current generation of each receive slot.
  std::array<std::uint32_t, kRecvs> generation{};
  generation.fill(7);

  LoopbackOptions opt;
  opt.caps = QpCaps{8, kRecvs, 1, 1};
  opt.cq_entries = 64;
  opt.before_connect = [&](Endpoint& c) {
    send_mr.emplace(*c.pd, std::span<std::byte>(send_buf), Access::none);
    return std::vector<std::byte>{};
  };
  opt.before_accept = [&](Endpoint& s) {
    recv_mr.emplace(*s.pd, std::span<std::byte>(recv_buf), Access::local_write);
    for (std::uint32_t i = 0; i < kRecvs; ++i) {
      const int rc = s.qp->post_recv(WrId(i, generation[i], WrKind::recv),
                                     std::span<std::byte>(recv_buf).subspan(i * kFlushMsgSize, kFlushMsgSize), recv_mr->lkey());
      if (rc != 0) throw std::runtime_error("post_recv failed");
    }
    return std::vector<std::byte>{};
  };
  Loopback lb(addr, opt);

  // Consume kSends receives.
  std::uint32_t sends_done = 0;
  for (std::uint32_t i = 0; i < kSends; ++i) {
    ASSERT_EQ(lb.client.qp->post_send(WrId(i, 1, WrKind::send), std::span<const std::byte>(send_buf).first(8),
                                      send_mr->lkey(), true),
              0);
  }
  std::uint32_t received = 0;
  auto on_recv = [&](const Completion& c) noexcept {
    if (c.ok() && c.wr_id.kind() == WrKind::recv) ++received;
  };
  ASSERT_TRUE(lb.server.drain_until(60s, on_recv, [&] { return received == kSends; })) << "received " << received;
  auto on_send = [&](const Completion& c) noexcept {
    if (c.ok()) ++sends_done;
  };
  ASSERT_TRUE(lb.client.drain_until(60s, on_send, [&] { return sends_done == kSends; }));

  // The owner frees and reuses slot kReusedSlot while its old receive is
  // still queued in the QP: the slot's generation moves on.
  generation[kReusedSlot] = WrId::next_generation(generation[kReusedSlot]);

  ASSERT_EQ(lb.server.qp->to_error(), 0);
  std::uint32_t flushed = 0;
  std::uint32_t stale = 0;
  std::uint32_t other = 0;
  std::set<std::uint32_t> flushed_slots;
  auto on_flush = [&](const Completion& c) noexcept {
    if (c.status != CompletionStatus::flushed || c.wr_id.kind() != WrKind::recv) {
      ++other;
      return;
    }
    ++flushed;
    try {
      flushed_slots.insert(c.wr_id.slot());
    } catch (...) {
    }
    if (!c.wr_id.is_current(generation[c.wr_id.slot()])) ++stale;  // drop it: the slot belongs to someone else now
  };
  const std::uint32_t outstanding = kRecvs - kSends;
  ASSERT_TRUE(lb.server.drain_until(60s, on_flush, [&] { return flushed + other >= outstanding; }))
      << "flushed " << flushed << " of " << outstanding;
  EXPECT_EQ(flushed, outstanding);
  EXPECT_EQ(other, 0u);
  EXPECT_EQ(stale, 1u);
  std::set<std::uint32_t> expected_slots;
  for (std::uint32_t i = kSends; i < kRecvs; ++i) expected_slots.insert(i);
  EXPECT_EQ(flushed_slots, expected_slots);

  // Nothing more arrives: a second pass finds an empty CQ.
  std::array<Completion, 4> extra;
  EXPECT_EQ(lb.server.cq->poll(extra), 0);
  EXPECT_STREQ(std::string(to_string(CompletionStatus::flushed)).c_str(), "flushed");

  lb.disconnect();
}

}  // namespace
}  // namespace rkv::verbs::test
