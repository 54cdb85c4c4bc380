#pragma once
// verbs::Error: the one exception type of src/verbs. Thrown only on setup and
// control paths (creating objects, connecting); the data path returns status
// values instead (see qp.hpp, cq.hpp).

#include <string>
#include <system_error>

namespace rkv::verbs {

class Error : public std::system_error {
 public:
  // what() reads "<call>: <errno text>", e.g. "ibv_reg_mr: Invalid argument".
  Error(const std::string& call, int err)
      : std::system_error(err, std::generic_category(), call) {}
};

}  // namespace rkv::verbs
