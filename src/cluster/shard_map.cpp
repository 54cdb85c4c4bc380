// A cluster's shard map: see shard_map.hpp.
#include "cluster/shard_map.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstddef>
#include <set>
#include <stdexcept>
#include <tuple>

namespace rkv::cluster {

std::map<std::string, std::uint32_t> ShardMap::primaries() const {
  std::map<std::string, std::uint32_t> n;
  for (const ShardOwners& s : shards) ++n[s.owners.front()];
  return n;
}

std::vector<proto::ShardPart> ShardMap::parts_of(std::string_view id, std::int64_t lease) const {
  std::vector<proto::ShardPart> out(shards.size());
  const auto it = leases.find(std::string(id));
  if (it == leases.end() || it->second != lease) return out;  // not this incarnation's
  for (std::size_t i = 0; i < shards.size(); ++i) {
    const auto& owners = shards[i].owners;
    const auto at = std::find(owners.begin(), owners.end(), id);
    if (at == owners.end()) continue;
    const bool in_sync = std::find(shards[i].in_sync.begin(), shards[i].in_sync.end(), id) != shards[i].in_sync.end();
    out[i] = {at == owners.begin() ? proto::ShardRole::primary : proto::ShardRole::backup, shards[i].epoch, in_sync};
  }
  return out;
}

std::string map_value(const ShardMap& map) {
  nlohmann::json shards = nlohmann::json::array();
  for (const ShardOwners& s : map.shards) {
    nlohmann::json j{{"epoch", s.epoch}, {"owners", s.owners}, {"in_sync", s.in_sync}};
    if (!s.taker.empty()) j["taker"] = s.taker;
    shards.push_back(std::move(j));
  }
  return nlohmann::json{{"epoch", map.epoch}, {"replicas", map.replicas}, {"shards", std::move(shards)},
                        {"leases", map.leases}}
      .dump();
}

namespace {

bool get_u64(const nlohmann::json& j, const char* name, std::uint64_t& out) {
  const auto it = j.find(name);
  if (it == j.end() || !it->is_number_unsigned()) return false;
  out = it->get<std::uint64_t>();
  return true;
}

std::optional<ShardOwners> parse_shard(const nlohmann::json& j, const ShardMap& map, std::string& error) {
  ShardOwners s;
  if (!j.is_object() || !get_u64(j, "epoch", s.epoch)) {
    error = "a shard without an epoch";
    return std::nullopt;
  }
  if (s.epoch > map.epoch) {
    error = "a shard's epoch above the map's";
    return std::nullopt;
  }
  const auto owners = j.find("owners");
  if (owners == j.end() || !owners->is_array() || owners->empty() || owners->size() > max_owners(map.replicas)) {
    error = "a shard without 1 to max_owners(replicas) owners";
    return std::nullopt;
  }
  std::set<std::string_view> seen;
  for (const auto& o : *owners) {
    if (!o.is_string() || o.get_ref<const std::string&>().empty()) {
      error = "an owner that is not an id";
      return std::nullopt;
    }
    if (!seen.insert(o.get_ref<const std::string&>()).second) {
      error = "a shard with an owner twice";
      return std::nullopt;
    }
    s.owners.push_back(o.get<std::string>());
  }
  // in_sync: the primary, then some of the backups, in the owners' order.
  const auto in_sync = j.find("in_sync");
  if (in_sync == j.end() || !in_sync->is_array() || in_sync->empty()) {
    error = "a shard without in_sync";
    return std::nullopt;
  }
  std::size_t next = 0;  // the owner the next in-sync id may be, at the earliest
  for (const auto& o : *in_sync) {
    if (!o.is_string()) {
      error = "an in_sync that is not an id";
      return std::nullopt;
    }
    const auto at = std::find(s.owners.begin() + static_cast<std::ptrdiff_t>(next), s.owners.end(),
                              o.get_ref<const std::string&>());
    if (at == s.owners.end() || (next == 0 && at != s.owners.begin())) {
      error = "an in_sync that is not the primary and some backups in their order";
      return std::nullopt;
    }
    next = static_cast<std::size_t>(at - s.owners.begin()) + 1;
    s.in_sync.push_back(*at);
  }
  if (const auto taker = j.find("taker"); taker != j.end()) {
    if (!taker->is_string() || std::find(s.owners.begin() + 1, s.owners.end(), taker->get_ref<const std::string&>()) ==
                                   s.owners.end()) {
      error = "a taker that is not a backup";
      return std::nullopt;
    }
    s.taker = taker->get<std::string>();
  }
  return s;
}

}  // namespace

std::optional<ShardMap> parse_map(std::string_view value, std::string& error) {
  const auto j = nlohmann::json::parse(value, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) {
    error = "not a JSON object";
    return std::nullopt;
  }
  ShardMap map;
  std::uint64_t replicas = 0;
  if (!get_u64(j, "epoch", map.epoch) || !get_u64(j, "replicas", replicas)) {
    error = "no epoch or replicas";
    return std::nullopt;
  }
  if (replicas > kMaxReplicas) {
    error = "replicas over " + std::to_string(kMaxReplicas);
    return std::nullopt;
  }
  map.replicas = static_cast<std::uint32_t>(replicas);
  const auto shards = j.find("shards");
  if (shards == j.end() || !shards->is_array() || shards->empty() || shards->size() > kMaxShards) {
    error = "not 1 to " + std::to_string(kMaxShards) + " shards";
    return std::nullopt;
  }
  map.shards.reserve(shards->size());
  for (const auto& s : *shards) {
    auto owners = parse_shard(s, map, error);
    if (!owners) return std::nullopt;
    map.shards.push_back(std::move(*owners));
  }
  const auto leases = j.find("leases");
  if (leases == j.end() || !leases->is_object()) {
    error = "no leases";
    return std::nullopt;
  }
  for (const auto& [id, lease] : leases->items()) {
    if (!lease.is_number_integer()) {
      error = "a lease that is not an integer";
      return std::nullopt;
    }
    map.leases.emplace(id, lease.get<std::int64_t>());
  }
  for (const ShardOwners& s : map.shards) {
    for (const std::string& id : s.owners) {
      if (!map.leases.contains(id)) {
        error = "an owner without a lease";
        return std::nullopt;
      }
    }
  }
  return map;
}

bool mark_in_sync(ShardMap& map, std::uint32_t shard, std::string_view id, std::uint64_t epoch) {
  if (shard >= map.shards.size()) return false;
  ShardOwners& s = map.shards[shard];
  if (s.epoch != epoch || std::find(s.in_sync.begin(), s.in_sync.end(), id) != s.in_sync.end()) return false;
  if (std::find(s.owners.begin(), s.owners.end(), id) == s.owners.end()) return false;
  std::vector<std::string> in_sync;  // rebuilt in the owners' order
  for (const std::string& o : s.owners) {
    if (o == id || std::find(s.in_sync.begin(), s.in_sync.end(), o) != s.in_sync.end()) in_sync.push_back(o);
  }
  s.in_sync = std::move(in_sync);
  return true;
}

namespace {

bool holds(const std::vector<std::string>& list, std::string_view id) {
  return std::find(list.begin(), list.end(), id) != list.end();
}

// The members while a plan runs: their position in the sorted ids, how many
// primaries each is to have, and how many owner places each holds.
class Loads {
 public:
  // Members in `draining` are passed over by least_primaries, most_primaries
  // and least_owned while another member is left.
  Loads(std::span<const std::string> ids, std::span<const std::string> draining)
      : ids_(ids), primaries_(ids.size()), owned_(ids.size()), eligible_(ids.size(), true) {
    for (std::size_t i = 0; i < ids.size(); ++i) {
      eligible_[i] = !std::binary_search(draining.begin(), draining.end(), ids[i]);
    }
    if (std::find(eligible_.begin(), eligible_.end(), true) == eligible_.end()) eligible_.assign(ids.size(), true);
  }

  [[nodiscard]] std::optional<std::size_t> index(std::string_view id) const {
    const auto it = std::lower_bound(ids_.begin(), ids_.end(), id);
    if (it == ids_.end() || *it != id) return std::nullopt;
    return static_cast<std::size_t>(it - ids_.begin());
  }
  [[nodiscard]] const std::string& id(std::size_t i) const { return ids_[i]; }
  [[nodiscard]] std::size_t size() const noexcept { return ids_.size(); }
  void count(const ShardOwners& s, int sign) {
    for (std::size_t k = 0; k < s.owners.size(); ++k) {
      const std::size_t i = *index(s.owners[k]);
      if (k == 0) primaries_[i] += sign;
      owned_[i] += sign;
    }
  }
  void primary(std::string_view id, int sign) { primaries_[*index(id)] += sign; }
  void owner(std::string_view id, int sign) { owned_[*index(id)] += sign; }
  // Fewest primaries (ties: the smaller id), most primaries (ties: the
  // smaller id), fewest places owned among members `not_in` does not hold.
  [[nodiscard]] std::size_t least_primaries() const {
    std::optional<std::size_t> best;
    for (std::size_t i = 0; i < ids_.size(); ++i) {
      if (eligible_[i] && (!best || primaries_[i] < primaries_[*best])) best = i;
    }
    return *best;
  }
  [[nodiscard]] std::size_t most_primaries() const {
    std::optional<std::size_t> best;
    for (std::size_t i = 0; i < ids_.size(); ++i) {
      if (eligible_[i] && (!best || primaries_[i] > primaries_[*best])) best = i;
    }
    return *best;
  }
  [[nodiscard]] bool eligible(std::string_view id) const { return eligible_[*index(id)]; }
  [[nodiscard]] long primaries(std::size_t i) const { return primaries_[i]; }
  [[nodiscard]] long owned(std::string_view id) const { return owned_[*index(id)]; }

 private:
  std::span<const std::string> ids_;
  std::vector<long> primaries_;
  std::vector<long> owned_;
  std::vector<bool> eligible_;  // not draining (all of them, if every member is)
};

// How many shards of each primary each member backs. Spreading a primary's
// backups over the members spreads its shards over them when it dies
// (rule 1 promotes one backup per shard), instead of piling them on one.
class Pairs {
 public:
  Pairs(const Loads& loads, std::span<const ShardOwners> shards) : loads_(loads), n_(loads.size()), count_(n_ * n_) {
    for (const ShardOwners& s : shards) {
      for (std::size_t k = 1; k < s.owners.size(); ++k) add(s.owners.front(), s.owners[k], +1);
    }
  }
  void add(std::string_view primary, std::string_view backup, int sign) {
    count_[*loads_.index(primary) * n_ + *loads_.index(backup)] += sign;
  }
  [[nodiscard]] long of(std::string_view primary, std::string_view backup) const {
    return count_[*loads_.index(primary) * n_ + *loads_.index(backup)];
  }
  // Rule 3's new backup of `s`: among the members that do not own it, the
  // one that backs the fewest of its primary's shards, then owns the fewest.
  [[nodiscard]] std::optional<std::size_t> best_backup(const ShardOwners& s) const {
    const std::size_t p = *loads_.index(s.owners.front());
    std::optional<std::size_t> best;
    const auto rank = [&](std::size_t i) { return std::pair{count_[p * n_ + i], loads_.owned(loads_.id(i))}; };
    for (std::size_t i = 0; i < n_; ++i) {
      if (!loads_.eligible(loads_.id(i)) || holds(s.owners, loads_.id(i))) continue;
      if (!best || rank(i) < rank(*best)) best = i;
    }
    return best;
  }

 private:
  const Loads& loads_;
  std::size_t n_;
  std::vector<long> count_;  // [primary * n_ + backup]
};

// Rule 3: each shard filled up to `width` owners.
void fill_backups(std::span<ShardOwners> shards, std::size_t width, Loads& loads) {
  Pairs pairs(loads, shards);
  for (ShardOwners& s : shards) {
    while (s.owners.size() < width) {
      const auto add = pairs.best_backup(s);
      if (!add) break;
      s.owners.push_back(loads.id(*add));
      loads.owner(s.owners.back(), +1);
      pairs.add(s.owners.front(), s.owners.back(), +1);
    }
  }
}

// No taker, every shard as wide as it can be and every owner in sync.
bool settled(std::span<const ShardOwners> shards, std::size_t width) {
  return std::all_of(shards.begin(), shards.end(), [&](const ShardOwners& s) {
    return s.taker.empty() && s.owners.size() == width && s.in_sync == s.owners;
  });
}

// Rule 4's last part, on a settled map with no primary to move: a shard
// whose primary has one backup backing two or more of its shards more than
// another member does gets that member as an extra owner. Once its primary
// caught it up, rule 5 drops the backup it relieves; until then that backup
// keeps the copy. A cluster formed by joins needs it: a member that joins
// backs only the shards it takes over, so the others keep the backups they had.
void spread_backups(std::span<ShardOwners> shards, Loads& loads) {
  Pairs pairs(loads, shards);
  for (ShardOwners& s : shards) {
    if (s.owners.size() < 2) continue;
    const std::string primary = s.owners.front();  // a copy: owners grows below
    std::size_t most = 1;
    for (std::size_t k = 2; k < s.owners.size(); ++k) {
      if (pairs.of(primary, s.owners[k]) > pairs.of(primary, s.owners[most])) most = k;
    }
    const auto add = pairs.best_backup(s);
    if (!add || pairs.of(primary, s.owners[most]) < pairs.of(primary, loads.id(*add)) + 2) continue;
    pairs.add(primary, s.owners[most], -1);  // as if relieved already: the next shard sees the spread
    s.owners.push_back(loads.id(*add));
    loads.owner(s.owners.back(), +1);
    pairs.add(primary, s.owners.back(), +1);
  }
}

// A shard spread_backups() gave an extra owner that is not in sync yet.
bool spreading(const ShardOwners& s, std::size_t width) {
  if (!s.taker.empty() || s.owners.size() != width + 1 || holds(s.in_sync, s.owners.back())) return false;
  return std::all_of(s.owners.begin(), s.owners.end() - 1, [&](const std::string& o) { return holds(s.in_sync, o); });
}

// Primaries round-robin in id order, backups by rule 3.
ShardMap first_map(std::span<const std::string> ids, MapShape shape) {
  ShardMap map{1, std::min(shape.replicas, kMaxReplicas), {}, {}};
  const std::size_t n = ids.size();
  const std::size_t width = std::min<std::size_t>(map.replicas + 1u, n);
  const std::uint32_t shards = std::clamp<std::uint32_t>(shape.shards, 1, kMaxShards);
  map.shards.resize(shards);
  Loads loads(ids, {});
  for (std::uint32_t s = 0; s < shards; ++s) {
    map.shards[s].epoch = 1;
    map.shards[s].owners.push_back(ids[s % n]);
    loads.count(map.shards[s], +1);
  }
  fill_backups(map.shards, width, loads);
  for (ShardOwners& s : map.shards) s.in_sync = s.owners;
  return map;
}

// Rule 1's new primary of a shard whose primary left: of the owners left,
// the in-sync one with the fewest primaries (ties: the first), else the
// first; moved to the front.
void promote(ShardOwners& s, const Loads& loads) {
  auto best = s.owners.end();
  for (auto it = s.owners.begin(); it != s.owners.end(); ++it) {
    if (!holds(s.in_sync, *it)) continue;
    if (best == s.owners.end() || loads.primaries(*loads.index(*it)) < loads.primaries(*loads.index(*best))) best = it;
  }
  if (best == s.owners.end()) best = s.owners.begin();
  std::rotate(s.owners.begin(), best, best + 1);
}

// Rule 4: `to` becomes the primary of `s` (it is an owner, or replicas is 0).
void move_primary(ShardOwners& s, const std::string& to, std::size_t width) {
  const auto it = std::find(s.owners.begin(), s.owners.end(), to);
  if (it != s.owners.end()) {
    std::iter_swap(s.owners.begin(), it);  // a backup of it takes over; the primary takes its place
    return;
  }
  s.owners.insert(s.owners.begin(), to);  // the old primary becomes the first backup
  if (s.owners.size() > width) s.owners.resize(width);
}

// Rule 5: drops backups of `s` over `limit`, never its primary or `keep`:
// those not in sync first, then those that back the most of its primary's
// shards, then those that own the most (ties: the later).
void trim(ShardOwners& s, std::size_t limit, const std::string& keep, Loads& loads, Pairs& pairs) {
  while (s.owners.size() > limit) {
    std::optional<std::size_t> drop;
    const auto rank = [&](std::size_t k) {
      return std::tuple{!holds(s.in_sync, s.owners[k]), pairs.of(s.owners.front(), s.owners[k]), loads.owned(s.owners[k])};
    };
    for (std::size_t k = 1; k < s.owners.size(); ++k) {
      if (s.owners[k] == keep) continue;
      if (!drop || rank(k) >= rank(*drop)) drop = k;
    }
    if (!drop) return;
    loads.owner(s.owners[*drop], -1);
    pairs.add(s.owners.front(), s.owners[*drop], -1);
    std::erase(s.in_sync, s.owners[*drop]);
    s.owners.erase(s.owners.begin() + static_cast<std::ptrdiff_t>(*drop));
  }
}

// Each owner's lease: the one it holds now (`ids`/`leases` are the live members).
void set_leases(ShardMap& map, std::span<const std::string> ids, std::span<const std::int64_t> leases) {
  map.leases.clear();
  for (const ShardOwners& s : map.shards) {
    for (const std::string& id : s.owners) {
      const auto it = std::lower_bound(ids.begin(), ids.end(), id);
      map.leases.emplace(id, leases[static_cast<std::size_t>(it - ids.begin())]);
    }
  }
}

}  // namespace

std::optional<ShardMap> plan_map(const std::optional<ShardMap>& last, std::span<const std::string> ids,
                                 std::span<const std::int64_t> leases, MapShape shape,
                                 std::span<const std::string> draining) {
  if (leases.size() != ids.size()) throw std::invalid_argument("plan_map: a lease per member");
  if (ids.empty()) return std::nullopt;
  if (!last) {
    ShardMap first = first_map(ids, shape);
    set_leases(first, ids, leases);
    return first;
  }
  ShardMap next = *last;
  const std::size_t width = std::min<std::size_t>(next.replicas + 1u, ids.size());
  Loads loads(ids, draining);
  // The owner `id` of `last` is the live member of that id (under the lease the map has for it).
  const auto live = [&](const std::string& id) {
    const auto i = loads.index(id);
    if (!i) return false;
    const auto it = last->leases.find(id);
    return it != last->leases.end() && it->second == leases[*i];
  };
  // 1. Only live members own shards; a shard whose primary left gets a new
  // one, chosen once the shards that kept theirs are counted.
  std::vector<bool> orphaned(next.shards.size());
  for (std::size_t i = 0; i < next.shards.size(); ++i) {
    ShardOwners& s = next.shards[i];
    const std::string was = s.owners.front();
    std::erase_if(s.owners, [&](const std::string& id) { return !live(id); });
    std::erase_if(s.in_sync, [&](const std::string& id) { return !live(id); });
    orphaned[i] = !s.owners.empty() && s.owners.front() != was;
    if (!orphaned[i]) loads.count(s, +1);
  }
  for (std::size_t i = 0; i < next.shards.size(); ++i) {
    if (!orphaned[i]) continue;
    ShardOwners& s = next.shards[i];
    promote(s, loads);
    loads.count(s, +1);
  }
  for (ShardOwners& s : next.shards) {
    if (!s.taker.empty() && (!live(s.taker) || s.owners.empty() || s.owners.front() == s.taker)) s.taker.clear();
  }
  // 2. Shards with no owner left.
  for (ShardOwners& s : next.shards) {
    if (!s.owners.empty()) continue;
    s.owners.push_back(loads.id(loads.least_primaries()));
    s.in_sync = s.owners;
    loads.count(s, +1);
  }
  // 3. Backups up to the width.
  fill_backups(next.shards, width, loads);
  // 4. Takers in sync take over; then balance the primaries, counting each
  // shard for its taker if it has one. A shard moves once per plan.
  std::vector<bool> moved(next.shards.size());
  const auto swap_to = [&](ShardOwners& s, const std::string& to) {
    const std::vector<std::string> before = s.owners;
    move_primary(s, to, width);
    for (const std::string& id : before) {
      if (!holds(s.owners, id)) loads.owner(id, -1);
    }
    if (!holds(before, to)) loads.owner(to, +1);
    std::erase_if(s.in_sync, [&](const std::string& id) { return !holds(s.owners, id); });
  };
  for (std::size_t i = 0; i < next.shards.size(); ++i) {
    ShardOwners& s = next.shards[i];
    if (s.taker.empty()) continue;
    moved[i] = true;
    loads.primary(s.owners.front(), -1);
    loads.primary(s.taker, +1);
    if (!holds(s.in_sync, s.taker)) continue;
    swap_to(s, s.taker);
    s.taker.clear();
  }
  const auto target = [&](std::size_t i) -> const std::string& {
    return next.shards[i].taker.empty() ? next.shards[i].owners.front() : next.shards[i].taker;
  };
  // Shard i is to be `taker`'s: at once from an in-sync backup (or with
  // replicas 0), else once caught up.
  const auto move_to = [&](std::size_t i, const std::string& taker) {
    ShardOwners& s = next.shards[i];
    moved[i] = true;
    loads.primary(target(i), -1);
    loads.primary(taker, +1);
    if (next.replicas == 0 || holds(s.in_sync, taker)) {
      s.taker.clear();
      swap_to(s, taker);
      return;
    }
    if (!holds(s.owners, taker)) {
      s.owners.push_back(taker);  // caught up by the primary first
      loads.owner(taker, +1);
    }
    s.taker = taker;
  };
  // A draining member's shards go first: to its in-sync backup with the
  // fewest primaries, else to the member with the fewest.
  for (std::size_t i = 0; i < next.shards.size(); ++i) {
    if (loads.eligible(target(i))) continue;
    const ShardOwners& s = next.shards[i];
    std::optional<std::string> best;
    for (const std::string& o : s.in_sync) {
      if (loads.eligible(o) && (!best || loads.primaries(*loads.index(o)) < loads.primaries(*loads.index(*best)))) best = o;
    }
    move_to(i, best ? *best : loads.id(loads.least_primaries()));
  }
  for (;;) {
    const std::size_t most = loads.most_primaries();
    const std::size_t least = loads.least_primaries();
    if (loads.primaries(most) - loads.primaries(least) <= 1) break;
    const std::string& from = loads.id(most);
    const std::string& taker = loads.id(least);
    // A shard of `from` that `taker` holds in sync, else one it backs, else the last one.
    const auto find = [&](auto&& fits) -> std::optional<std::size_t> {
      for (std::size_t i = 0; i < next.shards.size(); ++i) {
        if (!moved[i] && target(i) == from && fits(next.shards[i])) return i;
      }
      return std::nullopt;
    };
    std::optional<std::size_t> pick = find([&](const ShardOwners& s) { return holds(s.in_sync, taker); });
    if (!pick) pick = find([&](const ShardOwners& s) { return holds(s.owners, taker); });
    if (!pick) {
      for (std::size_t i = next.shards.size(); i-- > 0;) {
        if (!moved[i] && target(i) == from) {
          pick = i;
          break;
        }
      }
    }
    if (!pick) break;  // (cannot happen: `from` is to have primaries it has not given away in this plan)
    move_to(*pick, taker);
  }
  // Then, with no primary to move and every owner in sync, the backups.
  if (next.replicas > 0 && std::none_of(moved.begin(), moved.end(), [](bool m) { return m; }) &&
      settled(next.shards, width)) {
    spread_backups(next.shards, loads);
  }
  // 5. No more owners than the width (one more with a taker, or spreading).
  Pairs pairs(loads, next.shards);
  for (ShardOwners& s : next.shards) {
    const bool extra = !s.taker.empty() || spreading(s, width);
    trim(s, width + (extra ? 1u : 0u), s.taker, loads, pairs);
  }
  set_leases(next, ids, leases);
  if (next.shards == last->shards && next.leases == last->leases) return std::nullopt;
  next.epoch = last->epoch + 1;
  for (std::size_t i = 0; i < next.shards.size(); ++i) {  // a new primary, or the same id's new incarnation
    ShardOwners& s = next.shards[i];
    const std::string& was = last->shards[i].owners.front();
    const auto lease = last->leases.find(was);
    if (s.owners.front() != was || lease == last->leases.end() || lease->second != next.leases.at(s.owners.front())) {
      s.epoch = next.epoch;
      s.in_sync = {s.owners.front()};  // it catches its backups up again (a taker too)
    }
  }
  return next;
}

std::vector<std::uint32_t> shards_started_empty(const ShardMap& last, const ShardMap& next) {
  std::vector<std::uint32_t> out;
  if (last.shards.size() != next.shards.size()) return out;
  const auto same_owner = [&](const std::string& id) {
    const auto was = last.leases.find(id);
    const auto now = next.leases.find(id);
    return was != last.leases.end() && now != next.leases.end() && was->second == now->second;
  };
  for (std::size_t i = 0; i < next.shards.size(); ++i) {
    const std::vector<std::string>& before = last.shards[i].owners;
    const bool kept = std::ranges::any_of(next.shards[i].owners, [&](const std::string& id) {
      return std::ranges::find(before, id) != before.end() && same_owner(id);
    });
    if (!kept) out.push_back(static_cast<std::uint32_t>(i));
  }
  return out;
}

}  // namespace rkv::cluster
