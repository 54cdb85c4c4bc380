#include "kv/conn/registrar.hpp"

#include "verbs/pd.hpp"

namespace rkv::kv::conn {

namespace {
class MrRegistration final : public Registration {
 public:
  MrRegistration(const verbs::ProtectionDomain& pd, std::span<std::byte> bytes, verbs::Access access)
      : mr_(pd, bytes, access) {}
  [[nodiscard]] std::uint32_t lkey() const noexcept override { return mr_.lkey(); }
  [[nodiscard]] std::uint32_t rkey() const noexcept override { return mr_.rkey(); }
  [[nodiscard]] std::uint64_t addr() const noexcept override { return mr_.addr(); }
  [[nodiscard]] const verbs::MemoryRegion* region() const noexcept override { return &mr_; }

 private:
  verbs::MemoryRegion mr_;
};
}  // namespace

std::unique_ptr<Registration> PdRegistrar::do_register(std::span<std::byte> bytes, verbs::Access access) {
  return std::make_unique<MrRegistration>(*pd_, bytes, access);
}

}  // namespace rkv::kv::conn
