// ClientConn, grant part (docs/protocol.md "SET by grant"): the landing
// space kvd grants with its replies to large SETs, and a SET written into it
// by one RDMA WRITE WITH IMMEDIATE instead of a request the server answers
// with a READ. Reactor thread only.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <exception>
#include <new>
#include <string>
#include <utility>

#include "kv/client/client_conn.hpp"
#include "proto/copy.hpp"
#include "proto/crc32c.hpp"

namespace rkv::kv::client {

namespace {
// A slot's part of the tail buffer: the longest key and the trailer.
constexpr std::size_t kTailArea = proto::kMaxKey + proto::kGrantTrailerSize;
}  // namespace

bool ClientConn::enable_grants() noexcept {
  if (tail_reg_) return true;
  if (registrar_ == nullptr) return false;
  try {
    grants_.reserve(Link::kMaxWindows);  // the most a server can grant one connection: never grows on the data path
    tail_mem_.assign(std::size_t{slots_.max_slots()} * kTailArea, std::byte{0});
    // Only this side reads it (the WRITE's gather): no remote access.
    tail_reg_ = registrar_->register_memory(tail_mem_, verbs::Access::none);
  } catch (const std::exception& e) {
    spdlog::warn("client: no buffer for granted SETs ({}): large SETs go by the server's READ", e.what());
    tail_mem_ = {};
    tail_reg_.reset();
    return false;
  }
  return true;
}

bool ClientConn::keep_grant(const proto::GrantDesc& desc, std::uint64_t capacity) noexcept {
  if (!grants_enabled()) {
    fail("a grant this client did not ask for");
    return false;
  }
  if (grants_.size() >= Link::kMaxWindows ||
      std::any_of(grants_.begin(), grants_.end(), [&](const HeldGrant& g) { return g.desc.id == desc.id; })) {
    fail("grant " + std::to_string(desc.id) + " while holding it, or more grants than a server gives");
    return false;
  }
  const auto at = std::upper_bound(grants_.begin(), grants_.end(), capacity,
                                   [](std::uint64_t c, const HeldGrant& g) { return c < g.capacity; });
  grants_.insert(at, HeldGrant{desc, capacity});  // within the reserved room: no allocation
  ++counters_.grants_received;
  return true;
}

std::size_t ClientConn::fitting_grant(std::uint64_t need) const noexcept {
  const auto it = std::lower_bound(grants_.begin(), grants_.end(), need,
                                   [](const HeldGrant& g, std::uint64_t n) { return g.capacity < n; });
  return it == grants_.end() ? kNoGrant : static_cast<std::size_t>(it - grants_.begin());
}

std::size_t ClientConn::granted_fit(const Request& r) const noexcept {
  if (r.path != Path::rendezvous || r.op != proto::Opcode::set || grants_.empty()) return kNoGrant;
  return fitting_grant(proto::granted_set_size(r.key.size(), r.value.size()));
}

void ClientConn::queue_granted_set(SlotKey key, Request& r, std::size_t g) noexcept {
  const HeldGrant grant = grants_[g];
  grants_.erase(grants_.begin() + static_cast<std::ptrdiff_t>(g));
  // value | key | trailer: the value from the caller's buffer (its lease's
  // lkey), key and trailer from this slot's area.
  const std::span<std::byte> tail =
      std::span<std::byte>(tail_mem_).subspan(std::size_t{key.index} * kTailArea, r.key.size() + proto::kGrantTrailerSize);
  proto::copy_bytes(tail.data(), r.key.data(), r.key.size());  // a key, not a value: not in bytes_copied
  proto::GrantedSet set;
  set.req_id = req_id(key);
  set.key = r.key;
  set.value = r.value;
  set.value_crc = proto::crc32c(r.value.data(), r.value.size());
  if (r.ttl != 0) set.ttl = r.ttl;
  if (r.epoch != 0) set.epoch = r.epoch;
  proto::write_grant_trailer(tail.subspan(r.key.size()).first<proto::kGrantTrailerSize>(), set);
  verbs::SendWr wr =
      verbs::SendWr::write_imm(write_wr_id(key), r.value, r.lease.lkey(), grant.desc.addr, grant.desc.rkey, grant.desc.id);
  wr.local[1] = verbs::Sge{tail, tail_reg_->lkey()};
  wr.num_local = 2;
  if (!channel_.queue_rdma(wr)) {
    fail("out of memory queueing a granted SET");
    return;
  }
  Slot& s = live_slot(key);
  s.op = proto::Opcode::set;
  s.cb = std::move(r.cb);
  s.lease = std::move(r.lease);  // the value is read by our own device until the reply says it landed
  --credits_;  // it takes one of the server's receives, as a SEND does
  ++counters_.sets_granted;
}

}  // namespace rkv::kv::client
