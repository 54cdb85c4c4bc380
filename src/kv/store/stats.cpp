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

std::string_view to_string(StatKind k) noexcept {
  switch (k) {
    case StatKind::counter: return "counter";
    case StatKind::gauge: return "gauge";
    case StatKind::untyped: return "untyped";
    case StatKind::derived: return "derived";
  }
  return "untyped";
}

std::string prometheus_name(const StatRow& row) {
  std::string out = "rkv_";
  out += row.name;
  if (row.kind == StatKind::counter && !row.name.ends_with("_total")) out += "_total";
  return out;
}

std::string format_prometheus(const StatRows& rows) {
  std::string out;
  out.reserve(rows.size() * 96);
  for (const auto& r : rows) {
    if (r.kind == StatKind::derived) continue;
    const std::string name = prometheus_name(r);
    out += "# HELP ";
    out += name;
    out += ' ';
    for (const char c : r.help) {
      if (c == '\\') {
        out += "\\\\";
      } else if (c == '\n') {
        out += "\\n";
      } else {
        out += c;
      }
    }
    fmt::format_to(std::back_inserter(out), "\n# TYPE {} {}\n{} {}\n", name, to_string(r.kind), name, r.value);
  }
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
