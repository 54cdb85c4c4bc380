#pragma once
// ClusterWatch: a live view of a cluster's members and shard map
// (docs/cluster.md "Following the membership"), for clients and for the
// kvd that keep the map. It starts from a read of the cluster
// (read_cluster) and follows etcd's watch of the cluster's prefix from the
// revision after it, so it misses no change in between.
//
// Each watch message that changes the members or the map calls `on_change`
// with the whole view, from a reactor callback. When the stream ends (etcd
// restarted or compacted the history, the connection broke, a message did
// not parse), the cluster is read again and a new watch starts from that
// read's revision: after a backoff of 100 ms doubling to 2 s while etcd
// cannot be reached. A failure is logged once per streak; meanwhile the
// last view known stays in force.
//
// Owns: its EtcdClient and the backoff timer. The Reactor is the caller's
// and must outlive it. Thread: the reactor's; `on_change` must not destroy
// the ClusterWatch.

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cluster/etcd.hpp"
#include "cluster/keyspace.hpp"
#include "cluster/membership.hpp"
#include "reactor/reactor.hpp"

namespace rkv::cluster {

enum class WatchState : std::uint8_t {
  watching,  // a watch stream is open (or being opened)
  waiting,   // the stream ended: the backoff timer runs
  reading,   // reading the cluster again (then watching)
};
[[nodiscard]] std::string_view to_string(WatchState s) noexcept;

class ClusterWatch {
 public:
  using OnChange = std::function<void(const ClusterView&)>;

  // Starts watching start.url after `start` (a read_cluster).
  // Throws ClusterError if libcurl cannot be set up.
  ClusterWatch(reactor::Reactor& reactor, const ClusterView& start, OnChange on_change);
  ~ClusterWatch() = default;  // the stream and a read in flight are dropped
  ClusterWatch(const ClusterWatch&) = delete;
  ClusterWatch& operator=(const ClusterWatch&) = delete;
  ClusterWatch(ClusterWatch&&) = delete;
  ClusterWatch& operator=(ClusterWatch&&) = delete;

  [[nodiscard]] ClusterView view() const;
  [[nodiscard]] const ClusterUrl& url() const noexcept { return url_; }
  [[nodiscard]] WatchState state() const noexcept { return state_; }
  [[nodiscard]] std::int64_t revision() const noexcept { return revision_; }
  // Changes delivered, and watches that ended (each followed by a new read).
  [[nodiscard]] std::uint64_t changes() const noexcept { return changes_; }
  [[nodiscard]] std::uint64_t restarts() const noexcept { return restarts_; }

 private:
  void watch();                                  // -> watching: a stream from revision_ + 1
  [[nodiscard]] bool on_line(std::string_view line);  // a stream message; false ends the stream
  void on_end(const EtcdReply& reply);           // -> waiting
  void wait_then_read();                         // -> waiting: read() after the backoff (doubled for next time)
  void read();                                   // -> reading (the backoff passed)
  void on_read(EtcdReply& reply);                // -> watching, or waiting again
  [[nodiscard]] bool apply(const WatchEvent& ev);  // one event; true if it changed the view
  void failed(const std::string& why);           // logs once per streak
  void notify();                                 // on_change with the view

  reactor::Reactor* reactor_;
  ClusterUrl url_;
  OnChange on_change_;
  EtcdClient etcd_;
  reactor::Timer backoff_timer_;
  std::map<std::string, Member> members_;  // by etcd key
  std::optional<ShardMap> map_;
  std::int64_t map_revision_ = 0;
  std::int64_t revision_ = 0;              // every change up to this one is in the view
  WatchState state_ = WatchState::watching;
  std::chrono::milliseconds backoff_;
  bool failing_ = false;
  std::uint64_t changes_ = 0;
  std::uint64_t restarts_ = 0;
};

}  // namespace rkv::cluster
