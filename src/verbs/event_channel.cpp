#include "verbs/event_channel.hpp"

#include <fcntl.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "verbs/detail/addr.hpp"
#include "verbs/detail/handles.hpp"
#include "verbs/error.hpp"

namespace rkv::verbs {

namespace {

CmEventType map_type(rdma_cm_event_type t) noexcept {
  switch (t) {
    case RDMA_CM_EVENT_ADDR_RESOLVED: return CmEventType::addr_resolved;
    case RDMA_CM_EVENT_ROUTE_RESOLVED: return CmEventType::route_resolved;
    case RDMA_CM_EVENT_CONNECT_REQUEST: return CmEventType::connect_request;
    case RDMA_CM_EVENT_ESTABLISHED: return CmEventType::established;
    case RDMA_CM_EVENT_REJECTED: return CmEventType::rejected;
    case RDMA_CM_EVENT_DISCONNECTED: return CmEventType::disconnected;
    case RDMA_CM_EVENT_UNREACHABLE: return CmEventType::unreachable;
    case RDMA_CM_EVENT_CONNECT_ERROR: return CmEventType::connect_error;
    case RDMA_CM_EVENT_ADDR_ERROR: return CmEventType::addr_error;
    case RDMA_CM_EVENT_ROUTE_ERROR: return CmEventType::route_error;
    case RDMA_CM_EVENT_DEVICE_REMOVAL: return CmEventType::device_removal;
    case RDMA_CM_EVENT_TIMEWAIT_EXIT: return CmEventType::timewait_exit;
    default: return CmEventType::other;
  }
}

std::uint64_t token_of(const rdma_cm_id* id) noexcept {
  return id == nullptr ? 0 : static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(id->context));
}

// Acks on every exit path, including a throw while copying out.
struct AckGuard {
  explicit AckGuard(rdma_cm_event* e) noexcept : event(e) {}
  ~AckGuard() { rdma_ack_cm_event(event); }
  rdma_cm_event* event;
  AckGuard(const AckGuard&) = delete;
  AckGuard& operator=(const AckGuard&) = delete;
};

}  // namespace

EventChannel::EventChannel() {
  rdma_event_channel* ch = rdma_create_event_channel();
  if (ch == nullptr) {
    // The first verbs call of every server and client: ENODEV here means
    // librdmacm found no RDMA device at all (see verbs::NoDevice).
    if (errno == ENODEV) throw NoDevice("rdma_create_event_channel");
    detail::throw_error("rdma_create_event_channel", errno);
  }
  try {
    handle_ = std::make_shared<detail::EventChannelHandle>(ch);
  } catch (...) {
    rdma_destroy_event_channel(ch);
    throw;
  }
  // Non-blocking so next() can be driven from an event loop.
  const int flags = fcntl(ch->fd, F_GETFL);
  if (flags < 0 || fcntl(ch->fd, F_SETFL, flags | O_NONBLOCK) < 0) {
    detail::throw_error("fcntl(O_NONBLOCK) on rdma event channel", errno);
  }
}

int EventChannel::fd() const noexcept { return handle_->channel->fd; }

std::optional<CmEvent> EventChannel::next() {
  rdma_cm_event* ev = nullptr;
  if (rdma_get_cm_event(handle_->channel, &ev) != 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK) return std::nullopt;
    detail::throw_error("rdma_get_cm_event", errno);
  }

  // Wrap the new connection's id first, so it is owned (and destroyed on a
  // throw) before anything else can fail.
  std::optional<CmId> new_id;
  if (ev->event == RDMA_CM_EVENT_CONNECT_REQUEST) {
    try {
      new_id.emplace(CmId(std::make_shared<detail::CmIdHandle>(handle_, ev->id)));
    } catch (...) {
      rdma_destroy_id(ev->id);
      rdma_ack_cm_event(ev);
      throw;
    }
  }
  AckGuard ack(ev);

  CmEvent out;
  out.type = map_type(ev->event);
  out.raw_type = static_cast<int>(ev->event);
  out.status = ev->status;
  out.token = token_of(ev->event == RDMA_CM_EVENT_CONNECT_REQUEST ? ev->listen_id : ev->id);
  // param.conn is the member for RC ids (param.ud is for UD/multicast).
  const rdma_conn_param& conn = ev->param.conn;
  out.peer_initiator_depth = conn.initiator_depth;
  out.peer_responder_resources = conn.responder_resources;
  if (conn.private_data != nullptr && conn.private_data_len > 0) {
    out.private_data_len = std::min<std::size_t>(conn.private_data_len, CmEvent::kMaxPrivateData);
    std::memcpy(out.private_data_buf.data(), conn.private_data, out.private_data_len);
  }
  if (ev->id != nullptr) out.peer_address = detail::format_address(rdma_get_peer_addr(ev->id));
  out.new_id = std::move(new_id);

  SPDLOG_DEBUG("verbs: cm event {} ({}) status={} token={} peer={}", to_string(out.type),
               rdma_event_str(ev->event), out.status, out.token, out.peer_address);
  return out;
}

}  // namespace rkv::verbs
