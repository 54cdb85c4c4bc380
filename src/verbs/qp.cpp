#include "verbs/qp.hpp"

#include <arpa/inet.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdint>

#include "verbs/cm_id.hpp"
#include "verbs/cq.hpp"
#include "verbs/detail/handles.hpp"
#include "verbs/mw.hpp"
#include "verbs/pd.hpp"

namespace rkv::verbs {

namespace {

constexpr std::size_t kMaxSendSge = 16;    // stack array bound of a send-side gather/scatter list
constexpr std::size_t kRecvChunk = 32;     // chain length per ibv_post_recv

bool fits_u32(std::size_t n) noexcept { return n <= UINT32_MAX; }

ibv_sge make_sge(const void* data, std::size_t len, std::uint32_t lkey) noexcept {
  ibv_sge sge{};
  sge.addr = reinterpret_cast<std::uintptr_t>(data);
  sge.length = static_cast<std::uint32_t>(len);
  sge.lkey = lkey;
  return sge;
}

}  // namespace

QueuePair::QueuePair(CmId& id, const ProtectionDomain& pd, const CompletionQueue& send_cq,
                     const CompletionQueue& recv_cq, const QpCaps& caps) {
  ibv_qp_init_attr attr{};
  attr.send_cq = send_cq.handle_->cq;
  attr.recv_cq = recv_cq.handle_->cq;
  attr.qp_type = IBV_QPT_RC;
  attr.sq_sig_all = 0;  // each post says whether it wants a completion
  attr.cap.max_send_wr = caps.max_send_wr;
  attr.cap.max_recv_wr = caps.max_recv_wr;
  attr.cap.max_send_sge = caps.max_send_sge;
  attr.cap.max_recv_sge = caps.max_recv_sge;
  attr.cap.max_inline_data = 0;  // Soft-RoCE disables inline
  rdma_cm_id* raw_id = id.handle_->id;
  if (rdma_create_qp(raw_id, pd.handle_->pd, &attr) != 0) detail::throw_error("rdma_create_qp", errno);
  try {
    handle_ = std::make_shared<detail::QpHandle>(id.handle_, pd.handle_, send_cq.handle_, recv_cq.handle_,
                                                 raw_id->qp);
  } catch (...) {
    rdma_destroy_qp(raw_id);
    throw;
  }
  // rdma_create_qp wrote back what the provider granted.
  caps_ = QpCaps{attr.cap.max_send_wr, attr.cap.max_recv_wr, attr.cap.max_send_sge, attr.cap.max_recv_sge};
  SPDLOG_DEBUG("verbs: qp {} created (send_wr={} recv_wr={})", raw_id->qp->qp_num, caps_.max_send_wr,
               caps_.max_recv_wr);
}

std::uint32_t QueuePair::qp_num() const noexcept { return handle_->qp->qp_num; }

int QueuePair::post_recv(WrId wr_id, std::span<std::byte> buffer, std::uint32_t lkey) noexcept {
  if (!fits_u32(buffer.size())) return EINVAL;
  ibv_sge sge = make_sge(buffer.data(), buffer.size(), lkey);
  ibv_recv_wr wr{};
  wr.wr_id = wr_id.encode();
  wr.sg_list = &sge;
  wr.num_sge = buffer.empty() ? 0 : 1;
  ibv_recv_wr* bad = nullptr;
  return ibv_post_recv(handle_->qp, &wr, &bad);
}

int QueuePair::post_recv_batch(std::span<const RecvRequest> reqs, std::size_t* posted) noexcept {
  std::array<ibv_sge, kRecvChunk> sges;
  std::array<ibv_recv_wr, kRecvChunk> wrs;
  std::size_t done = 0;
  while (done < reqs.size()) {
    const std::size_t n = std::min(kRecvChunk, reqs.size() - done);
    for (std::size_t i = 0; i < n; ++i) {
      const RecvRequest& r = reqs[done + i];
      if (!fits_u32(r.buffer.size())) {
        if (posted != nullptr) *posted = done;
        return EINVAL;
      }
      sges[i] = make_sge(r.buffer.data(), r.buffer.size(), r.lkey);
      wrs[i] = ibv_recv_wr{};
      wrs[i].wr_id = r.wr_id.encode();
      wrs[i].sg_list = &sges[i];
      wrs[i].num_sge = r.buffer.empty() ? 0 : 1;
      wrs[i].next = i + 1 < n ? &wrs[i + 1] : nullptr;
    }
    ibv_recv_wr* bad = nullptr;
    if (int rc = ibv_post_recv(handle_->qp, wrs.data(), &bad); rc != 0) {
      // WRs before `bad` were posted.
      if (posted != nullptr) *posted = done + (bad != nullptr ? static_cast<std::size_t>(bad - wrs.data()) : 0);
      return rc;
    }
    done += n;
  }
  if (posted != nullptr) *posted = done;
  return 0;
}

namespace {
// Scatter/gather elements into `out`, skipping empty ones (a zero-length
// element adds nothing). The count, or -1 if an element is longer than a
// verbs length (u32). in.size() <= out.size().
template <std::size_t N>
int fill_sges(std::span<const Sge> in, std::array<ibv_sge, N>& out) noexcept {
  int num = 0;
  for (const Sge& s : in) {
    if (!fits_u32(s.bytes.size())) return -1;
    if (s.bytes.empty()) continue;
    out[static_cast<std::size_t>(num++)] = make_sge(s.bytes.data(), s.bytes.size(), s.lkey);
  }
  return num;
}

// Where an RDMA READ/WRITE goes; unused (zero) for a SEND.
struct Remote {
  std::uint64_t addr = 0;
  std::uint32_t rkey = 0;
};

// THE one place that fills an ibv_send_wr (SEND, RDMA READ, RDMA WRITE, with
// or without immediate): opcode, wr_id, the gather/scatter list (empty
// elements skipped, written to `list`, which must outlive the post), remote
// address/rkey, signaled flag, the immediate (host order), no successor
// (fill_window_fields adds a window bind's or invalidation's own fields).
// EINVAL for more elements than `list` holds or one longer than u32, else 0.
template <std::size_t N>
int fill_send_wr(ibv_send_wr& wr, std::array<ibv_sge, N>& list, ibv_wr_opcode opcode, WrId wr_id,
                 std::span<const Sge> sges, Remote remote, bool signaled, std::uint32_t imm = 0) noexcept {
  if (sges.size() > N) return EINVAL;
  const int num = fill_sges(sges, list);
  if (num < 0) return EINVAL;
  wr = ibv_send_wr{};
  wr.wr_id = wr_id.encode();
  wr.sg_list = list.data();
  wr.num_sge = num;
  wr.opcode = opcode;
  wr.send_flags = signaled ? IBV_SEND_SIGNALED : 0;
  wr.wr.rdma.remote_addr = remote.addr;
  wr.wr.rdma.rkey = remote.rkey;
  if (opcode == IBV_WR_RDMA_WRITE_WITH_IMM) wr.imm_data = htonl(imm);
  return 0;
}

ibv_wr_opcode to_ibv(SendOp op) noexcept {
  switch (op) {
    case SendOp::send: return IBV_WR_SEND;
    case SendOp::rdma_read: return IBV_WR_RDMA_READ;
    case SendOp::rdma_write: return IBV_WR_RDMA_WRITE;
    case SendOp::rdma_write_imm: return IBV_WR_RDMA_WRITE_WITH_IMM;
    case SendOp::bind_window: return IBV_WR_BIND_MW;
    case SendOp::invalidate: return IBV_WR_LOCAL_INV;
  }
  return IBV_WR_SEND;
}

// One WR, one post. ibv_post_send's errno value (ENOMEM = send queue full).
int post_send_wr(ibv_qp* qp, ibv_wr_opcode opcode, WrId wr_id, std::span<const Sge> sges, Remote remote,
                 bool signaled) noexcept {
  std::array<ibv_sge, kMaxSendSge> list;
  ibv_send_wr wr;
  if (const int rc = fill_send_wr(wr, list, opcode, wr_id, sges, remote, signaled); rc != 0) return rc;
  SPDLOG_TRACE("verbs: post opcode={} qp={} slot={} sge={}", static_cast<int>(opcode), qp->qp_num, wr_id.slot(),
               wr.num_sge);
  ibv_send_wr* bad = nullptr;
  return ibv_post_send(qp, &wr, &bad);
}
}  // namespace

int QueuePair::post_send(WrId wr_id, std::span<const std::byte> bytes, std::uint32_t lkey,
                         bool signaled) noexcept {
  const Sge one{bytes, lkey};
  return post_send(wr_id, std::span<const Sge>(&one, 1), signaled);
}

int QueuePair::post_send(WrId wr_id, std::span<const Sge> sges, bool signaled) noexcept {
  return post_send_wr(handle_->qp, IBV_WR_SEND, wr_id, sges, Remote{}, signaled);
}

int QueuePair::post_rdma_read(WrId wr_id, std::span<std::byte> local, std::uint32_t lkey,
                              std::uint64_t remote_addr, std::uint32_t rkey, bool signaled) noexcept {
  const Sge one{local, lkey};
  return post_send_wr(handle_->qp, IBV_WR_RDMA_READ, wr_id, std::span<const Sge>(&one, 1),
                      Remote{remote_addr, rkey}, signaled);
}

int QueuePair::post_chain(std::span<const SendWr> wrs, std::size_t* posted) noexcept {
  if (posted != nullptr) *posted = 0;
  if (wrs.size() > kMaxChain) return EINVAL;
  if (wrs.empty()) return 0;
  std::array<std::array<ibv_sge, SendWr::kMaxLocal>, kMaxChain> lists;
  std::array<ibv_send_wr, kMaxChain> chain;
  bool binds = false;  // a bind in the chain: its window's key advances once posted
  for (std::size_t i = 0; i < wrs.size(); ++i) {
    const SendWr& w = wrs[i];
    if (w.num_local > w.local.size() || w.num_local > caps_.max_send_sge) return EINVAL;
    const auto local = std::span<const Sge>(w.local).first(w.num_local);
    if (const int rc = fill_send_wr(chain[i], lists[i], to_ibv(w.op), w.wr_id, local, Remote{w.remote_addr, w.rkey},
                                    w.signaled, w.imm);
        rc != 0) {
      return rc;
    }
    if (const int rc = fill_window_fields(chain[i], w); rc != 0) return rc;
    binds = binds || w.op == SendOp::bind_window;
    if (i > 0) chain[i - 1].next = &chain[i];
  }
  SPDLOG_TRACE("verbs: post a chain of {} WRs qp={} first slot={}", wrs.size(), handle_->qp->qp_num,
               wrs.front().wr_id.slot());
  ibv_send_wr* bad = nullptr;
  const int rc = ibv_post_send(handle_->qp, chain.data(), &bad);
  // On failure the WRs before `bad` were posted (a provider that leaves it unset posted none).
  const std::size_t done = rc == 0 ? wrs.size() : (bad != nullptr ? static_cast<std::size_t>(bad - chain.data()) : 0);
  // A bind names the window by the key it has now (ibv_mw::rkey, which the
  // provider sends along and the device checks), and nothing updates that
  // key for a type-2 window but its owner: a posted bind makes it the new one.
  for (std::size_t i = 0; binds && i < done; ++i) {
    if (wrs[i].op == SendOp::bind_window) wrs[i].window->mw_->rkey = wrs[i].rkey;
  }
  if (posted != nullptr) *posted = done;
  return rc;
}

// The window fields of a bind_window or invalidate WR, after fill_send_wr
// filled the rest (they move no bytes: no gather list). EINVAL for a bind
// without its window or MR, or with an access other than remote read/write.
int QueuePair::fill_window_fields(ibv_send_wr& wr, const SendWr& w) noexcept {
  switch (w.op) {
    case SendOp::send:
    case SendOp::rdma_read:
    case SendOp::rdma_write:
    case SendOp::rdma_write_imm: return 0;
    case SendOp::invalidate:
      if (w.num_local != 0) return EINVAL;
      wr.invalidate_rkey = w.rkey;
      return 0;
    case SendOp::bind_window: {
      constexpr Access kRemote = Access::remote_read | Access::remote_write;
      if (w.window == nullptr || !w.window->valid() || w.window_mr == nullptr || !w.window_mr->valid() ||
          w.num_local != 0 || w.window_access == Access::none || (w.window_access | kRemote) != kRemote) {
        return EINVAL;
      }
      wr.bind_mw.mw = w.window->mw_;
      wr.bind_mw.rkey = w.rkey;
      wr.bind_mw.bind_info.mr = w.window_mr->mr_;
      wr.bind_mw.bind_info.addr = w.remote_addr;
      wr.bind_mw.bind_info.length = w.window_length;
      wr.bind_mw.bind_info.mw_access_flags = static_cast<unsigned>(detail::to_ibv_access(w.window_access));
      return 0;
    }
  }
  return EINVAL;
}

SendWr SendWr::bind_window(WrId id, const MemoryWindow& window, const MemoryRegion& mr, std::span<const std::byte> range,
                           Access access) noexcept {
  SendWr w;
  w.op = SendOp::bind_window;
  w.wr_id = id;
  w.remote_addr = reinterpret_cast<std::uintptr_t>(range.data());
  w.rkey = window.valid() ? window.next_rkey() : 0;
  w.window = &window;
  w.window_mr = &mr;
  w.window_length = range.size();
  w.window_access = access;
  return w;
}

int QueuePair::post_rdma_write(WrId wr_id, std::span<const std::byte> local, std::uint32_t lkey,
                               std::uint64_t remote_addr, std::uint32_t rkey, bool signaled) noexcept {
  const Sge one{local, lkey};
  return post_send_wr(handle_->qp, IBV_WR_RDMA_WRITE, wr_id, std::span<const Sge>(&one, 1),
                      Remote{remote_addr, rkey}, signaled);
}

int QueuePair::to_error() noexcept {
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_ERR;
  const int rc = ibv_modify_qp(handle_->qp, &attr, IBV_QP_STATE);
  SPDLOG_DEBUG("verbs: qp {} -> ERROR rc={}", handle_->qp->qp_num, rc);
  return rc;
}

}  // namespace rkv::verbs
