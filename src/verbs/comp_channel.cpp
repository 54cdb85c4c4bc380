#include "verbs/comp_channel.hpp"

#include <fcntl.h>

#include <cerrno>

#include "verbs/cm_id.hpp"
#include "verbs/detail/handles.hpp"

namespace rkv::verbs {

CompletionChannel::CompletionChannel(const CmId& id) {
  if (!id.has_device()) detail::throw_error("ibv_create_comp_channel (cm_id has no device yet)", ENODEV);
  ibv_comp_channel* ch = ibv_create_comp_channel(id.handle_->id->verbs);
  if (ch == nullptr) detail::throw_error("ibv_create_comp_channel", errno);
  try {
    handle_ = std::make_shared<detail::CompChannelHandle>(ch);
  } catch (...) {
    ibv_destroy_comp_channel(ch);
    throw;
  }
  // take_event() reads when the fd may have nothing (a spurious wakeup, an
  // event a poll pass already served): a blocking fd would hang it.
  const int flags = fcntl(ch->fd, F_GETFL);
  if (flags < 0 || fcntl(ch->fd, F_SETFL, flags | O_NONBLOCK) < 0) {
    detail::throw_error("fcntl(O_NONBLOCK) on completion channel", errno);
  }
}

int CompletionChannel::fd() const noexcept { return handle_->channel->fd; }

}  // namespace rkv::verbs
