#include "kv/server/shard_gate.hpp"

#include <algorithm>

#include "proto/placement.hpp"

namespace rkv::kv::server {

void ShardGate::close_to_cluster() noexcept {
  open_ = false;
  parts_.clear();
  lease_until_ = {};
}

void ShardGate::serve(std::vector<proto::ShardPart> parts) { parts_ = std::move(parts); }

bool ShardGate::admits_member(std::string_view key, Access access, std::uint64_t epoch) const noexcept {
  if (parts_.empty()) return false;  // no map yet: no shard is ours
  if (access == Access::write && Clock::now() >= lease_until_) return false;
  const proto::ShardPart& part = parts_[proto::shard_of(key, static_cast<std::uint32_t>(parts_.size()))];
  switch (part.role) {
    case proto::ShardRole::none: return false;
    case proto::ShardRole::primary: return epoch == 0;  // a primary takes no records: it sends them
    case proto::ShardRole::backup:
      return epoch != 0 ? epoch == part.epoch : access == Access::backup_read && part.in_sync;
  }
  return false;
}

std::optional<std::uint32_t> ShardGate::shard_index(std::string_view key) const noexcept {
  if (open_ || parts_.empty()) return std::nullopt;
  return proto::shard_of(key, static_cast<std::uint32_t>(parts_.size()));
}

bool ShardGate::backs(std::string_view key) const noexcept {
  const auto s = shard_index(key);
  return s && parts_[*s].role == proto::ShardRole::backup;
}

namespace {
std::size_t count_role(const std::vector<proto::ShardPart>& parts, proto::ShardRole role) noexcept {
  return static_cast<std::size_t>(
      std::count_if(parts.begin(), parts.end(), [role](const proto::ShardPart& p) { return p.role == role; }));
}
}  // namespace

std::size_t ShardGate::served() const noexcept { return count_role(parts_, proto::ShardRole::primary); }

std::size_t ShardGate::backed() const noexcept { return count_role(parts_, proto::ShardRole::backup); }

}  // namespace rkv::kv::server
