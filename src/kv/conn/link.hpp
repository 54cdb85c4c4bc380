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
  // Always signaled: the completion returns the send buffer to its pool.
  virtual int post_send(verbs::WrId id, std::span<const std::byte> buf, std::uint32_t lkey) noexcept = 0;
  virtual int post_read(verbs::WrId id, std::span<std::byte> local, std::uint32_t lkey,
                        std::uint64_t remote_addr, std::uint32_t rkey) noexcept = 0;
  virtual int post_write(verbs::WrId id, std::span<const std::byte> local, std::uint32_t lkey,
                         std::uint64_t remote_addr, std::uint32_t rkey) noexcept = 0;
  // Several RDMA READs (at most verbs::QueuePair::kMaxChain) in one post, in
  // order, each scattered over up to 2 local elements and signaled as its
  // ReadWr says (one-sided GETs: verbs::ReadWr). *posted: how many at the
  // front were posted (all on success).
  virtual int post_reads(std::span<const verbs::ReadWr> reads, std::size_t* posted) noexcept = 0;
};

// The production Link: a verbs::QueuePair.
class QpLink final : public Link {
 public:
  explicit QpLink(verbs::QueuePair& qp) noexcept : qp_(&qp) {}
  int post_recv(verbs::WrId id, std::span<std::byte> buf, std::uint32_t lkey) noexcept override {
    return qp_->post_recv(id, buf, lkey);
  }
  int post_send(verbs::WrId id, std::span<const std::byte> buf, std::uint32_t lkey) noexcept override {
    return qp_->post_send(id, buf, lkey, /*signaled=*/true);
  }
  int post_read(verbs::WrId id, std::span<std::byte> local, std::uint32_t lkey, std::uint64_t remote_addr,
                std::uint32_t rkey) noexcept override {
    return qp_->post_rdma_read(id, local, lkey, remote_addr, rkey, /*signaled=*/true);
  }
  int post_write(verbs::WrId id, std::span<const std::byte> local, std::uint32_t lkey,
                 std::uint64_t remote_addr, std::uint32_t rkey) noexcept override {
    return qp_->post_rdma_write(id, local, lkey, remote_addr, rkey, /*signaled=*/true);
  }
  int post_reads(std::span<const verbs::ReadWr> reads, std::size_t* posted) noexcept override {
    return qp_->post_rdma_reads(reads, posted);
  }

 private:
  verbs::QueuePair* qp_;
};

}  // namespace rkv::kv::conn
