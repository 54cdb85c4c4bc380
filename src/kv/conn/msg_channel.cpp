#include "kv/conn/msg_channel.hpp"

#include <algorithm>
#include <cerrno>
#include <new>

namespace rkv::kv::conn {
namespace {

void add(std::uint64_t* account, std::uint64_t n) noexcept {
  if (account != nullptr) *account += n;
}

// A READ or WRITE (a transfer whose completion the owner tracks), not a
// SEND and not a window's bind or invalidation.
constexpr bool moves_bytes(verbs::SendOp op) noexcept {
  switch (op) {
    case verbs::SendOp::rdma_read:
    case verbs::SendOp::rdma_write:
    case verbs::SendOp::rdma_write_imm: return true;
    case verbs::SendOp::send:
    case verbs::SendOp::bind_window:
    case verbs::SendOp::invalidate: return false;
  }
  return false;
}

}  // namespace

using verbs::WrId;
using verbs::WrKind;

MessageChannel::MessageChannel(Link& link, BufferPool& recv, BufferPool& send, std::uint32_t generation,
                               std::size_t peer_recv_size) noexcept
    : link_(&link), recv_(&recv), send_(&send), generation_(generation), peer_recv_size_(peer_recv_size) {}

std::optional<MessageChannel::Received> MessageChannel::received(const verbs::Completion& c) const noexcept {
  if (c.wr_id.kind() != WrKind::recv || !c.wr_id.is_current(generation_) || c.wr_id.slot() >= recv_->count()) {
    return std::nullopt;
  }
  auto buf = recv_->buffer(c.wr_id.slot());
  return Received{c.wr_id.slot(), buf.first(std::min<std::size_t>(c.byte_len, buf.size()))};
}

int MessageChannel::repost(std::uint32_t slot) noexcept {
  return link_->post_recv(WrId(slot, generation_, WrKind::recv), recv_->buffer(slot), recv_->lkey(slot));
}

std::size_t MessageChannel::max_message() const noexcept {
  return std::min(send_->buffer_size(), peer_recv_size_);
}

bool MessageChannel::open_buffer() noexcept {
  std::uint32_t index = 0;
  if (send_buffers_ >= send_limit_) return false;
  if (!sealed_.make_room()) return false;  // room to seal it later without allocating
  if (!send_->take(index)) return false;
  ++send_buffers_;
  open_ = index;
  open_size_ = 0;
  return true;
}

void MessageChannel::seal_open() noexcept {
  if (!open_) return;
  if (open_size_ == 0) {
    send_->give_back(*open_);
    --send_buffers_;
  } else {
    sealed_.push({*open_, open_size_});
  }
  open_.reset();
  open_size_ = 0;
  open_messages_ = 0;
}

bool MessageChannel::can_append(std::size_t bytes) const noexcept {
  if (bytes > max_message()) return false;
  if (open_ && open_size_ + bytes <= max_message()) return true;
  return send_buffers_ < send_limit_ && send_->may_take();
}

AppendStatus MessageChannel::append(const proto::MessageSpec& m, proto::Origin origin) noexcept {
  const std::size_t need = proto::encoded_size(m);
  if (need > max_message()) return AppendStatus::too_big;
  if (open_ && open_size_ + need > max_message()) seal_open();
  if (!open_ && !open_buffer()) return AppendStatus::no_buffer;
  auto buf = send_->buffer(*open_).first(max_message());
  const auto r = proto::encode(buf, open_size_, m, {}, value_account_, origin);
  switch (r.status) {
    case proto::EncodeStatus::ok:
      open_size_ = r.offset;
      ++open_messages_;
      return AppendStatus::ok;
    case proto::EncodeStatus::no_space: return AppendStatus::too_big;  // checked above; defensive
    case proto::EncodeStatus::invalid: return AppendStatus::invalid;
  }
  return AppendStatus::invalid;
}

std::size_t MessageChannel::queued_sends() const noexcept {
  return sealed_.size() + ((open_ && open_size_ > 0) ? 1 : 0);
}

bool MessageChannel::queue_rdma(const verbs::SendWr& wr) noexcept {
  try {
    wrs_.push_back(wr);
  } catch (const std::bad_alloc&) {
    return false;
  }
  return true;
}

std::size_t MessageChannel::flush(std::size_t max_sends, int* error) noexcept {
  if (sealed_.size() < max_sends) seal_open();  // the open buffer goes too, if allowed
  const std::size_t sends = std::min(max_sends, sealed_.size());
  if (wrs_.empty() && sends == 0) return 0;
  // The SENDs join the queue behind the transfers: the chains post from it.
  const std::size_t transfers = wrs_.size();
  if (!in_flight_.make_room(sends) || (posted_transfers_ != nullptr && !posted_transfers_->make_room(transfers))) {
    if (error != nullptr) *error = ENOMEM;
    return 0;
  }
  try {
    wrs_.reserve(transfers + sends);
  } catch (const std::bad_alloc&) {
    if (error != nullptr) *error = ENOMEM;
    return 0;
  }
  for (std::size_t i = 0; i < sends; ++i) {
    const Sealed& s = sealed_.at(i);
    wrs_.push_back(verbs::SendWr::send(WrId(s.index, generation_, WrKind::send), send_->buffer(s.index).first(s.size),
                                       send_->lkey(s.index)));
  }
  std::size_t done = 0;
  std::size_t sends_posted = 0;
  int rc = 0;
  while (done < wrs_.size()) {
    const std::size_t n = std::min(verbs::QueuePair::kMaxChain, wrs_.size() - done);
    // This call's transfers (wrs_[done .. last_transfer]): they come before
    // the SENDs. The READs and WRITEs among them are signaled by their
    // intervals, the last one always; a window's bind or invalidation keeps
    // its own (it is the caller's, not in `posted_transfers_`).
    const std::size_t in_call = done < transfers ? std::min(n, transfers - done) : 0;
    verbs::SendWr* last = nullptr;
    for (std::size_t i = done, reads = 0, writes = 0; i < done + in_call; ++i) {
      if (!moves_bytes(wrs_[i].op)) continue;
      wrs_[i].signaled = wrs_[i].op == verbs::SendOp::rdma_read ? ++reads % signal_reads_ == 0
                                                                : ++writes % signal_writes_ == 0;
      last = &wrs_[i];
    }
    if (last != nullptr) last->signaled = true;
    std::size_t posted = 0;
    rc = link_->post_chain(std::span<const verbs::SendWr>(wrs_).subspan(done, n), &posted);
    add(posted_.post_calls, 1);
    if (posted > 0 && in_call > 0) add(posted_.transfer_posts, 1);
    for (std::size_t i = done; i < done + posted; ++i) {
      const verbs::SendWr& w = wrs_[i];
      if (moves_bytes(w.op)) {
        if (posted_transfers_ != nullptr) posted_transfers_->push(w.wr_id);
        if (!w.signaled) add(posted_.transfers_unsignaled, 1);
      }
      switch (w.op) {
        case verbs::SendOp::rdma_read:
          add(posted_.reads, 1);
          add(posted_.bytes_in, w.length());
          break;
        case verbs::SendOp::rdma_write:
        case verbs::SendOp::rdma_write_imm:
          add(posted_.writes, 1);
          add(posted_.bytes_out, w.length());
          break;
        case verbs::SendOp::bind_window:
        case verbs::SendOp::invalidate:
          break;  // moves no bytes
        case verbs::SendOp::send: {
          const Sealed s = sealed_.pop_front();  // SENDs are posted in sealed_'s order
          add(posted_.bytes_out, w.length());
          in_flight_.push(s.index);
          ++sends_posted;
          break;
        }
      }
    }
    done += posted;
    if (rc != 0) break;
  }
  // What was not posted: its transfers stay queued; its SENDs are still in
  // sealed_ and are put in a chain again by the next flush.
  wrs_.erase(wrs_.begin(), wrs_.begin() + static_cast<std::ptrdiff_t>(done));
  std::erase_if(wrs_, [](const verbs::SendWr& w) { return w.op == verbs::SendOp::send; });
  if (rc != 0 && error != nullptr) *error = rc;
  return sends_posted;
}

bool MessageChannel::on_send_completion(const verbs::Completion& c) noexcept {
  if (c.wr_id.kind() != WrKind::send || !c.wr_id.is_current(generation_)) return false;
  if (!in_flight_.remove(c.wr_id.slot())) return false;
  send_->give_back(c.wr_id.slot());
  --send_buffers_;
  return true;
}

void MessageChannel::release_buffers() noexcept {
  seal_open();
  sealed_.for_each([&](const Sealed& s) { send_->give_back(s.index); });
  sealed_.clear();
  in_flight_.for_each([&](std::uint32_t i) { send_->give_back(i); });
  in_flight_.clear();
  send_buffers_ = 0;
}

}  // namespace rkv::kv::conn
