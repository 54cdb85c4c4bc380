#pragma once
// verbs::Error: the one exception type of src/verbs. Thrown only on setup and
// control paths (creating objects, connecting); the data path returns status
// values instead (see qp.hpp, cq.hpp).

#include <cerrno>
#include <stdexcept>
#include <string>
#include <system_error>

namespace rkv::verbs {

class Error : public std::system_error {
 public:
  // what() reads "<call>: <errno text>", e.g. "ibv_reg_mr: Invalid argument".
  Error(const std::string& call, int err)
      : std::system_error(err, std::generic_category(), call) {}
};

// No RDMA device at all: librdmacm found none it can use (ENODEV from its
// device scan: no RDMA NIC, no Soft-RoCE device, no provider library, or no
// /dev/infiniband). Decided in one place, EventChannel's constructor (the
// first verbs call of every server and client); what() says so and how to get
// a device, the code stays ENODEV. Nothing is logged here: the caller prints
// what() once (the tools) or hands it on (kv_last_error).
class NoDevice : public Error {
 public:
  explicit NoDevice(const std::string& call)
      : Error(call, ENODEV),
        text_("no RDMA device found (" + call +
              ": No such device; `ibv_devices` lists none). Run where one exists: in the source tree, "
              "`scripts/softroce run CMD [ARGS...]` runs CMD in a Soft-RoCE environment it sets up; or add a "
              "Soft-RoCE device: `modprobe rdma_rxe && rdma link add rxe0 type rxe netdev IFACE`") {}
  [[nodiscard]] const char* what() const noexcept override { return text_.what(); }

 private:
  std::runtime_error text_;  // copying an exception must not throw: a shared, immutable string
};

}  // namespace rkv::verbs
