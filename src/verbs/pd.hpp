#pragma once
// ProtectionDomain: ibv_alloc_pd on a cm_id's device. MRs and QPs created
// from it keep it alive (it is deallocated after the last of them).

#include <memory>

namespace rkv::verbs {

namespace detail {
struct PdHandle;
}
class CmId;

class ProtectionDomain {
 public:
  // `id` must be bound/resolved to a device (after bind(), addr_resolved, or
  // from a connect_request); throws verbs::Error(ENODEV) otherwise. One PD
  // can serve every cm_id on the same device.
  explicit ProtectionDomain(const CmId& id);

  ProtectionDomain(ProtectionDomain&&) noexcept = default;
  ProtectionDomain& operator=(ProtectionDomain&&) noexcept = default;
  ProtectionDomain(const ProtectionDomain&) = delete;
  ProtectionDomain& operator=(const ProtectionDomain&) = delete;
  ~ProtectionDomain() = default;

  [[nodiscard]] bool valid() const noexcept { return handle_ != nullptr; }

 private:
  friend class MemoryRegion;
  friend class MemoryWindow;
  friend class QueuePair;
  friend class DeviceEvents;
  std::shared_ptr<detail::PdHandle> handle_;
};

}  // namespace rkv::verbs
