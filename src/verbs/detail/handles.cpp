#include "verbs/detail/handles.hpp"

#include <spdlog/spdlog.h>

#include <cerrno>
#include <system_error>

#include "verbs/error.hpp"

namespace rkv::verbs::detail {

void log_destroy_failure(const char* call, int err) noexcept {
  try {
    spdlog::error("verbs: {} failed during teardown: {} (resource leaked)", call,
                  std::generic_category().message(err));
  } catch (...) {
    // Logging must not turn a destructor into a throwing one.
  }
}

void throw_error(const char* call, int err) { throw Error(call, err); }

EventChannelHandle::~EventChannelHandle() {
  // Returns void; closing the fd cannot meaningfully fail here.
  if (channel != nullptr) rdma_destroy_event_channel(channel);
}

CmIdHandle::~CmIdHandle() {
  // Does not block: EventChannel::next() acks every event immediately, and
  // rdma_destroy_id only waits for unacked events of this id.
  if (id != nullptr && rdma_destroy_id(id) != 0) log_destroy_failure("rdma_destroy_id", errno);
}

PdHandle::~PdHandle() {
  if (pd == nullptr) return;
  if (int rc = ibv_dealloc_pd(pd); rc != 0) log_destroy_failure("ibv_dealloc_pd", rc);
}

CompChannelHandle::~CompChannelHandle() {
  if (channel == nullptr) return;
  if (int rc = ibv_destroy_comp_channel(channel); rc != 0) {
    log_destroy_failure("ibv_destroy_comp_channel", rc);
  }
}

CqHandle::~CqHandle() {
  if (cq == nullptr) return;
  if (unacked_events != 0) ibv_ack_cq_events(cq, unacked_events);
  if (int rc = ibv_destroy_cq(cq); rc != 0) log_destroy_failure("ibv_destroy_cq", rc);
  if (channel) channel->bound = false;
}

QpHandle::~QpHandle() {
  if (qp == nullptr) return;
  // What rdma_destroy_qp does, minus its ucma_destroy_cqs (a no-op: our CQs
  // are not librdmacm's) and keeping the error code it throws away.
  if (int rc = ibv_destroy_qp(qp); rc != 0) {
    log_destroy_failure("ibv_destroy_qp", rc);
    return;  // leave id->qp set: the QP still exists
  }
  if (id && id->id != nullptr && id->id->qp == qp) id->id->qp = nullptr;
}

}  // namespace rkv::verbs::detail
