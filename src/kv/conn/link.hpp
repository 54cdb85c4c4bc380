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
#include <span>

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
};

// The production Link: a verbs::QueuePair.
class QpLink final : public Link {
 public:
  explicit QpLink(verbs::QueuePair& qp) noexcept : qp_(&qp) {}
  int post_recv(verbs::WrId id, std::span<std::byte> buf, std::uint32_t lkey) noexcept override {
    return qp_->post_recv(id, buf, lkey);
  }
  int post_chain(std::span<const verbs::SendWr> wrs, std::size_t* posted) noexcept override {
    return qp_->post_chain(wrs, posted);
  }

 private:
  verbs::QueuePair* qp_;
};

}  // namespace rkv::kv::conn
