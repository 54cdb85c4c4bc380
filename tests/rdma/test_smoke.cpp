// verbs_smoke: basic verbs over a loopback connection, and proof that the
// least-privilege MR flags are honoured by the HCA.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <cstring>
#include <vector>

#include "loopback.hpp"
#include "verbs/device.hpp"
#include "verbs/error.hpp"
#include "verbs/mr.hpp"
#include "verbs/wr_id.hpp"

namespace rkv::verbs::test {
namespace {

constexpr std::size_t kRegion = 4096;

// What the server advertises in its accept private data.
struct RemoteRegion {
  std::uint64_t addr;
  std::uint32_t rkey;
  std::uint32_t length;
};

std::vector<std::byte> encode(const MemoryRegion& mr) {
  RemoteRegion r{mr.addr(), mr.rkey(), static_cast<std::uint32_t>(mr.length())};
  std::vector<std::byte> out(sizeof r);
  std::memcpy(out.data(), &r, sizeof r);
  return out;
}

RemoteRegion decode(const std::vector<std::byte>& data) {
  RemoteRegion r{};
  if (data.size() < sizeof r) throw std::runtime_error("accept private data too short");
  std::memcpy(&r, data.data(), sizeof r);  // IB/RoCE pads private data: read our own length
  return r;
}

TEST(VerbsSmoke, DeviceIsPresent) {
  softroce_addr();
  EXPECT_FALSE(list_devices().empty());
}

TEST(VerbsSmoke, RdmaReadFromRemoteReadOnlyRegion) {
  const std::string addr = softroce_addr();
  std::vector<std::byte> remote = byte_pattern(kRegion, 7);
  std::vector<std::byte> local(kRegion, std::byte{0});
  std::optional<MemoryRegion> remote_mr;
  std::optional<MemoryRegion> local_mr;

  LoopbackOptions opt;
  opt.client_params.initiator_depth = 4;
  opt.server_params.responder_resources = 4;
  opt.before_connect = [&](Endpoint& c) {
    local_mr.emplace(*c.pd, std::span<std::byte>(local), Access::local_write);  // READ destination
    return std::vector<std::byte>{};
  };
  opt.before_accept = [&](Endpoint& s) {
    remote_mr.emplace(*s.pd, std::span<std::byte>(remote), Access::remote_read);  // nothing else
    return encode(*remote_mr);
  };
  Loopback lb(addr, opt);
  const RemoteRegion rr = decode(lb.client_saw_private);
  ASSERT_EQ(rr.addr, remote_mr->addr());
  ASSERT_EQ(rr.rkey, remote_mr->rkey());
  ASSERT_EQ(rr.length, kRegion);

  // Whole region.
  ASSERT_EQ(lb.client.qp->post_rdma_read(WrId(1, 1, WrKind::rdma_read), local, local_mr->lkey(), rr.addr, rr.rkey), 0);
  Completion c = one_completion(lb.client);
  ASSERT_EQ(c.status, CompletionStatus::success) << c.status_detail();
  EXPECT_EQ(c.opcode, CompletionOpcode::rdma_read);
  EXPECT_EQ(c.wr_id, WrId(1, 1, WrKind::rdma_read));
  EXPECT_EQ(c.byte_len, kRegion);
  EXPECT_EQ(c.qp_num, lb.client.qp->qp_num());
  EXPECT_EQ(local, remote);

  // An unaligned sub-range into the start of the local buffer.
  std::fill(local.begin(), local.end(), std::byte{0});
  const std::size_t off = 123, len = 1000;
  ASSERT_EQ(lb.client.qp->post_rdma_read(WrId(2, 1, WrKind::rdma_read), std::span<std::byte>(local).first(len),
                                         local_mr->lkey(), rr.addr + off, rr.rkey),
            0);
  c = one_completion(lb.client);
  ASSERT_EQ(c.status, CompletionStatus::success) << c.status_detail();
  EXPECT_EQ(0, std::memcmp(local.data(), remote.data() + off, len));
  EXPECT_EQ(local[len], std::byte{0});  // nothing beyond the requested length

  lb.disconnect();
}

// A chain of READs posted at once (QueuePair::post_chain) with only its
// last signaled: one completion, and by then every READ of the chain landed.
TEST(VerbsSmoke, ChainedReadsCompleteWithTheirLastSignaledOne) {
  const std::string addr = softroce_addr();
  std::vector<std::byte> remote = byte_pattern(kRegion, 3);
  std::vector<std::byte> local(kRegion, std::byte{0});
  std::optional<MemoryRegion> remote_mr;
  std::optional<MemoryRegion> local_mr;
  LoopbackOptions opt;
  opt.caps.max_send_sge = 2;
  opt.before_connect = [&](Endpoint& c) {
    local_mr.emplace(*c.pd, std::span<std::byte>(local), Access::local_write);
    return std::vector<std::byte>{};
  };
  opt.before_accept = [&](Endpoint& s) {
    remote_mr.emplace(*s.pd, std::span<std::byte>(remote), Access::remote_read);
    return encode(*remote_mr);
  };
  Loopback lb(addr, opt);  // initiator depth / responder resources: kNegotiate, as kvd and the client use
  const RemoteRegion rr = decode(lb.client_saw_private);
  std::printf("negotiated: client initiator depth %u, server responder resources %u\n",
              unsigned{lb.server_saw_initiator_depth}, unsigned{lb.client_saw_responder_resources});
  EXPECT_GT(lb.server_saw_initiator_depth, 1u) << "several READs in flight per QP";
  EXPECT_GT(lb.client_saw_responder_resources, 1u) << "the server serves several READs at once";
  constexpr std::size_t kReads = 16, kPiece = kRegion / kReads;
  std::vector<SendWr> chain(kReads);
  for (std::size_t i = 0; i < kReads; ++i) {
    SendWr& w = chain[i];
    w.op = SendOp::rdma_read;
    w.wr_id = WrId(static_cast<std::uint32_t>(i), 1, WrKind::rdma_read);
    const auto dst = std::span<std::byte>(local).subspan(i * kPiece, kPiece);
    if (i == 5) {  // one scattered over two elements
      w.local[0] = {dst.first(100), local_mr->lkey()};
      w.local[1] = {dst.subspan(100), local_mr->lkey()};
      w.num_local = 2;
    } else {
      w.local[0] = {dst, local_mr->lkey()};
      w.num_local = 1;
    }
    w.remote_addr = rr.addr + i * kPiece;
    w.rkey = rr.rkey;
    w.signaled = i + 1 == kReads;
  }
  std::size_t posted = 0;
  ASSERT_EQ(lb.client.qp->post_chain(chain, &posted), 0);
  EXPECT_EQ(posted, kReads);
  std::vector<Completion> got;
  auto cb = [&](const Completion& c) noexcept { got.push_back(c); };
  ASSERT_TRUE(lb.client.drain_until(60s, cb, [&] { return !got.empty(); }));
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].status, CompletionStatus::success) << got[0].status_detail();
  EXPECT_EQ(got[0].wr_id, chain.back().wr_id);
  EXPECT_EQ(local, remote) << "every READ before the signaled one has landed";
  // No completion for the unsignaled ones, ever.
  EXPECT_FALSE(lb.client.drain_until(300ms, cb, [&] { return got.size() > 1; }));
  EXPECT_EQ(got.size(), 1u);
  // More than a chain holds is refused whole.
  std::vector<SendWr> too_many(QueuePair::kMaxChain + 1, chain[0]);
  EXPECT_EQ(lb.client.qp->post_chain(too_many, &posted), EINVAL);
  EXPECT_EQ(posted, 0u);
  lb.disconnect();
}

// A chain of an RDMA WRITE and a SEND in one post (QueuePair::post_chain,
// as kvd posts a large GET's value and its reply), only the SEND signaled:
// when the SEND's receive completes at the peer, the WRITE's bytes are there
// (RC order), and the sender's one completion is the SEND's.
TEST(VerbsSmoke, AWriteAndASendInOneChainLandTheWriteFirst) {
  const std::string addr = softroce_addr();
  std::vector<std::byte> local = byte_pattern(kRegion, 9);
  std::vector<std::byte> remote(kRegion, std::byte{0});
  std::vector<std::byte> inbox(64, std::byte{0});
  std::optional<MemoryRegion> local_mr, remote_mr, inbox_mr;
  LoopbackOptions opt;
  opt.before_connect = [&](Endpoint& c) {
    local_mr.emplace(*c.pd, std::span<std::byte>(local), Access::none);  // a gather source only
    return std::vector<std::byte>{};
  };
  opt.before_accept = [&](Endpoint& s) {
    remote_mr.emplace(*s.pd, std::span<std::byte>(remote), Access::local_write | Access::remote_write);
    inbox_mr.emplace(*s.pd, std::span<std::byte>(inbox), Access::local_write);
    if (s.qp->post_recv(WrId(0, 1, WrKind::recv), inbox, inbox_mr->lkey()) != 0) {
      throw std::runtime_error("post_recv failed");
    }
    return encode(*remote_mr);
  };
  Loopback lb(addr, opt);
  const RemoteRegion rr = decode(lb.client_saw_private);
  std::array<SendWr, 2> chain{
      SendWr::write(WrId(1, 1, WrKind::rdma_write), local, local_mr->lkey(), rr.addr, rr.rkey),
      SendWr::send(WrId(2, 1, WrKind::send), std::span<const std::byte>(local).first(16), local_mr->lkey())};
  chain[0].signaled = false;
  std::size_t posted = 0;
  ASSERT_EQ(lb.client.qp->post_chain(chain, &posted), 0);
  EXPECT_EQ(posted, 2u);
  const Completion got = one_completion(lb.server);
  ASSERT_EQ(got.status, CompletionStatus::success) << got.status_detail();
  EXPECT_EQ(got.opcode, CompletionOpcode::recv);
  EXPECT_EQ(got.byte_len, 16u);
  EXPECT_EQ(remote, local) << "the WRITE landed before the SEND was received";
  const Completion sent = one_completion(lb.client);
  EXPECT_EQ(sent.status, CompletionStatus::success) << sent.status_detail();
  EXPECT_EQ(sent.wr_id, chain[1].wr_id) << "the unsignaled WRITE has no completion of its own";
  lb.disconnect();
}

// An unsignaled READ that fails still completes (with an error and its own
// wr_id); the READs after it flush, each with a completion.
TEST(VerbsSmoke, AFailingUnsignaledReadInAChainReportsItselfAndTheRestFlush) {
  const std::string addr = softroce_addr();
  std::vector<std::byte> remote = byte_pattern(kRegion, 4);
  std::vector<std::byte> local(kRegion, std::byte{0});
  std::optional<MemoryRegion> remote_mr;
  std::optional<MemoryRegion> local_mr;
  LoopbackOptions opt;
  opt.before_connect = [&](Endpoint& c) {
    local_mr.emplace(*c.pd, std::span<std::byte>(local), Access::local_write);
    return std::vector<std::byte>{};
  };
  opt.before_accept = [&](Endpoint& s) {
    remote_mr.emplace(*s.pd, std::span<std::byte>(remote), Access::remote_read);
    return encode(*remote_mr);
  };
  Loopback lb(addr, opt);
  const RemoteRegion rr = decode(lb.client_saw_private);
  constexpr std::size_t kReads = 4, kPiece = 256;
  std::vector<SendWr> chain(kReads);
  for (std::size_t i = 0; i < kReads; ++i) {
    SendWr& w = chain[i];
    w.op = SendOp::rdma_read;
    w.wr_id = WrId(static_cast<std::uint32_t>(i), 7, WrKind::rdma_read);
    w.local[0] = {std::span<std::byte>(local).subspan(i * kPiece, kPiece), local_mr->lkey()};
    w.num_local = 1;
    w.remote_addr = rr.addr + i * kPiece;
    w.rkey = rr.rkey;
    w.signaled = i + 1 == kReads;
  }
  chain[1].remote_addr = rr.addr + kRegion;  // past the end of the remote MR
  ASSERT_EQ(lb.client.qp->post_chain(chain), 0);
  std::vector<Completion> got;
  auto cb = [&](const Completion& c) noexcept { got.push_back(c); };
  ASSERT_TRUE(lb.client.drain_until(60s, cb, [&] {
    return !got.empty() && got.back().wr_id == chain.back().wr_id;
  }));
  ASSERT_EQ(got.size(), 3u) << "READ 0 succeeded unsignaled: no completion; 1, 2 and 3 each have one";
  EXPECT_EQ(got[0].wr_id, chain[1].wr_id);
  EXPECT_EQ(got[0].status, CompletionStatus::remote_access_error) << to_string(got[0].status);
  EXPECT_EQ(got[1].wr_id, chain[2].wr_id);
  EXPECT_EQ(got[1].status, CompletionStatus::flushed) << to_string(got[1].status);
  EXPECT_EQ(got[2].wr_id, chain[3].wr_id);
  EXPECT_EQ(got[2].status, CompletionStatus::flushed) << to_string(got[2].status);
  EXPECT_EQ(0, std::memcmp(local.data(), remote.data(), kPiece)) << "READ 0 landed";
}

TEST(VerbsSmoke, RdmaWriteWithoutRemoteWriteIsRejected) {
  const std::string addr = softroce_addr();
  const std::vector<std::byte> original = byte_pattern(kRegion, 1);
  std::vector<std::byte> remote = original;
  std::vector<std::byte> local = byte_pattern(kRegion, 99);
  std::optional<MemoryRegion> remote_mr;
  std::optional<MemoryRegion> local_mr;

  LoopbackOptions opt;
  opt.before_connect = [&](Endpoint& c) {
    local_mr.emplace(*c.pd, std::span<std::byte>(local), Access::none);  // WRITE source: local read only
    return std::vector<std::byte>{};
  };
  opt.before_accept = [&](Endpoint& s) {
    // Everything except remote_write.
    remote_mr.emplace(*s.pd, std::span<std::byte>(remote), Access::local_write | Access::remote_read);
    return encode(*remote_mr);
  };
  Loopback lb(addr, opt);
  const RemoteRegion rr = decode(lb.client_saw_private);

  ASSERT_EQ(lb.client.qp->post_rdma_write(WrId(3, 1, WrKind::rdma_write), local, local_mr->lkey(), rr.addr, rr.rkey,
                                          true),
            0);
  const Completion c = one_completion(lb.client);
  EXPECT_EQ(c.status, CompletionStatus::remote_access_error)
      << "got " << to_string(c.status) << " (" << c.status_detail() << ")";
  EXPECT_EQ(c.wr_id, WrId(3, 1, WrKind::rdma_write));
  EXPECT_EQ(remote, original) << "the remote region was modified";

  lb.disconnect();
}

TEST(VerbsSmoke, RemoteWriteRequiresLocalWrite) {
  const std::string addr = softroce_addr();
  EventChannel ec;
  CmId id(ec, 42);
  id.bind(addr, 0);
  ProtectionDomain pd(id);
  std::vector<std::byte> buf(64);
  EXPECT_THROW(MemoryRegion(pd, buf, Access::remote_write), Error);
  MemoryRegion ok(pd, buf, Access::local_write | Access::remote_write);
  EXPECT_EQ(ok.access(), Access::local_write | Access::remote_write);
  EXPECT_EQ(to_string(ok.access()), "local_write|remote_write");
}

}  // namespace
}  // namespace rkv::verbs::test
