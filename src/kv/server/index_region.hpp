#pragma once
// IndexRegion: the memory of kvd's one-sided GET index (docs/protocol.md,
// "One-sided GET"): proto::index_region_bytes(buckets) bytes rounded up to
// whole pages, mmap'd (page-aligned, zeroed), registered through the
// Registrar with remote_read ONLY (the server writes it with the CPU; no
// peer may write it), and the ReadableIndex that writes into it. Lives as
// long as the Server; a client's READ of it is valid the whole time.
// Reactor thread only.

#include <cstddef>
#include <cstdint>
#include <memory>

#include "kv/store/readable_index.hpp"
#include "kv/conn/registrar.hpp"

namespace rkv::kv::server {

using store::ReadableIndex;
using conn::Registrar;
using conn::Registration;

class IndexRegion {
 public:
  // Throws std::invalid_argument (bad bucket count), std::bad_alloc, or the
  // registrar's error.
  IndexRegion(Registrar& registrar, std::uint32_t buckets);
  IndexRegion(const IndexRegion&) = delete;
  IndexRegion& operator=(const IndexRegion&) = delete;
  IndexRegion(IndexRegion&&) = delete;
  IndexRegion& operator=(IndexRegion&&) = delete;
  ~IndexRegion();  // deregisters, then unmaps

  [[nodiscard]] ReadableIndex& index() noexcept { return *index_; }
  [[nodiscard]] const ReadableIndex& index() const noexcept { return *index_; }
  [[nodiscard]] std::uint64_t addr() const noexcept { return reg_->addr(); }
  [[nodiscard]] std::uint32_t rkey() const noexcept { return reg_->rkey(); }
  [[nodiscard]] std::size_t bytes() const noexcept { return size_; }

 private:
  void* base_ = nullptr;
  std::size_t size_ = 0;
  std::unique_ptr<Registration> reg_;
  std::unique_ptr<ReadableIndex> index_;
};

}  // namespace rkv::kv::server
