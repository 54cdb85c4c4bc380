// Fuzz target: the wire decoder (src/proto/decode.*), which every received
// SEND on either side goes through before any of it is acted on.
//
// Input: the bytes of one received buffer. Properties, under the default
// limits and under tight ones derived from the input:
// - the decoder never reads outside the buffer (ASan) and never loops;
// - messages are contiguous from offset 0, each inside the buffer, and the
//   walk ends at EndOfBuffer exactly at the end or at one DecodeError that repeats;
// - view_validated() (the server's second walk) gives the same view;
// - every accepted message is one the encoder accepts too and re-encodes to
//   exactly the bytes received (the format has one spelling per message);
// - the same bytes as what a client WROTE into a grant (proto/grant.hpp):
//   read_granted_set never reads outside them, and a SET it accepts lies
//   inside them (value at the start, key right after it) and is written back
//   to exactly the same bytes by write_grant_trailer.
#include <array>
#include <cstring>
#include <vector>

#include "fuzz_target.hpp"
#include "proto/decode.hpp"
#include "proto/encode.hpp"
#include "proto/grant.hpp"

namespace {

using namespace rkv::proto;

bool same_view(const MessageView& a, const MessageView& b) {
  return a.header == b.header && a.key.data() == b.key.data() && a.key.size() == b.key.size() &&
         a.value.data() == b.value.data() && a.value.size() == b.value.size() && a.rdv == b.rdv && a.grant == b.grant &&
         a.offset == b.offset && a.size == b.size && a.ttl == b.ttl && a.epoch == b.epoch;
}

MessageSpec spec_of(const MessageView& m) {
  MessageSpec s;
  s.opcode = m.header.opcode;
  s.req_id = m.header.req_id;
  s.status = m.header.status;
  s.credits = m.header.credits;
  s.found = m.header.found();
  s.pull = (m.header.flags & kFlagPull) != 0;
  s.key = m.key;
  s.value = m.value;
  s.rdv = m.rdv;
  s.grant = m.grant;
  if (m.rdv || m.grant) s.rdv_len = m.header.value_len;
  if (m.header.has_ttl()) s.ttl = m.ttl;
  if (m.header.has_epoch()) s.epoch = m.epoch;
  s.backup_read = m.header.backup_read();
  return s;
}

void walk(std::span<const std::byte> buf, const Limits& limits) {
  Decoder d(buf, limits);
  std::size_t end = 0;
  std::vector<std::byte> out;
  for (;;) {
    const DecodeResult r = d.next();
    if (const auto* m = std::get_if<MessageView>(&r)) {
      FUZZ_CHECK(m->offset == end);
      FUZZ_CHECK(m->size >= kHeaderSize && m->size <= buf.size() - m->offset);
      FUZZ_CHECK(m->key.size() <= kMaxKey);
      if (!m->key.empty()) {
        FUZZ_CHECK(reinterpret_cast<const std::byte*>(m->key.data()) == buf.data() + m->offset + kHeaderSize);
      }
      if (!m->value.empty()) FUZZ_CHECK(m->value.data() + m->value.size() == buf.data() + m->offset + m->size);
      FUZZ_CHECK(m->header.value_len <= limits.max_value);
      FUZZ_CHECK(same_view(*m, view_validated(buf, m->offset)));
      const MessageSpec spec = spec_of(*m);
      FUZZ_CHECK(!check_message(spec, limits).has_value());
      FUZZ_CHECK(encoded_size(spec) == m->size);
      out.assign(m->size, std::byte{0xEE});
      const EncodeResult enc = encode(out, 0, spec, limits);
      FUZZ_CHECK(enc.ok() && enc.offset == m->size);
      FUZZ_CHECK(std::memcmp(out.data(), buf.data() + m->offset, m->size) == 0);
      end = m->offset + m->size;
      FUZZ_CHECK(d.offset() == end);
      continue;
    }
    if (std::holds_alternative<EndOfBuffer>(r)) {
      FUZZ_CHECK(end == buf.size() && d.at_end());
      FUZZ_CHECK(std::holds_alternative<EndOfBuffer>(d.next()));
      return;
    }
    const auto err = std::get<DecodeError>(r);
    FUZZ_CHECK(err.offset == end && d.failed());
    FUZZ_CHECK(!to_string(err.reason).empty());
    FUZZ_CHECK(std::get<DecodeError>(d.next()) == err);
    return;
  }
}

void granted(std::span<const std::byte> written, const Limits& limits) {
  const auto r = read_granted_set(written, limits);
  if (const auto* reason = std::get_if<Reason>(&r)) {
    FUZZ_CHECK(!to_string(*reason).empty());
    return;
  }
  const GrantedSet& s = std::get<GrantedSet>(r);
  FUZZ_CHECK(s.value.data() == written.data());
  FUZZ_CHECK(reinterpret_cast<const std::byte*>(s.key.data()) == written.data() + s.value.size());
  FUZZ_CHECK(granted_set_size(s.key.size(), s.value.size()) == written.size());
  FUZZ_CHECK(!check_granted_set(s, written.size(), limits).has_value());
  std::array<std::byte, kGrantTrailerSize> t{};
  write_grant_trailer(t, s);
  FUZZ_CHECK(std::memcmp(t.data(), written.data() + written.size() - kGrantTrailerSize, kGrantTrailerSize) == 0);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto buf = rkv::fuzz::as_bytes(data, size);
  walk(buf, Limits{});
  // The server's limits (any RDV length), and tight ones that move every bound.
  walk(buf, Limits{kMaxKey, UINT64_MAX});
  walk(buf, Limits{1 + size % 64, size / 2});
  granted(buf, Limits{});
  granted(buf, Limits{1 + size % 64, size / 2});
  return 0;
}
