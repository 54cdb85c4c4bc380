// QpLink's windows: see link.hpp.
#include "kv/conn/link.hpp"

#include <cerrno>
#include <exception>
#include <new>

#include "verbs/error.hpp"

namespace rkv::kv::conn {

int QpLink::bind_wr(verbs::WrId id, std::uint32_t window, const Registration& reg, std::span<const std::byte> range,
                    bool signaled, verbs::SendWr* wr) noexcept {
  const verbs::MemoryRegion* mr = reg.region();
  if (window >= kMaxWindows || mr == nullptr || wr == nullptr) return EINVAL;
  try {
    if (windows_.empty()) windows_.resize(kMaxWindows);
    if (!windows_[window]) windows_[window].emplace(*pd_);
  } catch (const verbs::Error& e) {
    return e.code().value() != 0 ? e.code().value() : ENOMEM;
  } catch (const std::exception&) {
    return ENOMEM;
  }
  *wr = verbs::SendWr::bind_window(id, *windows_[window], *mr, range, verbs::Access::remote_write);
  wr->signaled = signaled;
  return 0;
}

int QpLink::invalidate_wr(verbs::WrId id, std::uint32_t window, verbs::SendWr* wr) noexcept {
  if (window >= windows_.size() || !windows_[window] || wr == nullptr) return EINVAL;
  *wr = verbs::SendWr::invalidate(id, windows_[window]->rkey());
  return 0;
}

}  // namespace rkv::kv::conn
