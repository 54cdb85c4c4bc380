// A cluster's shard map: see shard_map.hpp.
#include "cluster/shard_map.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstddef>
#include <set>
#include <stdexcept>

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
    out[i] = {at == owners.begin() ? proto::ShardRole::primary : proto::ShardRole::backup, shards[i].epoch};
  }
  return out;
}

std::string map_value(const ShardMap& map) {
  nlohmann::json shards = nlohmann::json::array();
  for (const ShardOwners& s : map.shards) shards.push_back({{"epoch", s.epoch}, {"owners", s.owners}});
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
  if (owners == j.end() || !owners->is_array() || owners->empty() || owners->size() > map.replicas + 1u) {
    error = "a shard without 1 to replicas + 1 owners";
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

namespace {

// The members while a plan runs: their position in the sorted ids, and how
// many primaries and owner places each holds.
class Loads {
 public:
  explicit Loads(std::span<const std::string> ids) : ids_(ids), primaries_(ids.size()), owned_(ids.size()) {}

  [[nodiscard]] std::optional<std::size_t> index(std::string_view id) const {
    const auto it = std::lower_bound(ids_.begin(), ids_.end(), id);
    if (it == ids_.end() || *it != id) return std::nullopt;
    return static_cast<std::size_t>(it - ids_.begin());
  }
  [[nodiscard]] const std::string& id(std::size_t i) const { return ids_[i]; }
  void count(const ShardOwners& s, int sign) {
    for (std::size_t k = 0; k < s.owners.size(); ++k) {
      const std::size_t i = *index(s.owners[k]);
      if (k == 0) primaries_[i] += sign;
      owned_[i] += sign;
    }
  }
  // Fewest primaries (ties: the smaller id), most primaries (ties: the
  // smaller id), fewest places owned among members `not_in` does not hold.
  [[nodiscard]] std::size_t least_primaries() const {
    return static_cast<std::size_t>(std::min_element(primaries_.begin(), primaries_.end()) - primaries_.begin());
  }
  [[nodiscard]] std::size_t most_primaries() const {
    return static_cast<std::size_t>(std::max_element(primaries_.begin(), primaries_.end(),
                                                     [](long a, long b) { return a < b; }) -
                                    primaries_.begin());
  }
  [[nodiscard]] long primaries(std::size_t i) const { return primaries_[i]; }
  [[nodiscard]] std::optional<std::size_t> least_owned(const ShardOwners& not_in) const {
    std::optional<std::size_t> best;
    for (std::size_t i = 0; i < ids_.size(); ++i) {
      if (std::find(not_in.owners.begin(), not_in.owners.end(), ids_[i]) != not_in.owners.end()) continue;
      if (!best || owned_[i] < owned_[*best]) best = i;
    }
    return best;
  }

 private:
  std::span<const std::string> ids_;
  std::vector<long> primaries_;
  std::vector<long> owned_;
};

ShardMap first_map(std::span<const std::string> ids, MapShape shape) {
  ShardMap map{1, std::min(shape.replicas, kMaxReplicas), {}, {}};
  const std::size_t n = ids.size();
  const std::size_t width = std::min<std::size_t>(map.replicas + 1u, n);
  const std::uint32_t shards = std::clamp<std::uint32_t>(shape.shards, 1, kMaxShards);
  map.shards.resize(shards);
  for (std::uint32_t s = 0; s < shards; ++s) {
    map.shards[s].epoch = 1;
    for (std::size_t k = 0; k < width; ++k) map.shards[s].owners.push_back(ids[(s + k) % n]);
  }
  return map;
}

// Step 3 of plan_map: shard `s` of `from` goes to `to`.
void move_primary(ShardOwners& s, const std::string& to, std::size_t width) {
  const auto it = std::find(s.owners.begin(), s.owners.end(), to);
  if (it != s.owners.end()) {
    std::iter_swap(s.owners.begin(), it);  // a backup of it takes over; the primary takes its place
    return;
  }
  s.owners.insert(s.owners.begin(), to);  // the old primary becomes the first backup
  if (s.owners.size() > width) s.owners.resize(width);
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
                                 std::span<const std::int64_t> leases, MapShape shape) {
  if (leases.size() != ids.size()) throw std::invalid_argument("plan_map: a lease per member");
  if (ids.empty()) return std::nullopt;
  if (!last) {
    ShardMap first = first_map(ids, shape);
    set_leases(first, ids, leases);
    return first;
  }
  ShardMap next = *last;
  const std::size_t width = std::min<std::size_t>(next.replicas + 1u, ids.size());
  Loads loads(ids);
  // The owner `id` of `last` is the live member of that id (under the lease the map has for it).
  const auto live = [&](const std::string& id) {
    const auto i = loads.index(id);
    if (!i) return false;
    const auto it = last->leases.find(id);
    return it != last->leases.end() && it->second == leases[*i];
  };
  // 1. Only live members own shards; the first live backup of a shard whose primary left takes over.
  for (ShardOwners& s : next.shards) {
    std::erase_if(s.owners, [&](const std::string& id) { return !live(id); });
    if (s.owners.size() > width) s.owners.resize(width);
    loads.count(s, +1);
  }
  // 2. Shards with no owner left.
  for (ShardOwners& s : next.shards) {
    if (!s.owners.empty()) continue;
    s.owners.push_back(loads.id(loads.least_primaries()));
    loads.count(s, +1);
  }
  // 3. Balance the primaries.
  for (;;) {
    const std::size_t most = loads.most_primaries();
    const std::size_t least = loads.least_primaries();
    if (loads.primaries(most) - loads.primaries(least) <= 1) break;
    const std::string& from = loads.id(most);
    const std::string& to = loads.id(least);
    ShardOwners* pick = nullptr;
    for (ShardOwners& s : next.shards) {  // a shard `to` already backs, else the last one of `from`
      if (s.owners.front() != from) continue;
      if (std::find(s.owners.begin(), s.owners.end(), to) != s.owners.end()) {
        pick = &s;
        break;
      }
    }
    if (pick == nullptr) {
      for (auto it = next.shards.rbegin(); it != next.shards.rend(); ++it) {
        if (it->owners.front() == from) {
          pick = &*it;
          break;
        }
      }
    }
    loads.count(*pick, -1);
    move_primary(*pick, to, width);
    loads.count(*pick, +1);
  }
  // 4. Backups up to the width.
  for (ShardOwners& s : next.shards) {
    while (s.owners.size() < width) {
      const auto add = loads.least_owned(s);
      if (!add) break;
      loads.count(s, -1);
      s.owners.push_back(loads.id(*add));
      loads.count(s, +1);
    }
  }
  set_leases(next, ids, leases);
  if (next.shards == last->shards && next.leases == last->leases) return std::nullopt;
  next.epoch = last->epoch + 1;
  for (std::size_t i = 0; i < next.shards.size(); ++i) {  // a new primary, or the same id's new incarnation
    const std::string& was = last->shards[i].owners.front();
    const std::string& is = next.shards[i].owners.front();
    const auto lease = last->leases.find(was);
    if (is != was || lease == last->leases.end() || lease->second != next.leases.at(is)) next.shards[i].epoch = next.epoch;
  }
  return next;
}

}  // namespace rkv::cluster
