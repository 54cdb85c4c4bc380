#pragma once
// MessageChannel: the SEND/RECV half of one connection, shared by the server
// and the client.
//
// Receive side: the owner posts its receive buffers with repost(slot) (before
// the QP reaches RTR, i.e. before connect/accept); a recv completion gives its
// bytes through received(); the owner decodes them, copies out what it keeps,
// and calls repost(slot) (or gives the buffer back to its pool).
// Send side: messages are appended into the open send buffer (coalescing:
// whatever is appended before the next flush() shares one SEND); a buffer
// that fills up is sealed and queued; flush() posts queued buffers as SENDs,
// at most `max_sends` of them (the client passes its credits). A send
// completion returns the buffer to the pool. RDMA READs and WRITEs the owner
// queues (queue_rdma) go out with the next flush(), ahead of its SENDs and
// in the same post: one ibv_post_send (in rxe, one system call) carries a
// batch's transfers and replies.
// The send pool may be shared by many channels (kvd's): set_send_limit()
// bounds what one channel holds, and release_buffers() gives back all it
// holds when its QP is gone.
//
// WrIds: slot = buffer index, generation = the connection's generation, kind =
// recv or send. Runs on the reactor thread only; not thread-safe.

#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <vector>

#include "kv/conn/buffer_pool.hpp"
#include "kv/conn/fifo_vector.hpp"
#include "kv/conn/link.hpp"
#include "proto/encode.hpp"
#include "verbs/completion.hpp"

namespace rkv::kv::conn {

enum class AppendStatus : std::uint8_t {
  ok,
  no_buffer,  // every send buffer is in flight or queued: retry after a send completion
  too_big,    // larger than one SEND may be (peer's receive buffer or ours)
  invalid,    // the encoder refused it (a wire rule); a bug in the caller
};

[[nodiscard]] constexpr const char* to_string(AppendStatus s) noexcept {
  switch (s) {
    case AppendStatus::ok: return "ok";
    case AppendStatus::no_buffer: return "no_buffer";
    case AppendStatus::too_big: return "too_big";
    case AppendStatus::invalid: return "invalid";
  }
  return "?";
}

class MessageChannel {
 public:
  // `peer_recv_size` bounds every SEND (the peer's receive buffer size).
  MessageChannel(Link& link, BufferPool& recv, BufferPool& send, std::uint32_t generation,
                 std::size_t peer_recv_size = std::numeric_limits<std::size_t>::max()) noexcept;

  void set_peer_recv_size(std::size_t n) noexcept { peer_recv_size_ = n; }
  [[nodiscard]] std::uint32_t generation() const noexcept { return generation_; }
  // The link this channel posts on (rendezvous READ/WRITEs share it).
  [[nodiscard]] Link& link() noexcept { return *link_; }

  // --- receive side -----------------------------------------------------------
  // The bytes a successful recv completion delivered; nullopt if the
  // completion is not a current recv of this channel (stale generation, bad slot).
  struct Received {
    std::uint32_t slot;
    std::span<const std::byte> bytes;
  };
  [[nodiscard]] std::optional<Received> received(const verbs::Completion& c) const noexcept;
  [[nodiscard]] int repost(std::uint32_t slot) noexcept;

  // --- send side -------------------------------------------------------------
  // origin: proto::Origin (encode.hpp); the server's replies are built.
  [[nodiscard]] AppendStatus append(const proto::MessageSpec& m, proto::Origin origin = proto::Origin::outside) noexcept;
  // From now on the eager value bytes append() copies are added to *account
  // by the copy itself (proto::copy_bytes; a client's bytes_copied).
  void count_value_copies(std::uint64_t* account) noexcept { value_account_ = account; }
  // What flush() posts, counted as it is posted, never when it is queued
  // (a transfer dropped with the connection was not sent); a null field is
  // not counted. The server's counters, and the client's READ counters
  // (rdma_reads, read_posts, reads_unsignaled).
  struct PostAccounts {
    std::uint64_t* post_calls = nullptr;  // +1 per post call
    std::uint64_t* bytes_out = nullptr;   // + the bytes of each SEND and WRITE
    std::uint64_t* bytes_in = nullptr;    // + the bytes of each READ
    std::uint64_t* reads = nullptr;       // +1 per READ
    std::uint64_t* writes = nullptr;      // +1 per WRITE
    std::uint64_t* transfer_posts = nullptr;        // +1 per post call that carried a READ or WRITE
    std::uint64_t* transfers_unsignaled = nullptr;  // +1 per READ or WRITE posted unsignaled
  };
  void count_posted(const PostAccounts& a) noexcept { posted_ = a; }
  // How flush() signals the queued READs and WRITEs: every `reads`-th READ
  // and every `writes`-th WRITE of a post call, and the call's last
  // transfer, are signaled, the others not. 1 (the default): every one, for
  // a completion that does work at once (the server's READs: the SET is
  // installed and answered). With more, a signaled completion also says the
  // unsignaled transfers posted before it are done (the send queue
  // completes in order), so the caller needs their order: `posted` (valid
  // while this channel posts) gets every posted transfer's wr_id, in post
  // order; the caller pops them as it learns they completed.
  struct TransferSignaling {
    std::size_t reads = 1;
    std::size_t writes = 1;
  };
  void set_transfer_signaling(TransferSignaling every, FifoVector<verbs::WrId>* posted) noexcept {
    signal_reads_ = every.reads == 0 ? 1 : every.reads;
    signal_writes_ = every.writes == 0 ? 1 : every.writes;
    posted_transfers_ = posted;
  }
  // At most `n` send buffers held at once (open, sealed and in flight).
  void set_send_limit(std::size_t n) noexcept { send_limit_ = n; }
  // Would a message of `bytes` fit without a new buffer, or with one the
  // pool may give and the limit allows?
  [[nodiscard]] bool can_append(std::size_t bytes) const noexcept;
  // An RDMA READ or WRITE, or a window's bind or invalidation
  // (Link::bind_wr / invalidate_wr), for the next flush(). False if it could
  // not be queued (no memory).
  [[nodiscard]] bool queue_rdma(const verbs::SendWr& wr) noexcept;
  [[nodiscard]] std::size_t queued_rdma() const noexcept { return wrs_.size(); }
  // The queued RDMA WRs are dropped, never posted (the connection is
  // closing: no completion will come for them); f(wr_id) for each.
  template <class F>
  void drop_queued_rdma(F&& f) noexcept {
    for (const verbs::SendWr& w : wrs_) f(w.wr_id);
    wrs_.clear();
  }
  // Posts the queued RDMA WRs and up to max_sends queued SENDs (the open
  // buffer too, if non-empty), in that order, in chains of up to
  // QueuePair::kMaxChain, the READs and WRITEs signaled as
  // set_transfer_signaling says (a window's WR as it was queued). Returns
  // the number of SENDs posted; *error gets the errno of a failed post
  // (what it did not post stays queued: ENOMEM means the send queue is
  // full, retry later).
  std::size_t flush(std::size_t max_sends = std::numeric_limits<std::size_t>::max(),
                    int* error = nullptr) noexcept;
  // A send completion (any status): returns its buffer. False if not ours/stale.
  bool on_send_completion(const verbs::Completion& c) noexcept;

  [[nodiscard]] std::size_t queued_sends() const noexcept;   // sealed + open non-empty
  [[nodiscard]] std::size_t open_messages() const noexcept { return open_messages_; }  // in the open buffer
  [[nodiscard]] std::size_t sends_in_flight() const noexcept { return in_flight_.size(); }
  // Send buffers held now: the open one, sealed ones, those in flight.
  [[nodiscard]] std::size_t send_buffers() const noexcept { return send_buffers_; }
  [[nodiscard]] std::size_t send_buffer_bytes() const noexcept { return send_buffers() * send_->buffer_size(); }
  // Gives every send buffer held back to the pool (the QP is destroyed: no
  // completion will return the ones in flight).
  void release_buffers() noexcept;
  [[nodiscard]] std::size_t max_message() const noexcept;    // largest SEND allowed

 private:
  struct Sealed {
    std::uint32_t index;
    std::size_t size;
  };
  bool open_buffer() noexcept;
  void seal_open() noexcept;

  Link* link_;
  BufferPool* recv_;
  BufferPool* send_;
  std::uint32_t generation_;
  std::size_t peer_recv_size_;

  // READs and WRITEs for the next flush(), in order (between flushes: no SENDs).
  std::vector<verbs::SendWr> wrs_;
  // Sealed buffers not yet posted, oldest first. Room for one more is made
  // when a buffer is opened (open_buffer), so sealing never allocates.
  FifoVector<Sealed> sealed_;
  std::optional<std::uint32_t> open_;  // index of the buffer being filled
  std::size_t open_size_ = 0;
  std::size_t open_messages_ = 0;
  PostedIds in_flight_;          // posted SENDs' buffers
  std::size_t send_buffers_ = 0;  // taken from the pool and not given back: open + sealed + in flight
  std::size_t send_limit_ = std::numeric_limits<std::size_t>::max();
  std::uint64_t* value_account_ = nullptr;
  PostAccounts posted_;
  std::size_t signal_reads_ = 1;                          // set_transfer_signaling
  std::size_t signal_writes_ = 1;                         // set_transfer_signaling
  FifoVector<verbs::WrId>* posted_transfers_ = nullptr;   // set_transfer_signaling
};

// A completion of a READ or WRITE that flush() posted as
// set_transfer_signaling says: it completes the unsignaled transfers posted
// before it too (the send queue completes in order, and an error completion
// comes signaled or not, first). done(completion) runs once for each, each
// popped from `posted` (the list given to set_transfer_signaling): on
// success the earlier ones first, as successes, in post order, then c;
// after an error c first (its owner fails the connection), then the earlier
// ones as flushed (none of them is trusted), so every posted transfer closes
// once. False, with nothing run, if c is not in `posted`: a repeated
// completion, or one never posted.
template <class Done>
bool complete_transfers(FifoVector<verbs::WrId>& posted, const verbs::Completion& c, Done&& done) noexcept {
  const std::size_t at = posted.find(c.wr_id);
  if (at == posted.size()) return false;
  if (!c.ok()) done(c);
  verbs::Completion earlier;
  earlier.status = c.ok() ? verbs::CompletionStatus::success : verbs::CompletionStatus::flushed;
  earlier.qp_num = c.qp_num;
  for (std::size_t i = 0; i < at; ++i) {
    earlier.wr_id = posted.pop_front();
    earlier.opcode = earlier.wr_id.kind() == verbs::WrKind::rdma_write ? verbs::CompletionOpcode::rdma_write
                                                                        : verbs::CompletionOpcode::rdma_read;
    done(earlier);
  }
  (void)posted.pop_front();  // c's own, now the oldest (anything posted meanwhile went behind it)
  if (c.ok()) done(c);
  return true;
}

}  // namespace rkv::kv::conn
