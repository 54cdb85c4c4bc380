#pragma once
// The RDMA device: discovery (list_devices, for diagnostics and test
// preconditions) and its asynchronous events (DeviceEvents).
//
// DeviceEvents: the asynchronous events of the device a ProtectionDomain is
// on (ibv_get_async_event on its context's async fd, made non-blocking):
// a port going down or up, the device failing. take() acknowledges each
// event as it takes it, so nothing is left unacknowledged for a destroy to
// wait on. Events of one QP, CQ or SRQ (their errors also reach their owners
// as completions or cm events) come out as `other`, with their name.
// Thread: its owner's.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace rkv::verbs {

// Names of the RDMA devices visible to this process (e.g. "rxe0"); empty if
// there are none. Throws verbs::Error if the kernel has no RDMA support.
std::vector<std::string> list_devices();

namespace detail {
struct PdHandle;
}
class ProtectionDomain;

enum class DeviceEventType : std::uint8_t {
  port_active,   // a port came up (IBV_EVENT_PORT_ACTIVE)
  port_error,    // a port went down (IBV_EVENT_PORT_ERR): nothing moves through it
  device_fatal,  // the device failed (IBV_EVENT_DEVICE_FATAL): everything on it is lost
  other,         // any other event (QP, CQ, SRQ, LID, GID, pkey, ...)
};
[[nodiscard]] std::string_view to_string(DeviceEventType t) noexcept;

struct DeviceEvent {
  DeviceEventType type;
  std::uint32_t port = 0;  // port_active / port_error; else 0
  std::string_view name;   // the verbs name of the event (ibv_event_type_str)
};

class DeviceEvents {
 public:
  // Throws verbs::Error if the fd cannot be made non-blocking.
  explicit DeviceEvents(const ProtectionDomain& pd);

  DeviceEvents(DeviceEvents&&) noexcept = default;
  DeviceEvents& operator=(DeviceEvents&&) noexcept = default;
  DeviceEvents(const DeviceEvents&) = delete;
  DeviceEvents& operator=(const DeviceEvents&) = delete;
  ~DeviceEvents() = default;

  // Readable => take() until it returns nullopt.
  [[nodiscard]] int fd() const noexcept;
  // The next pending event, acknowledged; nullopt if none is pending.
  [[nodiscard]] std::optional<DeviceEvent> take() noexcept;

 private:
  std::shared_ptr<detail::PdHandle> pd_;  // keeps the device's context in use
};

}  // namespace rkv::verbs
