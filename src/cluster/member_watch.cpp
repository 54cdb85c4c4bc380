// A client's watch of the members: see member_watch.hpp.
#include "cluster/member_watch.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <exception>

#include "cluster/etcd_wire.hpp"

namespace rkv::cluster {

namespace {

constexpr std::chrono::milliseconds kReadTimeout{5'000};  // a read of the members, and connecting a watch
constexpr std::chrono::milliseconds kBackoffMin{100};
constexpr std::chrono::milliseconds kBackoffMax{2'000};

}  // namespace

std::string_view to_string(WatchState s) noexcept {
  switch (s) {
    case WatchState::watching: return "watching";
    case WatchState::waiting: return "waiting";
    case WatchState::reading: return "reading";
  }
  return "?";
}

MemberWatch::MemberWatch(reactor::Reactor& reactor, const MemberView& start, OnChange on_change)
    : reactor_(&reactor),
      url_(start.url),
      on_change_(std::move(on_change)),
      etcd_(reactor, url_.endpoint(), kReadTimeout),
      revision_(start.revision),
      backoff_(kBackoffMin) {
  for (const Member& m : start.members) members_.emplace(member_key(url_, m), m);
  watch();
}

std::vector<Member> MemberWatch::members() const {
  // Keyed by member_key() (member_record refuses any other key): one prefix
  // plus the id, so the map's order is the ids' order.
  std::vector<Member> out;
  out.reserve(members_.size());
  for (const auto& [key, m] : members_) out.push_back(m);
  return out;
}

void MemberWatch::watch() {
  state_ = WatchState::watching;
  try {
    etcd_.stream(kPathWatch, watch_prefix_body(url_.members_prefix(), revision_ + 1),
                 [this](std::string_view line) { return on_line(line); },
                 [this](EtcdReply& r) { on_end(r); });
  } catch (const std::exception& e) {
    failed(std::string("starting a watch: ") + e.what());
    on_end(EtcdReply{});
  }
}

bool MemberWatch::on_line(std::string_view line) {
  std::string why;
  const auto msg = parse_watch(line, why);
  if (!msg) {
    failed(why);
    return false;
  }
  if (msg->canceled) {
    failed(msg->compact_revision > 0
               ? "etcd compacted the history past revision " + std::to_string(revision_ + 1)
               : "etcd canceled the watch" + (msg->cancel_reason.empty() ? "" : ": " + msg->cancel_reason));
    return false;
  }
  if (msg->created) {
    if (failing_) spdlog::info("client: cluster {}: watching the members again", url_.text());
    failing_ = false;
    backoff_ = kBackoffMin;
  }
  if (msg->events.empty()) return true;
  for (const WatchEvent& ev : msg->events) {
    switch (ev.type) {
      case WatchEvent::Type::put:
        if (auto m = member_record(url_, ev.kv, why)) {
          members_.insert_or_assign(ev.kv.key, std::move(*m));
        } else {
          spdlog::warn("cluster {}: skipping {}: {}", url_.text(), ev.kv.key, why);
          members_.erase(ev.kv.key);
        }
        break;
      case WatchEvent::Type::del:
        members_.erase(ev.kv.key);
        break;
    }
    revision_ = std::max(revision_, ev.kv.mod_revision);
  }
  notify();
  return true;
}

void MemberWatch::on_end(const EtcdReply& reply) {
  ++restarts_;
  if (!reply.ok && !reply.error.empty()) failed("the watch ended: " + reply.error);
  wait_then_read();
}

void MemberWatch::wait_then_read() {
  state_ = WatchState::waiting;
  backoff_timer_ = reactor_->after(backoff_, [this] { read(); });
  backoff_ = std::min(backoff_ * 2, kBackoffMax);
}

void MemberWatch::read() {
  state_ = WatchState::reading;
  try {
    etcd_.post(kPathRange, range_prefix_body(url_.members_prefix()), [this](EtcdReply& r) { on_read(r); });
  } catch (const std::exception& e) {
    failed(std::string("reading the members: ") + e.what());
    wait_then_read();
  }
}

void MemberWatch::on_read(EtcdReply& reply) {
  std::string why;
  std::optional<RangeResult> range;
  if (!reply.ok || !(range = parse_range(reply.body, why))) {
    failed("reading the members: " + (reply.ok ? why : reply.error));
    return wait_then_read();
  }
  std::map<std::string, Member> now;
  for (Member& m : members_of(url_, range->kvs)) now.emplace(member_key(url_, m), std::move(m));
  revision_ = range->revision;
  const bool changed = now.size() != members_.size() ||
                       !std::equal(now.begin(), now.end(), members_.begin(), [](const auto& a, const auto& b) {
                         return a.first == b.first && a.second.capacity == b.second.capacity;  // the key is the id's
                       });
  members_ = std::move(now);
  if (changed) notify();
  watch();
}

void MemberWatch::failed(const std::string& why) {
  if (!failing_) spdlog::warn("client: cluster {}: {} (the last members known stay in use)", url_.text(), why);
  failing_ = true;
}

void MemberWatch::notify() {
  ++changes_;
  on_change_(members());
}

}  // namespace rkv::cluster
