#include "verbs/mr.hpp"

#include <cerrno>
#include <utility>

#include "verbs/detail/handles.hpp"
#include "verbs/pd.hpp"

namespace rkv::verbs {

int detail::to_ibv_access(Access a) noexcept {
  int flags = 0;
  if (has(a, Access::local_write)) flags |= IBV_ACCESS_LOCAL_WRITE;
  if (has(a, Access::remote_read)) flags |= IBV_ACCESS_REMOTE_READ;
  if (has(a, Access::remote_write)) flags |= IBV_ACCESS_REMOTE_WRITE;
  if (has(a, Access::mw_bind)) flags |= IBV_ACCESS_MW_BIND;
  return flags;
}

std::string to_string(Access a) {
  std::string s;
  auto add = [&](Access f, const char* name) {
    if (!has(a, f)) return;
    if (!s.empty()) s += '|';
    s += name;
  };
  add(Access::local_write, "local_write");
  add(Access::remote_read, "remote_read");
  add(Access::remote_write, "remote_write");
  add(Access::mw_bind, "mw_bind");
  return s.empty() ? "none" : s;
}

MemoryRegion::MemoryRegion(const ProtectionDomain& pd, std::span<std::byte> buffer, Access access)
    : pd_(pd.handle_), buffer_(buffer), access_(access) {
  if (has(access, Access::remote_write) && !has(access, Access::local_write)) {
    detail::throw_error("ibv_reg_mr (remote_write requires local_write)", EINVAL);
  }
  mr_ = ibv_reg_mr(pd_->pd, buffer.data(), buffer.size(), detail::to_ibv_access(access));
  if (mr_ == nullptr) detail::throw_error("ibv_reg_mr", errno);
}

MemoryRegion::MemoryRegion(MemoryRegion&& o) noexcept
    : pd_(std::move(o.pd_)),
      mr_(std::exchange(o.mr_, nullptr)),
      buffer_(std::exchange(o.buffer_, {})),
      access_(std::exchange(o.access_, Access::none)) {}

MemoryRegion& MemoryRegion::operator=(MemoryRegion&& o) noexcept {
  if (this != &o) {
    reset();
    pd_ = std::move(o.pd_);
    mr_ = std::exchange(o.mr_, nullptr);
    buffer_ = std::exchange(o.buffer_, {});
    access_ = std::exchange(o.access_, Access::none);
  }
  return *this;
}

MemoryRegion::~MemoryRegion() { reset(); }

void MemoryRegion::reset() noexcept {
  if (mr_ != nullptr) {
    if (int rc = ibv_dereg_mr(mr_); rc != 0) detail::log_destroy_failure("ibv_dereg_mr", rc);
    mr_ = nullptr;
  }
  pd_.reset();  // after deregistration
}

std::uint32_t MemoryRegion::lkey() const noexcept { return mr_->lkey; }
std::uint32_t MemoryRegion::rkey() const noexcept { return mr_->rkey; }
std::uint64_t MemoryRegion::addr() const noexcept { return reinterpret_cast<std::uintptr_t>(mr_->addr); }

}  // namespace rkv::verbs
