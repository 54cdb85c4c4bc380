#pragma once
// INTERNAL to src/verbs (included by its .cpp files only): the shared handle
// behind each public RAII type.
//
// Each public type (EventChannel, CmId, ...) is move-only and owns a
// std::shared_ptr to one of these. A handle keeps shared_ptrs to the handles
// it depends on, declared before the raw pointer, and its destructor destroys
// the raw object first; the members (parents) are released afterwards. So
// the verbs destruction order QP -> CQ -> MR -> PD -> channel holds whatever
// order the owner drops its objects in: a parent is destroyed only when its
// last dependent is gone.
//
// Note on the device context: PDs and completion channels are created on the
// cm_id's ibv_context, which librdmacm owns and keeps open for the life of
// the process (it only closes a context after DEVICE_REMOVAL once no cm_id
// references it). So nothing here pins the context; after device_removal an
// owner must tear down everything on that device.

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <cstdint>
#include <memory>

namespace rkv::verbs {
enum class Access : std::uint8_t;  // mr.hpp
}

namespace rkv::verbs::detail {

// Access flags as IBV_ACCESS_* bits (mr.cpp).
int to_ibv_access(Access a) noexcept;

// Log a failed destroy/dealloc call once; never throws (used in destructors).
void log_destroy_failure(const char* call, int err) noexcept;
// Throw verbs::Error for a failed setup call.
[[noreturn]] void throw_error(const char* call, int err);

struct EventChannelHandle {
  rdma_event_channel* channel = nullptr;
  explicit EventChannelHandle(rdma_event_channel* c) noexcept : channel(c) {}
  ~EventChannelHandle();
  EventChannelHandle(const EventChannelHandle&) = delete;
  EventChannelHandle& operator=(const EventChannelHandle&) = delete;
};

struct CmIdHandle {
  std::shared_ptr<EventChannelHandle> channel;  // events for this id arrive there
  rdma_cm_id* id = nullptr;
  CmIdHandle(std::shared_ptr<EventChannelHandle> c, rdma_cm_id* i) noexcept
      : channel(std::move(c)), id(i) {}
  ~CmIdHandle();
  CmIdHandle(const CmIdHandle&) = delete;
  CmIdHandle& operator=(const CmIdHandle&) = delete;
};

struct PdHandle {
  ibv_pd* pd = nullptr;
  explicit PdHandle(ibv_pd* p) noexcept : pd(p) {}
  ~PdHandle();
  PdHandle(const PdHandle&) = delete;
  PdHandle& operator=(const PdHandle&) = delete;
};

struct CompChannelHandle {
  ibv_comp_channel* channel = nullptr;
  bool bound = false;  // one CQ per channel, see cq.hpp
  explicit CompChannelHandle(ibv_comp_channel* c) noexcept : channel(c) {}
  ~CompChannelHandle();
  CompChannelHandle(const CompChannelHandle&) = delete;
  CompChannelHandle& operator=(const CompChannelHandle&) = delete;
};

struct CqHandle {
  std::shared_ptr<CompChannelHandle> channel;
  ibv_cq* cq = nullptr;
  // Events taken with ibv_get_cq_event but not yet acked. Lives here, not in
  // CompletionQueue, because ibv_destroy_cq blocks forever on unacked events
  // and the last owner of the handle (maybe a QP) is the one destroying it.
  unsigned unacked_events = 0;
  // Armed with ibv_req_notify_cq and its event not yet taken. An armed CQ
  // raises at most one event, so false means: no event can be pending.
  bool armed = false;
  CqHandle(std::shared_ptr<CompChannelHandle> ch, ibv_cq* c) noexcept
      : channel(std::move(ch)), cq(c) {}
  ~CqHandle();
  CqHandle(const CqHandle&) = delete;
  CqHandle& operator=(const CqHandle&) = delete;
};

struct QpHandle {
  std::shared_ptr<CmIdHandle> id;  // rdma_create_qp attached the QP to it
  std::shared_ptr<PdHandle> pd;
  std::shared_ptr<CqHandle> send_cq;
  std::shared_ptr<CqHandle> recv_cq;
  ibv_qp* qp = nullptr;
  QpHandle(std::shared_ptr<CmIdHandle> i, std::shared_ptr<PdHandle> p,
           std::shared_ptr<CqHandle> s, std::shared_ptr<CqHandle> r, ibv_qp* q) noexcept
      : id(std::move(i)), pd(std::move(p)), send_cq(std::move(s)), recv_cq(std::move(r)), qp(q) {}
  ~QpHandle();
  QpHandle(const QpHandle&) = delete;
  QpHandle& operator=(const QpHandle&) = delete;
};

}  // namespace rkv::verbs::detail
