#include "kv/conn/endpoint.hpp"

#include <utility>

namespace rkv::kv::conn {

namespace {
verbs::QpCaps caps_for(const EndpointConfig& cfg) {
  verbs::QpCaps caps;
  caps.max_send_wr = cfg.send_count + cfg.rdma_depth;
  caps.max_recv_wr = cfg.recv_count;
  caps.max_send_sge = 2;  // one-sided GET: a READ scattered into value + key
  caps.max_recv_sge = 1;
  return caps;
}
}  // namespace

Endpoint::Endpoint(verbs::CmId id, std::shared_ptr<const verbs::ProtectionDomain> pd, const EndpointConfig& cfg)
    : pd_(std::move(pd)),
      id_(std::move(id)),
      channel_(id_),
      cfg_(cfg),
      // Every WR on this QP can complete at once: size the CQ for all of them.
      cq_(channel_, static_cast<int>(cfg.recv_count + cfg.send_count + cfg.rdma_depth)),
      qp_(id_, *pd_, cq_, cq_, caps_for(cfg)),
      link_(qp_, pd_) {
  if (!cfg.own_buffers) return;
  recv_pool_.emplace(cfg.recv_count, cfg.recv_size);
  send_pool_.emplace(cfg.send_count, cfg.send_size);
  recv_mr_.emplace(*pd_, recv_pool_->bytes(), verbs::Access::local_write);  // RECV target
  send_mr_.emplace(*pd_, send_pool_->bytes(), verbs::Access::none);         // SEND source: local read only
  recv_pool_->set_lkey(recv_mr_->lkey());
  send_pool_->set_lkey(send_mr_->lkey());
}

}  // namespace rkv::kv::conn
