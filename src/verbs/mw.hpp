#pragma once
// MemoryWindow: a type-2 memory window (ibv_alloc_mw, IBV_MW_TYPE_2). A
// window is bound by a WR on one QP's send queue (SendWr::bind_window) and
// then opens [addr, +length) of one MR, with the window's own access, to the
// peer of THAT QP only, under a fresh rkey; an invalidation (SendWr::
// invalidate, a LOCAL_INV on the same QP) closes it again. So a server can
// hand one connection remote_write to one block for one operation and take
// it back without a registration per grant.
//
// Rules the device enforces (verified in the guest: tests/rdma/test_window.cpp):
//  - the MR needs Access::mw_bind; a window with remote_write needs the MR's
//    local_write. The MR itself needs no remote access (its own rkey opens
//    nothing then).
//  - a type-2 window must be free (new or invalidated) to be bound; each bind
//    gives it the key byte after the current one (ibv_inc_rkey), so an rkey
//    a peer kept from an earlier bind is refused. The bind WR names the
//    window by its current key, which QueuePair::post_chain advances when it
//    posts a bind: a window whose posted bind then FAILED has a key the
//    device does not know and cannot be bound again (deallocate it; its QP
//    is in ERROR anyway).
//  - Soft-RoCE (kernel 6.1, measured in the guest 2026-12-02) checks an
//    access through a window against its MR's bounds, not the window's: a
//    WRITE outside the window and inside its MR lands. So a window confines
//    a peer only to the MR it is bound on: register each grantable block as
//    its own MR.
//  - a bound window holds its QP: destroying the QP first makes Soft-RoCE
//    wait ~50 s in the destroy and log a kernel warning (measured). Drop a
//    window (dealloc invalidates it) or invalidate it before its QP.
//
// Not thread-safe: the thread that owns the QP builds its bind WRs.

#include <cstdint>
#include <memory>

struct ibv_mw;  // from <infiniband/verbs.h>; only src/verbs touches it

namespace rkv::verbs {

namespace detail {
struct PdHandle;
}
class ProtectionDomain;
class QueuePair;

class MemoryWindow {
 public:
  // Throws verbs::Error (e.g. EOPNOTSUPP where the device has no type-2 windows).
  explicit MemoryWindow(const ProtectionDomain& pd);

  MemoryWindow(MemoryWindow&&) noexcept;
  MemoryWindow& operator=(MemoryWindow&&) noexcept;
  MemoryWindow(const MemoryWindow&) = delete;
  MemoryWindow& operator=(const MemoryWindow&) = delete;
  ~MemoryWindow();  // ibv_dealloc_mw, then releases the PD

  // The key of the last bind posted (QueuePair::post_chain), or the
  // allocation's while none was: valid for the peer once that bind has
  // completed, until the window is invalidated.
  [[nodiscard]] std::uint32_t rkey() const noexcept;
  [[nodiscard]] bool valid() const noexcept { return mw_ != nullptr; }

 private:
  friend struct SendWr;
  friend class QueuePair;
  void reset() noexcept;
  // The key a bind built now takes (rkey() with its key byte incremented);
  // it becomes rkey() when the bind is posted.
  [[nodiscard]] std::uint32_t next_rkey() const noexcept;

  std::shared_ptr<detail::PdHandle> pd_;  // declared first: released after mw_ is deallocated
  ::ibv_mw* mw_ = nullptr;                // mw_->rkey: the one record of the window's key
};

}  // namespace rkv::verbs
