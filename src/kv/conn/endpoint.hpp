#pragma once
// Endpoint: the verbs resources of one connection, client or server side:
// cm_id, completion channel + CQ (event mode), RC QP, and (a client's) the
// registered send/receive buffer pools; kvd's connections take their buffers
// from the server's shared pools instead (`own_buffers` false). Registered for
// local access only (SEND source, RECV target): nothing here is remotely
// accessible.
//
// Members are declared so destruction runs the link's memory windows -> QP
// -> CQ -> MR -> buffers -> channel -> cm_id -> PD (each verbs handle also
// keeps its parents alive; a window bound when its QP goes stalls the
// destroy, verbs/mw.hpp).
// Teardown of a live connection follows verbs/qp.hpp: disconnect, wait for
// DISCONNECTED (or to_error), drain the flushed completions, then destroy.

#include <cstdint>
#include <memory>
#include <optional>

#include "kv/conn/buffer_pool.hpp"
#include "kv/conn/link.hpp"
#include "verbs/cm_id.hpp"
#include "verbs/comp_channel.hpp"
#include "verbs/cq.hpp"
#include "verbs/mr.hpp"
#include "verbs/pd.hpp"
#include "verbs/qp.hpp"

namespace rkv::kv::conn {

struct EndpointConfig {
  std::uint32_t recv_count = 16;  // receives posted at most
  std::uint32_t recv_size = 8192;
  std::uint32_t send_count = 16;  // SENDs in flight at most
  std::uint32_t send_size = 8192;
  std::uint32_t rdma_depth = 16;  // RDMA READ/WRITE WRs in flight (rendezvous)
  bool own_buffers = true;        // false: no pools here (the owner's shared ones feed the QP)
};

class Endpoint {
 public:
  // Throws verbs::Error / std::bad_alloc.
  Endpoint(verbs::CmId id, std::shared_ptr<const verbs::ProtectionDomain> pd, const EndpointConfig& cfg);

  Endpoint(const Endpoint&) = delete;
  Endpoint& operator=(const Endpoint&) = delete;
  Endpoint(Endpoint&&) = delete;  // link_ points at qp_
  Endpoint& operator=(Endpoint&&) = delete;
  ~Endpoint() = default;

  [[nodiscard]] verbs::CmId& id() noexcept { return id_; }
  [[nodiscard]] const std::shared_ptr<const verbs::ProtectionDomain>& pd() const noexcept { return pd_; }
  [[nodiscard]] verbs::QueuePair& qp() noexcept { return qp_; }
  [[nodiscard]] verbs::CompletionQueue& cq() noexcept { return cq_; }
  [[nodiscard]] int cq_fd() const noexcept { return channel_.fd(); }
  [[nodiscard]] Link& link() noexcept { return link_; }
  // Only with own_buffers.
  [[nodiscard]] BufferPool& recv_pool() noexcept { return *recv_pool_; }
  [[nodiscard]] BufferPool& send_pool() noexcept { return *send_pool_; }
  [[nodiscard]] const EndpointConfig& config() const noexcept { return cfg_; }

 private:
  std::shared_ptr<const verbs::ProtectionDomain> pd_;
  verbs::CmId id_;
  verbs::CompletionChannel channel_;
  EndpointConfig cfg_;
  std::optional<BufferPool> recv_pool_;
  std::optional<BufferPool> send_pool_;
  std::optional<verbs::MemoryRegion> recv_mr_;
  std::optional<verbs::MemoryRegion> send_mr_;
  verbs::CompletionQueue cq_;
  verbs::QueuePair qp_;
  QpLink link_;
};

}  // namespace rkv::kv::conn
