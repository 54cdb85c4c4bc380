#pragma once
// FakeLink: the protocol suite's test seam. It records every post a state
// machine makes, and builds the completions a real CQ would deliver, so the
// server and client connection logic can be driven step by step without a device.
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "kv/conn/link.hpp"
#include "verbs/completion.hpp"

namespace rkv::test {

struct Post {
  verbs::WrId id;
  std::vector<std::span<std::byte>> scatter;  // post_read_sg: the local elements
  std::vector<std::byte> bytes;      // send/write: the payload at post time
  std::span<std::byte> target;       // recv/read: where the data would land
  std::uint64_t remote_addr = 0;
  std::uint32_t rkey = 0;
};

class FakeLink final : public kv::conn::Link {
 public:
  std::vector<Post> recvs, sends, reads, writes;
  int fail_next_send = 0;  // errno to return from the next post_send (0: succeed)

  int post_recv(verbs::WrId id, std::span<std::byte> buf, std::uint32_t) noexcept override {
    recvs.push_back({id, {}, {}, buf});
    return 0;
  }
  int post_send(verbs::WrId id, std::span<const std::byte> buf, std::uint32_t) noexcept override {
    if (fail_next_send != 0) {
      const int rc = fail_next_send;
      fail_next_send = 0;
      return rc;
    }
    sends.push_back({id, {}, {buf.begin(), buf.end()}, {}});
    return 0;
  }
  int post_read(verbs::WrId id, std::span<std::byte> local, std::uint32_t, std::uint64_t raddr,
                std::uint32_t rkey) noexcept override {
    reads.push_back({id, {}, {}, local, raddr, rkey});
    return 0;
  }
  int post_read_sg(verbs::WrId id, std::span<const verbs::ReadSge> local, std::uint64_t raddr,
                   std::uint32_t rkey) noexcept override {
    Post p{id, {}, {}, {}, raddr, rkey};
    for (const auto& s : local) p.scatter.push_back(s.bytes);
    reads.push_back(std::move(p));
    return 0;
  }
  int post_write(verbs::WrId id, std::span<const std::byte> local, std::uint32_t, std::uint64_t raddr,
                 std::uint32_t rkey) noexcept override {
    writes.push_back({id, {}, {local.begin(), local.end()}, {}, raddr, rkey});
    return 0;
  }

  // The recv completion for `bytes` arriving in the posted receive `r`
  // (copies them into its buffer, as the HCA would).
  static verbs::Completion deliver(const Post& r, std::span<const std::byte> bytes) {
    std::memcpy(r.target.data(), bytes.data(), bytes.size());
    verbs::Completion c;
    c.wr_id = r.id;
    c.status = verbs::CompletionStatus::success;
    c.opcode = verbs::CompletionOpcode::recv;
    c.byte_len = static_cast<std::uint32_t>(bytes.size());
    return c;
  }
  // A successful completion of a posted send/read/write.
  static verbs::Completion complete(const Post& p, verbs::CompletionOpcode op, std::uint32_t byte_len = 0) {
    verbs::Completion c;
    c.wr_id = p.id;
    c.status = verbs::CompletionStatus::success;
    c.opcode = op;
    c.byte_len = byte_len;
    return c;
  }
  static verbs::Completion failed(const Post& p, verbs::CompletionStatus st) {
    verbs::Completion c;
    c.wr_id = p.id;
    c.status = st;
    return c;
  }
};

}  // namespace rkv::test
