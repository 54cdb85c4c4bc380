#pragma once
// QueuePair: an RC QP created with rdma_create_qp on a CmId, plus the
// data-path post functions (status values, never exceptions).
//
// TEARDOWN ORDER (the known pitfalls; an owner of a connection follows it):
//  1. Stop posting new work.
//  2. Initiator: cm_id.disconnect(). Passive side, on DISCONNECTED: call
//     cm_id.disconnect() too (answers the peer's DREQ). librdmacm moves the
//     QP to ERROR inside disconnect() on IB/RoCE.
//  3. The side that called disconnect() waits for its DISCONNECTED event
//     before destroying the QP (destroying earlier races the CM exchange).
//  4. qp.to_error(): idempotent; guarantees the flush even when step 2 was
//     skipped (peer vanished, connect failed/rejected, error completion).
//  5. Drain the CQ(s) until every WR the owner posted has come back. WRs
//     still queued complete with status `flushed` (IBV_WC_WR_FLUSH_ERR):
//     normal after a peer leaves, not a crash. Only then may the buffers
//     they reference be reused or freed. Use WrId generations to drop flushes
//     for slots that were already recycled.
//  6. Drop the MemoryWindows bound to the QP (mw.hpp: a bound window holds
//     its QP). Destroy QueuePair, then CmId, CompletionQueue, MemoryRegions,
//     ProtectionDomain, channels. The handles enforce QP -> CQ -> MR -> PD ->
//     channel on their own (each keeps its parents alive), so dropping them
//     in another order is safe, just later.
//
// Soft-RoCE (rxe) disables inline data, so max_inline_data is always 0 and
// no send uses IBV_SEND_INLINE. The QP is created with sq_sig_all = 0:
// unsignaled sends are allowed, but signal at least one WR per send-queue
// depth or the send queue never frees its slots.
//
// Not thread-safe: one thread (the reactor) owns a QP and its CQs.

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "verbs/mr.hpp"
#include "verbs/wr_id.hpp"

struct ibv_send_wr;  // from <infiniband/verbs.h>; only src/verbs touches it

namespace rkv::verbs {

namespace detail {
struct QpHandle;
}
class CmId;
class ProtectionDomain;
class CompletionQueue;
class MemoryWindow;

struct QpCaps {
  std::uint32_t max_send_wr = 64;
  std::uint32_t max_recv_wr = 64;
  std::uint32_t max_send_sge = 1;
  std::uint32_t max_recv_sge = 1;
};

// One gather element of a SEND or an RDMA WRITE, or one scatter element of
// an RDMA READ (the READ writes `bytes`: its MR needs local_write).
struct Sge {
  std::span<const std::byte> bytes;
  std::uint32_t lkey = 0;
};

// rdma_write_imm: an RDMA WRITE that also completes one of the peer's
// receives, handing it SendWr::imm and the length written. bind_window and
// invalidate move no bytes: they open and close a MemoryWindow (mw.hpp) for
// the peer of this QP.
enum class SendOp : std::uint8_t { send, rdma_read, rdma_write, rdma_write_imm, bind_window, invalidate };

// One work request of a post_chain: a SEND of local[0 .. num_local) gathered
// in order, an RDMA WRITE of them to [remote_addr, + total length), or an
// RDMA READ of [remote_addr, + total length) scattered over them (empty
// elements are skipped). Unsignaled (signaled = false) it makes no
// completion when it succeeds; an error completion always comes. A
// completion of a later WR of the same send queue means it has completed (RC
// send queues complete in order), so a chain whose last WR is signaled is
// known done when that one is.
struct SendWr {
  static constexpr std::size_t kMaxLocal = 2;
  SendOp op = SendOp::send;
  WrId wr_id;
  std::array<Sge, kMaxLocal> local{};
  std::uint32_t num_local = 0;
  std::uint64_t remote_addr = 0;  // READ and WRITE: the peer's address; bind_window: where the window starts
  std::uint32_t rkey = 0;         // READ and WRITE: the peer's key; bind_window: the window's new key;
                                  // invalidate: the key to invalidate
  bool signaled = true;
  std::uint32_t imm = 0;  // rdma_write_imm only (host order; the wire's byte order is verbs')
  // bind_window only: the window, the MR it opens [remote_addr, + window_length)
  // of, and what the peer may do there (remote_read and/or remote_write).
  const MemoryWindow* window = nullptr;
  const MemoryRegion* window_mr = nullptr;
  std::uint64_t window_length = 0;
  Access window_access = Access::none;

  // The bytes it moves: local[0 .. num_local) together.
  [[nodiscard]] std::uint64_t length() const noexcept {
    std::uint64_t n = 0;
    for (std::uint32_t i = 0; i < num_local && i < kMaxLocal; ++i) n += local[i].bytes.size();
    return n;
  }

  [[nodiscard]] static SendWr send(WrId id, std::span<const std::byte> bytes, std::uint32_t lkey) noexcept {
    return {SendOp::send, id, {Sge{bytes, lkey}, Sge{}}, 1, 0, 0, true};
  }
  [[nodiscard]] static SendWr read(WrId id, std::span<std::byte> local, std::uint32_t lkey,
                                   std::uint64_t remote_addr, std::uint32_t rkey) noexcept {
    return {SendOp::rdma_read, id, {Sge{local, lkey}, Sge{}}, 1, remote_addr, rkey, true};
  }
  [[nodiscard]] static SendWr write(WrId id, std::span<const std::byte> local, std::uint32_t lkey,
                                    std::uint64_t remote_addr, std::uint32_t rkey) noexcept {
    return {SendOp::rdma_write, id, {Sge{local, lkey}, Sge{}}, 1, remote_addr, rkey, true};
  }
  [[nodiscard]] static SendWr write_imm(WrId id, std::span<const std::byte> local, std::uint32_t lkey,
                                        std::uint64_t remote_addr, std::uint32_t rkey, std::uint32_t imm) noexcept {
    return {SendOp::rdma_write_imm, id, {Sge{local, lkey}, Sge{}}, 1, remote_addr, rkey, true, imm};
  }
  // Binds `window` to this QP over `range` of `mr` (which needs
  // Access::mw_bind; remote_write needs its local_write too) with `access`
  // (remote_read, remote_write or both), under the window's next rkey:
  // window.rkey() once posted, valid for the peer once this WR completes.
  [[nodiscard]] static SendWr bind_window(WrId id, const MemoryWindow& window, const MemoryRegion& mr,
                                          std::span<const std::byte> range, Access access) noexcept;
  // LOCAL_INV of `rkey` (a window's): once it completes the peer's accesses
  // with that key are refused and the window may be bound again.
  [[nodiscard]] static SendWr invalidate(WrId id, std::uint32_t rkey) noexcept {
    SendWr w;
    w.op = SendOp::invalidate;
    w.wr_id = id;
    w.rkey = rkey;
    return w;
  }
};

// One receive of a post_recv_batch chain.
struct RecvRequest {
  WrId wr_id;
  std::span<std::byte> buffer;
  std::uint32_t lkey = 0;
};

class QueuePair {
 public:
  // rdma_create_qp(id, pd, {send_cq, recv_cq, caps, RC, inline 0}); the
  // send and recv CQ may be the same object. Throws verbs::Error.
  QueuePair(CmId& id, const ProtectionDomain& pd, const CompletionQueue& send_cq,
            const CompletionQueue& recv_cq, const QpCaps& caps);

  QueuePair(QueuePair&&) noexcept = default;
  QueuePair& operator=(QueuePair&&) noexcept = default;
  QueuePair(const QueuePair&) = delete;
  QueuePair& operator=(const QueuePair&) = delete;
  ~QueuePair() = default;  // destroys the QP and detaches it from the cm_id

  [[nodiscard]] std::uint32_t qp_num() const noexcept;
  [[nodiscard]] bool valid() const noexcept { return handle_ != nullptr; }

  // --- data path: 0 or an errno value --------------------------------------
  // ENOMEM from a send-side post means the send queue is full: poll/defer.
  int post_recv(WrId wr_id, std::span<std::byte> buffer, std::uint32_t lkey) noexcept;
  // Posts `reqs` as chained WRs (one ibv_post_recv per chunk of up to 32).
  // On failure *posted (if given) says how many were posted before it.
  int post_recv_batch(std::span<const RecvRequest> reqs, std::size_t* posted = nullptr) noexcept;
  int post_send(WrId wr_id, std::span<const std::byte> bytes, std::uint32_t lkey, bool signaled) noexcept;
  int post_send(WrId wr_id, std::span<const Sge> sges, bool signaled) noexcept;
  // Reads remote [remote_addr, +local.size()) into `local` (its MR needs
  // local_write; the remote MR needs remote_read).
  int post_rdma_read(WrId wr_id, std::span<std::byte> local, std::uint32_t lkey, std::uint64_t remote_addr,
                     std::uint32_t rkey, bool signaled = true) noexcept;
  // Posts `wrs` (at most kMaxChain, of any SendOp) as ONE chain: one
  // ibv_post_send, the WRs in order. Each WR's list has at most
  // max_send_sge elements as granted (at least what QpCaps asked for).
  // *posted (if given) says how many WRs at the front were posted: all on
  // success; on ibv_post_send's failure those before the bad one (they
  // complete or flush as usual). EINVAL, nothing posted, for more than
  // kMaxChain WRs or a bad element; ENOMEM: the send queue is full.
  static constexpr std::size_t kMaxChain = 64;
  int post_chain(std::span<const SendWr> wrs, std::size_t* posted = nullptr) noexcept;
  // Writes `local` to remote_addr (the remote MR needs remote_write).
  int post_rdma_write(WrId wr_id, std::span<const std::byte> local, std::uint32_t lkey,
                      std::uint64_t remote_addr, std::uint32_t rkey, bool signaled) noexcept;

  // --- control ----------------------------------------------------------------
  // Move to ERROR so every outstanding WR flushes (teardown step 4).
  int to_error() noexcept;

 private:
  // The window fields of a bind_window or invalidate WR (qp.cpp).
  static int fill_window_fields(::ibv_send_wr& wr, const SendWr& w) noexcept;

  std::shared_ptr<detail::QpHandle> handle_;
  QpCaps caps_;  // as granted by rdma_create_qp
};

}  // namespace rkv::verbs
