#pragma once
// FakeLink: the protocol suite's test seam. It records every post a state
// machine makes, and builds the completions a real CQ would deliver, so the
// server and client connection logic can be driven step by step without a device.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "kv/conn/link.hpp"
#include "verbs/completion.hpp"

namespace rkv::test {

struct Post {
  verbs::WrId id;
  std::vector<std::span<std::byte>> scatter;  // post_reads: the local elements
  std::vector<std::byte> bytes;      // send/write: the payload at post time
  std::span<std::byte> target;       // recv/read: where the data would land
  std::uint64_t remote_addr = 0;
  std::uint32_t rkey = 0;
  bool signaled = true;   // reads: false = no completion unless it fails
  std::size_t post = 0;   // reads: which post call carried it (read_posts index)
};

class FakeLink final : public kv::conn::Link {
 public:
  std::vector<Post> recvs, sends, reads, writes;
  // The READ post calls, each as the number of WRs it carried (post_read: 1).
  std::vector<std::size_t> read_posts;
  int fail_next_send = 0;  // errno to return from the next post_send (0: succeed)
  // The next post_reads fails with fail_reads_errno after posting the first
  // fail_reads_after WRs of its chain (as ibv_post_send's bad_wr says).
  int fail_reads_errno = 0;
  std::size_t fail_reads_after = 0;

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
    reads.push_back({id, {}, {}, local, raddr, rkey, true, read_posts.size()});
    read_posts.push_back(1);
    return 0;
  }
  int post_reads(std::span<const verbs::ReadWr> chain, std::size_t* posted) noexcept override {
    std::size_t n = chain.size();
    int rc = 0;
    if (fail_reads_errno != 0) {
      rc = fail_reads_errno;
      n = std::min(n, fail_reads_after);
      fail_reads_errno = 0;
    }
    for (std::size_t i = 0; i < n; ++i) {
      const verbs::ReadWr& w = chain[i];
      Post p{w.wr_id, {}, {}, {}, w.remote_addr, w.rkey, w.signaled, read_posts.size()};
      for (std::uint32_t e = 0; e < w.num_local; ++e) p.scatter.push_back(w.local[e].bytes);
      if (p.scatter.size() == 1) {  // one element: also where it lands, as for post_read
        p.target = p.scatter[0];
        p.scatter.clear();
      }
      reads.push_back(std::move(p));
    }
    read_posts.push_back(n);
    if (posted != nullptr) *posted = n;
    return rc;
  }
  // The reads of post call `i`.
  [[nodiscard]] std::vector<const Post*> chain(std::size_t i) const {
    std::vector<const Post*> out;
    for (const auto& p : reads) {
      if (p.post == i) out.push_back(&p);
    }
    return out;
  }
  int post_write(verbs::WrId id, std::span<const std::byte> local, std::uint32_t, std::uint64_t raddr,
                 std::uint32_t rkey) noexcept override {
    writes.push_back({id, {}, {local.begin(), local.end()}, {}, raddr, rkey});
    return 0;
  }

  // The recv completion for `bytes` arriving in the posted receive `r`
  // (copies them into its buffer, as the HCA would).
  static verbs::Completion deliver(const Post& r, std::span<const std::byte> bytes) {
    if (!bytes.empty()) std::memcpy(r.target.data(), bytes.data(), bytes.size());
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
