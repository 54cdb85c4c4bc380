// A watch of a cluster's members and map: see cluster_watch.hpp.
#include "cluster/cluster_watch.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <exception>

#include "cluster/etcd_wire.hpp"

namespace rkv::cluster {

namespace {

constexpr std::chrono::milliseconds kReadTimeout{5'000};  // a read of the cluster, and connecting a watch
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

ClusterWatch::ClusterWatch(reactor::Reactor& reactor, const ClusterView& start, OnChange on_change)
    : reactor_(&reactor),
      url_(start.url),
      on_change_(std::move(on_change)),
      etcd_(reactor, url_.endpoints(), kReadTimeout),
      map_(start.map),
      map_revision_(start.map_revision),
      revision_(start.revision),
      backoff_(kBackoffMin) {
  for (const Member& m : start.members) members_.emplace(member_key(url_, m), m);
  watch();
}

ClusterView ClusterWatch::view() const {
  // Keyed by member_key() (member_record refuses any other key): one prefix
  // plus the id, so the map's order is the ids' order.
  ClusterView v{url_, {}, map_, map_revision_, revision_};
  v.members.reserve(members_.size());
  for (const auto& [key, m] : members_) v.members.push_back(m);
  return v;
}

void ClusterWatch::watch() {
  state_ = WatchState::watching;
  try {
    etcd_.stream(kPathWatch, watch_prefix_body(url_.prefix(), revision_ + 1),
                 [this](std::string_view line) { return on_line(line); },
                 [this](EtcdReply& r) { on_end(r); });
  } catch (const std::exception& e) {
    failed(std::string("starting a watch: ") + e.what());
    on_end(EtcdReply{});
  }
}

bool ClusterWatch::on_line(std::string_view line) {
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
    if (failing_) spdlog::info("cluster {}: watching it again", url_.text());
    failing_ = false;
    backoff_ = kBackoffMin;
  }
  bool changed = false;
  for (const WatchEvent& ev : msg->events) {
    changed = apply(ev) || changed;
    revision_ = std::max(revision_, ev.kv.mod_revision);
  }
  if (changed) notify();
  return true;
}

bool ClusterWatch::apply(const WatchEvent& ev) {
  if (ev.kv.key == url_.map_key()) {
    switch (ev.type) {
      case WatchEvent::Type::put:
        map_ = map_or_none(url_, ev.kv);
        map_revision_ = ev.kv.mod_revision;
        return true;
      case WatchEvent::Type::del:
        map_.reset();
        map_revision_ = 0;
        return true;
    }
  }
  if (!ev.kv.key.starts_with(url_.members_prefix())) return false;  // another key of the cluster's
  switch (ev.type) {
    case WatchEvent::Type::put:
      if (auto m = member_or_skip(url_, ev.kv)) {
        members_.insert_or_assign(ev.kv.key, std::move(*m));
        return true;
      }
      return members_.erase(ev.kv.key) > 0;
    case WatchEvent::Type::del:
      return members_.erase(ev.kv.key) > 0;
  }
  return false;
}

void ClusterWatch::on_end(const EtcdReply& reply) {
  ++restarts_;
  if (!reply.ok && !reply.error.empty()) failed("the watch ended: " + reply.error);
  wait_then_read();
}

void ClusterWatch::wait_then_read() {
  state_ = WatchState::waiting;
  backoff_timer_ = reactor_->after(backoff_, [this] { read(); });
  backoff_ = std::min(backoff_ * 2, kBackoffMax);
}

void ClusterWatch::read() {
  state_ = WatchState::reading;
  try {
    etcd_.post(kPathRange, range_prefix_body(url_.prefix()), [this](EtcdReply& r) { on_read(r); });
  } catch (const std::exception& e) {
    failed(std::string("reading the cluster: ") + e.what());
    wait_then_read();
  }
}

void ClusterWatch::on_read(EtcdReply& reply) {
  std::string why;
  std::optional<RangeResult> range;
  if (!reply.ok || !(range = parse_range(reply.body, why))) {
    failed("reading the cluster: " + (reply.ok ? why : reply.error));
    return wait_then_read();
  }
  ClusterView now = view_of(url_, range->kvs, range->revision);
  const ClusterView before = view();
  const bool changed =
      now.members != before.members || now.map != before.map || now.map_revision != before.map_revision;
  members_.clear();
  for (Member& m : now.members) members_.emplace(member_key(url_, m), std::move(m));
  map_ = std::move(now.map);
  map_revision_ = now.map_revision;
  revision_ = now.revision;
  if (changed) notify();
  watch();
}

void ClusterWatch::failed(const std::string& why) {
  if (!failing_) spdlog::warn("cluster {}: {} (the last view of it stays in use)", url_.text(), why);
  failing_ = true;
}

void ClusterWatch::notify() {
  ++changes_;
  on_change_(view());
}

}  // namespace rkv::cluster
