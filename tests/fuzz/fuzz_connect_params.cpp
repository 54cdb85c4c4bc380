// Fuzz target: the connection parameters in rdma_cm private data, both
// directions: kvd decodes a client's connect request (Role::client), and a
// client decodes the server's accept data (Role::server; a hostile server
// must not crash or mislead the client either).
//
// Written against decode_connect_params()/encode_connect_params() only, so it
// keeps working whatever fields the format gains. Properties:
// - decoding never reads past the data and never crashes;
// - a decoded value passes check_connect_params, has the expected role, and
//   survives encode -> decode unchanged;
// - the other role is always refused (bad_role) or refused for the same
//   framing reason, never accepted;
// - trailing bytes (rdma_cm pads private data) do not change the result;
// - what a client takes from the server's index fields (usable_index) is a
//   shape it can probe: a power of two of buckets within kMaxIndexBuckets;
// - a REJECT's private data (decode_reject, what a client reads when kvd
//   refuses it) is a known reason or nothing, and a known one re-encodes to
//   the bytes it came from.
#include <algorithm>
#include <bit>
#include <vector>

#include "fuzz_target.hpp"
#include "proto/auth.hpp"
#include "proto/connect_params.hpp"
#include "proto/index_format.hpp"

namespace {

using namespace rkv::proto;

void one_direction(std::span<const std::byte> data, Role expected) {
  const ConnectDecodeResult r = decode_connect_params(data, expected);
  const Role other = expected == Role::client ? Role::server : Role::client;
  if (const auto* err = std::get_if<ConnectError>(&r)) {
    FUZZ_CHECK(!to_string(*err).empty());
    return;
  }
  const ConnectParams& p = std::get<ConnectParams>(r);
  FUZZ_CHECK(p.role == expected);
  FUZZ_CHECK(!check_connect_params(p).has_value());
  FUZZ_CHECK(p.credits != 0 && p.recv_buf_size >= kMinRecvBufSize);
  // One spelling: what we would send is read back as the same parameters.
  const auto again = encode_connect_params(p);
  const ConnectDecodeResult r2 = decode_connect_params(again, expected);
  FUZZ_CHECK(std::holds_alternative<ConnectParams>(r2) && std::get<ConnectParams>(r2) == p);
  // The same bytes never pass for the other role.
  const ConnectDecodeResult swapped = decode_connect_params(data, other);
  FUZZ_CHECK(std::holds_alternative<ConnectError>(swapped));
  // Trailing padding is ignored: the parameters alone decode the same.
  if (data.size() > again.size()) {
    const ConnectDecodeResult trimmed = decode_connect_params(data.first(again.size()), expected);
    FUZZ_CHECK(std::holds_alternative<ConnectParams>(trimmed) && std::get<ConnectParams>(trimmed) == p);
  }
  if (expected == Role::client) {
    FUZZ_CHECK(p.max_value == 0 && p.index_addr == 0 && p.index_rkey == 0 && p.index_buckets == 0 &&
               p.index_layout == 0);
    FUZZ_CHECK(!usable_index(p).has_value());
    return;
  }
  // The client's side: the index it would READ.
  if (const auto ix = usable_index(p)) {
    FUZZ_CHECK(ix->buckets != 0 && std::has_single_bit(ix->buckets) && ix->buckets <= kMaxIndexBuckets);
    FUZZ_CHECK(ix->addr == p.index_addr && ix->rkey == p.index_rkey && p.index_layout == kIndexLayout);
    // Every home bucket a key can hash to is inside the announced region.
    const std::uint64_t last_home = home_bucket(~std::uint64_t{0}, ix->buckets);
    FUZZ_CHECK((last_home + kNeighborhood) * kBucketSize <= index_region_bytes(ix->buckets));
  }
}

// The client reading a REJECT's private data.
void reject(std::span<const std::byte> data) {
  const auto r = decode_reject(data);
  if (!r) return;
  FUZZ_CHECK(*r == RejectReason::auth_required || *r == RejectReason::auth_failed);
  FUZZ_CHECK(!to_string(*r).empty());
  FUZZ_CHECK(data.size() >= kRejectSize);
  const auto again = encode_reject(*r);
  FUZZ_CHECK(std::equal(again.begin(), again.end(), data.begin()));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto bytes = rkv::fuzz::as_bytes(data, size);
  one_direction(bytes, Role::client);  // kvd reading a connect request
  one_direction(bytes, Role::server);  // a client reading the accept data
  reject(bytes);                       // a client reading a REJECT
  return 0;
}
