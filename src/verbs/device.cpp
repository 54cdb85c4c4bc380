#include "verbs/device.hpp"

#include <fcntl.h>
#include <infiniband/verbs.h>

#include <cerrno>

#include "verbs/detail/handles.hpp"
#include "verbs/pd.hpp"

namespace rkv::verbs {

std::vector<std::string> list_devices() {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (list == nullptr) detail::throw_error("ibv_get_device_list", errno);
  std::vector<std::string> names;
  try {
    for (int i = 0; i < n; ++i) names.emplace_back(ibv_get_device_name(list[i]));
  } catch (...) {
    ibv_free_device_list(list);
    throw;
  }
  ibv_free_device_list(list);
  return names;
}

std::string_view to_string(DeviceEventType t) noexcept {
  switch (t) {
    case DeviceEventType::port_active: return "port_active";
    case DeviceEventType::port_error: return "port_error";
    case DeviceEventType::device_fatal: return "device_fatal";
    case DeviceEventType::other: return "other";
  }
  return "invalid";
}

DeviceEvents::DeviceEvents(const ProtectionDomain& pd) : pd_(pd.handle_) {
  const int fd = pd_->pd->context->async_fd;
  const int flags = fcntl(fd, F_GETFL);
  if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) {
    detail::throw_error("fcntl(O_NONBLOCK) on the device's async event fd", errno);
  }
}

int DeviceEvents::fd() const noexcept { return pd_->pd->context->async_fd; }

std::optional<DeviceEvent> DeviceEvents::take() noexcept {
  ibv_async_event e{};
  if (ibv_get_async_event(pd_->pd->context, &e) != 0) return std::nullopt;  // EAGAIN: none pending
  DeviceEvent out{DeviceEventType::other, 0, ibv_event_type_str(e.event_type)};
  switch (e.event_type) {
    case IBV_EVENT_PORT_ACTIVE:
      out = {DeviceEventType::port_active, static_cast<std::uint32_t>(e.element.port_num), out.name};
      break;
    case IBV_EVENT_PORT_ERR:
      out = {DeviceEventType::port_error, static_cast<std::uint32_t>(e.element.port_num), out.name};
      break;
    case IBV_EVENT_DEVICE_FATAL:
      out.type = DeviceEventType::device_fatal;
      break;
    default:
      break;
  }
  ibv_ack_async_event(&e);
  return out;
}

}  // namespace rkv::verbs
