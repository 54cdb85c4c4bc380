// ClientConn, one-sided GET (docs/protocol.md, "One-sided GET"): a GET in
// read mode READs the key's neighborhood of the server's index (1 KiB, one
// READ) and checks the entries' CRCs. An INLINE entry holds the value and key
// bytes: they are checked (key bytes, data CRC) where they landed, and that
// one READ was the GET. Otherwise it READs the value block scattered into the
// destination (value) and scratch (key), and checks the key bytes and the
// data CRC. A torn entry or a failed check re-reads, at most
// proto::kOneSidedAttempts times; then, or when the index cannot answer
// (overflow, rpc-only entry, a hash collision), the GET goes as a message.
// No message is sent to the server otherwise. Reactor thread only.
//
// Posting (every READ the client posts: these and a pulled GET's or CALL's,
// client_rdv.cpp): the READs are queued with the MessageChannel's transfers
// where they are decided, and flush() posts them ahead of its SENDs, as the
// server posts its transfers, in chains of QueuePair::kMaxChain WRs, only every
// kReadSignalInterval-th READ and the last of a chain signaled: at depth, the
// index READs of a turn's GETs go out in one post with its requests, and the
// value READs of every index READ a CQ pass completed in one post at the end
// of that pass. The channel appends them to reads_posted_ in post order, so a
// completion also completes the unsignaled READs before it (on_transfer, client_rdv.cpp).
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cassert>
#include <cstring>
#include <exception>
#include <utility>

#include "kv/client/client_conn.hpp"
#include "proto/wall_clock.hpp"

namespace rkv::kv::client {

namespace {
// Per-slot area of os_mem_: neighborhood | key | small value.
constexpr std::size_t kHoodOff = 0;
constexpr std::size_t kKeyOff = proto::kNeighborhoodBytes;
constexpr std::size_t kValueOff = kKeyOff + proto::kMaxKey;
constexpr std::size_t kSmallValue = proto::kEagerLimit;  // values up to this land in the slot's area
constexpr std::size_t kStride = kValueOff + kSmallValue;
static_assert(kStride % 64 == 0);
}  // namespace

std::string_view to_string(GetMode m) noexcept {
  switch (m) {
    case GetMode::rpc: return "rpc";
    case GetMode::read: return "read";
  }
  return "invalid";
}

bool parse_get_mode(std::string_view text, GetMode& out) noexcept {
  if (text == "rpc") {
    out = GetMode::rpc;
    return true;
  }
  if (text == "read") {
    out = GetMode::read;
    return true;
  }
  return false;
}

bool ClientConn::enable_onesided(const IndexInfo& index) noexcept {
  if (registrar_ == nullptr || index.buckets == 0 || (index.buckets & (index.buckets - 1)) != 0 ||
      index.buckets > proto::kMaxIndexBuckets) {
    spdlog::warn("client: the server's index is unusable ({} buckets): GETs go by message", index.buckets);
    return false;
  }
  try {
    os_mem_.assign(std::size_t{slots_.max_slots()} * kStride, std::byte{0});  // indices stay below the bound
    os_reg_ = registrar_->register_memory(os_mem_, verbs::Access::local_write);  // READ target only
  } catch (const std::exception& e) {
    os_reg_.reset();
    os_mem_.clear();
    spdlog::warn("client: no buffer for one-sided GETs ({}): GETs go by message", e.what());
    return false;
  }
  index_ = index;
  return true;
}

std::span<std::byte> ClientConn::os_area(std::uint32_t index, std::size_t off, std::size_t len) noexcept {
  return std::span<std::byte>(os_mem_).subspan(std::size_t{index} * kStride + off, len);
}

void ClientConn::start_onesided(SlotKey key, Request& r) noexcept {
  Slot& s = live_slot(key);
  s.op = proto::Opcode::get;
  s.cb = std::move(r.cb);
  s.key = std::move(r.key);
  s.attempts = 0;
  s.into = std::move(r.into);
  ++counters_.onesided_gets;
  queue_hood_read(key);
}

void ClientConn::queue_hood_read(SlotKey key) noexcept {
  Slot& s = live_slot(key);
  const std::uint64_t home = proto::home_bucket(proto::hash64(s.key), index_.buckets);
  s.stage = Stage::hood;
  ++s.attempts;
  queue_read(verbs::SendWr::read(read_wr_id(key), os_area(key.index, kHoodOff, proto::kNeighborhoodBytes),
                                      os_reg_->lkey(), index_.addr + home * proto::kBucketSize, index_.rkey));
}

void ClientConn::queue_read(const verbs::SendWr& wr) noexcept {
  // At most one READ per request slot is queued or posted: reads_posted_ has room for all.
  assert(channel_.queued_rdma() + reads_posted_.size() < slots_.max_slots());
  if (!channel_.queue_rdma(wr)) fail("out of memory queueing an RDMA READ");
}

std::size_t ClientConn::post(std::size_t sends) noexcept {
  const std::size_t before = reads_posted_.size();
  int err = 0;
  const std::size_t posted = channel_.flush(sends, &err);
  for (std::size_t i = before; i < reads_posted_.size(); ++i) {
    const verbs::WrId id = reads_posted_.at(i);
    if (id.kind() != verbs::WrKind::rdma_read) continue;  // a granted SET's WRITE
    const Slot* s = slots_.find(read_key(id));  // queued by its live request
    if (s != nullptr && s->stage != Stage::pull) ++counters_.onesided_reads;
  }
  if (err != 0) fail(std::string("post_send failed: ") + std::strerror(err));
  return posted;
}

void ClientConn::on_onesided_read(SlotKey key, const verbs::Completion& c) noexcept {
  if (!c.ok()) {
    try {
      fail(fmt::format("one-sided GET RDMA READ: {} ({})", verbs::to_string(c.status), c.status_detail()));
    } catch (...) {
      fail("one-sided GET RDMA READ failed");
    }
    return;
  }
  switch (live_slot(key).stage) {
    case Stage::hood:
      on_hood(key);
      return;
    case Stage::block:
      on_block(key);
      return;
    case Stage::reply:
    case Stage::pull:
      break;  // on_transfer() routes only the two one-sided stages here
  }
  fail("one-sided READ completion for a request in another stage");
}

void ClientConn::on_hood(SlotKey key) noexcept {
  Slot& s = live_slot(key);
  const auto hood = os_area(key.index, kHoodOff, proto::kNeighborhoodBytes);
  std::size_t bucket = 0;
  const auto res = proto::probe_neighborhood(hood, proto::hash64(s.key), static_cast<std::uint32_t>(s.key.size()),
                                             s.entry, bucket);
  switch (res) {
    case proto::ProbeResult::torn: retry_or_fallback(key); return;
    case proto::ProbeResult::ask_rpc: fallback(key); return;
    case proto::ProbeResult::not_found: miss(key); return;
    case proto::ProbeResult::found: break;
  }
  // The key's expiry by this reader's clock: what makes an expired key gone
  // for one-sided readers whether or not kvd has run since. The clock is read
  // only for a key that has one (most GETs find none).
  if (s.entry.expire_at != 0) {
    switch (proto::expiry_verdict(s.entry, proto::wall_ms())) {
      case proto::ExpiryVerdict::live: break;
      case proto::ExpiryVerdict::expired: miss(key); return;
      case proto::ExpiryVerdict::ask_rpc: fallback(key); return;
    }
  }
  if (!proto::block_readable(s.entry, max_value_)) {  // a consistent entry the server could not have written
    fallback(key);
    return;
  }
  const std::size_t len = s.entry.value_len;
  std::span<std::byte> value_dst;
  std::uint32_t value_lkey = os_reg_->lkey();
  if (s.into.on && len > s.into.bytes.size()) {  // does not fit the caller's buffer
    Callback cb = std::move(s.cb);
    free_slot(key);
    finish(Status::too_large, true, {}, cb);
    return;
  }
  if (s.entry.inlined()) {  // the value came with the entry: check it where it landed
    const auto data = proto::inline_data(hood.subspan(bucket * proto::kBucketSize, proto::kBucketSize), s.entry);
    check_value(key, data.first(len), data.subspan(len));
    return;
  }
  if (len <= kSmallValue) {
    value_dst = os_area(key.index, kValueOff, len);
  } else if (s.into.on) {  // straight into the caller's memory (registered: it is larger than kSmallValue)
    value_dst = s.into.bytes.first(len);
    value_lkey = s.into.reg->lkey();
  } else {
    if (!s.landing) s.landing = take_spare_over(len);
    if (!s.landing || s.landing->capacity() <= len) {
      recycle(std::move(s.landing));
      try {
        s.landing = LandingBuffer::create(*registrar_, len + 1);  // size learned just now, as for a pull
      } catch (const std::exception& e) {
        spdlog::warn("client: no {}-byte landing buffer for a one-sided GET: {}", len, e.what());
        fallback(key);
        return;
      }
    }
    value_dst = s.landing->data().first(len);
    value_lkey = s.landing->lkey();
  }
  verbs::SendWr wr;
  wr.op = verbs::SendOp::rdma_read;
  wr.wr_id = read_wr_id(key);
  wr.local[0] = {value_dst, value_lkey};
  wr.local[1] = {os_area(key.index, kKeyOff, s.entry.key_len), os_reg_->lkey()};
  wr.num_local = 2;
  wr.remote_addr = s.entry.addr;
  wr.rkey = s.entry.rkey;
  s.stage = Stage::block;
  queue_read(wr);
}

void ClientConn::on_block(SlotKey key) noexcept {
  Slot& s = live_slot(key);
  const std::size_t len = s.entry.value_len;
  const auto value = len <= kSmallValue ? os_area(key.index, kValueOff, len)
                     : s.into.on        ? s.into.bytes.first(len)
                                        : s.landing->data().first(len);
  check_value(key, value, os_area(key.index, kKeyOff, s.entry.key_len));
}

void ClientConn::check_value(SlotKey key, std::span<const std::byte> value,
                             std::span<const std::byte> key_read) noexcept {
  Slot& s = live_slot(key);
  const std::size_t len = value.size();
  switch (proto::check_block(s.entry, value, key_read, s.key)) {
    case proto::BlockCheck::torn:  // reused or half-rewritten block: the entry is stale, read it again
      retry_or_fallback(key);
      return;
    case proto::BlockCheck::other_key:  // a whole, consistent block of another key with the same hash
      fallback(key);
      return;
    case proto::BlockCheck::ok: break;
  }
  ++counters_.onesided_hits;
  note_touch(s.key);
  if (len > kSmallValue) {
    deliver(key, len);
    return;
  }
  Callback cb = std::move(s.cb);
  free_slot(key);  // recycles a landing buffer left from an earlier attempt
  // The view (the slot's value area, or the inline bytes in its neighborhood
  // area) stays valid during the callback: only flush() posts READs into
  // this slot's area again, and callbacks do not flush.
  finish(Status::ok, true, value, cb);
}

void ClientConn::miss(SlotKey key) noexcept {
  ++counters_.onesided_misses;
  Callback cb = std::move(live_slot(key).cb);
  free_slot(key);
  finish(Status::ok, false, {}, cb);
}

void ClientConn::retry_or_fallback(SlotKey key) noexcept {
  if (live_slot(key).attempts >= proto::kOneSidedAttempts) {
    fallback(key);
    return;
  }
  ++counters_.onesided_retries;
  queue_hood_read(key);
}

void ClientConn::fallback(SlotKey key) noexcept {
  ++counters_.onesided_fallbacks;
  Slot& s = live_slot(key);
  Request r;
  r.op = proto::Opcode::get;
  r.key = std::move(s.key);
  r.cb = std::move(s.cb);
  r.into = std::move(s.into);
  free_slot(key);  // recycles a landing buffer
  try {
    queue_.push_front(std::move(r));  // goes out with the next flush, before later requests
  } catch (...) {
    finish(Status::no_memory, false, {}, r.cb);
  }
}

void ClientConn::note_touch(std::string_view key) noexcept {
  if (touches_.size() + 2 + key.size() > kTouchMaxBytes) queue_touch();  // full: this one starts the next
  try {
    touches_.push_back(static_cast<std::byte>(key.size() & 0xFF));
    touches_.push_back(static_cast<std::byte>(key.size() >> 8));
    const auto k = std::as_bytes(std::span(key.data(), key.size()));
    touches_.insert(touches_.end(), k.begin(), k.end());
    ++touch_keys_;
  } catch (...) {
    touches_.clear();  // out of memory: a hint is only a hint
    touch_keys_ = 0;
  }
}

void ClientConn::queue_touch() noexcept {
  if (touches_.empty()) return;
  try {
    Request r;
    r.op = proto::Opcode::touch;
    r.owned = std::move(touches_);
    queue_.push_back(std::move(r));
    queue_.back().value = queue_.back().owned;  // the vector's buffer stays put when the Request moves
    counters_.touches_sent += touch_keys_;
  } catch (...) {
  }
  touches_.clear();
  touch_keys_ = 0;
}

}  // namespace rkv::kv::client
