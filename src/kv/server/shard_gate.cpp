#include "kv/server/shard_gate.hpp"

#include <algorithm>

#include "proto/placement.hpp"

namespace rkv::kv::server {

void ShardGate::close_to_cluster() noexcept {
  open_ = false;
  primary_.clear();
  lease_until_ = {};
}

void ShardGate::serve(std::vector<bool> primary) { primary_ = std::move(primary); }

bool ShardGate::admits_member(std::string_view key, Access access) const noexcept {
  if (primary_.empty()) return false;  // no map yet: no shard is ours
  if (access == Access::write && Clock::now() >= lease_until_) return false;
  return primary_[proto::shard_of(key, static_cast<std::uint32_t>(primary_.size()))];
}

std::size_t ShardGate::served() const noexcept {
  return static_cast<std::size_t>(std::count(primary_.begin(), primary_.end(), true));
}

}  // namespace rkv::kv::server
