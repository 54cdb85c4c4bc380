// QpLink's windows: see link.hpp.
#include "kv/conn/link.hpp"

#include <cerrno>
#include <exception>
#include <new>

#include "verbs/error.hpp"

namespace rkv::kv::conn {

int QpLink::post_bind(verbs::WrId id, std::uint32_t window, const Registration& reg, std::span<const std::byte> range,
                      bool signaled, std::uint32_t* rkey) noexcept {
  const verbs::MemoryRegion* mr = reg.region();
  if (window >= kMaxWindows || mr == nullptr) return EINVAL;
  try {
    if (windows_.size() <= window) windows_.resize(window + 1);
    if (!windows_[window]) windows_[window].emplace(*pd_);
  } catch (const verbs::Error& e) {
    return e.code().value() != 0 ? e.code().value() : ENOMEM;
  } catch (const std::exception&) {
    return ENOMEM;
  }
  const verbs::MemoryWindow& w = *windows_[window];
  verbs::SendWr wr = verbs::SendWr::bind_window(id, w, *mr, range, verbs::Access::remote_write);
  wr.signaled = signaled;
  const int rc = post(wr);
  if (rc == 0 && rkey != nullptr) *rkey = w.rkey();  // post_chain advanced it
  return rc;
}

int QpLink::post_invalidate(verbs::WrId id, std::uint32_t window) noexcept {
  if (window >= windows_.size() || !windows_[window]) return EINVAL;
  return post(verbs::SendWr::invalidate(id, windows_[window]->rkey()));
}

}  // namespace rkv::kv::conn
