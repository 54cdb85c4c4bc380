// Unit tests for kv::load::Histogram: bucket layout, precision bound, percentiles on
// known distributions, merge.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>

#include "kv/load/histogram.hpp"

namespace rkv::kv::load {
namespace {

// Relative error of `got` against `want`.
double rel(std::uint64_t got, std::uint64_t want) {
  return std::fabs(static_cast<double>(got) - static_cast<double>(want)) / static_cast<double>(want);
}

TEST(Histogram, Empty) {
  Histogram h;
  EXPECT_EQ(h.count(), 0u);
  EXPECT_EQ(h.min(), 0u);
  EXPECT_EQ(h.max(), 0u);
  EXPECT_EQ(h.mean(), 0.0);
  EXPECT_EQ(h.percentile(50), 0u);
}

TEST(Histogram, BucketsTileTheRange) {
  // Consecutive buckets cover consecutive values, with no gaps or overlaps.
  EXPECT_EQ(Histogram::bucket_low(0), 0u);
  for (std::size_t b = 1; b < Histogram::kBuckets; ++b) {
    ASSERT_EQ(Histogram::bucket_low(b), Histogram::bucket_high(b - 1) + 1) << b;
  }
  EXPECT_EQ(Histogram::bucket_high(Histogram::kBuckets - 1), Histogram::kMaxTrackable);
  // ~1 hour must be inside the tracked range.
  EXPECT_GT(Histogram::kMaxTrackable, 3600ull * 1000 * 1000 * 1000);
}

TEST(Histogram, BucketOfIsConsistentAndPrecise) {
  std::uint64_t v = 0;
  while (v < Histogram::kMaxTrackable) {
    const std::size_t b = Histogram::bucket_of(v);
    ASSERT_LT(b, Histogram::kBuckets);
    ASSERT_LE(Histogram::bucket_low(b), v);
    ASSERT_GE(Histogram::bucket_high(b), v);
    // Bucket width relative to its values: the precision promise.
    const auto width = static_cast<double>(Histogram::bucket_high(b) - Histogram::bucket_low(b) + 1);
    if (v >= 512) {
      ASSERT_LE(width / static_cast<double>(Histogram::bucket_low(b)), 1.0 / 256) << v;
    } else {
      ASSERT_EQ(width, 1.0) << v;
    }
    v = v < 1000 ? v + 1 : v + v / 97;
  }
  EXPECT_EQ(Histogram::bucket_of(std::numeric_limits<std::uint64_t>::max()), Histogram::kBuckets - 1);
}

TEST(Histogram, SmallValuesAreExact) {
  Histogram h;
  for (std::uint64_t v = 1; v <= 100; ++v) h.record(v);
  EXPECT_EQ(h.count(), 100u);
  EXPECT_EQ(h.min(), 1u);
  EXPECT_EQ(h.max(), 100u);
  EXPECT_DOUBLE_EQ(h.mean(), 50.5);
  EXPECT_EQ(h.percentile(50), 50u);
  EXPECT_EQ(h.percentile(99), 99u);
  EXPECT_EQ(h.percentile(1), 1u);
  // 7 / 100 * 100 is 7.000000000000001 in doubles: still rank 7, not 8.
  EXPECT_EQ(h.percentile(7), 7u);
  EXPECT_EQ(h.percentile(56), 56u);
  EXPECT_EQ(h.percentile(0), 1u);
  EXPECT_EQ(h.percentile(100), 100u);
  EXPECT_EQ(h.percentile(250), 100u);  // clamped
  EXPECT_EQ(h.percentile(-3), 1u);
}

TEST(Histogram, UniformWithinOnePercent) {
  Histogram h;
  constexpr std::uint64_t kN = 1000000;
  for (std::uint64_t v = 1; v <= kN; ++v) h.record(v * 1000);  // 1 us .. 1 s
  EXPECT_EQ(h.count(), kN);
  EXPECT_EQ(h.min(), 1000u);
  EXPECT_EQ(h.max(), kN * 1000);
  EXPECT_NEAR(h.mean(), 500000.5 * 1000, 1.0);
  for (double p : {1.0, 10.0, 25.0, 50.0, 75.0, 90.0, 99.0, 99.9, 99.99}) {
    const auto want = static_cast<std::uint64_t>(std::ceil(p / 100 * kN)) * 1000;
    EXPECT_LE(rel(h.percentile(p), want), 0.01) << "p" << p << " got " << h.percentile(p);
    // Tighter than the promise: the layout gives 0.2%.
    EXPECT_LE(rel(h.percentile(p), want), 0.002) << "p" << p;
  }
  EXPECT_EQ(h.percentile(100), kN * 1000);
}

TEST(Histogram, TwoPoint) {
  Histogram h;
  h.record(2000, 900);         // 90% at 2 us
  h.record(50000000, 100);     // 10% at 50 ms
  EXPECT_EQ(h.count(), 1000u);
  EXPECT_LE(rel(h.percentile(50), 2000), 0.01);
  EXPECT_LE(rel(h.percentile(90), 2000), 0.01);      // rank 900 is still the low point
  EXPECT_LE(rel(h.percentile(90.1), 50000000), 0.01);  // rank 901 is the high one
  EXPECT_LE(rel(h.percentile(99), 50000000), 0.01);
  EXPECT_EQ(h.min(), 2000u);
  EXPECT_EQ(h.max(), 50000000u);
  EXPECT_DOUBLE_EQ(h.mean(), (2000.0 * 900 + 50000000.0 * 100) / 1000);
}

TEST(Histogram, SingleValueIsExact) {
  // Clamping to [min, max] makes a one-valued distribution exact.
  Histogram h;
  h.record(123457, 5);
  for (double p : {0.0, 50.0, 99.9, 100.0}) EXPECT_EQ(h.percentile(p), 123457u);
}

TEST(Histogram, HugeValuesClampToTopBucket) {
  Histogram h;
  h.record(std::numeric_limits<std::uint64_t>::max());
  h.record(1);
  EXPECT_EQ(h.max(), std::numeric_limits<std::uint64_t>::max());
  EXPECT_EQ(h.percentile(100), std::numeric_limits<std::uint64_t>::max());
  EXPECT_GE(h.percentile(99), Histogram::bucket_low(Histogram::kBuckets - 1));
}

TEST(Histogram, MergeEqualsRecordingEverything) {
  Histogram a, b, all;
  for (std::uint64_t v = 1; v < 5000; v += 3) {
    a.record(v * 77);
    all.record(v * 77);
  }
  for (std::uint64_t v = 1; v < 3000; v += 7) {
    b.record(v * 1311);
    all.record(v * 1311);
  }
  Histogram empty;
  a.merge(empty);
  a.merge(b);
  EXPECT_EQ(a.count(), all.count());
  EXPECT_EQ(a.min(), all.min());
  EXPECT_EQ(a.max(), all.max());
  EXPECT_DOUBLE_EQ(a.mean(), all.mean());
  for (double p : {0.0, 10.0, 50.0, 90.0, 99.0, 100.0}) EXPECT_EQ(a.percentile(p), all.percentile(p));
  empty.merge(b);  // into an empty one: min must come from b, not 0
  EXPECT_EQ(empty.min(), b.min());
}

TEST(Histogram, Reset) {
  Histogram h;
  h.record(5);
  h.reset();
  EXPECT_EQ(h.count(), 0u);
  EXPECT_EQ(h.percentile(50), 0u);
  h.record(9);
  EXPECT_EQ(h.min(), 9u);
}

}  // namespace
}  // namespace rkv::kv::load
