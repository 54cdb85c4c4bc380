#pragma once
// FakeRegistrar: a kv::conn::Registrar without a device. Each registration gets
// keys 1000+n (lkey) / 2000+n (rkey) and the virtual address as its remote
// address; live() counts the ones not yet deregistered.
#include <cstdint>
#include <memory>

#include "kv/conn/registrar.hpp"

namespace rkv::test {

class FakeRegistrar final : public kv::conn::Registrar {
 public:
  int live = 0;
  bool fail_next = false;
  verbs::Access last_access = verbs::Access::none;
  std::size_t last_length = 0;

 protected:
  std::unique_ptr<kv::conn::Registration> do_register(std::span<std::byte> bytes, verbs::Access access) override {
    if (fail_next) {
      fail_next = false;
      throw std::bad_alloc();
    }
    last_access = access;
    last_length = bytes.size();
    ++n_;
    return std::make_unique<Reg>(this, n_, reinterpret_cast<std::uint64_t>(bytes.data()));
  }

 private:
  struct Reg final : kv::conn::Registration {
    Reg(FakeRegistrar* o, std::uint32_t n, std::uint64_t a) : owner(o), id(n), address(a) { ++owner->live; }
    ~Reg() override { --owner->live; }
    std::uint32_t lkey() const noexcept override { return 1000 + id; }
    std::uint32_t rkey() const noexcept override { return 2000 + id; }
    std::uint64_t addr() const noexcept override { return address; }
    const verbs::MemoryRegion* region() const noexcept override { return nullptr; }
    FakeRegistrar* owner;
    std::uint32_t id;
    std::uint64_t address;
  };
  std::uint32_t n_ = 0;
};

}  // namespace rkv::test
