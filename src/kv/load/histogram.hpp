#pragma once
// Latency histogram over nanoseconds, HDR-style log-linear buckets.
//
// Values below 512 ns get one bucket each (exact). Above, every power of two
// [2^e, 2^(e+1)) is split into 256 equal buckets, so a bucket is at most
// 1/256 of its values wide and percentile() (the bucket midpoint, clamped to
// [min, max]) is within 0.2% of a recorded value. Values up to 2^43 ns
// (~2.4 hours) are bucketed; larger ones land in the top bucket (max() stays
// exact). Memory is fixed (~72 KiB), record() is O(1) and never allocates.

#include <cstddef>
#include <cstdint>
#include <vector>

namespace rkv::kv::load {

class Histogram {
 public:
  static constexpr unsigned kSubBits = 8;   // 256 buckets per power of two
  static constexpr unsigned kMaxExp = 42;   // last bucketed octave: [2^42, 2^43)
  static constexpr std::uint64_t kMaxTrackable = (std::uint64_t{1} << (kMaxExp + 1)) - 1;

  Histogram();

  void record(std::uint64_t ns) noexcept { record(ns, 1); }
  void record(std::uint64_t ns, std::uint64_t times) noexcept;
  void merge(const Histogram& other) noexcept;
  void reset() noexcept;

  [[nodiscard]] std::uint64_t count() const noexcept { return count_; }
  // 0 when empty.
  [[nodiscard]] std::uint64_t min() const noexcept { return count_ ? min_ : 0; }
  [[nodiscard]] std::uint64_t max() const noexcept { return max_; }
  // Exact (from the running sum); 0 when empty.
  [[nodiscard]] double mean() const noexcept;
  // Nearest-rank percentile, p in [0, 100] (clamped): the smallest bucket
  // holding at least ceil(p% * count) samples. p = 0 gives min(), p = 100
  // max(). 0 when empty.
  [[nodiscard]] std::uint64_t percentile(double p) const noexcept;

  // Bucket layout, exposed for tests.
  [[nodiscard]] static std::size_t bucket_of(std::uint64_t ns) noexcept;
  [[nodiscard]] static std::uint64_t bucket_low(std::size_t b) noexcept;   // smallest value
  [[nodiscard]] static std::uint64_t bucket_high(std::size_t b) noexcept;  // largest value
  static constexpr std::size_t kBuckets =
      (std::size_t{2} << kSubBits) + (kMaxExp - kSubBits) * (std::size_t{1} << kSubBits);

 private:
  std::vector<std::uint64_t> counts_;  // sized once, never grows
  std::uint64_t count_ = 0;
  std::uint64_t min_ = 0;
  std::uint64_t max_ = 0;
  // Saturates instead of wrapping (2^64 ns is 584 years of total latency).
  std::uint64_t sum_ = 0;
};

}  // namespace rkv::kv::load
