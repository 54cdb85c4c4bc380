#pragma once
// Registrar: the one door through which kv code registers memory (ibv_reg_mr)
// for the rendezvous path. Pure logic on top of it (Arena, RegCache, landing
// buffers) is unit-tested with a fake, and every registration is counted here,
// which is what the "registrations" counters report.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "verbs/mr.hpp"

namespace rkv::verbs {
class ProtectionDomain;
}

namespace rkv::kv::conn {

// One registered range; deregistered by the destructor (never throws).
class Registration {
 public:
  virtual ~Registration() = default;
  [[nodiscard]] virtual std::uint32_t lkey() const noexcept = 0;
  [[nodiscard]] virtual std::uint32_t rkey() const noexcept = 0;
  // The address a peer uses for bytes[0] (the virtual address with verbs).
  [[nodiscard]] virtual std::uint64_t addr() const noexcept = 0;
  // The verbs MR behind it (what a memory window over it names); null where
  // there is no device (a fake registrar's).
  [[nodiscard]] virtual const verbs::MemoryRegion* region() const noexcept = 0;
};

class Registrar {
 public:
  virtual ~Registrar() = default;
  // Registers `bytes` with exactly `access`. Throws (verbs::Error,
  // std::bad_alloc) on failure; counted only when it succeeds.
  [[nodiscard]] std::unique_ptr<Registration> register_memory(std::span<std::byte> bytes, verbs::Access access) {
    auto r = do_register(bytes, access);
    ++count_;
    return r;
  }
  [[nodiscard]] std::uint64_t registrations() const noexcept { return count_; }

 protected:
  virtual std::unique_ptr<Registration> do_register(std::span<std::byte> bytes, verbs::Access access) = 0;

 private:
  std::uint64_t count_ = 0;
};

// The production Registrar: verbs::MemoryRegion on a protection domain.
class PdRegistrar final : public Registrar {
 public:
  explicit PdRegistrar(std::shared_ptr<const verbs::ProtectionDomain> pd) noexcept : pd_(std::move(pd)) {}

 protected:
  std::unique_ptr<Registration> do_register(std::span<std::byte> bytes, verbs::Access access) override;

 private:
  std::shared_ptr<const verbs::ProtectionDomain> pd_;
};

}  // namespace rkv::kv::conn
