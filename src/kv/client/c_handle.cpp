// CHandle: see c_handle.hpp. The owner thread only, except release_value.
#include "kv/client/c_handle.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cassert>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <utility>

#include "kv/client/landing.hpp"
#include "proto/copy.hpp"
#include "proto/wire.hpp"

namespace rkv::kv::client {

using reactor::SlotKey;

namespace {

// Small values handed out: malloc'd with the same 64-byte header position as
// a landing buffer, so release_value can tell the two apart.
struct SmallHeader {
  std::uint64_t magic;
};

constexpr bool has_next(SlotKey k) noexcept { return k.generation != 0; }

// The C function that submitted an async op of this kind (for messages).
const char* async_name(OpKind k) noexcept {
  switch (k) {
    case OpKind::set: return "kv_set_async";
    case OpKind::get: return "kv_get_async";
    case OpKind::del: return "kv_del_async";
    case OpKind::get_into: return "kv_get_into_async";
    case OpKind::call: return "kv_call_async";
    case OpKind::expire: return "kv_expire_async";
    case OpKind::ttl: return "kv_ttl_async";
  }
  return "kv_*_async";
}

}  // namespace

std::string_view to_string(OpKind k) noexcept {
  switch (k) {
    case OpKind::set: return "SET";
    case OpKind::get: return "GET";
    case OpKind::del: return "DEL";
    case OpKind::get_into: return "GET";
    case OpKind::call: return "CALL";
    case OpKind::expire: return "EXPIRE";
    case OpKind::ttl: return "TTL";
  }
  return "?";
}

void* copy_value(std::span<const std::byte> v, std::uint64_t* account) noexcept {
  auto* base = static_cast<char*>(std::malloc(kValueHeader + v.size() + 1));
  if (base == nullptr) return nullptr;
  const SmallHeader hdr{kMallocMagic};
  std::memcpy(base, &hdr, sizeof hdr);
  char* p = base + kValueHeader;
  proto::copy_bytes(std::span<std::byte>(reinterpret_cast<std::byte*>(p), v.size()), v, account);
  p[v.size()] = '\0';
  return p;
}

// Any thread: the value is no longer tied to its handle (a large one's
// registration already ended, see ClientConn::adopt_landing).
void release_value(void* value) noexcept {
  if (value == nullptr) return;
  if (auto* lb = LandingBuffer::from_data(value)) {
    delete lb;  // unmaps (its registration ended when it was handed out)
    return;
  }
  char* base = static_cast<char*>(value) - kValueHeader;
  SmallHeader hdr{};
  std::memcpy(&hdr, base, sizeof hdr);
  if (hdr.magic != kMallocMagic) {
    spdlog::error("kv_release: {} was not returned by kv_get, kv_get_bin or kv_poll (ignored)", value);
    return;
  }
  hdr.magic = 0;  // a double release is caught, not a double free
  std::memcpy(base, &hdr, sizeof hdr);
  std::free(base);
}

CHandle::CHandle(std::unique_ptr<reactor::Reactor> reactor) : reactor_(std::move(reactor)), ready_(kMaxPending) {}

std::unique_ptr<CHandle> CHandle::open(std::vector<proto::ServerAddr> servers, ClientOptions options,
                                       std::optional<cluster::ClusterView> cluster, bool read_from_backups) {
  // Requests go out at the end of a turn only: a submission then never
  // flushes, so no completion runs inside Client::set/get (the lines rely
  // on it: send() is never re-entered by a callback).
  options.request_batch = 0;
  std::unique_ptr<CHandle> h(new CHandle(std::make_unique<reactor::Reactor>()));
  // Never acted on inside a turn (enter() consumes it before every run): it
  // is in the epoll set only to make kv_fd readable between calls.
  h->wake_watch_ = h->reactor_->watch(h->wake_.fd(), EPOLLIN, [](std::uint32_t) {});
  ShardSetOptions so;
  CHandle* self = h.get();
  so.on_maintain_due = [self] { self->signal(); };  // kv_fd readable: the caller comes back to kv_poll (maintain)
  so.cluster = std::move(cluster);
  so.read_from_backups = read_from_backups;
  h->shards_ = ShardSet::connect(*h->reactor_, std::move(servers), options, std::move(so));
  return h;
}

CHandle::~CHandle() {
  assert_owner();
  if (shards_) shards_->close();  // ops in flight complete (ENOTCONN) into ready_
  shards_.reset();
  while (ready_count_ > 0) {
    kv_completion c{};
    take(&c, 1);
    release_value(c.value);
  }
}

int CHandle::set_error(int code, std::string_view msg) noexcept {
  last_status_ = Status::ok;  // an error that is no Status's (status_error sets it after)
  try {
    last_error_.assign(msg);
  } catch (...) {
    last_error_.clear();
  }
  return code;
}

int CHandle::status_error(Status st, const char* what, std::size_t shard) noexcept {
  const int code = to_errno(st);
  try {
    std::string msg = std::string(what) + ": " + std::string(to_string(st));
    const std::string why = shards_->failure(shard);
    if (shards_->sharded()) {
      msg += " (server " + shards_->server(shard).id + (why.empty() ? "" : ": " + why) + ")";
    } else if (!why.empty()) {
      msg += " (" + why + ")";
    }
    set_error(code, msg);
  } catch (...) {
    set_error(code, what);
  }
  last_status_ = st;
  return code;
}

std::size_t CHandle::shard_for(std::string_view key, bool read) noexcept {
  if (shards_->membership_reported()) {
    try {
      shards_->maintain();
    } catch (const std::exception& e) {
      spdlog::warn("kv: applying a change of the cluster's members: {}", e.what());
    }
  }
  if (key.empty()) return 0;
  return read ? shards_->read_shard_of(key) : shards_->shard_of(key);
}

int CHandle::check(std::string_view key, std::size_t shard, std::size_t value_len, const char* what) noexcept {
  try {
    if (key.empty()) return set_error(EINVAL, std::string(what) + ": empty key");
    if (key.size() > proto::kMaxKey) {
      return set_error(E2BIG, std::string(what) + ": key of " + std::to_string(key.size()) +
                                  " bytes is longer than 1024 bytes");
    }
    const std::uint64_t max = shards_->server_max_value(shard);
    if (max != 0 && value_len > max) {
      return set_error(E2BIG, std::string(what) + ": value of " + std::to_string(value_len) +
                                  " bytes is over the server's limit of " + std::to_string(max));
    }
    if (shards_->state(shard) != ShardState::up) {
      // Down: if its backoff passed, try it now (outside any reactor callback:
      // check() runs at an entry point), so a caller that only retries this
      // key sees the server come back.
      try {
        shards_->maintain();
      } catch (const std::exception& e) {
        spdlog::warn("kv: reconnecting {}: {}", shards_->server(shard).id, e.what());
      }
    }
    if (const Status u = shards_->usable(shard); u != Status::ok) return status_error(u, what, shard);
    return 0;
  } catch (...) {
    return set_error(ENOMEM, what);
  }
}

// ---- lines -------------------------------------------------------------

Status CHandle::add(OpKind kind, std::size_t shard, std::string_view key, std::span<const std::byte> value,
                    std::uint64_t tag, bool sync, std::span<std::byte> into, SlotKey& out, std::uint16_t call_op,
                    std::uint64_t ttl_ms) {
  Op op;
  op.kind = kind;
  op.call_op = call_op;
  op.ttl_ms = ttl_ms;
  op.sync = sync;
  op.key.assign(key);
  op.value = value;
  op.into = into;
  op.tag = tag;
  op.shard = shard;
  auto it = lines_.find(key);
  const bool fresh = it == lines_.end();
  if (fresh) it = lines_.emplace(std::string(key), Line{}).first;
  SlotKey k{};
  try {
    k = ops_.insert(std::move(op));
  } catch (...) {
    if (fresh) lines_.erase(it);
    throw;
  }
  if (!fresh) {  // behind the ops already on this key
    ops_.find(it->second.back)->next = k;
    it->second.back = k;
    out = k;
    return Status::ok;
  }
  it->second = Line{k, k};
  const Status st = send(k);
  if (st != Status::ok) {  // refused at once: no op, no completion
    ops_.erase(k);
    lines_.erase(it);
    return st;
  }
  out = k;
  return Status::ok;
}

Status CHandle::send(SlotKey k) noexcept {
  Op& op = *ops_.find(k);
  Callback cb = [this, k](Status st, bool found, std::span<const std::byte> v) { on_reply(k, st, found, v); };
  Status st = Status::ok;
  try {
    switch (op.kind) {
      case OpKind::set: st = shards_->set(op.shard, op.key, op.value, std::move(cb), &op.path, op.ttl_ms); break;
      case OpKind::get: st = shards_->get(op.shard, op.key, std::move(cb)); break;
      case OpKind::del: st = shards_->del(op.shard, op.key, std::move(cb)); break;
      case OpKind::get_into: st = shards_->get_into(op.shard, op.key, op.into, std::move(cb)); break;
      case OpKind::call: st = shards_->call(op.shard, op.call_op, op.value, std::move(cb), &op.path); break;
      case OpKind::expire: st = shards_->expire(op.shard, op.key, op.ttl_ms, std::move(cb)); break;
      case OpKind::ttl: st = shards_->ttl(op.shard, op.key, std::move(cb)); break;
    }
  } catch (const std::bad_alloc&) {
    st = Status::no_memory;
  } catch (const std::exception& e) {
    spdlog::error("kv: submitting a {}: {}", to_string(op.kind), e.what());
    st = Status::no_memory;
  }
  if (st == Status::ok) op.state = OpState::sent;
  return st;
}

void CHandle::on_reply(SlotKey k, Status st, bool found, std::span<const std::byte> v) noexcept {
  Op* op = ops_.find(k);
  assert(op != nullptr && op->state == OpState::sent && "kv: a reply for an op that is not in flight");
  if (op == nullptr) return;
  OpResult r;
  r.status = st;
  r.found = st == Status::ok && found;
  Client* client = shards_->client(op->shard);  // the one calling back
  if ((op->kind == OpKind::get || op->kind == OpKind::call) && r.found) {
    if (auto lb = client != nullptr ? client->adopt_landing() : nullptr) {  // large: the buffer it landed in, NUL-terminated
      r.value_len = lb->size();
      r.value = lb.release()->data().data();
    } else {
      r.value = copy_value(v, client != nullptr ? client->copy_account() : nullptr);
      r.value_len = v.size();
      if (r.value == nullptr) {
        r.status = Status::no_memory;
        r.found = false;
        r.value_len = 0;
      }
    }
  }
  if (op->kind == OpKind::ttl && r.found) r.ttl_ms = ClientConn::ttl_of(v);
  if (op->kind == OpKind::get_into && r.found) {
    if (v.data() != op->into.data()) {  // a small value, in a message or the one-sided area: copied in
      if (v.size() > op->into.size()) {
        r.status = Status::too_large;
        r.found = false;
      } else {
        proto::copy_bytes(op->into, v, client != nullptr ? client->copy_account() : nullptr);
      }
    }
    if (r.found) r.value_len = v.size();
  }
  if (op->path == Path::rendezvous) {  // a SET's or CALL's value, READ by the server
    // The caller may free this buffer once the completion is returned: keep
    // no registration of it (a cached one could outlive the memory, see
    // reg_cache.hpp). The op's own lease ended before this callback.
    if (client != nullptr) client->forget(op->value);
  }
  complete(k, r);
}

void CHandle::complete(SlotKey k, OpResult r) noexcept {
  const auto line = lines_.find(std::string_view(ops_.find(k)->key));
  assert(line != lines_.end() && line->second.front == k && "kv: an op completed out of its line's order");
  SlotKey next = ops_.find(k)->next;
  deliver(k, r);
  // The line moves on: the next ops go to the Client; one it refuses
  // completes now with that status, and the one after it goes.
  while (has_next(next)) {
    line->second.front = next;
    const Status st = send(next);
    if (st == Status::ok) return;
    const SlotKey refused = next;
    next = ops_.find(refused)->next;
    OpResult err;
    err.status = st;
    deliver(refused, err);
  }
  lines_.erase(line);
}

void CHandle::deliver(SlotKey k, OpResult r) noexcept {
  Op& op = *ops_.find(k);
  if (op.sync) {
    op.result = r;
    op.state = OpState::done;
    return;
  }
  kv_completion c{};
  c.tag = op.tag;
  if (r.status != Status::ok) {
    c.status = to_errno(r.status);
    status_error(r.status, async_name(op.kind), op.shard);
  } else if ((op.kind == OpKind::get || op.kind == OpKind::del || op.kind == OpKind::get_into ||
              op.kind == OpKind::expire || op.kind == OpKind::ttl) &&
             !r.found) {
    c.status = ENOENT;
  }
  c.value = r.value;
  c.value_len = r.value_len;
  ops_.erase(k);
  --async_in_flight_;
  push_ready(c);
}

// ---- completions and the fd --------------------------------------------

void CHandle::push_ready(const kv_completion& c) noexcept {
  // Never full: submit() keeps in-flight + ready at most kMaxPending.
  assert(ready_count_ < ready_.size());
  ready_[(ready_head_ + ready_count_) % ready_.size()] = c;
  ++ready_count_;
}

int CHandle::take(kv_completion* out, int max) noexcept {
  int n = 0;
  while (n < max && ready_count_ > 0) {
    out[n++] = ready_[ready_head_];
    ready_head_ = (ready_head_ + 1) % ready_.size();
    --ready_count_;
  }
  return n;
}

void CHandle::enter() noexcept {
  if (!signaled_) return;
  wake_.consume();
  signaled_ = false;
}

void CHandle::signal() noexcept {
  if (signaled_) return;
  try {
    wake_.notify();  // false only when the counter is saturated: readable too
    signaled_ = true;
  } catch (const std::exception& e) {
    spdlog::error("kv: eventfd notify failed: {}", e.what());
  }
}

bool CHandle::settle() {
  for (int i = 0; i < kSettleTurns; ++i) {
    if (reactor_->settle_once() == 0) return true;
    if (ready_count_ > 0) return false;
  }
  return false;
}

void CHandle::leave() {
  bool settled = true;
  if (async_in_flight_ > 0 && ready_count_ == 0) settled = settle();
  if (ready_count_ > 0 || !settled) signal();
}

// ---- the calls ---------------------------------------------------------

int CHandle::submit(OpKind kind, std::size_t shard, std::string_view key, std::span<const std::byte> value,
                    std::uint64_t tag, const char* what, std::span<std::byte> into, std::uint16_t call_op,
                    std::uint64_t ttl_ms) {
  if (async_in_flight_ + ready_count_ >= kMaxPending) {
    return set_error(EAGAIN, std::string(what) + ": the pipeline is full (" + std::to_string(kMaxPending) +
                                 " operations submitted and not yet returned by kv_poll)");
  }
  shards_->maintain();  // a shard whose retry is due reconnects before its keys are tried
  SlotKey k{};
  if (const Status st = add(kind, shard, key, value, tag, false, into, k, call_op, ttl_ms); st != Status::ok) {
    return status_error(st, what, shard);
  }
  ++async_in_flight_;
  signal();  // kv_poll sends what is queued (requests go out together at the end of a turn)
  return 0;
}

int CHandle::run(OpKind kind, std::size_t shard, std::string_view key, std::span<const std::byte> value,
                 OpResult& out, const char* what, std::span<std::byte> into, std::uint16_t call_op,
                 std::uint64_t ttl_ms) {
  int rc = run_on(kind, shard, key, value, out, what, into, call_op, ttl_ms);
  // not_owner: placed by an older map than the member's; shard_down or a
  // failed connection in a cluster: its primary went down, and the map will
  // name another; moved: the shard moved before the write was replicated
  // (ShardSet::place_again; a CALL may not run twice). A keyless CALL has
  // no key to place.
  const auto again = [&] { return shards_->place_again(last_status_, kind != OpKind::call); };
  if (rc == 0 || key.empty() || !again()) return rc;  // the common case reads no clock
  const auto first = reactor::Reactor::Clock::now();
  for (unsigned n = 0; rc != 0 && again(); ++n) {
    const auto pause = shards_->not_owner_pause(n, first);
    if (!pause) break;
    enter();
    reactor_->run_once(*pause);  // the watch's report may arrive; shard_for applies it
    leave();
    shard = shard_for(key, kind == OpKind::get || kind == OpKind::get_into);
    if (const int c = check(key, shard, value.size(), what); c != 0) return c;
    rc = run_on(kind, shard, key, value, out, what, into, call_op, ttl_ms);
  }
  return rc;
}

int CHandle::run_on(OpKind kind, std::size_t shard, std::string_view key, std::span<const std::byte> value,
                    OpResult& out, const char* what, std::span<std::byte> into, std::uint16_t call_op,
                    std::uint64_t ttl_ms) {
  enter();
  shards_->maintain();
  SlotKey k{};
  if (const Status st = add(kind, shard, key, value, 0, true, into, k, call_op, ttl_ms); st != Status::ok) {
    leave();
    return status_error(st, what, shard);
  }
  // The op is in flight on its shard's Client, or waits behind one that is
  // (its line): that Client's await runs the reactor (every shard's traffic).
  Client* client = shards_->client(shard);
  const Status w = client != nullptr ? client->await([this, k] { return ops_.find(k)->state == OpState::done; }, what)
                                     : Status::shard_down;
  Op& op = *ops_.find(k);
  if (op.state != OpState::done) {
    // Cannot happen: a timeout fails the connection, which completes every
    // op, and a line's refused ops complete at once. Keep the op (its reply
    // would find it) but say why.
    leave();
    return status_error(w != Status::ok ? w : Status::invalid_use, what, shard);
  }
  const OpResult r = op.result;
  ops_.erase(k);
  leave();
  if (w != Status::ok) {  // timed out: the op completed with the connection's failure
    release_value(r.value);
    return status_error(w, what, shard);
  }
  if (r.status != Status::ok) return status_error(r.status, what, shard);
  out = r;
  return 0;
}

int CHandle::stats(std::string& out, const char* what) {
  enter();
  shards_->maintain();
  if (!shards_->sharded()) {
    Client* client = shards_->client(0);
    const Status st = client != nullptr ? client->stats_sync(out) : Status::not_connected;
    leave();
    if (st != Status::ok) return status_error(st, what);
    return 0;
  }
  // Several servers: a "# shard ID up|down|gone" line, then that server's lines.
  out.clear();
  for (std::size_t i = 0; i < shards_->size(); ++i) {
    if (shards_->state(i) == ShardState::gone) {
      out += "# shard " + shards_->server(i).id + " gone\n";  // it left the cluster
      continue;
    }
    Client* client = shards_->usable(i) == Status::ok ? shards_->client(i) : nullptr;
    std::string text;
    const Status st = client != nullptr ? client->stats_sync(text) : Status::shard_down;
    out += "# shard " + shards_->server(i).id + (st == Status::ok ? " up\n" : " down\n");
    if (st == Status::ok) out += text;
  }
  leave();
  return 0;
}

std::string CHandle::counters_text() const {
  const ClientCounters c = shards_->counters();  // every shard's, summed (max_* the largest)
  std::string out;
  for (const ClientCounterInfo& row : kClientCounterTable) {
    out.append(row.name);
    out += ' ';
    out += std::to_string(c.*row.member);
    out += '\n';
  }
  if (shards_->sharded()) {
    out += "shard_failures " + std::to_string(shards_->shard_failures()) + "\n";
    out += "reconnects " + std::to_string(shards_->reconnects()) + "\n";
  }
  if (shards_->following()) out += "membership_changes " + std::to_string(shards_->membership_changes()) + "\n";
  return out;
}

int CHandle::poll(kv_completion* out, int max, int timeout_ms) {
  enter();
  if (ready_count_ == 0 && async_in_flight_ > 0 && timeout_ms != 0) {
    using std::chrono::milliseconds;
    const auto deadline = reactor::Reactor::now() + milliseconds(std::max(timeout_ms, 0));
    while (ready_count_ == 0 && async_in_flight_ > 0) {
      milliseconds left(-1);
      if (timeout_ms > 0) {
        left = std::chrono::ceil<milliseconds>(deadline - reactor::Reactor::now());
        if (left.count() <= 0) break;
      }
      reactor_->run_once(left);
      shards_->maintain();
    }
  }
  shards_->maintain();
  int n = take(out, max);
  bool settled = true;
  if (ready_count_ == 0) {
    // Always at least one turn, also with nothing in flight: it takes what
    // made kv_fd readable (e.g. an rdma_cm event), so the fd quiets down.
    settled = settle();
    n += take(out + n, max - n);
  }
  if (ready_count_ > 0 || !settled) signal();
  return n;
}

}  // namespace rkv::kv::client
