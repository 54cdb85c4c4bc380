// StatRow formatters: see stats.hpp.
#include "kv/store/stats.hpp"

#include <fmt/format.h>

namespace rkv::kv::store {

std::string format_stats_line(const StatRows& rows) {
  std::string out;
  for (const auto& r : rows) fmt::format_to(std::back_inserter(out), "{}{}={}", out.empty() ? "" : " ", r.name, r.value);
  return out;
}

std::string format_stats_lines(const StatRows& rows) {
  std::string out;
  for (const auto& r : rows) fmt::format_to(std::back_inserter(out), "{} {}\n", r.name, r.value);
  return out;
}

std::string format_stats_json(const StatRows& rows) {
  std::string out = "{";
  for (const auto& r : rows) {
    fmt::format_to(std::back_inserter(out), "{}\"{}\": {}", out.size() == 1 ? "" : ", ", r.name, r.value);
  }
  out += '}';
  return out;
}

}  // namespace rkv::kv::store
