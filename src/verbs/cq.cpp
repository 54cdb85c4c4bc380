#include "verbs/cq.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>

#include "verbs/comp_channel.hpp"
#include "verbs/detail/handles.hpp"
#include "verbs/detail/wc.hpp"

namespace rkv::verbs {

CompletionQueue::CompletionQueue(const CompletionChannel& channel, int min_entries) {
  auto& ch = channel.handle_;
  if (ch->bound) detail::throw_error("ibv_create_cq (completion channel already has a CQ)", EBUSY);
  ibv_cq* cq = ibv_create_cq(ch->channel->context, min_entries, nullptr, ch->channel, 0);
  if (cq == nullptr) detail::throw_error("ibv_create_cq", errno);
  try {
    handle_ = std::make_shared<detail::CqHandle>(ch, cq);
  } catch (...) {
    ibv_destroy_cq(cq);
    throw;
  }
  ch->bound = true;
  // Armed once here; from now on only arm_and_poll() arms (a new CQ is empty).
  if (const ArmStats st = arm_and_poll([](const Completion&) noexcept {}); st.error != 0) {
    detail::throw_error("ibv_req_notify_cq", st.error);
  }
}

int CompletionQueue::take_event() noexcept {
  auto& h = *handle_;
  ibv_cq* ev_cq = nullptr;
  void* ev_ctx = nullptr;
  if (ibv_get_cq_event(h.channel->channel, &ev_cq, &ev_ctx) != 0) {
    return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -errno;
  }
  h.armed = false;
  if (++h.unacked_events >= kAckBatch) {  // acking takes a mutex in libibverbs
    ibv_ack_cq_events(h.cq, h.unacked_events);
    h.unacked_events = 0;
  }
  return 1;
}

bool CompletionQueue::armed() const noexcept { return handle_->armed; }

int CompletionQueue::arm() noexcept {
  const int rc = ibv_req_notify_cq(handle_->cq, 0);
  if (rc == 0) handle_->armed = true;
  return rc;
}

int CompletionQueue::poll(std::span<Completion> out) noexcept {
  std::array<ibv_wc, kPollBatch> wc;
  std::size_t filled = 0;
  while (filled < out.size()) {
    const int want = static_cast<int>(std::min<std::size_t>(out.size() - filled, wc.size()));
    const int n = ibv_poll_cq(handle_->cq, want, wc.data());
    if (n < 0) return n == -1 ? -EIO : n;  // providers return -1 or -errno
    for (int i = 0; i < n; ++i) {
      Completion& c = out[filled++];
      c = detail::to_completion(wc[static_cast<std::size_t>(i)]);
      SPDLOG_TRACE("verbs: wc slot={} gen={} kind={} status={} opcode={} len={}", c.wr_id.slot(),
                   c.wr_id.generation(), to_string(c.wr_id.kind()), to_string(c.status),
                   to_string(c.opcode), c.byte_len);
    }
    if (n < want) break;  // CQ empty
  }
  return static_cast<int>(filled);
}

}  // namespace rkv::verbs
