#include "verbs/pd.hpp"

#include <cerrno>

#include "verbs/cm_id.hpp"
#include "verbs/detail/handles.hpp"

namespace rkv::verbs {

ProtectionDomain::ProtectionDomain(const CmId& id) {
  if (!id.has_device()) detail::throw_error("ibv_alloc_pd (cm_id has no device yet)", ENODEV);
  ibv_pd* pd = ibv_alloc_pd(id.handle_->id->verbs);
  if (pd == nullptr) detail::throw_error("ibv_alloc_pd", errno);
  try {
    handle_ = std::make_shared<detail::PdHandle>(pd);
  } catch (...) {
    ibv_dealloc_pd(pd);
    throw;
  }
}

}  // namespace rkv::verbs
