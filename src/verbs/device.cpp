#include "verbs/device.hpp"

#include <infiniband/verbs.h>

#include <cerrno>

#include "verbs/detail/handles.hpp"

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

}  // namespace rkv::verbs
