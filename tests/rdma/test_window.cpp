// verbs_window: type-2 memory windows (verbs/mw.hpp) over a loopback
// connection, as the planned grant path (docs/protocol.md) relies on them: a
// window bound by the server opens one block of an MR that has no remote
// access of its own, to a WRITE with immediate of its peer; an invalidated
// key, the MR's own key, an access the window does not grant, a write
// past the MR's end and the peer of another connection on the same PD are
// refused. A refused access moves the client's QP to
// ERROR, so each refusal has a connection of its own.
#include <gtest/gtest.h>

#include <cstring>
#include <optional>
#include <vector>

#include "loopback.hpp"
#include "verbs/mr.hpp"
#include "verbs/mw.hpp"
#include "verbs/wr_id.hpp"

namespace rkv::verbs::test::window_test {
namespace {

constexpr std::size_t kBlock = 4096;

// A server holding `buffer` registered as ONE MR without remote access (its
// [0, mr_length)), a window, and receives for WRITEs with immediate; a
// client with a registered source buffer.
struct WindowFixture {
  std::vector<std::byte> buffer;
  std::vector<std::byte> source;
  std::optional<MemoryRegion> mr;
  std::optional<MemoryRegion> source_mr;
  std::optional<Loopback> lb;
  // After lb: a window still bound is deallocated before the QP goes (see verbs/mw.hpp).
  std::optional<MemoryWindow> window;

  explicit WindowFixture(std::size_t buffer_bytes, std::size_t mr_length)
      : buffer(buffer_bytes, std::byte{0}), source(byte_pattern(kBlock, 5)) {
    LoopbackOptions opt;
    opt.before_connect = [&](Endpoint& c) {
      source_mr.emplace(*c.pd, std::span<std::byte>(source), Access::none);  // a gather source only
      return std::vector<std::byte>{};
    };
    opt.before_accept = [&, mr_length](Endpoint& s) {
      mr.emplace(*s.pd, std::span<std::byte>(buffer).first(mr_length), Access::local_write | Access::mw_bind);
      window.emplace(*s.pd);
      for (std::uint32_t i = 0; i < 4; ++i) {  // a WRITE with immediate takes one; it lands in the window
        if (s.qp->post_recv(WrId(i, 1, WrKind::recv), {}, 0) != 0) throw std::runtime_error("post_recv failed");
      }
      return std::vector<std::byte>{};
    };
    lb.emplace(softroce_addr(), opt);
  }

  // Binds the window over [offset, + length) of the MR with `access`;
  // returns its key once the bind completed.
  std::uint32_t bind(std::size_t offset, std::size_t length, Access access) {
    const SendWr w = SendWr::bind_window(WrId(10, 1, WrKind::window), *window, *mr,
                                         std::span<const std::byte>(buffer).subspan(offset, length), access);
    if (lb->server.qp->post_chain(std::span<const SendWr>(&w, 1)) != 0) throw std::runtime_error("bind post failed");
    const Completion c = one_completion(lb->server);
    EXPECT_EQ(c.status, CompletionStatus::success) << c.status_detail();
    EXPECT_EQ(c.opcode, CompletionOpcode::bind_window);
    EXPECT_EQ(c.wr_id, w.wr_id);
    EXPECT_EQ(window->rkey(), w.rkey);
    return w.rkey;
  }

  void invalidate(std::uint32_t rkey) {
    const SendWr w = SendWr::invalidate(WrId(11, 1, WrKind::window), rkey);
    if (lb->server.qp->post_chain(std::span<const SendWr>(&w, 1)) != 0) throw std::runtime_error("inv post failed");
    const Completion c = one_completion(lb->server);
    EXPECT_EQ(c.status, CompletionStatus::success) << c.status_detail();
    EXPECT_EQ(c.opcode, CompletionOpcode::invalidate);
  }

  // The client's WRITE with immediate of source[0, len) to `addr` under
  // `rkey`; returns its completion.
  Completion write_imm(std::uint64_t addr, std::uint32_t rkey, std::size_t len, std::uint32_t imm) {
    const SendWr w = SendWr::write_imm(WrId(20, 1, WrKind::rdma_write), std::span<const std::byte>(source).first(len),
                                       source_mr->lkey(), addr, rkey, imm);
    if (lb->client.qp->post_chain(std::span<const SendWr>(&w, 1)) != 0) throw std::runtime_error("write post failed");
    return one_completion(lb->client);
  }

  [[nodiscard]] std::uint64_t addr_of(std::size_t offset) const {
    return reinterpret_cast<std::uintptr_t>(buffer.data()) + offset;
  }
};

TEST(VerbsWindow, AWriteWithImmediateThroughABoundWindowLandsAndARebindTakesANewKey) {
  WindowFixture f(2 * kBlock, 2 * kBlock);
  const std::uint32_t first = f.bind(kBlock, kBlock, Access::remote_write);
  EXPECT_NE(first, f.mr->rkey());

  Completion w = f.write_imm(f.addr_of(kBlock), first, 1000, 77);
  ASSERT_EQ(w.status, CompletionStatus::success) << w.status_detail();
  Completion r = one_completion(f.lb->server);
  ASSERT_EQ(r.status, CompletionStatus::success) << r.status_detail();
  EXPECT_EQ(r.opcode, CompletionOpcode::recv_rdma_with_imm);
  EXPECT_EQ(r.imm, 77u);
  EXPECT_EQ(r.byte_len, 1000u);
  EXPECT_EQ(0, std::memcmp(f.buffer.data() + kBlock, f.source.data(), 1000));
  EXPECT_EQ(f.buffer[kBlock + 1000], std::byte{0}) << "nothing past what was written";

  f.invalidate(first);
  const std::uint32_t second = f.bind(0, kBlock, Access::remote_write);
  EXPECT_NE(second, first);
  w = f.write_imm(f.addr_of(0), second, kBlock, 78);
  ASSERT_EQ(w.status, CompletionStatus::success) << w.status_detail();
  r = one_completion(f.lb->server);
  ASSERT_EQ(r.status, CompletionStatus::success) << r.status_detail();
  EXPECT_EQ(r.imm, 78u);
  EXPECT_EQ(0, std::memcmp(f.buffer.data(), f.source.data(), kBlock));
  f.lb->disconnect();
}

// A client that kept the key of an earlier grant writes nothing.
TEST(VerbsWindow, AnInvalidatedKeyIsRefused) {
  WindowFixture f(kBlock, kBlock);
  const std::uint32_t key = f.bind(0, kBlock, Access::remote_write);
  f.invalidate(key);
  const Completion w = f.write_imm(f.addr_of(0), key, 512, 1);
  EXPECT_EQ(w.status, CompletionStatus::remote_access_error) << to_string(w.status) << " " << w.status_detail();
  EXPECT_EQ(f.buffer, std::vector<std::byte>(kBlock, std::byte{0}));
  f.lb->disconnect();
}

// Registered for windows only, the MR's own key opens nothing.
TEST(VerbsWindow, TheMrsOwnKeyOpensNothing) {
  WindowFixture f(kBlock, kBlock);
  (void)f.bind(0, kBlock, Access::remote_write);
  const Completion w = f.write_imm(f.addr_of(0), f.mr->rkey(), 512, 1);
  EXPECT_EQ(w.status, CompletionStatus::remote_access_error) << to_string(w.status) << " " << w.status_detail();
  EXPECT_EQ(f.buffer, std::vector<std::byte>(kBlock, std::byte{0}));
  f.lb->disconnect();
}

// A window granting remote_write does not grant remote_read.
TEST(VerbsWindow, AReadThroughAWriteOnlyWindowIsRefused) {
  WindowFixture f(kBlock, kBlock);
  const std::uint32_t key = f.bind(0, kBlock, Access::remote_write);
  std::vector<std::byte> into(512, std::byte{0});
  MemoryRegion into_mr(*f.lb->client.pd, std::span<std::byte>(into), Access::local_write);
  const SendWr rd = SendWr::read(WrId(21, 1, WrKind::rdma_read), into, into_mr.lkey(), f.addr_of(0), key);
  ASSERT_EQ(f.lb->client.qp->post_chain(std::span<const SendWr>(&rd, 1)), 0);
  const Completion c = one_completion(f.lb->client);
  EXPECT_EQ(c.status, CompletionStatus::remote_access_error) << to_string(c.status) << " " << c.status_detail();
  f.lb->disconnect();
}

// The block registered as its own MR confines a writer holding a window
// over all of it: a write that runs past the MR's end is refused whole,
// and the bytes after the MR are untouched.
TEST(VerbsWindow, AWritePastTheMrsEndIsRefused) {
  WindowFixture f(2 * kBlock, kBlock);
  const std::uint32_t key = f.bind(0, kBlock, Access::remote_write);
  const Completion w = f.write_imm(f.addr_of(kBlock - 512), key, 1024, 1);
  EXPECT_EQ(w.status, CompletionStatus::remote_access_error) << to_string(w.status) << " " << w.status_detail();
  EXPECT_EQ(f.buffer, std::vector<std::byte>(2 * kBlock, std::byte{0}));
  f.lb->disconnect();
}

// A window is bound to one QP: the peer of another connection on the same
// PD (as every connection of kvd is) writes nothing with its key, and the
// connection it was opened to still can afterwards.
TEST(VerbsWindow, AnotherConnectionOnTheSamePdCannotUseTheWindow) {
  WindowFixture f(kBlock, kBlock);
  const std::uint32_t key = f.bind(0, kBlock, Access::remote_write);
  std::vector<std::byte> other_source = byte_pattern(kBlock, 9);
  std::optional<MemoryRegion> other_mr;
  LoopbackOptions opt;
  opt.server_pd = &*f.lb->server.pd;
  opt.before_connect = [&](Endpoint& c) {
    other_mr.emplace(*c.pd, std::span<std::byte>(other_source), Access::none);
    return std::vector<std::byte>{};
  };
  opt.before_accept = [](Endpoint& s) {
    if (s.qp->post_recv(WrId(0, 1, WrKind::recv), {}, 0) != 0) throw std::runtime_error("post_recv failed");
    return std::vector<std::byte>{};
  };
  Loopback other(softroce_addr(), opt);
  const SendWr w = SendWr::write_imm(WrId(30, 1, WrKind::rdma_write), std::span<const std::byte>(other_source).first(512),
                                     other_mr->lkey(), f.addr_of(0), key, 1);
  ASSERT_EQ(other.client.qp->post_chain(std::span<const SendWr>(&w, 1)), 0);
  const Completion refused = one_completion(other.client);
  EXPECT_EQ(refused.status, CompletionStatus::remote_access_error)
      << to_string(refused.status) << " " << refused.status_detail();
  EXPECT_EQ(f.buffer, std::vector<std::byte>(kBlock, std::byte{0}));
  other.disconnect();

  const Completion ok = f.write_imm(f.addr_of(0), key, 512, 2);
  ASSERT_EQ(ok.status, CompletionStatus::success) << ok.status_detail();
  const Completion r = one_completion(f.lb->server);
  EXPECT_EQ(r.imm, 2u);
  EXPECT_EQ(0, std::memcmp(f.buffer.data(), f.source.data(), 512));
  f.lb->disconnect();
}

}  // namespace
}  // namespace rkv::verbs::test::window_test
