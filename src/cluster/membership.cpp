// Membership through etcd leases: see membership.hpp.
#include "cluster/membership.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>

#include "cluster/etcd_wire.hpp"

namespace rkv::cluster {

namespace {

// A renewal: short against the TTL (a late one is retried at the next tick).
constexpr std::chrono::milliseconds kRequestTimeout{2'000};
// Joining and leaving: a slow etcd (a loaded machine: a lease grant once took
// over 1 s in a TCG guest beside a CI run) must not fail kvd's start.
constexpr std::chrono::milliseconds kSetupTimeout{15'000};

int code_of(const EtcdReply& r) { return r.code != 0 ? r.code : EIO; }  // as EtcdReply::check

}  // namespace

std::string_view to_string(LeaseState s) noexcept {
  switch (s) {
    case LeaseState::joined: return "joined";
    case LeaseState::rejoining: return "rejoining";
    case LeaseState::left: return "left";
  }
  return "?";
}

MemberLease::MemberLease(reactor::Reactor& reactor, ClusterUrl url, Member self, std::chrono::seconds ttl, Held held)
    : url_(std::move(url)),
      self_(std::move(self)),
      ttl_(std::max(ttl, std::chrono::seconds(2))),
      held_(std::move(held)),
      key_(member_key(url_, self_)),
      etcd_(reactor, url_.endpoints(), std::min<std::chrono::milliseconds>(kRequestTimeout, ttl_ / 2)) {
  // The async join, run to its end here (each step bounded by kSetupTimeout).
  std::optional<std::pair<int, std::string>> failed;
  bool done = false;
  join(kSetupTimeout, 0, [&](int code, const std::string& why) {
    done = true;
    if (code != 0) failed.emplace(code, why);
  });
  while (!done) reactor.run_once(std::chrono::milliseconds(100));
  if (failed) throw ClusterError(failed->first, failed->second);
  renew_timer_ = reactor.every(renew_period(), [this] { renew(); });
  spdlog::info("kvd: joined cluster {} as {} (lease {:x}, {} s)", url_.text(), self_.id(), lease_, ttl_.count());
}

MemberLease::~MemberLease() = default;

void MemberLease::leave() noexcept {
  if (state_ == LeaseState::left) return;
  state_ = LeaseState::left;
  renew_timer_.reset();
  try {
    on_revoked(etcd_.call(kPathRevoke, revoke_body(lease_), kSetupTimeout));
  } catch (const std::exception& e) {
    spdlog::warn("kvd: leaving cluster {}: {}", url_.text(), e.what());
  }
}

void MemberLease::on_revoked(const EtcdReply& reply) const {
  if (reply.ok) {
    spdlog::info("kvd: left cluster {}", url_.text());
  } else {
    spdlog::warn("kvd: leaving cluster {}: {}; the record goes when its lease expires", url_.text(), reply.error);
  }
}

void MemberLease::leave_async(std::function<void()> done) {
  if (state_ == LeaseState::left) return done();
  state_ = LeaseState::left;
  renew_timer_.reset();
  etcd_.post(kPathRevoke, revoke_body(lease_), [this, done = std::move(done)](EtcdReply& r) {
    on_revoked(r);
    done();
  }, kSetupTimeout);
}

void MemberLease::drain_async(std::function<void(bool ok)> done) {
  self_.draining = true;  // a rejoin puts it so too
  etcd_.post(kPathPut, put_body(key_, member_value(self_), lease_),
             [done = std::move(done)](EtcdReply& r) { done(r.ok); }, kSetupTimeout);
}

void MemberLease::renew() {
  if (in_flight_ || state_ == LeaseState::left) return;
  if (state_ == LeaseState::rejoining) {
    rejoin();  // the last attempt failed: try again
    return;
  }
  in_flight_ = true;
  const Clock::time_point sent = Clock::now();
  etcd_.post(kPathKeepAlive, keepalive_body(lease_), [this, sent](EtcdReply& r) { on_renewed(r, sent); });
}

void MemberLease::confirmed(Clock::time_point sent, std::int64_t ttl_s) {
  if (!held_ || ttl_s <= 0) return;
  const auto ttl = std::chrono::duration_cast<Clock::duration>(std::chrono::seconds(ttl_s));
  held_(sent + ttl - ttl / 10);
}

void MemberLease::on_renewed(EtcdReply& reply, Clock::time_point sent) {
  in_flight_ = false;
  if (state_ == LeaseState::left) return;
  if (!reply.ok) return on_failure("renewing the lease", reply.error);
  std::string why;
  const auto lease = parse_keepalive(reply.body, why);
  if (!lease) return on_failure("renewing the lease", why);
  if (failing_) spdlog::info("kvd: cluster {}: etcd answers again", url_.text());
  failing_ = false;
  if (lease->ttl > 0) return confirmed(sent, lease->ttl);
  // Expired: etcd deleted the record. Join again under a new lease.
  spdlog::warn("kvd: cluster {}: the lease expired (not renewed within {} s); joining again", url_.text(),
               ttl_.count());
  ++rejoins_;
  state_ = LeaseState::rejoining;
  rejoin();
}

void MemberLease::join(std::chrono::milliseconds timeout, std::int64_t want, JoinDone done) {
  in_flight_ = true;
  const Clock::time_point sent = Clock::now();
  etcd_.post(kPathGrant, grant_body(ttl_.count(), want),
             [this, timeout, want, sent, done = std::move(done)](EtcdReply& r) mutable {
    std::string why;
    std::optional<Lease> lease;
    if (r.ok && (lease = parse_grant(r.body, why))) {
      lease_ = lease->id;
      return put_record(timeout, sent, lease->ttl, std::move(done));
    }
    const std::string& refusal = r.ok ? why : r.error;
    if (want != 0 && r.http_status != 0 && refusal.find("lease already exists") != std::string::npos) {
      // An earlier attempt's grant of it landed and its put did not: it is
      // this kvd's. Its TTL runs from that grant, so only the next renewal
      // tells how long it holds (no `held` now).
      lease_ = want;
      return put_record(timeout, sent, 0, std::move(done));
    }
    if (want != 0 && r.http_status != 0) {  // etcd refused that ID: any other will do
      spdlog::warn("kvd: cluster {}: etcd refused lease {:x} again ({}): joining under a new lease, as a new "
                   "incarnation", url_.text(), want, refusal);
      return join(timeout, 0, std::move(done));
    }
    in_flight_ = false;
    return done(r.ok ? EPROTO : code_of(r), "etcd lease grant: " + refusal);
  }, timeout);
}

void MemberLease::put_record(std::chrono::milliseconds timeout, Clock::time_point sent, std::int64_t ttl_s,
                             JoinDone done) {
  etcd_.post(kPathPut, put_body(key_, member_value(self_), lease_), [this, sent, ttl_s, done = std::move(done)](EtcdReply& p) {
    in_flight_ = false;
    if (!p.ok) return done(code_of(p), "etcd put of " + key_ + ": " + p.error);
    std::string why;
    const auto rev = parse_header_revision(p.body, why);
    if (!rev) return done(EPROTO, "etcd put of " + key_ + ": " + why);
    record_revision_ = *rev;
    confirmed(sent, ttl_s);
    done(0, {});
  }, timeout);
}

void MemberLease::rejoin() {
  // The lease it had, asked for again: the same incarnation, which the map
  // may still name (docs/cluster.md "Membership", A lease that lapsed).
  join(std::chrono::milliseconds(0), lease_, [this](int code, const std::string& why) {
    if (state_ == LeaseState::left) return;
    if (code != 0) return on_failure("joining again", why);
    state_ = LeaseState::joined;
    failing_ = false;
    spdlog::info("kvd: joined cluster {} again (lease {:x}, record at revision {})", url_.text(), lease_,
                 record_revision_);
  });
}

void MemberLease::on_failure(std::string_view what, const std::string& why) {
  ++renew_failures_;
  if (!failing_) {
    spdlog::warn("kvd: cluster {}: {}: {} (retrying every {} ms)", url_.text(), what, why, renew_period().count());
  }
  failing_ = true;
}

std::optional<Member> member_record(const ClusterUrl& url, const KeyValue& kv, std::string& error) {
  auto m = parse_member(kv.value, error);
  if (m && member_key(url, *m) != kv.key) {
    error = "a member record must be under its id's key (" + member_key(url, *m) + ")";
    return std::nullopt;
  }
  if (m) m->lease = kv.lease;
  return m;
}

std::vector<std::string> ClusterView::ids() const {
  std::vector<std::string> out;
  out.reserve(members.size());
  for (const Member& m : members) out.push_back(m.id());
  return out;
}

std::vector<std::int64_t> ClusterView::leases() const {
  std::vector<std::int64_t> out;
  out.reserve(members.size());
  for (const Member& m : members) out.push_back(m.lease);
  return out;
}

std::vector<std::string> ClusterView::draining() const {
  std::vector<std::string> out;
  for (const Member& m : members) {
    if (m.draining) out.push_back(m.id());
  }
  return out;
}

std::optional<Member> member_or_skip(const ClusterUrl& url, const KeyValue& kv) {
  std::string why;
  auto m = member_record(url, kv, why);
  if (!m) spdlog::warn("cluster {}: skipping {}: {}", url.text(), kv.key, why);
  return m;
}

std::optional<ShardMap> map_or_none(const ClusterUrl& url, const KeyValue& kv) {
  std::string why;
  auto map = parse_map(kv.value, why);
  if (!map) spdlog::warn("cluster {}: the shard map does not parse ({}); taken as none", url.text(), why);
  return map;
}

ClusterView view_of(const ClusterUrl& url, const std::vector<KeyValue>& kvs, std::int64_t revision) {
  ClusterView view{url, {}, std::nullopt, 0, revision};
  const std::string members = url.members_prefix();
  const std::string map = url.map_key();
  for (const auto& kv : kvs) {
    if (kv.key == map) {
      view.map_revision = kv.mod_revision;
      view.map = map_or_none(url, kv);
    } else if (kv.key.starts_with(members)) {
      if (auto m = member_or_skip(url, kv)) view.members.push_back(std::move(*m));
    }  // else another key under the cluster's prefix
  }
  std::sort(view.members.begin(), view.members.end(), [](const Member& a, const Member& b) { return a.id() < b.id(); });
  return view;
}

ClusterView read_cluster(const ClusterUrl& url, std::chrono::milliseconds timeout) {
  reactor::Reactor reactor;
  EtcdClient etcd(reactor, url.endpoints(), timeout);
  const EtcdReply reply = etcd.call(kPathRange, range_prefix_body(url.prefix()));
  reply.check("reading cluster " + url.text());
  std::string why;
  const auto range = parse_range(reply.body, why);
  if (!range) throw ClusterError(EPROTO, "reading cluster " + url.text() + ": " + why);
  return view_of(url, range->kvs, range->revision);
}

void mark_draining(const ClusterUrl& url, Member member, std::chrono::milliseconds timeout) {
  reactor::Reactor reactor;
  EtcdClient etcd(reactor, url.endpoints(), timeout);
  member.draining = true;
  const EtcdReply reply = etcd.call(kPathPut, put_body(member_key(url, member), member_value(member), member.lease));
  reply.check("marking " + member.id() + " draining in " + url.text());
}

}  // namespace rkv::cluster
