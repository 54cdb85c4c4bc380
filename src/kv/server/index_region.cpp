// IndexRegion: see index_region.hpp.
#include "kv/server/index_region.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <new>

namespace rkv::kv::server {

using store::ReadableIndex;
using conn::Registrar;

IndexRegion::IndexRegion(Registrar& registrar, std::uint32_t buckets) {
  // Validates the count before mapping anything (throws).
  const std::size_t want = proto::index_region_bytes(buckets);
  const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  size_ = (want + page - 1) / page * page;
  void* p = ::mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  base_ = p;
  try {
    const std::span<std::byte> region(static_cast<std::byte*>(p), size_);
    index_ = std::make_unique<ReadableIndex>(region, buckets);
    reg_ = registrar.register_memory(region, verbs::Access::remote_read);  // least privilege: READ only
  } catch (...) {
    index_.reset();
    ::munmap(base_, size_);
    throw;
  }
}

IndexRegion::~IndexRegion() {
  reg_.reset();  // deregister before unmapping
  index_.reset();
  if (base_ != nullptr) ::munmap(base_, size_);
}

}  // namespace rkv::kv::server
