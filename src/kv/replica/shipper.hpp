#pragma once
// Shipper: the thread that sends a primary's replication records to its
// backups (docs/cluster.md "Replication"), one kv::Client per backup, on a
// Reactor of its own. Client::connect runs its reactor while it waits for
// rdma_cm, which a callback of the server's reactor may not do, and two
// members connecting to each other from their server reactors would each
// wait for the other to accept: hence a thread.
//
// The owner (the Replicator, on the server's thread) hands over work with
// post(): a Config (every backup link and the (shard, epoch) pairs it backs)
// or Ships (one record for one link), in order. The thread answers with one
// ShipDone per Ship, through take_done() after the owner's eventfd fired:
// applied (the backup acknowledged it) or dropped (the link no longer backs
// the record's shard at its epoch: the map moved on). A record the backup
// refuses (its map differs for now) or that a failed connection took down
// is sent again, after a pause, in order, until one of those two happens.
//
// A link whose connect the backup's node refuses because nothing listens
// on its port (ConnectError::no_listener: the backup's process is gone) is
// reported (at each such failure) through take_gone(), with the member and
// lease the Config gave it, so the owner can have the member's lease
// revoked at once instead of waiting for it to expire (docs/cluster.md
// "Membership", Dying). A Probe asks the same of a member this one does not
// ship to (a primary whose replication connection into this member
// dropped): connect once, again every 500 ms while the attempt times out
// (a dying process's listener may still take the request), at most
// kProbeTries times; a refusal is reported the same way, a connection
// closed at once (it lives).
//
// Order: records of one link go out in the order posted; one whose key has
// an earlier record still in flight waits for it (a large SET completes
// when the backup's READ does, so a later SET of the same key could
// otherwise overtake it), and so does everything behind it.
//
// A large record's value is READ by the backup straight from `large`
// (the primary's arena, pinned by the owner until the ShipDone): no copy.
//
// Owns: the thread, its Reactor, the Clients. Thread: post(), take_done()
// and the destructor on the owner's; everything else on its own.

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "kv/client/client.hpp"
#include "proto/wire.hpp"
#include "reactor/event_fd.hpp"

namespace rkv::kv::replica {

struct LinkConfig {
  std::string member;  // its member id
  std::string host;
  std::uint16_t port = 0;
  std::int64_t lease = 0;  // the member's etcd lease as the map's view had it (0: unknown)
  std::map<std::uint32_t, std::uint64_t> backs;  // shard -> its epoch, of the shards this link backs
};
// Every link by its number (the owner's, never reused); a link missing from
// a Config backs nothing any more.
struct Config {
  std::map<std::uint32_t, LinkConfig> links;
};

struct Ship {
  std::uint64_t write = 0;  // the owner's id of the write it belongs to
  std::uint32_t link = 0;
  std::uint32_t shard = 0;
  std::uint64_t epoch = 0;
  proto::Opcode op = proto::Opcode::set;  // set, del or expire
  std::string key;
  std::string value;                  // a small SET's value (a copy)
  std::span<const std::byte> large;   // a large SET's value, in memory the owner keeps alive
  std::uint64_t ttl_ms = 0;
};

struct ShipDone {
  std::uint64_t write = 0;
  std::uint32_t link = 0;
  bool applied = false;  // false: dropped
};

// Is this member still there? (See above.)
struct Probe {
  std::string member;
  std::string host;
  std::uint16_t port = 0;
  std::int64_t lease = 0;  // as the map has it
};

// A member whose node said nothing listens on its port: a link's backup, or a probe's member.
struct MemberGone {
  std::string member;
  std::int64_t lease = 0;  // its LinkConfig's or Probe's
};

struct ShipperCounters {
  std::uint64_t sent = 0;      // records submitted (resends included)
  std::uint64_t applied = 0;   // acknowledged by a backup
  std::uint64_t refused = 0;   // refused or failed, to be sent again
  std::uint64_t dropped = 0;   // given up: the link no longer backs the shard at that epoch
  std::uint64_t connects = 0;  // connections made
  std::uint64_t connect_failures = 0;
  std::uint64_t gone = 0;      // connects refused as nothing listens on the member's port
  std::uint64_t probes = 0;    // probe connection attempts

  bool operator==(const ShipperCounters&) const = default;
};

class Shipper {
 public:
  // `done` fires (notify()) whenever take_done() has something. The clients'
  // options: kvd's auth token, no spinning (the thread shares the cores with
  // the server). Throws std::system_error if the thread cannot start.
  Shipper(client::ClientOptions options, reactor::EventFd& done);
  Shipper(const Shipper&) = delete;
  Shipper& operator=(const Shipper&) = delete;
  Shipper(Shipper&&) = delete;
  Shipper& operator=(Shipper&&) = delete;
  ~Shipper();  // stops the thread (pending Ships are dropped, unanswered) and joins it

  void post(Config config);
  void post(Probe probe);
  // Moves the ships out (`ships` is then empty). Throws std::bad_alloc
  // with nothing moved.
  void post(std::vector<Ship>& ships);
  [[nodiscard]] std::vector<ShipDone> take_done();
  [[nodiscard]] std::vector<MemberGone> take_gone();
  [[nodiscard]] ShipperCounters counters() const;

 private:
  struct Inbox;
  class Worker;

  std::unique_ptr<Inbox> inbox_;
  std::thread thread_;
};

}  // namespace rkv::kv::replica
