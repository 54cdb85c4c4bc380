#pragma once
// EventChannel: an rdma_event_channel with a non-blocking fd, and CmEvent,
// the copied-out, already-acked form of an rdma_cm_event.
//
// Usage: register fd() with poll/epoll/the reactor; when readable, call
// next() until it returns nullopt.

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "verbs/cm_id.hpp"

namespace rkv::verbs {

namespace detail {
struct EventChannelHandle;
}

enum class CmEventType : std::uint8_t {
  addr_resolved,
  route_resolved,
  connect_request,
  established,
  rejected,
  disconnected,
  unreachable,
  connect_error,
  addr_error,
  route_error,
  device_removal,
  timewait_exit,
  other,  // multicast, addr_change, connect_response (we always have a QP)
};

constexpr std::string_view to_string(CmEventType t) noexcept {
  switch (t) {
    case CmEventType::addr_resolved: return "addr_resolved";
    case CmEventType::route_resolved: return "route_resolved";
    case CmEventType::connect_request: return "connect_request";
    case CmEventType::established: return "established";
    case CmEventType::rejected: return "rejected";
    case CmEventType::disconnected: return "disconnected";
    case CmEventType::unreachable: return "unreachable";
    case CmEventType::connect_error: return "connect_error";
    case CmEventType::addr_error: return "addr_error";
    case CmEventType::route_error: return "route_error";
    case CmEventType::device_removal: return "device_removal";
    case CmEventType::timewait_exit: return "timewait_exit";
    case CmEventType::other: return "other";
  }
  return "invalid";
}

struct CmEvent {
  // librdmacm's own buffer size (RDMA_MAX_PRIVATE_DATA): copying never truncates.
  static constexpr std::size_t kMaxPrivateData = 256;
  // The reject reason the peer's connection manager answers a REQ with when
  // nothing listens on its port (IBTA CM REJ reason 8, "invalid service ID";
  // the kernel's IB_CM_REJ_INVALID_SERVICE_ID, not in rdma-core's headers).
  // An application's own rdma_reject(), or an id destroyed before it
  // accepted, answers "consumer defined" (28) instead.
  static constexpr int kRejectNoListener = 8;

  CmEventType type = CmEventType::other;
  int raw_type = 0;  // rdma_cm_event_type, for logs
  int status = 0;    // 0, a negative errno, or a transport reject reason (rejected)
  // Token of the cm_id the event belongs to. For connect_request it is the
  // LISTENER's token (the new connection's id is in new_id).
  std::uint64_t token = 0;
  // Peer's values, for connect_request/established (what it asked for).
  std::uint8_t peer_initiator_depth = 0;
  std::uint8_t peer_responder_resources = 0;
  // connect_request only: the new connection. Dropping it without accept()
  // destroys the id, which rejects the request.
  std::optional<CmId> new_id;
  std::string peer_address;  // "ip:port", for logs

  // Pitfall: on IB/RoCE the CM message has a fixed-size private-data field,
  // so the length reported here is that field's size (e.g. 56 for a
  // connect_request), not what the peer passed. Encode your own length.
  [[nodiscard]] std::span<const std::byte> private_data() const noexcept {
    return {private_data_buf.data(), private_data_len};
  }
  std::array<std::byte, kMaxPrivateData> private_data_buf{};
  std::size_t private_data_len = 0;

  // A connect refused by the peer's node because nothing listens on the
  // port there (not by an application, not a timeout).
  [[nodiscard]] bool no_listener() const noexcept {
    return type == CmEventType::rejected && status == kRejectNoListener;
  }
};

class EventChannel {
 public:
  // rdma_create_event_channel + O_NONBLOCK; throws verbs::Error (verbs::NoDevice:
  // no RDMA device at all, error.hpp)
  EventChannel();

  EventChannel(EventChannel&&) noexcept = default;
  EventChannel& operator=(EventChannel&&) noexcept = default;
  EventChannel(const EventChannel&) = delete;
  EventChannel& operator=(const EventChannel&) = delete;
  // The channel itself is destroyed once the last CmId created on it is gone.
  ~EventChannel() = default;

  [[nodiscard]] int fd() const noexcept;

  // Next event, copied out and acked at once (so rdma_destroy_id never waits
  // on us); nullopt when none is pending (EAGAIN). Throws verbs::Error on any
  // other failure.
  std::optional<CmEvent> next();

 private:
  friend class CmId;  // rdma_create_id on this channel
  std::shared_ptr<detail::EventChannelHandle> handle_;
};

}  // namespace rkv::verbs
