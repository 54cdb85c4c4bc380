#pragma once
// Link: what a connection's protocol logic asks of its queue pair.
//
// The protocol state machines (ServerConn, ClientConn) post work only through
// this interface and are fed verbs::Completion values. In production a
// QpLink forwards to a verbs::QueuePair; the `protocol` test suite plugs in a
// recording fake, so the state machines are tested without a device.
// Every call returns 0 or an errno value (ENOMEM: send queue full).

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "kv/conn/registrar.hpp"
#include "verbs/mw.hpp"

#include "verbs/qp.hpp"
#include "verbs/wr_id.hpp"

namespace rkv::kv::conn {

class Link {
 public:
  virtual ~Link() = default;
  virtual int post_recv(verbs::WrId id, std::span<std::byte> buf, std::uint32_t lkey) noexcept = 0;
  // Everything for the send queue: SENDs, RDMA READs and WRITEs (at most
  // verbs::QueuePair::kMaxChain) in ONE post, in order, each signaled as its
  // SendWr says (a SEND always: its completion returns the send buffer to
  // its pool). *posted: how many at the front were posted (all on success).
  virtual int post_chain(std::span<const verbs::SendWr> wrs, std::size_t* posted) noexcept = 0;
  // One WR: a chain of one.
  int post(const verbs::SendWr& wr) noexcept { return post_chain(std::span<const verbs::SendWr>(&wr, 1), nullptr); }

  // The connection's type-2 memory windows (the grant path, docs/protocol.md
  // "SET by grant"), by index (< kMaxWindows): the link owns them, creates
  // each when it is first bound, and drops them with itself (an Endpoint
  // declares its link after its QP: the windows go first, as verbs/mw.hpp
  // requires). bind_wr builds (does not post) the WR that opens `range` of
  // `reg`'s MR (which needs mw_bind) to this QP's peer for remote_write under
  // a fresh key, *wr's rkey: the window's key once the WR is posted, valid
  // for the peer once it has completed; invalidate_wr builds the one that
  // closes window `window` again (LOCAL_INV of its current key). Either goes
  // in a post_chain like any other WR (the server queues them with its
  // pass's transfers and replies: one post), so a SEND behind a bind reaches
  // the peer after the bind took effect; an unsignaled bind completes only
  // if it fails. Until a bind is posted, no other WR of its window is built.
  static constexpr std::uint32_t kMaxWindows = 64;
  virtual int bind_wr(verbs::WrId id, std::uint32_t window, const Registration& reg, std::span<const std::byte> range,
                      bool signaled, verbs::SendWr* wr) noexcept = 0;
  virtual int invalidate_wr(verbs::WrId id, std::uint32_t window, verbs::SendWr* wr) noexcept = 0;
};

// The production Link: a verbs::QueuePair (and the windows on its PD).
class QpLink final : public Link {
 public:
  QpLink(verbs::QueuePair& qp, std::shared_ptr<const verbs::ProtectionDomain> pd) noexcept
      : qp_(&qp), pd_(std::move(pd)) {}
  int post_recv(verbs::WrId id, std::span<std::byte> buf, std::uint32_t lkey) noexcept override {
    return qp_->post_recv(id, buf, lkey);
  }
  int post_chain(std::span<const verbs::SendWr> wrs, std::size_t* posted) noexcept override {
    return qp_->post_chain(wrs, posted);
  }
  // link.cpp. EINVAL: index out of range, a registration without an MR, or
  // (invalidate) a window never bound; ENOMEM / the device's errno: the
  // window could not be created.
  int bind_wr(verbs::WrId id, std::uint32_t window, const Registration& reg, std::span<const std::byte> range,
              bool signaled, verbs::SendWr* wr) noexcept override;
  int invalidate_wr(verbs::WrId id, std::uint32_t window, verbs::SendWr* wr) noexcept override;

 private:
  verbs::QueuePair* qp_;
  std::shared_ptr<const verbs::ProtectionDomain> pd_;
  // kMaxWindows slots from the first bind on (a built WR points at its window:
  // the vector never moves them), each window created as first bound.
  std::vector<std::optional<verbs::MemoryWindow>> windows_;
};

}  // namespace rkv::kv::conn
