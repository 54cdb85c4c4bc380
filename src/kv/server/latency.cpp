// LatencyHistograms: see latency.hpp.
#include "kv/server/latency.hpp"

#include <fmt/format.h>
#include <utility>

namespace rkv::kv::server {

namespace {
template <std::size_t... I>
std::array<store::QuantileRows, kOpClasses> quantile_rows(std::index_sequence<I...>) {
  return {store::QuantileRows(fmt::format("latency_{}", kOpClassNames[I]),
                              fmt::format("{} requests (receive completion to reply post)", kOpClassNames[I]))...};
}
}  // namespace

const std::array<std::string, store::Histogram::kBounds + 1>& latency_le_row_names() {
  static const auto names = [] {
    std::array<std::string, store::Histogram::kBounds + 1> n;
    for (std::size_t b = 0; b < store::Histogram::kBounds; ++b) {
      n[b] = fmt::format("latency_le_{}_microseconds", std::uint64_t{1} << b);
    }
    n[store::Histogram::kBounds] = "latency_le_inf";
    return n;
  }();
  return names;
}

LatencyHistograms::LatencyHistograms() : rows_(quantile_rows(std::make_index_sequence<kOpClasses>{})) {}

void LatencyHistograms::append_stats(store::StatRows& rows) const {
  for (std::size_t c = 0; c < kOpClasses; ++c) rows_[c].append(rows, of_[c]);
  store::Histogram requests;
  for (std::size_t c = 0; c < kOpClasses; ++c) {
    if (static_cast<OpClass>(c) != OpClass::other) requests.add(of_[c]);
  }
  const auto& names = latency_le_row_names();
  for (std::size_t b = 0; b <= store::Histogram::kBounds; ++b) {
    rows.push_back({names[b], requests.cumulative(b), store::StatKind::derived,
                    "requests of every class but other answered within this bound, since start (cumulative: "
                    "rkv top's p99 of an interval)"});
  }
}

std::string LatencyHistograms::prometheus() const {
  constexpr std::string_view kName = "rkv_request_duration_seconds";
  std::string out;
  store::Histogram::append_family(
      out, kName, "server time of a request: the receive completion of its SEND to the post of its reply's SEND");
  for (std::size_t c = 0; c < kOpClasses; ++c) {
    of_[c].append_prometheus(out, kName, fmt::format("op=\"{}\"", kOpClassNames[c]));
  }
  return out;
}

}  // namespace rkv::kv::server
