// Shipper: see shipper.hpp.

#include "kv/replica/shipper.hpp"

#include <spdlog/spdlog.h>
#include <sys/epoll.h>

#include <chrono>
#include <exception>
#include <list>
#include <set>
#include <utility>
#include <variant>

#include "reactor/reactor.hpp"

namespace rkv::kv::replica {

using client::Client;
using client::ConnState;
using client::Status;

namespace {

// How long a link waits before sending again after a refusal or a failed
// connection, and before it tries to connect again.
constexpr std::chrono::milliseconds kResendPause{100};
constexpr std::chrono::milliseconds kReconnectPause{500};
// A probe's attempts at most (one every kReconnectPause while they time out).
constexpr int kProbeTries = 6;

}  // namespace

struct Shipper::Inbox {
  explicit Inbox(client::ClientOptions o, reactor::EventFd& d) : options(std::move(o)), done_fd(&d) {}

  const client::ClientOptions options;
  reactor::EventFd wake;     // the worker's: items or stop
  reactor::EventFd* done_fd;  // the owner's: done has something
  std::mutex mu;
  // Under mu:
  std::vector<std::variant<Config, Ship, Probe>> items;
  std::vector<ShipDone> done;
  std::vector<MemberGone> gone;
  ShipperCounters counters;
  bool stop = false;
};

class Shipper::Worker {
 public:
  explicit Worker(Inbox& in) : in_(in) {
    watch_ = reactor_.watch(in_.wake.fd(), EPOLLIN, [this](std::uint32_t) { take(); });
    // Every turn, also those a connect runs while it waits (a backup or a
    // probed member that does not answer holds it up to its timeout): the
    // other links' answers reach the owner meanwhile.
    reporter_ = reactor_.add_poller([this] {
      report();
      return false;
    });
  }
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;
  Worker(Worker&&) = delete;
  Worker& operator=(Worker&&) = delete;
  ~Worker() {
    stopping_ = true;  // the clients' closing callbacks change nothing
    for (auto& [id, link] : links_) {
      if (link.client) link.client->close();
    }
    links_.clear();
  }

  // Connects outside every reactor callback (Client::connect runs the reactor).
  void run() {
    take();
    while (!stopping_) {
      reactor_.run_once(std::chrono::milliseconds(-1));
      prune();
      connect_wanted();
      run_probes();
      report();
    }
  }

 private:
  struct Entry {
    Ship ship;
    bool sent = false;
  };
  struct Link {
    LinkConfig config;
    bool configured = true;
    bool want_connect = false;
    bool warned = false;  // a connect failure was logged (once per streak)
    std::unique_ptr<Client> client;
    std::map<std::uint64_t, Entry> queue;  // by sequence number: the order posted
    std::multiset<std::string> in_flight;  // keys of sent records
    reactor::Timer pause;                  // while pending, nothing is sent
  };

  void take() {
    in_.wake.consume();
    std::vector<std::variant<Config, Ship, Probe>> items;
    {
      std::lock_guard lock(in_.mu);
      items.swap(in_.items);
      if (in_.stop) stopping_ = true;
    }
    if (stopping_) return reactor_.stop();
    for (auto& item : items) {
      if (auto* c = std::get_if<Config>(&item)) {
        apply(std::move(*c));
      } else if (auto* p = std::get_if<Probe>(&item)) {
        add_probe(std::move(*p));
      } else {
        add(std::move(std::get<Ship>(item)));
      }
    }
    for (auto& [id, link] : links_) pump(id, link);
  }

  [[nodiscard]] static bool backs(const Link& link, const Ship& ship) {
    if (!link.configured) return false;
    const auto it = link.config.backs.find(ship.shard);
    return it != link.config.backs.end() && it->second == ship.epoch;
  }

  void apply(Config config) {
    for (auto& [id, link] : links_) {
      const auto it = config.links.find(id);
      if (it == config.links.end()) {
        link.configured = false;
        link.config.backs.clear();
        continue;
      }
      link.config = std::move(it->second);  // (a link number names one member id: the same host and port)
      link.configured = true;
      config.links.erase(it);
    }
    for (auto& [id, lc] : config.links) links_[id].config = std::move(lc);
    for (auto& [id, link] : links_) {
      for (auto e = link.queue.begin(); e != link.queue.end();) {
        if (!e->second.sent && !backs(link, e->second.ship)) {
          done(e->second.ship, false);
          e = link.queue.erase(e);
        } else {
          ++e;
        }
      }
    }
  }

  // Outside every reactor callback (a Client closes by running the reactor
  // until DISCONNECTED): links no map names and with nothing in flight go.
  void prune() {
    std::erase_if(links_, [](const auto& kv) { return !kv.second.configured && kv.second.queue.empty(); });
  }

  void add(Ship ship) {
    const auto it = links_.find(ship.link);
    if (it == links_.end() || !backs(it->second, ship)) return done(ship, false);
    it->second.queue.emplace(next_seq_++, Entry{std::move(ship)});
  }

  void pump(std::uint32_t id, Link& link) {
    if (stopping_ || link.pause.pending() || link.queue.empty()) return;
    if (!link.client || link.client->state() != ConnState::established) {
      link.want_connect = true;  // run() connects after this turn
      return;
    }
    for (auto& [seq, e] : link.queue) {
      if (e.sent) continue;
      if (link.in_flight.contains(e.ship.key)) break;  // an earlier record of the key is in flight
      const Ship& s = e.ship;
      const auto value = s.large.empty() ? std::as_bytes(std::span<const char>(s.value.data(), s.value.size()))
                                         : s.large;
      const Status st = link.client->record(s.op, s.key, value, s.ttl_ms, s.epoch,
                                            [this, id, seq = seq](Status r, bool, std::span<const std::byte>) {
                                              on_reply(id, seq, r);
                                            });
      if (st != Status::ok) {
        spdlog::debug("replica: {}:{} refused a record at submit: {}", link.config.host, link.config.port,
                      client::to_string(st));
        ++counters_.refused;
        hold(id, link, kResendPause);
        return;
      }
      e.sent = true;
      link.in_flight.insert(s.key);
      ++counters_.sent;
    }
  }

  void on_reply(std::uint32_t id, std::uint64_t seq, Status st) {
    if (stopping_) return;
    const auto it = links_.find(id);
    if (it == links_.end()) return;
    Link& link = it->second;
    const auto e = link.queue.find(seq);
    if (e == link.queue.end()) return;
    if (const auto k = link.in_flight.find(e->second.ship.key); k != link.in_flight.end()) link.in_flight.erase(k);
    const bool applied = st == Status::ok;
    if (applied || !backs(link, e->second.ship)) {
      if (!e->second.ship.large.empty() && link.client) link.client->forget(e->second.ship.large);
      done(e->second.ship, applied);
      link.queue.erase(e);
    } else {
      e->second.sent = false;
      ++counters_.refused;
      spdlog::debug("replica: {}:{} did not take a record: {}", link.config.host, link.config.port,
                    client::to_string(st));
      hold(id, link, kResendPause);
    }
    pump(id, link);
  }

  // Nothing goes out on the link for `pause`; then it resumes in order.
  void hold(std::uint32_t id, Link& link, std::chrono::milliseconds pause) {
    if (link.pause.pending()) return;
    link.pause = reactor_.after(pause, [this, id] {
      const auto it = links_.find(id);
      if (it != links_.end()) pump(id, it->second);
    });
  }

  void connect_wanted() {
    for (auto& [id, link] : links_) {
      if (stopping_) return;
      if (!link.want_connect) continue;
      link.want_connect = false;
      if (link.pause.pending() || link.queue.empty()) continue;
      // Requests the old connection took down came back through on_reply; a
      // record not answered yet is sent again on the new one.
      if (link.client) link.client->close();
      link.client.reset();
      for (auto& [seq, e] : link.queue) e.sent = false;
      link.in_flight.clear();
      try {
        link.client = Client::connect(reactor_, link.config.host, link.config.port, in_.options);
        ++counters_.connects;
        spdlog::info("replica: connected to backup {}:{}", link.config.host, link.config.port);
        link.warned = false;
        // A pump() while connect() ran the reactor (records posted meanwhile)
        // found no client and asked for a connection again: this one will do.
        // (Without this, every connect made during a catch-up was closed and
        // made again at the next turn, its records all sent again.)
        link.want_connect = false;
      } catch (const client::ConnectError& ex) {
        if (ex.no_listener()) {  // each time (every kReconnectPause at most): the owner acts once per lease
          ++counters_.gone;
          gone_.push_back({link.config.member, link.config.lease});
        }
        connect_failed(id, link, ex.what());
        continue;
      } catch (const std::exception& ex) {
        connect_failed(id, link, ex.what());
        continue;
      }
      pump(id, link);
    }
  }

  void add_probe(Probe p) {
    for (const Probing& q : probes_) {
      if (q.probe.member == p.member && q.probe.lease == p.lease) return;  // already under way
    }
    probes_.emplace_back().probe = std::move(p);
  }

  // Outside every reactor callback, as connects are.
  void run_probes() {
    for (auto it = probes_.begin(); it != probes_.end() && !stopping_;) {
      Probing& p = *it;
      if (!p.due) {
        ++it;
        continue;
      }
      p.due = false;
      ++p.tries;
      ++counters_.probes;
      bool over = p.tries >= kProbeTries;
      try {
        Client::connect(reactor_, p.probe.host, p.probe.port, in_.options)->close();
        over = true;  // it listens: alive
      } catch (const client::ConnectError& ex) {
        if (ex.no_listener()) {
          ++counters_.gone;
          gone_.push_back({p.probe.member, p.probe.lease});
          over = true;
        }
      } catch (const std::exception&) {  // e.g. out of memory: tried again like a timeout
      }
      if (over) {
        it = probes_.erase(it);
        continue;
      }
      p.next = reactor_.after(kReconnectPause, [&p] { p.due = true; });  // (a list: p stays put)
      ++it;
    }
  }

  void connect_failed(std::uint32_t id, Link& link, const char* why) {
    ++counters_.connect_failures;
    if (!link.warned) {
      spdlog::warn("replica: cannot connect to backup {}:{}: {} (trying again every {} ms while the map names it)",
                   link.config.host, link.config.port, why, kReconnectPause.count());
    }
    link.warned = true;
    hold(id, link, kReconnectPause);
  }

  void done(const Ship& ship, bool applied) {
    (applied ? counters_.applied : counters_.dropped) += 1;
    done_.push_back({ship.write, ship.link, applied});
  }

  // What this turn finished goes to the owner at once: one lock, one wakeup.
  void report() {
    if (done_.empty() && gone_.empty() && counters_ == reported_) return;
    reported_ = counters_;
    const bool any = !done_.empty() || !gone_.empty();
    {
      std::lock_guard lock(in_.mu);
      in_.done.insert(in_.done.end(), std::make_move_iterator(done_.begin()), std::make_move_iterator(done_.end()));
      in_.gone.insert(in_.gone.end(), gone_.begin(), gone_.end());
      in_.counters = counters_;
    }
    done_.clear();
    gone_.clear();
    if (any) in_.done_fd->notify();
  }

  Inbox& in_;
  reactor::Reactor reactor_;
  reactor::Registration watch_;
  std::map<std::uint32_t, Link> links_;
  std::uint64_t next_seq_ = 0;
  std::vector<ShipDone> done_;
  std::vector<MemberGone> gone_;
  struct Probing {
    Probe probe;
    bool due = true;  // run_probes() tries it next
    int tries = 0;
    reactor::Timer next;  // sets due again
  };
  std::list<Probing> probes_;
  reactor::Poller reporter_;
  ShipperCounters counters_;
  ShipperCounters reported_;  // as the owner last saw them
  bool stopping_ = false;
};

Shipper::Shipper(client::ClientOptions options, reactor::EventFd& done)
    : inbox_(std::make_unique<Inbox>(std::move(options), done)) {
  thread_ = std::thread([in = inbox_.get()] {
    try {
      Worker worker(*in);
      worker.run();
    } catch (const std::exception& e) {
      spdlog::error("replica: the shipping thread failed: {} (no record reaches a backup any more)", e.what());
    }
  });
}

Shipper::~Shipper() {
  {
    std::lock_guard lock(inbox_->mu);
    inbox_->stop = true;
  }
  inbox_->wake.notify();
  thread_.join();
}

void Shipper::post(Config config) {
  {
    std::lock_guard lock(inbox_->mu);
    inbox_->items.emplace_back(std::move(config));
  }
  inbox_->wake.notify();
}

void Shipper::post(Probe probe) {
  {
    std::lock_guard lock(inbox_->mu);
    inbox_->items.emplace_back(std::move(probe));
  }
  inbox_->wake.notify();
}

void Shipper::post(std::vector<Ship>& ships) {
  if (ships.empty()) return;
  {
    std::lock_guard lock(inbox_->mu);
    inbox_->items.reserve(inbox_->items.size() + ships.size());  // may throw: then nothing moved
    for (Ship& s : ships) inbox_->items.emplace_back(std::move(s));
  }
  ships.clear();
  inbox_->wake.notify();
}

std::vector<ShipDone> Shipper::take_done() {
  std::vector<ShipDone> out;
  std::lock_guard lock(inbox_->mu);
  out.swap(inbox_->done);
  return out;
}

std::vector<MemberGone> Shipper::take_gone() {
  std::vector<MemberGone> out;
  std::lock_guard lock(inbox_->mu);
  out.swap(inbox_->gone);
  return out;
}

ShipperCounters Shipper::counters() const {
  std::lock_guard lock(inbox_->mu);
  return inbox_->counters;
}

}  // namespace rkv::kv::replica
