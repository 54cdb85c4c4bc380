#pragma once
// Device discovery, for diagnostics and test preconditions.

#include <string>
#include <vector>

namespace rkv::verbs {

// Names of the RDMA devices visible to this process (e.g. "rxe0"); empty if
// there are none. Throws verbs::Error if the kernel has no RDMA support.
std::vector<std::string> list_devices();

}  // namespace rkv::verbs
