// LandingBuffer: see landing.hpp.
#include "kv/client/landing.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <new>

namespace rkv::kv::client {

using conn::Registrar;

namespace {
struct Header {
  std::uint64_t magic;
  LandingBuffer* owner;
};
static_assert(sizeof(Header) <= kValueHeader);
}  // namespace

LandingBuffer::LandingBuffer(void* base, std::size_t map_size, std::size_t capacity) noexcept
    : base_(base), map_size_(map_size), data_(static_cast<std::byte*>(base) + kValueHeader), capacity_(capacity) {
  const Header h{kLandingMagic, this};
  std::memcpy(base, &h, sizeof h);
}

std::unique_ptr<LandingBuffer> LandingBuffer::create(Registrar& registrar, std::size_t capacity) {
  if (capacity == 0 || capacity > (std::size_t{1} << 40)) throw std::bad_alloc();
  const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  const std::size_t map_size = (kValueHeader + capacity + page - 1) / page * page;
  void* base = ::mmap(nullptr, map_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED) throw std::bad_alloc();
  std::unique_ptr<LandingBuffer> lb(new (std::nothrow) LandingBuffer(base, map_size, capacity));
  if (!lb) {
    ::munmap(base, map_size);
    throw std::bad_alloc();
  }
  lb->reg_ = registrar.register_memory(lb->data(), verbs::Access::local_write | verbs::Access::remote_write);
  return lb;
}

LandingBuffer::~LandingBuffer() {
  reg_.reset();  // no DMA can reach the pages after this
  Header h{};
  std::memcpy(base_, &h, sizeof h);
  ::munmap(base_, map_size_);
}

LandingBuffer* LandingBuffer::from_data(const void* p) noexcept {
  if (p == nullptr) return nullptr;
  Header h{};
  std::memcpy(&h, static_cast<const std::byte*>(p) - kValueHeader, sizeof h);
  if (h.magic != kLandingMagic || h.owner == nullptr || h.owner->data_ != p) return nullptr;
  return h.owner;
}

}  // namespace rkv::kv::client
