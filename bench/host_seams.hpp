#pragma once
// The seams bench/server_cost drives the server through, without a device:
//
//   BenchLink       a kv::conn::Link that keeps the posted receives in a FIFO
//                   and the posted SENDs as views of their send buffers (valid
//                   until the bench feeds the send completion back). Unlike the
//                   protocol suite's FakeLink (tests/protocol/fake_link.hpp),
//                   which copies every payload into a vector so a test can
//                   inspect it later, it never allocates or copies after
//                   construction: what is timed is the server, not the seam.
//   HostRegistrar   a kv::conn::Registrar for plain host memory (keys are
//                   counters, the remote address is the virtual address), so
//                   the Arena and the IndexRegion of the one-sided index run
//                   as in kvd.
//
// Bench-only; the tests keep their own recording fakes. No verbs calls.
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "kv/conn/link.hpp"
#include "kv/conn/registrar.hpp"
#include "verbs/completion.hpp"

namespace rkv::bench {

class BenchLink final : public kv::conn::Link {
 public:
  struct Recv {
    verbs::WrId id;
    std::span<std::byte> buf;
  };
  struct Send {
    verbs::WrId id;
    std::span<const std::byte> bytes;
  };

  // Room for `max_recvs` posted receives and `max_sends` SENDs between two clear_sends().
  BenchLink(std::size_t max_recvs, std::size_t max_sends) : recvs_(max_recvs) { sends_.reserve(max_sends); }

  int post_recv(verbs::WrId id, std::span<std::byte> buf, std::uint32_t) noexcept override {
    if (posted_ == recvs_.size()) return ENOMEM;  // a receive queue this deep was never promised
    recvs_[(head_ + posted_) % recvs_.size()] = {id, buf};
    ++posted_;
    return 0;
  }
  // No windows on the eager path: counted, refused.
  int bind_wr(verbs::WrId, std::uint32_t, const kv::conn::Registration&, std::span<const std::byte>, bool,
              verbs::SendWr*) noexcept override {
    ++unexpected_;
    return EINVAL;
  }
  int invalidate_wr(verbs::WrId, std::uint32_t, verbs::SendWr*) noexcept override {
    ++unexpected_;
    return EINVAL;
  }
  // SENDs are kept for the bench to read; the eager path never posts RDMA: counted, refused.
  int post_chain(std::span<const verbs::SendWr> chain, std::size_t* posted) noexcept override {
    std::size_t n = 0;
    int rc = 0;
    for (const verbs::SendWr& w : chain) {
      if (w.op != verbs::SendOp::send) {
        ++unexpected_;
        rc = EINVAL;
        break;
      }
      if (sends_.size() == sends_.capacity()) {
        rc = ENOMEM;
        break;
      }
      sends_.push_back({w.wr_id, w.local[0].bytes});
      ++n;
    }
    if (posted != nullptr) *posted = n;
    return rc;
  }

  // The oldest posted receive (where the next SEND from the client lands); false if none.
  bool pop_recv(Recv& out) noexcept {
    if (posted_ == 0) return false;
    out = recvs_[head_];
    head_ = (head_ + 1) % recvs_.size();
    --posted_;
    return true;
  }
  [[nodiscard]] std::size_t recvs_posted() const noexcept { return posted_; }
  [[nodiscard]] const std::vector<Send>& sends() const noexcept { return sends_; }
  void clear_sends() noexcept { sends_.clear(); }
  [[nodiscard]] std::uint64_t unexpected_posts() const noexcept { return unexpected_; }

  // The completions a CQ would deliver.
  static verbs::Completion received(const Recv& r, std::size_t len) noexcept {
    verbs::Completion c;
    c.wr_id = r.id;
    c.status = verbs::CompletionStatus::success;
    c.opcode = verbs::CompletionOpcode::recv;
    c.byte_len = static_cast<std::uint32_t>(len);
    return c;
  }
  static verbs::Completion sent(const Send& s) noexcept {
    verbs::Completion c;
    c.wr_id = s.id;
    c.status = verbs::CompletionStatus::success;
    c.opcode = verbs::CompletionOpcode::send;
    return c;
  }

 private:
  std::vector<Recv> recvs_;  // ring: posted_ entries from head_
  std::size_t head_ = 0;
  std::size_t posted_ = 0;
  std::vector<Send> sends_;
  std::uint64_t unexpected_ = 0;
};

class HostRegistrar final : public kv::conn::Registrar {
 protected:
  std::unique_ptr<kv::conn::Registration> do_register(std::span<std::byte> bytes, verbs::Access) override {
    ++n_;
    return std::make_unique<Reg>(n_, reinterpret_cast<std::uint64_t>(bytes.data()));
  }

 private:
  struct Reg final : kv::conn::Registration {
    Reg(std::uint32_t n, std::uint64_t a) noexcept : id(n), address(a) {}
    std::uint32_t lkey() const noexcept override { return 1000 + id; }
    std::uint32_t rkey() const noexcept override { return 2000 + id; }
    std::uint64_t addr() const noexcept override { return address; }
    const verbs::MemoryRegion* region() const noexcept override { return nullptr; }
    std::uint32_t id;
    std::uint64_t address;
  };
  std::uint32_t n_ = 0;
};

}  // namespace rkv::bench
