#include "reactor/handle.hpp"

#include <cassert>

#include "reactor/reactor.hpp"

namespace rkv::reactor {
namespace detail {

template <HandleKind Kind>
Handle<Kind>::Handle(Reactor* reactor, SlotKey key) noexcept : reactor_(reactor), key_(key) {
  reactor_->retain();
}

template <HandleKind Kind>
void Handle<Kind>::reset() noexcept {
  // Clear first: release() may run destructors that touch this handle again.
  if (Reactor* r = std::exchange(reactor_, nullptr)) r->release(Kind, key_);
}

template class Handle<HandleKind::kWatch>;
template class Handle<HandleKind::kTimer>;
template class Handle<HandleKind::kPoller>;

}  // namespace detail

void Poller::wake() noexcept {
  if (reactor() != nullptr) reactor()->wake_pollers();
}

void Registration::modify(std::uint32_t events) {
  assert(reactor() != nullptr && "Registration::modify on an empty handle");
  if (reactor() != nullptr) reactor()->modify_watch(key(), events);
}

int Registration::fd() const noexcept {
  const auto* w = reactor() != nullptr ? reactor()->find_watch(key()) : nullptr;
  return w != nullptr ? w->fd : -1;
}

std::uint32_t Registration::events() const noexcept {
  const auto* w = reactor() != nullptr ? reactor()->find_watch(key()) : nullptr;
  return w != nullptr ? w->events : 0;
}

bool Timer::pending() const noexcept {
  return reactor() != nullptr && reactor()->timer_pending(key());
}

}  // namespace rkv::reactor
