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

ShardGate::Admission ShardGate::admit_member(std::string_view key, Access access, std::uint64_t epoch) const noexcept {
  if (parts_.empty()) return {};  // no map yet: no shard is ours
  const std::uint32_t shard = proto::shard_of(key, static_cast<std::uint32_t>(parts_.size()));
  const proto::ShardPart& part = parts_[shard];
  Admission a{.admitted = false, .role = part.role, .shard = shard};
  if (access == Access::write && Clock::now() >= lease_until_) return a;
  switch (part.role) {
    case proto::ShardRole::none: break;
    case proto::ShardRole::primary: a.admitted = epoch == 0; break;  // a primary takes no records: it sends them
    case proto::ShardRole::backup:
      a.admitted = epoch != 0 ? epoch == part.epoch : access == Access::backup_read && part.in_sync;
      break;
  }
  return a;
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
