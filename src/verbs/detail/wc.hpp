#pragma once
// INTERNAL: ibv_wc -> Completion.
#include <infiniband/verbs.h>

#include "verbs/completion.hpp"

namespace rkv::verbs::detail {

Completion to_completion(const ibv_wc& wc) noexcept;

}  // namespace rkv::verbs::detail
