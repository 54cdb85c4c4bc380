// The process-wide meter of copy_bytes (copy.hpp).
#include "proto/copy.hpp"

namespace rkv::proto::detail {

std::atomic<std::uint64_t> copied_bytes{0};

}  // namespace rkv::proto::detail
