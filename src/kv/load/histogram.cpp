#include "kv/load/histogram.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

namespace rkv::kv::load {
namespace {

constexpr std::size_t kSub = std::size_t{1} << Histogram::kSubBits;  // buckets per octave
constexpr std::size_t kLinear = 2 * kSub;  // values below this are exact

std::uint64_t add_sat(std::uint64_t a, std::uint64_t b) noexcept {
  return b > std::numeric_limits<std::uint64_t>::max() - a ? std::numeric_limits<std::uint64_t>::max()
                                                           : a + b;
}

std::uint64_t mul_sat(std::uint64_t a, std::uint64_t b) noexcept {
  if (a != 0 && b > std::numeric_limits<std::uint64_t>::max() / a) {
    return std::numeric_limits<std::uint64_t>::max();
  }
  return a * b;
}

}  // namespace

Histogram::Histogram() : counts_(kBuckets, 0) {}

std::size_t Histogram::bucket_of(std::uint64_t ns) noexcept {
  if (ns < kLinear) return static_cast<std::size_t>(ns);
  ns = std::min(ns, kMaxTrackable);
  const unsigned e = static_cast<unsigned>(std::bit_width(ns)) - 1;  // 2^e <= ns
  const std::size_t mantissa = static_cast<std::size_t>(ns >> (e - kSubBits));  // [kSub, 2*kSub)
  return kLinear + (e - kSubBits - 1) * kSub + (mantissa - kSub);
}

std::uint64_t Histogram::bucket_low(std::size_t b) noexcept {
  if (b < kLinear) return b;
  const std::size_t k = b - kLinear;
  const unsigned shift = static_cast<unsigned>(k / kSub) + 1;  // e - kSubBits
  return static_cast<std::uint64_t>(kSub + k % kSub) << shift;
}

std::uint64_t Histogram::bucket_high(std::size_t b) noexcept {
  if (b < kLinear) return b;
  const unsigned shift = static_cast<unsigned>((b - kLinear) / kSub) + 1;
  return bucket_low(b) + (std::uint64_t{1} << shift) - 1;
}

void Histogram::record(std::uint64_t ns, std::uint64_t times) noexcept {
  if (times == 0) return;
  counts_[bucket_of(ns)] += times;
  min_ = count_ ? std::min(min_, ns) : ns;
  max_ = std::max(max_, ns);
  count_ += times;
  sum_ = add_sat(sum_, mul_sat(ns, times));
}

void Histogram::merge(const Histogram& other) noexcept {
  if (other.count_ == 0) return;
  for (std::size_t i = 0; i < kBuckets; ++i) counts_[i] += other.counts_[i];
  min_ = count_ ? std::min(min_, other.min_) : other.min_;
  max_ = std::max(max_, other.max_);
  count_ += other.count_;
  sum_ = add_sat(sum_, other.sum_);
}

void Histogram::reset() noexcept {
  std::fill(counts_.begin(), counts_.end(), 0);
  count_ = min_ = max_ = sum_ = 0;
}

double Histogram::mean() const noexcept {
  return count_ ? static_cast<double>(sum_) / static_cast<double>(count_) : 0.0;
}

std::uint64_t Histogram::percentile(double p) const noexcept {
  if (count_ == 0) return 0;
  if (!(p > 0.0)) return min();  // also catches NaN
  if (p >= 100.0) return max_;
  // Nearest rank. The tiny downward nudge keeps 99% of 1000 at rank 990
  // despite 0.99 * 1000 rounding to 990.0000000001.
  const double exact = p / 100.0 * static_cast<double>(count_);
  auto rank = static_cast<std::uint64_t>(std::ceil(exact - exact * 1e-12));
  rank = std::clamp<std::uint64_t>(rank, 1, count_);
  std::uint64_t seen = 0;
  for (std::size_t b = 0; b < kBuckets; ++b) {
    seen += counts_[b];
    if (seen >= rank) {
      const std::uint64_t mid = bucket_low(b) + (bucket_high(b) - bucket_low(b)) / 2;
      return std::clamp(mid, min_, max_);
    }
  }
  return max_;  // unreachable: the buckets hold count_ samples
}

}  // namespace rkv::kv::load
