#include "verbs/mw.hpp"

#include <cerrno>
#include <utility>

#include "verbs/detail/handles.hpp"
#include "verbs/pd.hpp"

namespace rkv::verbs {

MemoryWindow::MemoryWindow(const ProtectionDomain& pd) : pd_(pd.handle_) {
  mw_ = ibv_alloc_mw(pd_->pd, IBV_MW_TYPE_2);
  if (mw_ == nullptr) detail::throw_error("ibv_alloc_mw (type 2)", errno != 0 ? errno : EOPNOTSUPP);
}

MemoryWindow::MemoryWindow(MemoryWindow&& o) noexcept
    : pd_(std::move(o.pd_)), mw_(std::exchange(o.mw_, nullptr)) {}

MemoryWindow& MemoryWindow::operator=(MemoryWindow&& o) noexcept {
  if (this != &o) {
    reset();
    pd_ = std::move(o.pd_);
    mw_ = std::exchange(o.mw_, nullptr);
  }
  return *this;
}

MemoryWindow::~MemoryWindow() { reset(); }

void MemoryWindow::reset() noexcept {
  if (mw_ != nullptr) {
    if (int rc = ibv_dealloc_mw(mw_); rc != 0) detail::log_destroy_failure("ibv_dealloc_mw", rc);
    mw_ = nullptr;
  }
  pd_.reset();  // after deallocation
}

std::uint32_t MemoryWindow::rkey() const noexcept { return mw_->rkey; }

std::uint32_t MemoryWindow::next_rkey() const noexcept { return ibv_inc_rkey(mw_->rkey); }

}  // namespace rkv::verbs
