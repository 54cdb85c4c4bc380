#pragma once
// FakeLink: the protocol suite's test seam. It records every post a state
// machine makes, and builds the completions a real CQ would deliver, so the
// server and client connection logic can be driven step by step without a device.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <span>
#include <utility>
#include <vector>

#include "kv/conn/link.hpp"
#include "verbs/completion.hpp"

namespace rkv::test {

struct Post {
  verbs::WrId id;
  std::vector<std::span<std::byte>> scatter;  // a READ of several elements: them
  std::vector<std::byte> bytes;      // send/write: the payload at post time
  std::span<std::byte> target;       // recv/read: where the data would land
  std::uint64_t remote_addr = 0;
  std::uint32_t rkey = 0;
  bool signaled = true;   // reads: false = no completion unless it fails
  std::size_t post = 0;   // reads: which post call carried it (read_posts index)
  std::uint32_t imm = 0;  // a WRITE with immediate: its immediate
  bool with_imm = false;  // a WRITE with immediate
};

class FakeLink final : public kv::conn::Link {
 public:
  std::vector<Post> recvs, sends, reads, writes;
  // The post calls that carried READs, each as the number of READs it
  // posted (a single READ: 1).
  std::vector<std::size_t> read_posts;
  // The kinds of the WRs of each post call, in chain order (what it posted).
  std::vector<std::vector<verbs::SendOp>> posts;
  int fail_next_post = 0;  // errno from the next post call, which posts nothing (0: succeed)
  int fail_next_send = 0;  // errno from the next post reaching a SEND: the WRs before it are posted (0: succeed)
  // The next post carrying READs fails with fail_reads_errno after posting
  // the first fail_reads_after READs of its chain (as ibv_post_send's bad_wr says).
  int fail_reads_errno = 0;
  std::size_t fail_reads_after = 0;
  // Window binds and invalidations as posted (in post_chain), in order;
  // each bind takes the window's next key (window * 256 + its binds so far
  // mod 256, + 1), the window's key once posted.
  struct WindowPost {
    verbs::WrId id;
    std::uint32_t window;
    bool bind;                   // else an invalidation
    std::span<const std::byte> range;
    std::uint32_t rkey;          // bind: the key handed out; invalidation: the key closed
    bool signaled;
  };
  std::vector<WindowPost> window_posts;
  std::vector<std::uint32_t> window_keys = std::vector<std::uint32_t>(kMaxWindows, 0);
  int fail_next_window = 0;  // errno from building the next bind / invalidation (0: succeed)

  int post_recv(verbs::WrId id, std::span<std::byte> buf, std::uint32_t) noexcept override {
    recvs.push_back({id, {}, {}, buf});
    return 0;
  }
  // Each WR of a chain is recorded by kind, as one post call.
  int post_chain(std::span<const verbs::SendWr> chain, std::size_t* posted) noexcept override {
    std::size_t n = 0, reads_in_chain = 0;
    int rc = 0;
    posts.emplace_back();
    if (fail_next_post != 0) {
      if (posted != nullptr) *posted = 0;
      return std::exchange(fail_next_post, 0);
    }
    for (const verbs::SendWr& w : chain) {
      if (w.op == verbs::SendOp::send && fail_next_send != 0) {
        rc = std::exchange(fail_next_send, 0);
        break;
      }
      if (w.op == verbs::SendOp::rdma_read && fail_reads_errno != 0 && reads_in_chain == fail_reads_after) {
        rc = std::exchange(fail_reads_errno, 0);
        break;
      }
      Post p{w.wr_id, {}, {}, {}, w.remote_addr, w.rkey, w.signaled, read_posts.size()};
      switch (w.op) {
        case verbs::SendOp::send:
        case verbs::SendOp::rdma_write:
        case verbs::SendOp::rdma_write_imm:
          p.imm = w.imm;
          p.with_imm = w.op == verbs::SendOp::rdma_write_imm;
          for (std::uint32_t e = 0; e < w.num_local; ++e) {
            p.bytes.insert(p.bytes.end(), w.local[e].bytes.begin(), w.local[e].bytes.end());
          }
          (w.op == verbs::SendOp::send ? sends : writes).push_back(std::move(p));
          break;
        case verbs::SendOp::rdma_read:
          // The HCA writes there: the element's memory is the caller's, writable.
          for (std::uint32_t e = 0; e < w.num_local; ++e) {
            const auto b = w.local[e].bytes;
            p.scatter.emplace_back(const_cast<std::byte*>(b.data()), b.size());
          }
          if (p.scatter.size() == 1) {  // one element: also where it lands
            p.target = p.scatter[0];
            p.scatter.clear();
          }
          reads.push_back(std::move(p));
          ++reads_in_chain;
          break;
        case verbs::SendOp::bind_window:
          window_keys[window_of(w.rkey)] = w.rkey;
          window_posts.push_back({w.wr_id, window_of(w.rkey), true,
                                  {reinterpret_cast<const std::byte*>(w.remote_addr), w.window_length}, w.rkey,
                                  w.signaled});
          break;
        case verbs::SendOp::invalidate:
          window_posts.push_back({w.wr_id, window_of(w.rkey), false, {}, w.rkey, w.signaled});
          break;
      }
      posts.back().push_back(w.op);
      ++n;
    }
    if (reads_in_chain > 0 || (rc != 0 && n < chain.size() && chain[n].op == verbs::SendOp::rdma_read)) {
      read_posts.push_back(reads_in_chain);
    }
    if (posted != nullptr) *posted = n;
    return rc;
  }
  int bind_wr(verbs::WrId id, std::uint32_t window, const kv::conn::Registration&, std::span<const std::byte> range,
              bool signaled, verbs::SendWr* wr) noexcept override {
    if (window >= kMaxWindows) return EINVAL;
    if (fail_next_window != 0) return std::exchange(fail_next_window, 0);
    verbs::SendWr w;
    w.op = verbs::SendOp::bind_window;
    w.wr_id = id;
    w.remote_addr = reinterpret_cast<std::uintptr_t>(range.data());
    w.window_length = range.size();
    w.rkey = window * 256 + (window_keys[window] & 0xFFu) + 1;
    w.signaled = signaled;
    *wr = w;
    return 0;
  }
  int invalidate_wr(verbs::WrId id, std::uint32_t window, verbs::SendWr* wr) noexcept override {
    if (window >= kMaxWindows || window_keys[window] == 0) return EINVAL;
    if (fail_next_window != 0) return std::exchange(fail_next_window, 0);
    *wr = verbs::SendWr::invalidate(id, window_keys[window]);
    return 0;
  }
  // The window a key of bind_wr's names.
  [[nodiscard]] static std::uint32_t window_of(std::uint32_t key) noexcept { return (key - 1) / 256; }
  // The reads of post call `i`.
  [[nodiscard]] std::vector<const Post*> chain(std::size_t i) const {
    std::vector<const Post*> out;
    for (const auto& p : reads) {
      if (p.post == i) out.push_back(&p);
    }
    return out;
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
  // The recv completion a WRITE with immediate makes in the posted receive
  // `r`: `len` bytes were written elsewhere (the caller put them there).
  static verbs::Completion deliver_written(const Post& r, std::uint32_t imm, std::uint32_t len) {
    verbs::Completion c;
    c.wr_id = r.id;
    c.status = verbs::CompletionStatus::success;
    c.opcode = verbs::CompletionOpcode::recv_rdma_with_imm;
    c.byte_len = len;
    c.imm = imm;
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
