// Client: connection setup, reactor wiring, sync helpers and teardown (see
// client.hpp). Reactor thread only.
#include "kv/client/client.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <utility>

#include "kv/conn/endpoint.hpp"
#include "proto/auth.hpp"
#include "proto/connect_params.hpp"
#include "proto/copy.hpp"
#include "proto/wire.hpp"
#include "verbs/error.hpp"
#include "verbs/pd.hpp"

namespace rkv::kv::client {

using conn::Endpoint;
using conn::EndpointConfig;
using conn::PdRegistrar;

namespace {

using namespace std::chrono_literals;
constexpr std::uint64_t kToken = 1;
// The CM reports its own timeouts; wait a little longer before giving up on it.
constexpr std::chrono::milliseconds kCmSlack{2'000};

// A numeric address for `host`: as is if numeric, else the first IPv4 (then
// IPv6) address getaddrinfo gives.
std::string resolve_host(const std::string& host) {
  if (host.empty()) throw ConnectError(EINVAL, "empty server address");
  in6_addr buf{};
  if (inet_pton(AF_INET, host.c_str(), &buf) == 1 || inet_pton(AF_INET6, host.c_str(), &buf) == 1) return host;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &res); rc != 0) {
    throw ConnectError(EHOSTUNREACH, "cannot resolve server name '" + host + "': " + ::gai_strerror(rc));
  }
  std::string out;
  for (int family : {AF_INET, AF_INET6}) {
    for (const addrinfo* ai = res; ai != nullptr && out.empty(); ai = ai->ai_next) {
      if (ai->ai_family != family) continue;
      char text[INET6_ADDRSTRLEN] = {};
      const void* src = family == AF_INET ? static_cast<const void*>(&reinterpret_cast<const sockaddr_in*>(ai->ai_addr)->sin_addr)
                                          : static_cast<const void*>(&reinterpret_cast<const sockaddr_in6*>(ai->ai_addr)->sin6_addr);
      if (inet_ntop(family, src, text, sizeof text) != nullptr) out = text;
    }
  }
  ::freeaddrinfo(res);
  if (out.empty()) throw ConnectError(EHOSTUNREACH, "server name '" + host + "' has no IP address");
  return out;
}

int cm_errno(const verbs::CmEvent& ev) {
  switch (ev.type) {
    case verbs::CmEventType::rejected: return ECONNREFUSED;
    case verbs::CmEventType::unreachable: return ev.status == -ETIMEDOUT ? ETIMEDOUT : EHOSTUNREACH;
    case verbs::CmEventType::connect_error: return ECONNREFUSED;
    case verbs::CmEventType::addr_error: return EHOSTUNREACH;
    case verbs::CmEventType::route_error: return ENETUNREACH;
    case verbs::CmEventType::device_removal: return ENODEV;
    case verbs::CmEventType::addr_resolved:
    case verbs::CmEventType::route_resolved:
    case verbs::CmEventType::connect_request:
    case verbs::CmEventType::established:
    case verbs::CmEventType::disconnected:
    case verbs::CmEventType::timewait_exit:
    case verbs::CmEventType::other:
      return EPROTO;
  }
  return EPROTO;
}

std::string describe(const verbs::CmEvent& ev) {
  std::string s(verbs::to_string(ev.type));
  if (ev.status < 0) {
    s += std::string(" (") + std::strerror(-ev.status) + ")";
  } else if (ev.status > 0) {
    s += " (status " + std::to_string(ev.status) + ")";
  }
  if (ev.no_listener()) s += ": nothing listens on that port (is kvd running there?)";
  return s;
}

}  // namespace

Client::Client(reactor::Reactor& reactor, const ClientOptions& options)
    : reactor_(&reactor), options_(options), flush_poller_(reactor.add_poller([this] { return on_flush_poll(); })) {}

Client::~Client() {  // close() asserts the thread
  if (ep_ && reactor_->state() != reactor::ReactorState::kIdle) {
    spdlog::warn("client: destroyed inside a reactor callback: the connection to {} goes without waiting for "
                 "DISCONNECTED (close() there, destroy it outside callbacks)", peer_);
  }
  close();
}

std::unique_ptr<Client> Client::connect(reactor::Reactor& reactor, const std::string& host, std::uint16_t port,
                                        const ClientOptions& options) {
  reactor.assert_owner_thread();
  const std::string where = host + ":" + std::to_string(port);
  try {
    std::unique_ptr<Client> c(new Client(reactor, options));
    c->do_connect(host, port);
    return c;  // on a throw, ~Client tears down whatever was built
  } catch (const ConnectError& e) {
    throw ConnectError(e.code(), "connect to " + where + ": " + e.what(), e.no_listener());
  } catch (const verbs::Error& e) {
    throw ConnectError(e.code().value(), "connect to " + where + ": " + e.what());
  } catch (const std::system_error& e) {
    throw ConnectError(e.code().value(), "connect to " + where + ": " + e.what());
  }
}

void Client::do_connect(const std::string& host, std::uint16_t port) {
  if (options_.max_in_flight == 0 || options_.max_in_flight >= ClientConn::kMaxSlots) {
    throw ConnectError(EINVAL, "max_in_flight must be 1..65535");
  }
  if (options_.recv_size < proto::kMinRecvBufSize || options_.recv_size % 64 != 0 ||
      options_.send_size < proto::kMaxEagerSetSize || options_.send_size % 64 != 0 || options_.send_count == 0) {
    throw ConnectError(EINVAL, "buffer sizes must be multiples of 64 holding the largest eager message");
  }
  const std::string ip = resolve_host(host);
  peer_ = ip + ":" + std::to_string(port);
  cm_watch_ = reactor_->watch(events_.fd(), EPOLLIN, [this](std::uint32_t) { on_cm_readable(); });

  verbs::CmId id(events_, kToken);
  id.resolve_addr("", ip, port, options_.resolve_timeout);
  verbs::CmEvent ev = wait_cm_event(options_.resolve_timeout + kCmSlack, "address resolution");
  if (ev.type != verbs::CmEventType::addr_resolved) {
    throw ConnectError(cm_errno(ev), "address resolution failed: " + describe(ev));
  }
  id.resolve_route(options_.resolve_timeout);
  ev = wait_cm_event(options_.resolve_timeout + kCmSlack, "route resolution");
  if (ev.type != verbs::CmEventType::route_resolved) {
    throw ConnectError(cm_errno(ev), "route resolution failed: " + describe(ev));
  }

  auto pd = std::make_shared<const verbs::ProtectionDomain>(id);
  EndpointConfig cfg;
  cfg.recv_count = options_.max_in_flight;
  cfg.recv_size = options_.recv_size;
  cfg.send_count = options_.send_count;
  cfg.send_size = options_.send_size;
  // RDMA READs (pull, one-sided GET) and granted SETs' WRITEs: at most one per
  // request at a time; with grants, a WRITE whose reply came first may still
  // hold its send-queue entry while its slot serves the next request.
  cfg.rdma_depth = (options_.grants ? 2 : 1) * options_.max_in_flight;
  registrar_ = std::make_unique<PdRegistrar>(pd);
  ep_ = std::make_unique<Endpoint>(std::move(id), std::move(pd), cfg);
  // One connection per Client, over pools of its own: the first generation will do.
  conn_ = std::make_unique<ClientConn>(ep_->link(), ep_->recv_pool(), ep_->send_pool(), registrar_.get(),
                                       options_.rdv, ClientConn::kDefaultGeneration);
  conn_->set_backup_reads(options_.backup_reads);
  if (options_.poll.count() < 0) throw ConnectError(EINVAL, "poll budget must not be negative");
  reactor::PollerOptions po;
  po.spin = options_.poll;
  po.before_sleep = [this] { return on_cq_arm(); };
  cq_poller_ = reactor_->add_poller([this] { return on_cq_poll(); }, std::move(po));
  cq_watch_ = reactor_->watch(ep_->cq_fd(), EPOLLIN, [this](std::uint32_t) { on_cq_readable(); });
  if (int rc = conn_->post_receives(); rc != 0) {
    throw ConnectError(rc, std::string("posting receives failed: ") + std::strerror(rc));
  }

  proto::ConnectParams mine;
  mine.role = proto::Role::client;
  mine.credits = static_cast<std::uint16_t>(options_.max_in_flight);
  mine.recv_buf_size = options_.recv_size;
  if (options_.grants && conn_->enable_grants()) mine.features |= proto::kFeatureGrants;
  if (!options_.auth_token.empty()) mine.auth = proto::auth_digest(options_.auth_token);
  const auto mine_bytes = proto::encode_connect_params(mine);
  verbs::ConnParams cp;
  cp.private_data = mine_bytes;
  ep_->id().connect(cp);
  ev = wait_cm_event(options_.connect_timeout, "connect");
  if (ev.type != verbs::CmEventType::established) {
    if (ev.type == verbs::CmEventType::rejected) {
      if (const auto why = proto::decode_reject(ev.private_data())) {
        throw ConnectError(EACCES, "connection rejected: " + std::string(proto::to_string(*why)) +
                                       (*why == proto::RejectReason::auth_required
                                            ? " (kvd --auth-token-file: give the client the same file)"
                                            : ""));
      }
    }
    throw ConnectError(cm_errno(ev), "connection failed: " + describe(ev), ev.no_listener());
  }
  conn_->on_accepted();  // from here on, closing it means disconnecting it
  const auto decoded = proto::decode_connect_params(ev.private_data(), proto::Role::server);
  if (const auto* err = std::get_if<proto::ConnectError>(&decoded)) {
    throw ConnectError(EPROTO, "server sent bad connect parameters: " + std::string(proto::to_string(*err)));
  }
  const auto& theirs = std::get<proto::ConnectParams>(decoded);
  if (auto bad = proto::check_connect_params(theirs)) {
    throw ConnectError(EPROTO, "server sent bad connect parameters: " + std::string(proto::to_string(*bad)));
  }
  server_credits_ = theirs.credits;
  server_recv_size_ = theirs.recv_buf_size;
  server_max_value_ = theirs.max_value;
  conn_->on_established(theirs.credits, theirs.recv_buf_size, theirs.max_value, theirs.features);
  if (options_.get_mode == GetMode::read) {
    if (const auto ix = proto::usable_index(theirs)) {
      (void)conn_->enable_onesided({ix->addr, ix->rkey, ix->buckets});
    } else {
      spdlog::warn("client: {} has no usable readable index (kvd --index-buckets 0?): GETs go by message", peer_);
    }
  }
  // READs in flight at once: our initiator depth (kNegotiate: the device's
  // maximum) capped by the responder resources the server accepted with.
  spdlog::debug("client: connected to {} ({} credits, server recv size {}, server serves {} READs at once)", peer_,
                server_credits_, server_recv_size_, ev.peer_responder_resources);
  // Events that raced the connect (e.g. an immediate DISCONNECTED).
  while (!cm_events_.empty()) {
    const verbs::CmEvent next = std::move(cm_events_.front());
    cm_events_.pop_front();
    handle_cm_event(next);
  }
}

verbs::CmEvent Client::wait_cm_event(std::chrono::milliseconds timeout, const char* step) {
  const auto deadline = reactor::Reactor::now() + timeout;
  while (cm_events_.empty()) {
    if (!cm_error_.empty()) throw ConnectError(EIO, step + std::string(": ") + cm_error_);
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - reactor::Reactor::now());
    if (left.count() <= 0) {
      throw ConnectError(ETIMEDOUT, std::string(step) + ": no answer within " + std::to_string(timeout.count()) +
                                        " ms");
    }
    reactor_->run_once(left);
  }
  verbs::CmEvent ev = std::move(cm_events_.front());
  cm_events_.pop_front();
  SPDLOG_DEBUG("client: cm event {} status {}", verbs::to_string(ev.type), ev.status);
  return ev;
}

void Client::on_cm_readable() noexcept {
  for (;;) {
    std::optional<verbs::CmEvent> ev;
    try {
      ev = events_.next();
    } catch (const std::exception& e) {
      cm_error_ = e.what();
      if (conn_) conn_->fail(std::string("rdma_cm event channel: ") + e.what());
      cm_watch_.reset();  // a broken channel would report readable forever
      return;
    }
    if (!ev) return;
    if (!conn_ || conn_->state() == ConnState::connecting) {  // the connect path takes it
      try {
        cm_events_.push_back(std::move(*ev));
      } catch (...) {
        cm_error_ = "out of memory";
      }
    } else {
      handle_cm_event(*ev);
    }
  }
}

void Client::handle_cm_event(const verbs::CmEvent& ev) noexcept {
  SPDLOG_DEBUG("client: cm event {} status {}", verbs::to_string(ev.type), ev.status);
  switch (ev.type) {
    case verbs::CmEventType::disconnected:
      if (conn_ && conn_->on_disconnected()) {
        ep_->id().disconnect();  // answers the server's DREQ (no-op if we started it)
      }
      return;
    case verbs::CmEventType::device_removal:
    case verbs::CmEventType::rejected:
    case verbs::CmEventType::unreachable:
    case verbs::CmEventType::connect_error:
    case verbs::CmEventType::addr_error:
    case verbs::CmEventType::route_error:
      if (conn_) conn_->fail("rdma_cm: " + describe(ev));
      return;
    case verbs::CmEventType::addr_resolved:
    case verbs::CmEventType::route_resolved:
    case verbs::CmEventType::connect_request:
    case verbs::CmEventType::established:
    case verbs::CmEventType::timewait_exit:
    case verbs::CmEventType::other:
      return;
  }
}

void Client::on_cq_readable() noexcept {
  if (!ep_ || !conn_) return;
  if (const int rc = ep_->cq().take_event(); rc < 0) {
    after_cq(rc, "completion channel");
    return;
  }
  after_cq(poll_cq(), "completion queue");
}

bool Client::on_cq_poll() noexcept {
  if (!ep_ || !conn_ || ep_->cq().armed()) return false;  // armed: its event wakes us
  return after_cq(poll_cq(), "completion queue");
}

bool Client::on_cq_arm() noexcept {
  if (!ep_ || !conn_) return false;
  in_cq_pass_ = true;
  const verbs::ArmStats st = ep_->cq().arm_and_poll(feed_);
  in_cq_pass_ = false;
  return after_cq(st.error != 0 ? -st.error : static_cast<int>(st.completions), "completion queue");
}

int Client::poll_cq() noexcept {
  in_cq_pass_ = true;
  const int n = ep_->cq().poll(kPollBatch, feed_);
  in_cq_pass_ = false;
  return n;
}

bool Client::after_cq(int n, const char* what) noexcept {
  if (n < 0) {
    conn_->fail(std::string(what) + ": " + std::strerror(-n));
    return false;
  }
  if (n == 0) return false;
  do_flush();  // once per pass: whatever the callbacks submitted goes out together
  return true;
}

// Submissions of one loop turn (or of the fibers run between two turns) go
// out together at the end of the turn: the flush poller runs after the fd
// callbacks, and wake() keeps the next epoll_wait from sleeping first.
std::chrono::milliseconds Client::watchdog_period() const noexcept {
  return std::clamp<std::chrono::milliseconds>(options_.op_timeout / 4, std::chrono::milliseconds(1),
                                               std::chrono::milliseconds(1000));
}

void Client::arm_watchdog() noexcept {
  if (options_.op_timeout.count() <= 0 || watchdog_.pending()) return;
  watch_progress_ = progress();
  watch_since_ = reactor::Reactor::now();
  try {
    watchdog_ = reactor_->every(watchdog_period(), [this] { on_watchdog(); });
  } catch (const std::exception& e) {
    spdlog::warn("client: no request watchdog for {}: {}", peer_, e.what());
  }
}

std::uint64_t Client::progress() const noexcept {
  if (!conn_) return 0;
  const ClientCounters c = conn_->counters();
  return c.completed + c.recv_completions + c.rdma_reads;
}

void Client::on_watchdog() noexcept {
  if (!conn_ || conn_->state() != ConnState::established || conn_->pending() == 0) {
    watchdog_.reset();  // nothing in flight: the next submit arms it again
    return;
  }
  const auto now = reactor::Reactor::now();
  if (const std::uint64_t p = progress(); p != watch_progress_) {
    watch_progress_ = p;
    watch_since_ = now;
    return;
  }
  // A period past the op timeout: a sync helper waiting as long (wait_for)
  // returns its own timeout first.
  if (now - watch_since_ < options_.op_timeout + watchdog_period()) return;
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now - watch_since_).count();
  watchdog_.reset();
  try {
    conn_->fail(fmt::format("no reply for {} ms with {} requests in flight ({} sent, {} queued; {} credits, {} grants "
                            "held, {} work requests outstanding)",
                            ms, conn_->pending(), conn_->in_flight(), conn_->queued(), conn_->credits(),
                            conn_->grants_held(), conn_->outstanding_work()));
  } catch (...) {
    conn_->fail("no reply within the op timeout");
  }
}

void Client::schedule_flush(bool rendezvous) {
  arm_watchdog();
  // A full batch goes now, and so does a rendezvous SET: its transfer, not
  // its message, is what costs, so the server starts pulling it while the
  // caller prepares the next (not from inside a CQ pass: its callbacks run
  // in the middle of ClientConn, and the pass flushes when it ends).
  if (options_.request_batch != 0 && !in_cq_pass_ && conn_ &&
      (rendezvous || conn_->queued() >= options_.request_batch)) {
    do_flush();
    return;
  }
  if (flush_scheduled_) return;
  flush_scheduled_ = true;
  flush_poller_.wake();
}

bool Client::on_flush_poll() noexcept {
  if (!flush_scheduled_) return false;
  flush_scheduled_ = false;
  do_flush();
  return true;
}

void Client::do_flush() noexcept {
  if (conn_) conn_->flush();
}

Status Client::set(std::string_view key, std::span<const std::byte> value, Callback cb, Path* path,
                   std::uint64_t ttl_ms) {
  assert_owner();
  if (!conn_) return Status::not_connected;  // torn down (a ClientConn whose requests ended refuses them)
  Path p = Path::eager;
  const Status st = conn_->submit_set(key, value, std::move(cb), &p, ttl_ms);
  if (st != Status::ok) return st;
  if (path != nullptr) *path = p;
  schedule_flush(p == Path::rendezvous);
  return st;
}

Status Client::get(std::string_view key, Callback cb) {
  assert_owner();
  if (!conn_) return Status::not_connected;  // torn down (a ClientConn whose requests ended refuses them)
  const Status st = conn_->submit_get(key, std::move(cb));
  if (st == Status::ok) schedule_flush();
  return st;
}

Status Client::get_into(std::string_view key, std::span<std::byte> into, Callback cb) {
  assert_owner();
  if (!conn_) return Status::not_connected;  // torn down (a ClientConn whose requests ended refuses them)
  const Status st = conn_->submit_get_into(key, into, std::move(cb));
  if (st == Status::ok) schedule_flush();
  return st;
}

Status Client::del(std::string_view key, Callback cb) {
  assert_owner();
  if (!conn_) return Status::not_connected;  // torn down (a ClientConn whose requests ended refuses them)
  const Status st = conn_->submit_del(key, std::move(cb));
  if (st == Status::ok) schedule_flush();
  return st;
}

Status Client::expire(std::string_view key, std::uint64_t ttl_ms, Callback cb) {
  assert_owner();
  if (!conn_) return Status::not_connected;
  const Status st = conn_->submit_expire(key, ttl_ms, std::move(cb));
  if (st == Status::ok) schedule_flush();
  return st;
}

Status Client::record(proto::Opcode op, std::string_view key, std::span<const std::byte> value,
                      std::uint64_t ttl_ms, std::uint64_t epoch, Callback cb) {
  assert_owner();
  if (!conn_) return Status::not_connected;
  Path p = Path::eager;
  const Status st = conn_->submit_record(op, key, value, ttl_ms, epoch, std::move(cb), &p);
  if (st == Status::ok) schedule_flush(p == Path::rendezvous);
  return st;
}

Status Client::ttl(std::string_view key, Callback cb) {
  assert_owner();
  if (!conn_) return Status::not_connected;
  const Status st = conn_->submit_ttl(key, std::move(cb));
  if (st == Status::ok) schedule_flush();
  return st;
}

Status Client::call(std::uint16_t op, std::span<const std::byte> request, Callback cb, Path* path) {
  assert_owner();
  if (!conn_) return Status::not_connected;  // torn down (a ClientConn whose requests ended refuses them)
  const Status st = conn_->submit_call(op, request, std::move(cb), path);
  if (st == Status::ok) schedule_flush();
  return st;
}

bool Client::run_until(const std::function<bool()>& done, std::chrono::milliseconds timeout) {
  const auto deadline = reactor::Reactor::now() + timeout;
  while (!done()) {
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - reactor::Reactor::now());
    if (left.count() <= 0) return false;
    reactor_->run_once(left);
  }
  return true;
}

namespace {
struct SyncResult {
  std::optional<Status> status;
  bool found = false;
  std::string value;
};
}  // namespace

// The sync helpers' wait: flush, then run the reactor until `status` is set
// or the op timeout passes (then the connection is failed: a reply that never
// comes means the connection is unusable). Returns the op's status, or timeout.
Status Client::await_reply(const std::optional<Status>& status, std::string_view what) {
  if (Status w = wait_for([&] { return status.has_value(); }, what); w != Status::ok) return w;
  return *status;
}

Status Client::wait_for(const std::function<bool()>& done, std::string_view what) {
  do_flush();
  // op_timeout 0: no limit (a year stands for it).
  const std::chrono::milliseconds limit =
      options_.op_timeout.count() > 0 ? options_.op_timeout : std::chrono::hours(24 * 365);
  if (!run_until(done, limit)) {
    if (conn_) conn_->fail(std::string(what) + " got no reply within " + std::to_string(options_.op_timeout.count()) + " ms");
    return Status::timeout;
  }
  return Status::ok;
}

Status Client::await(const std::function<bool()>& done, std::string_view what) {
  assert_owner();
  if (reactor_->state() != reactor::ReactorState::kIdle) return Status::invalid_use;
  return wait_for(done, what);
}

Status Client::set_sync(std::string_view key, std::string_view value, std::uint64_t ttl_ms) {
  assert_owner();
  if (reactor_->state() != reactor::ReactorState::kIdle) return Status::invalid_use;
  auto result = std::make_shared<SyncResult>();
  Status st = set(
      key, value, [result](Status s, bool, std::span<const std::byte>) { result->status = s; }, ttl_ms);
  if (st != Status::ok) return st;
  if (Status w = await_reply(result->status, "a SET"); w != Status::ok) return w;
  return *result->status;
}

Status Client::get_sync(std::string_view key, std::string& out, bool& found) {
  return get_sync_with(key, found, [&out, account = copy_account()](std::span<const std::byte> v) {
    proto::copy_to_string(out, v, account);
  });
}

Status Client::get_sync(std::string_view key, Value& out, bool& found) {
  ClientConn* conn = conn_.get();
  return get_sync_with(key, found, [&out, conn](std::span<const std::byte> v) {
    if (auto lb = conn->adopt_landing()) {
      out = Value(std::move(lb));  // no copy: the buffer it landed in
    } else {
      std::string copy;  // eager, or copied out of its landing buffer (ClientConn::kCopyOutMax)
      proto::copy_to_string(copy, v, conn->copy_account());
      out = Value(std::move(copy));
    }
  });
}

Status Client::get_sync_with(std::string_view key, bool& found,
                             std::function<void(std::span<const std::byte>)> take) {
  assert_owner();
  if (reactor_->state() != reactor::ReactorState::kIdle) return Status::invalid_use;
  auto result = std::make_shared<SyncResult>();
  Status st = get(key, [result, take = std::move(take)](Status s, bool f, std::span<const std::byte> v) {
    if (s == Status::ok) {  // the caller's outputs are set only on success
      result->found = f;
      take(v);
    }
    result->status = s;
  });
  if (st != Status::ok) return st;
  if (Status w = await_reply(result->status, "a GET"); w != Status::ok) return w;
  if (*result->status == Status::ok) found = result->found;
  return *result->status;
}

Status Client::del_sync(std::string_view key, bool& found) {
  assert_owner();
  if (reactor_->state() != reactor::ReactorState::kIdle) return Status::invalid_use;
  auto result = std::make_shared<SyncResult>();
  Status st = del(key, [result](Status s, bool f, std::span<const std::byte>) {
    result->found = f;
    result->status = s;
  });
  if (st != Status::ok) return st;
  if (Status w = await_reply(result->status, "a DEL"); w != Status::ok) return w;
  if (*result->status == Status::ok) found = result->found;
  return *result->status;
}

Status Client::expire_sync(std::string_view key, std::uint64_t ttl_ms, bool& found) {
  assert_owner();
  if (reactor_->state() != reactor::ReactorState::kIdle) return Status::invalid_use;
  auto result = std::make_shared<SyncResult>();
  Status st = expire(key, ttl_ms, [result](Status s, bool f, std::span<const std::byte>) {
    result->found = f;
    result->status = s;
  });
  if (st != Status::ok) return st;
  if (Status w = await_reply(result->status, "an EXPIRE"); w != Status::ok) return w;
  if (*result->status == Status::ok) found = result->found;
  return *result->status;
}

Status Client::ttl_sync(std::string_view key, std::int64_t& ttl_ms, bool& found) {
  assert_owner();
  if (reactor_->state() != reactor::ReactorState::kIdle) return Status::invalid_use;
  auto result = std::make_shared<SyncResult>();
  auto left = std::make_shared<std::int64_t>(-1);
  Status st = ttl(key, [result, left](Status s, bool f, std::span<const std::byte> v) {
    result->found = f;
    if (f) *left = ClientConn::ttl_of(v);
    result->status = s;
  });
  if (st != Status::ok) return st;
  if (Status w = await_reply(result->status, "a TTL"); w != Status::ok) return w;
  if (*result->status == Status::ok) {
    found = result->found;
    ttl_ms = found ? *left : -1;
  }
  return *result->status;
}

Status Client::call_sync(std::uint16_t op, std::span<const std::byte> request, Value& reply) {
  assert_owner();
  if (reactor_->state() != reactor::ReactorState::kIdle) return Status::invalid_use;
  auto result = std::make_shared<SyncResult>();
  auto value = std::make_shared<Value>();
  ClientConn* conn = conn_.get();
  Status st = call(op, request, [result, value, conn](Status s, bool, std::span<const std::byte> v) {
    if (s == Status::ok) {
      if (auto lb = conn->adopt_landing()) {
        *value = Value(std::move(lb));  // no copy: the buffer it was READ into
      } else {
        *value = Value(std::string(reinterpret_cast<const char*>(v.data()), v.size()));
      }
    }
    result->status = s;
  });
  if (st != Status::ok) return st;
  if (Status w = await_reply(result->status, "a CALL"); w != Status::ok) return w;
  if (*result->status == Status::ok) reply = std::move(*value);
  return *result->status;
}

Status Client::call_sync(std::uint16_t op, std::string_view request, std::string& reply) {
  Value v;
  const Status st = call_sync(op, proto::as_bytes(request), v);
  if (st == Status::ok) {
    proto::copy_to_string(reply, proto::as_bytes(v.view()), copy_account());
  }
  return st;
}

Status Client::stats_sync(std::string& out) {
  assert_owner();
  if (reactor_->state() != reactor::ReactorState::kIdle) return Status::invalid_use;
  if (!conn_) return Status::not_connected;  // torn down (a ClientConn whose requests ended refuses them)
  auto result = std::make_shared<SyncResult>();
  Status st = conn_->submit_stats([result](Status s, bool, std::span<const std::byte> v) {
    result->value.assign(reinterpret_cast<const char*>(v.data()), v.size());
    result->status = s;
  });
  if (st != Status::ok) return st;
  if (Status w = await_reply(result->status, "a STATS"); w != Status::ok) return w;
  if (*result->status == Status::ok) out = std::move(result->value);
  return *result->status;
}

void Client::forget(std::span<const std::byte> bytes) noexcept {
  assert_owner();
  if (conn_) conn_->forget(bytes);
}

bool Client::wait_idle(std::chrono::milliseconds timeout) {
  assert_owner();
  if (reactor_->state() != reactor::ReactorState::kIdle) return false;
  do_flush();
  return run_until([&] { return !conn_ || conn_->pending() == 0; }, timeout);
}

ConnState Client::state() const noexcept {
  assert_owner();
  return conn_ ? conn_->state() : final_state_;
}

ClientCounters Client::counters() const noexcept {
  assert_owner();
  return conn_ ? conn_->counters() : counters_;
}

const std::string& Client::failure() const noexcept {
  assert_owner();
  return conn_ ? conn_->failure() : failure_;
}

void Client::close() noexcept {
  assert_owner();
  if (!conn_ && !ep_) return;  // torn down already, or never built
  if (conn_) conn_->close();  // pending requests complete with Status::closed
  if (reactor_->state() != reactor::ReactorState::kIdle) {
    // Called from a reactor callback: the loop cannot be run from here, and
    // the CQ may be mid-drain. Stop the traffic now; ~Client finishes.
    if (conn_ && conn_->state() == ConnState::closing) ep_->id().disconnect();
    return;
  }
  teardown();
}

void Client::teardown() noexcept {
  flush_poller_.reset();
  flush_scheduled_ = false;
  try {
    if (ep_) {
      // Teardown order of verbs/qp.hpp: disconnect, wait DISCONNECTED, to_error, drain.
      if (conn_ && conn_->state() == ConnState::closing) {
        // A second disconnect (after a close() in a callback) returns 0 too.
        if (ep_->id().disconnect() == 0) {
          if (!run_until([&] { return conn_->state() != ConnState::closing; }, options_.close_timeout)) {
            spdlog::warn("client: no DISCONNECTED from {} within {} ms", peer_, options_.close_timeout.count());
          }
        }
        conn_->cm_done();  // closed, whether DISCONNECTED came or not
      }
      ep_->qp().to_error();
      if (conn_ && (cq_watch_ || cq_poller_) &&
          !run_until([&] { return conn_->outstanding_work() == 0; }, options_.close_timeout)) {
        spdlog::warn("client: {} work requests did not flush within {} ms", conn_->outstanding_work(),
                     options_.close_timeout.count());
      }
    }
  } catch (const std::exception& e) {
    spdlog::warn("client: teardown: {}", e.what());
  }
  if (conn_) {
    counters_ = conn_->counters();
    final_state_ = conn_->state();
    try {
      failure_ = conn_->failure();
    } catch (...) {
      failure_.clear();
    }
  }
  cq_watch_.reset();
  cq_poller_.reset();
  cm_watch_.reset();
  conn_.reset();
  ep_.reset();  // QP, CQ, MRs, pools, cm_id
}

}  // namespace rkv::kv::client
