#pragma once
// CompletionChannel: an ibv_comp_channel with a non-blocking fd. Exactly one
// CompletionQueue may be bound to it, so that its take_event() owns every
// event the fd reports (a shared channel would hand one CQ's events to
// another CQ).

#include <memory>

namespace rkv::verbs {

namespace detail {
struct CompChannelHandle;
}
class CmId;

class CompletionChannel {
 public:
  // On the device of `id` (see ProtectionDomain for the precondition).
  explicit CompletionChannel(const CmId& id);

  CompletionChannel(CompletionChannel&&) noexcept = default;
  CompletionChannel& operator=(CompletionChannel&&) noexcept = default;
  CompletionChannel(const CompletionChannel&) = delete;
  CompletionChannel& operator=(const CompletionChannel&) = delete;
  // The channel is destroyed after its CQ (which holds a reference).
  ~CompletionChannel() = default;

  // Readable => CompletionQueue::take_event() on the CQ bound to it, then poll.
  [[nodiscard]] int fd() const noexcept;
  [[nodiscard]] bool valid() const noexcept { return handle_ != nullptr; }

 private:
  friend class CompletionQueue;
  std::shared_ptr<detail::CompChannelHandle> handle_;
};

}  // namespace rkv::verbs
