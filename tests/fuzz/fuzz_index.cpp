// Fuzz target: what a client checks in the bytes it RDMA READs from a
// server's one-sided index (src/proto/index_format.*): the neighborhood of
// index entries (probe_neighborhood, decode_entry) and then the value an
// entry holds inline or names in a block (inline_data, block_readable,
// check_block) — the same functions ClientConn::on_hood/on_block
// (kv/client/client_onesided.cpp) call, without verbs.
//
// Input: ctl u8 | max_value selector u8 | key_len u16 | key | 1 KiB
// neighborhood | value block bytes (value then key; missing bytes read as
// zeros, as if the remote memory were zero). ctl lets the fuzzer reach deep
// states a CRC would otherwise hide: bit 0 sets bucket (ctl >> 4 & 7)'s
// key_hash/key_len to the key's, bit 1 recomputes every nonzero bucket's
// entry CRC (and zeroes what follows its inline data), bit 2 sets that
// bucket's data CRC to its inline data's or the block's, bit 3 makes it
// "used", bit 7 makes it INLINE.
// Properties: no crash or out-of-bounds read; every decoded entry re-encodes
// to its bytes; `found` names a used, not rpc-only entry with the key's hash
// and length in the bucket it reports; inline data never reaches past its
// bucket; check_block's verdict agrees with an independent CRC and key
// comparison.
#include <algorithm>
#include <array>
#include <vector>

#include "fuzz_target.hpp"
#include "proto/crc32c.hpp"
#include "proto/endian.hpp"
#include "proto/index_format.hpp"
#include "proto/wire.hpp"

namespace {

using namespace rkv::proto;

constexpr std::size_t kMaxSimulatedValue = std::size_t{1} << 16;  // larger blocks: only block_readable

void check_bucket(std::span<const std::byte> b) {
  const auto e = decode_entry(b);
  if (!e) return;
  const bool zero = std::all_of(b.begin(), b.end(), [](std::byte x) { return x == std::byte{0}; });
  if (zero) {
    FUZZ_CHECK(*e == IndexEntry{});
    return;
  }
  const auto data = e->inlined() ? inline_data(b, *e) : std::span<const std::byte>{};
  FUZZ_CHECK(data.size() <= kInlineMax);
  const auto again = encode_entry(*e, data);
  FUZZ_CHECK(std::equal(again.begin(), again.end(), b.begin()));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  rkv::fuzz::Input in(data, size);
  const std::uint8_t ctl = in.u8();
  const std::uint8_t mv = in.u8();
  const std::uint64_t max_value = mv == 0 ? 0 : std::uint64_t{1} << (mv % 33);
  const std::size_t key_len = 1 + in.u16() % kMaxKey;
  const auto key_bytes = in.bytes(key_len);
  const std::string_view key = rkv::fuzz::as_text(key_bytes);
  const std::uint64_t hash = hash64(key);

  std::array<std::byte, kNeighborhoodBytes> hood{};
  const auto hood_in = in.bytes(kNeighborhoodBytes);
  std::copy(hood_in.begin(), hood_in.end(), hood.begin());
  const auto block = in.rest();

  const std::size_t target = (ctl >> 4) & 7;
  const std::span<std::byte> tb = std::span(hood).subspan(target * kBucketSize, kBucketSize);
  if ((ctl & 1) != 0) {
    store_le<std::uint64_t>(tb, 8, hash);
    store_le<std::uint32_t>(tb, 28, static_cast<std::uint32_t>(key.size()));
  }
  if ((ctl & 8) != 0) store_le<std::uint32_t>(tb, 40, load_le<std::uint32_t>(tb, 40) | kFlagUsed);
  if ((ctl & 128) != 0) store_le<std::uint32_t>(tb, 40, load_le<std::uint32_t>(tb, 40) | kFlagInline);
  // The [value][key] bytes bucket b carries inline by its own fields (empty if none or too long).
  const auto inline_bytes = [](std::span<std::byte> b) {
    const std::uint64_t n = std::uint64_t{load_le<std::uint32_t>(b, 32)} + load_le<std::uint32_t>(b, 28);
    const bool in = (load_le<std::uint32_t>(b, 40) & kFlagInline) != 0 && n <= kInlineMax;
    return in ? b.subspan(kInlineOffset, static_cast<std::size_t>(n)) : std::span<std::byte>{};
  };
  if ((ctl & 4) != 0) {  // the data CRC a well-behaved server would have written for this value
    const std::uint32_t vlen = load_le<std::uint32_t>(tb, 32);
    const std::uint32_t klen = load_le<std::uint32_t>(tb, 28);
    if ((load_le<std::uint32_t>(tb, 40) & kFlagInline) != 0) {
      store_le<std::uint32_t>(tb, 36, crc32c(inline_bytes(tb)));
    } else if (std::uint64_t{vlen} + klen <= block.size()) {
      store_le<std::uint32_t>(tb, 36, crc32c(block.first(std::size_t{vlen} + klen)));
    }
  }
  if ((ctl & 2) != 0) {
    for (std::size_t i = 0; i < kNeighborhood; ++i) {
      const std::span<std::byte> b = std::span(hood).subspan(i * kBucketSize, kBucketSize);
      if (std::all_of(b.begin(), b.end(), [](std::byte x) { return x == std::byte{0}; })) continue;
      std::fill(b.begin() + kEntryCrcOffset + 4, b.begin() + kInlineOffset, std::byte{0});
      std::fill(b.begin() + kInlineOffset + static_cast<std::ptrdiff_t>(inline_bytes(b).size()), b.end(),
                std::byte{0});
      store_le<std::uint32_t>(b, kEntryCrcOffset, crc32c(b.data(), kEntryCrcOffset));
    }
  }

  for (std::size_t i = 0; i < kNeighborhood; ++i) check_bucket(std::span(hood).subspan(i * kBucketSize, kBucketSize));
  // A short READ (cannot happen on RC, but the function takes any span) is torn.
  IndexEntry ignored;
  std::size_t ignored_at = 0;
  FUZZ_CHECK(probe_neighborhood(std::span(hood).first(kNeighborhoodBytes - 1), hash,
                                static_cast<std::uint32_t>(key.size()), ignored, ignored_at) == ProbeResult::torn);

  IndexEntry entry;
  std::size_t at = kNeighborhood;
  const ProbeResult res = probe_neighborhood(hood, hash, static_cast<std::uint32_t>(key.size()), entry, at);
  FUZZ_CHECK(!to_string(res).empty());
  if (res != ProbeResult::found) return 0;
  FUZZ_CHECK(entry.used() && !entry.rpc_only() && entry.key_hash == hash && entry.key_len == key.size());
  FUZZ_CHECK(at < kNeighborhood);
  const std::span<const std::byte> found_bucket = std::span(hood).subspan(at * kBucketSize, kBucketSize);
  const auto decoded = decode_entry(found_bucket);
  FUZZ_CHECK(decoded && *decoded == entry);
  if (!block_readable(entry, max_value)) {
    FUZZ_CHECK(entry.value_len > (max_value != 0 ? max_value : kDefaultMaxValue));
    return 0;
  }
  if (entry.value_len > kMaxSimulatedValue) return 0;

  // The value as the client checks it: the entry's inline data, or the block
  // as the client's scatter READ lands it (value bytes, then key bytes).
  std::vector<std::byte> remote(std::size_t{entry.value_len} + entry.key_len, std::byte{0});
  if (entry.inlined()) {
    const auto in = inline_data(found_bucket, entry);
    FUZZ_CHECK(in.size() == remote.size() && in.size() <= kInlineMax);
    std::copy(in.begin(), in.end(), remote.begin());
  } else {
    std::copy_n(block.begin(), std::min(block.size(), remote.size()), remote.begin());
  }
  const auto value = std::span<const std::byte>(remote).first(entry.value_len);
  const auto key_read = std::span<const std::byte>(remote).subspan(entry.value_len, entry.key_len);
  const BlockCheck verdict = check_block(entry, value, key_read, key);
  FUZZ_CHECK(!to_string(verdict).empty());
  const bool crc_ok = crc32c(remote.data(), remote.size()) == entry.data_crc;
  const bool key_ok = std::equal(key_read.begin(), key_read.end(), key_bytes.begin(), key_bytes.end());
  switch (verdict) {
    case BlockCheck::ok: FUZZ_CHECK(crc_ok && key_ok); break;
    case BlockCheck::torn: FUZZ_CHECK(!crc_ok); break;
    case BlockCheck::other_key: FUZZ_CHECK(crc_ok && !key_ok); break;
  }
  return 0;
}
