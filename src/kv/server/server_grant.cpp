// ServerConn, grant part (docs/protocol.md "SET by grant"): landing space
// granted with the replies to large SETs, the client's WRITE WITH IMMEDIATE
// into it, the window's invalidation, then the SET installed as a READ's
// value is. Reactor thread only.
#include <spdlog/spdlog.h>

#include <new>
#include <utility>
#include <variant>

#include "kv/server/server_conn.hpp"
#include "proto/grant.hpp"

namespace rkv::kv::server {

using proto::Opcode;
using proto::Status;
using verbs::WrId;
using verbs::WrKind;

namespace {
// A bind's WR slot: its window index + kBindSlot (an invalidation's is the
// index alone). Binds are unsignaled: one completes only when it failed.
constexpr std::uint32_t kBindSlot = 0x100;
static_assert(Link::kMaxWindows <= kBindSlot);
}  // namespace

void ServerConn::offer_grant(Pending& p) noexcept {
  const std::uint64_t want = std::exchange(p.grant_for, 0);
  if (p.reply.opcode != Opcode::set_reply || p.reply.status != Status::ok || grants_held_ >= grants_.size()) return;
  std::uint32_t i = 0;
  while (i < grants_.size() && grants_[i]) ++i;
  if (i == grants_.size()) return;  // every slot holds a grant or one being consumed
  GrantBudget* const budget = config_.grant_budget;
  // A block holds at least `want`: past the budget by that alone, no block is taken out and put back.
  if (budget != nullptr && want > budget->limit - budget->held) {
    ++counters_->grants_withheld;
    return;
  }
  GrantBlock g = arena_->allocate_grantable(want);
  if (!g.block) return;  // no memory for one now: the next large SET goes by READ
  if (budget != nullptr && g.block->capacity > budget->limit - budget->held) {
    ++counters_->grants_withheld;  // the block goes back; this client's next large SET goes by READ
    return;
  }
  // The bind goes out with this pass's replies, in the same post and ahead
  // of them: the client learns the key after the window is open.
  verbs::SendWr bind;
  if (const int rc = link_->bind_wr(WrId(kBindSlot + i, config_.generation, WrKind::window), i, *g.registration,
                                    g.block->block(), false, &bind);
      rc != 0) {  // e.g. the window could not be created: no grant this time, the block goes back
    SPDLOG_DEBUG("conn {}: building a grant window's bind failed: errno {}", config_.label, rc);
    return;
  }
  if (!channel_.queue_rdma(bind)) return;  // no memory to queue it: no grant this time
  const proto::GrantDesc desc{g.block->addr, bind.rkey, i + 1};
  const std::uint64_t capacity = g.block->capacity;
  grants_[i] = Grant{std::move(g), bind.rkey, false, std::nullopt};
  ++grants_held_;
  if (budget != nullptr) budget->held += capacity;
  ++counters_->grants;
  p.reply = proto::msg::set_reply_grant(p.reply.req_id, 0, desc, capacity);
}

void ServerConn::on_granted_write(const verbs::Completion& c, std::uint32_t slot) noexcept {
  // Nothing is in the receive buffer: it goes back at once, its credit owed
  // to the reply as an executed SEND's is.
  if (!recycle(slot)) return;
  const std::uint32_t i = c.imm - 1;
  if (c.imm == 0 || i >= grants_.size() || !grants_[i] || grants_[i]->used) {
    return fail(CloseCause::protocol_error, fmt::format("a WRITE with immediate {} names no grant this client holds",
                                                        c.imm));
  }
  if (c.byte_len > grants_[i]->block.block->capacity) {  // the MR ends there: the device refuses it first
    return fail(CloseCause::protocol_error, fmt::format("a WRITE of {} bytes into a grant of {}", c.byte_len,
                                                        grants_[i]->block.block->capacity));
  }
  unhold(*grants_[i]);
  grants_[i]->used = true;
  --grants_held_;
  ++outstanding_;
  counters_->max_conn_outstanding = std::max(counters_->max_conn_outstanding, outstanding_);
  if (held_.empty()) {
    (void)start_granted(i, c.byte_len, Clock::now());  // a failure decided to close
    return;
  }
  if (!held_.make_room()) return fail(CloseCause::internal, "out of memory queueing a granted SET");
  held_.push({kRecycled, 0, 0, Clock::now(), i, c.byte_len});  // after the requests received before it (per-key order)
}

void ServerConn::unhold(const Grant& g) noexcept {
  if (config_.grant_budget != nullptr && !g.used) config_.grant_budget->held -= g.block.block->capacity;
}

bool ServerConn::start_granted(std::uint32_t grant, std::uint32_t written, Clock::time_point received) noexcept {
  Grant& g = *grants_[grant];
  Pending p;
  p.wait = Wait::invalidate;
  p.op = Opcode::set;
  p.grant = grant;
  p.written = written;
  p.large_request = true;
  executing_received_ = received;
  const auto k = open_entry(std::move(p));
  if (!k) {
    grants_[grant].reset();
    fail(CloseCause::internal, "no entry free for a granted SET");
    return false;
  }
  g.entry = *k;
  // Posted with this pass's transfers and replies (flush).
  verbs::SendWr inv;
  if (const int rc = link_->invalidate_wr(WrId(grant, config_.generation, WrKind::window), grant, &inv); rc != 0) {
    close_entry(*k);
    fail(CloseCause::internal, fmt::format("building a grant window's invalidation failed: errno {}", rc));
    return false;
  }
  if (!queued_transfer(*k, channel_.queue_rdma(inv), "invalidation of a grant window")) return false;
  ++window_ops_;
  return true;
}

void ServerConn::on_window(const verbs::Completion& c) noexcept {
  const std::uint32_t slot = c.wr_id.slot();
  if (slot >= kBindSlot) {  // an unsignaled bind: it failed (or was flushed)
    if (c.ok()) {  // a device that completes unsignaled WRs anyway: nothing to do
      ++counters_->stale_completions;
      return;
    }
    if (!serving()) return;
    return fail(CloseCause::completion_error,
                fmt::format("binding a grant window failed: {} ({})", to_string(c.status), c.status_detail()));
  }
  if (window_ops_ > 0) --window_ops_;
  const bool ours = slot < grants_.size() && grants_[slot] && grants_[slot]->entry;
  if (!ours) {
    ++counters_->stale_completions;
    return;
  }
  const Key k = *grants_[slot]->entry;
  if (!serving() || !c.ok()) {
    close_entry(k);  // the QP is in error: nothing of it reaches the Store
    if (!serving()) return;
    return fail(CloseCause::completion_error,
                fmt::format("invalidating a grant window failed: {} ({})", to_string(c.status), c.status_detail()));
  }
  install_granted(k);
}

void ServerConn::drop_window_op(std::uint32_t slot) noexcept {
  if (slot >= kBindSlot) return;
  if (window_ops_ > 0) --window_ops_;
  if (slot < grants_.size() && grants_[slot] && grants_[slot]->entry) close_entry(*grants_[slot]->entry);
}

void ServerConn::install_granted(Key k) noexcept {
  // The window is closed: no write reaches the block any more, so what the
  // checks below see is what gets stored.
  Pending& p = *pending_.find(k);
  std::shared_ptr<store::LargeValue> block = std::move(grants_[p.grant]->block.block);
  grants_[p.grant].reset();
  p.wait = Wait::log;
  const auto read = proto::read_granted_set(block->block().first(p.written), config_.limits);
  if (const auto* why = std::get_if<proto::Reason>(&read)) {
    close_entry(k);
    return fail(CloseCause::protocol_error, fmt::format("a SET written into a grant is malformed: {}",
                                                        to_string(*why)));
  }
  const proto::GrantedSet& s = std::get<proto::GrantedSet>(read);
  p.req_id = s.req_id;
  ++counters_->sets;
  ++counters_->granted_sets;
  ++counters_->messages_received;  // (its bytes were counted as received with its completion)
  if (s.value.size() > config_.max_value) {
    ++counters_->too_large;
    p.reply = proto::msg::error_reply(Opcode::set, s.req_id, 0, Status::too_large);
    finish(k);
    return process_held();
  }
  const ShardGate::Admission admission = config_.gate->admit(s.key, ShardGate::Access::write, s.epoch.value_or(0));
  if (!admission.admitted) {  // nothing done: the client places it again
    ++counters_->not_owner;
    p.reply = proto::msg::error_reply(Opcode::set, s.req_id, 0, Status::not_owner);
    finish(k);
    return process_held();
  }
  if (s.epoch) {
    ++counters_->records_applied;  // a backup applies it as the primary did
    record_shard_ = admission.shard;
  }
  try {
    p.key.assign(s.key);
  } catch (const std::bad_alloc&) {
    ++counters_->no_memory;
    p.reply = proto::msg::error_reply(Opcode::set, s.req_id, 0, Status::no_memory);
    finish(k);
    return process_held();
  }
  block->bytes = {block->block().data(), s.value.size()};
  const store::ExpireAt expire_at = s.ttl ? store_->now() + static_cast<store::ExpireAt>(*s.ttl) : store::kNoExpiry;
  p.grant_for = proto::granted_set_size(s.key.size(), s.value.size());  // the next one like it
  p.reply = proto::msg::set_reply(s.req_id, 0);
  const LargeRef value = std::move(block);
  if (!deferred(store_block(p.key, value, s.value_crc, expire_at, k.pack32()), k, Opcode::set, p.reply)) finish(k);
  process_held();
}

}  // namespace rkv::kv::server
