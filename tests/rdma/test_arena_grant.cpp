// arena_grant: the server arena's grantable blocks (kv/server/arena.hpp) on a
// real PD, and windows through the Link seam (kv/conn/link.hpp: QpLink owns
// them), as the planned grant path (docs/protocol.md) uses them: a window
// bound over a block's own registration lets the peer WRITE with immediate
// into that block; the block's own key serves READs (as an index entry's
// rkey does for one-sided GETs) and refuses WRITEs; a block given back is
// granted again with the registration it kept and a window bound anew.
#include <gtest/gtest.h>

#include <cstring>
#include <optional>
#include <vector>

#include "kv/conn/link.hpp"
#include "kv/conn/registrar.hpp"
#include "kv/server/arena.hpp"
#include "loopback.hpp"
#include "verbs/mr.hpp"
#include "verbs/mw.hpp"
#include "verbs/wr_id.hpp"

namespace rkv::verbs::test::arena_grant_test {
namespace {

using kv::conn::PdRegistrar;
using kv::conn::QpLink;
using kv::server::Arena;
using kv::server::GrantBlock;

constexpr std::size_t kBlock = 8192;

struct GrantFixture {
  std::vector<std::byte> source = byte_pattern(kBlock, 3);
  std::vector<std::byte> into = std::vector<std::byte>(kBlock, std::byte{0});
  std::optional<MemoryRegion> source_mr;
  std::optional<MemoryRegion> into_mr;
  std::optional<PdRegistrar> registrar;
  std::optional<Arena> arena;
  GrantBlock grant;
  std::optional<Loopback> lb;
  // After lb: its windows (still bound or not) go before the QP (see verbs/mw.hpp), as in an Endpoint.
  std::optional<QpLink> link;

  GrantFixture() {
    LoopbackOptions opt;
    opt.before_connect = [&](Endpoint& c) {
      source_mr.emplace(*c.pd, std::span<std::byte>(source), Access::none);
      into_mr.emplace(*c.pd, std::span<std::byte>(into), Access::local_write);
      return std::vector<std::byte>{};
    };
    opt.before_accept = [&](Endpoint& s) {
      // kvd's registrar holds its PD; here the endpoint owns it and outlives the arena.
      const std::shared_ptr<const ProtectionDomain> pd(std::shared_ptr<void>(), &*s.pd);
      registrar.emplace(pd);
      link.emplace(*s.qp, pd);
      arena.emplace(*registrar, kv::server::ArenaConfig{4096, 1u << 20, 64u << 20, 64u << 10, 16});
      grant = arena->allocate_grantable(kBlock);
      if (!grant.block) throw std::runtime_error("no grantable block");
      for (std::uint32_t i = 0; i < 4; ++i) {
        if (s.qp->post_recv(WrId(i, 1, WrKind::recv), {}, 0) != 0) throw std::runtime_error("post_recv failed");
      }
      return std::vector<std::byte>{};
    };
    lb.emplace(softroce_addr(), opt);
  }

  // Binds window 3 of the link over the whole granted block (remote_write only).
  std::uint32_t bind() {
    SendWr wr;
    if (link->bind_wr(WrId(10, 1, WrKind::window), 3, *grant.registration, grant.block->block(), true, &wr) != 0 ||
        link->post(wr) != 0) {
      throw std::runtime_error("bind post failed");
    }
    const std::uint32_t key = wr.rkey;
    const Completion c = one_completion(lb->server);
    EXPECT_EQ(c.status, CompletionStatus::success) << c.status_detail();
    EXPECT_EQ(c.opcode, CompletionOpcode::bind_window);
    EXPECT_EQ(c.wr_id, WrId(10, 1, WrKind::window));
    return key;
  }

  void invalidate() {
    SendWr wr;
    if (link->invalidate_wr(WrId(11, 1, WrKind::window), 3, &wr) != 0 || link->post(wr) != 0) {
      throw std::runtime_error("inv post failed");
    }
    const Completion c = one_completion(lb->server);
    EXPECT_EQ(c.status, CompletionStatus::success) << c.status_detail();
    EXPECT_EQ(c.opcode, CompletionOpcode::invalidate);
  }

  Completion client_op(const SendWr& w) {
    if (lb->client.qp->post_chain(std::span<const SendWr>(&w, 1)) != 0) throw std::runtime_error("post failed");
    return one_completion(lb->client);
  }

  Completion write_imm(std::uint32_t rkey, std::size_t len, std::uint32_t imm) {
    return client_op(SendWr::write_imm(WrId(20, 1, WrKind::rdma_write), std::span<const std::byte>(source).first(len),
                                       source_mr->lkey(), grant.block->addr, rkey, imm));
  }
};

TEST(ArenaGrant, AWindowOverAGrantableBlockTakesAWriteAndTheBlocksOwnKeyOnlyReads) {
  GrantFixture f;
  ASSERT_EQ(f.grant.block->capacity, kBlock);
  SendWr unused;
  EXPECT_EQ(f.link->invalidate_wr(WrId(12, 1, WrKind::window), 3, &unused), EINVAL) << "never bound";
  EXPECT_EQ(f.link->bind_wr(WrId(12, 1, WrKind::window), QpLink::kMaxWindows, *f.grant.registration,
                            f.grant.block->block(), true, &unused),
            EINVAL);
  const std::uint32_t key = f.bind();
  EXPECT_NE(key, f.grant.block->rkey);

  Completion w = f.write_imm(key, 3000, 41);
  ASSERT_EQ(w.status, CompletionStatus::success) << w.status_detail();
  Completion r = one_completion(f.lb->server);
  ASSERT_EQ(r.status, CompletionStatus::success) << r.status_detail();
  EXPECT_EQ(r.opcode, CompletionOpcode::recv_rdma_with_imm);
  EXPECT_EQ(r.imm, 41u);
  EXPECT_EQ(r.byte_len, 3000u);
  EXPECT_EQ(0, std::memcmp(f.grant.block->bytes.data(), f.source.data(), 3000));
  f.invalidate();

  // What a one-sided GET does with the index entry's rkey: the block's own.
  const Completion rd = f.client_op(SendWr::read(WrId(21, 1, WrKind::rdma_read), std::span<std::byte>(f.into).first(3000),
                                                 f.into_mr->lkey(), f.grant.block->addr, f.grant.block->rkey));
  ASSERT_EQ(rd.status, CompletionStatus::success) << rd.status_detail();
  EXPECT_EQ(0, std::memcmp(f.into.data(), f.source.data(), 3000));

  // Given back and granted again: the same block and registration, a new window key.
  const std::uint64_t registrations = f.arena->registrations();
  const std::uint64_t addr = f.grant.block->addr;
  f.grant = {};
  f.grant = f.arena->allocate_grantable(kBlock);
  ASSERT_TRUE(f.grant.block);
  EXPECT_EQ(f.grant.block->addr, addr);
  EXPECT_EQ(f.arena->registrations(), registrations);
  const std::uint32_t again = f.bind();
  EXPECT_NE(again, key);
  w = f.write_imm(again, kBlock, 42);
  ASSERT_EQ(w.status, CompletionStatus::success) << w.status_detail();
  r = one_completion(f.lb->server);
  ASSERT_EQ(r.status, CompletionStatus::success) << r.status_detail();
  EXPECT_EQ(r.imm, 42u);
  EXPECT_EQ(0, std::memcmp(f.grant.block->bytes.data(), f.source.data(), kBlock));
  f.invalidate();

  // The block's own key writes nothing (last: a refusal moves the client's QP to ERROR).
  std::memset(f.grant.block->bytes.data(), 0, kBlock);
  w = f.write_imm(f.grant.block->rkey, 512, 43);
  EXPECT_EQ(w.status, CompletionStatus::remote_access_error) << to_string(w.status) << " " << w.status_detail();
  EXPECT_EQ(std::vector<std::byte>(f.grant.block->bytes.begin(), f.grant.block->bytes.end()),
            std::vector<std::byte>(kBlock, std::byte{0}));
  f.lb->disconnect();
}

}  // namespace
}  // namespace rkv::verbs::test::arena_grant_test
