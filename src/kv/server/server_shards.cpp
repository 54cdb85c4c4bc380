// Server::serve_shards and its sweep: a cluster member drops its keys of the
// shards it no longer holds, as their primary or a backup (server.hpp,
// docs/cluster.md "Fencing").
//
// Thread: the reactor's.

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <exception>
#include <string_view>
#include <utility>
#include <vector>

#include "kv/server/server.hpp"
#include "proto/placement.hpp"

namespace rkv::kv::server {

namespace {
bool held(const proto::ShardPart& part) noexcept { return part.role != proto::ShardRole::none; }
}  // namespace

void Server::serve_shards(std::vector<proto::ShardPart> parts) {
  if (parts.empty()) {  // no map: nothing is served, nothing can be told lost
    gate_.serve({});
    return;
  }
  // A shard held again, or a new shard count, while a sweep is under way:
  // that sweep ends first, so nothing held from before is served again.
  if (!dropping_.empty()) {
    bool finish = dropping_.size() != parts.size();
    for (std::size_t i = 0; !finish && i < parts.size(); ++i) finish = held(parts[i]) && dropping_[i];
    if (finish) drop_keys(true);
  }
  // Before the first map (or under a new shard count) every shard may hold
  // keys (recovered from the log): each one not held now is lost.
  const std::vector<proto::ShardPart>& before = gate_.shards();
  const bool all_held = before.size() != parts.size();
  if (dropping_.empty()) dropping_.assign(parts.size(), false);
  std::size_t newly_lost = 0;
  std::size_t newly_backed = 0;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    // A shard it starts to back having had no part in it (or before the
    // first map) is emptied before it takes a record: what it held of it
    // (keys recovered from the log, an earlier turn as owner) may be stale,
    // and the primary's catch-up would not remove keys deleted since. A
    // primary that becomes a backup keeps its keys: they are current.
    if (parts[i].role == proto::ShardRole::backup && (all_held || !held(before[i]))) {
      dropping_[i] = true;
      ++newly_backed;
      continue;
    }
    if (held(parts[i]) || dropping_[i] || !(all_held || held(before[i]))) continue;
    dropping_[i] = true;
    ++newly_lost;
  }
  gate_.serve(std::move(parts));
  if (newly_backed > 0) {  // at once: its records may come in the next turn
    spdlog::info("server: emptying {} shard(s) it now backs before taking their records", newly_backed);
    drop_cursor_ = {};
    drop_keys(true);
    return;
  }
  if (newly_lost == 0) {
    if (std::find(dropping_.begin(), dropping_.end(), true) == dropping_.end()) dropping_.clear();
    return;  // a sweep under way (if any) goes on where it was
  }
  spdlog::info("server: dropping its keys of {} shard(s) it no longer holds", newly_lost);
  drop_cursor_ = {};  // the newly lost shards' keys may be anywhere: from the start
  drop_keys(false);
}

void Server::drop_keys(bool to_end) noexcept {
  drop_more_ = reactor::Timer();
  const auto shards = static_cast<std::uint32_t>(dropping_.size());
  const Store::KeyFilter doomed = [this, shards](std::string_view key) {
    return dropping_[proto::shard_of(key, shards)];
  };
  const std::uint64_t before = store_->dropped_keys();
  bool done = false;
  do {
    done = store_->sweep(drop_cursor_, kDropSlots, doomed);  // each with its tombstone (EvictionLog)
  } while (to_end && !done);
  if (durability_ != nullptr && store_->dropped_keys() != before) durability_->flush();
  if (done) {
    dropping_.clear();
    spdlog::info("server: keys of shards no longer held dropped ({} so far)", store_->dropped_keys());
    return;
  }
  try {  // more slots at the next turn, after what is waiting (never a stall)
    drop_more_ = reactor_->after(std::chrono::nanoseconds(0), [this] { drop_keys(false); });
  } catch (const std::exception& e) {
    spdlog::error("server: dropping keys of lost shards not continued ({}): finishing it now", e.what());
    drop_keys(true);
  }
}

}  // namespace rkv::kv::server
