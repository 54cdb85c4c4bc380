// RawClient: see raw_client.hpp. Single-threaded test helper.
#include "raw_client.hpp"

#include <gtest/gtest.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <stdexcept>

#include "proto/connect_params.hpp"

namespace rkv::test {

using namespace std::chrono_literals;
using verbs::CmEventType;
using verbs::WrId;
using verbs::WrKind;

RawClient::RawClient(const std::string& addr, std::uint16_t port, std::uint16_t recv_credits, Handshake handshake,
                     std::uint32_t send_slots)
    : addr_(addr), port_(port), recv_credits_(recv_credits), send_slots_(send_slots), handshake_(handshake) {
  id_.emplace(events_, 1);
  id_->resolve_addr(addr_, addr_, port_, 10s);
}

RawClient::~RawClient() {
  if (established_ && !disconnected_ && id_ && qp_) (void)id_->disconnect();
}

void RawClient::poll() {
  while (!(handshake_ == Handshake::stall && connect_sent_)) {
    auto ev = events_.next();
    if (!ev) break;
    on_cm(*ev);
  }
  if (!cq_) return;
  std::array<verbs::Completion, 16> batch;
  for (;;) {
    const int n = cq_->poll(batch);
    if (n <= 0) break;
    for (int i = 0; i < n; ++i) on_completion(batch[static_cast<std::size_t>(i)]);
  }
}

void RawClient::on_cm(verbs::CmEvent& ev) {
  switch (ev.type) {
    case CmEventType::addr_resolved: id_->resolve_route(10s); return;
    case CmEventType::route_resolved: setup_and_connect(); return;
    case CmEventType::established: {
      const auto p = proto::decode_connect_params(ev.private_data(), proto::Role::server);
      if (const auto* e = std::get_if<proto::ConnectError>(&p)) {
        failure_ = std::string("bad accept parameters: ") + std::string(to_string(*e));
        return;
      }
      credits_ = std::get<proto::ConnectParams>(p).credits;
      server_features_ = std::get<proto::ConnectParams>(p).features;
      established_ = true;
      return;
    }
    case CmEventType::disconnected:
      (void)id_->disconnect();  // answer (no-op if we initiated)
      disconnected_ = true;
      return;
    case CmEventType::rejected:
    case CmEventType::unreachable:
    case CmEventType::connect_error:
    case CmEventType::addr_error:
    case CmEventType::route_error:
    case CmEventType::device_removal:
      failure_ = std::string("cm event ") + std::string(to_string(ev.type)) + " status " + std::to_string(ev.status);
      return;
    case CmEventType::connect_request:
    case CmEventType::timewait_exit:
    case CmEventType::other: return;
  }
}

void RawClient::setup_and_connect() {
  pd_.emplace(*id_);
  channel_.emplace(*id_);
  cq_.emplace(*channel_, static_cast<int>(recv_credits_ + send_slots_ + 8));
  recv_mem_.assign(std::size_t{recv_credits_} * kBufSize, std::byte{0});
  send_mem_.assign(std::size_t{send_slots_} * kBufSize, std::byte{0});
  recv_mr_.emplace(*pd_, std::span<std::byte>(recv_mem_), verbs::Access::local_write);
  send_mr_.emplace(*pd_, std::span<std::byte>(send_mem_), verbs::Access::none);
  verbs::QpCaps caps;
  caps.max_send_wr = send_slots_;
  caps.max_recv_wr = recv_credits_;
  qp_.emplace(*id_, *pd_, *cq_, *cq_, caps);
  for (std::uint32_t i = 0; i < recv_credits_; ++i) {
    auto buf = std::span<std::byte>(recv_mem_).subspan(std::size_t{i} * kBufSize, kBufSize);
    if (int rc = qp_->post_recv(WrId(i, 1, WrKind::recv), buf, recv_mr_->lkey()); rc != 0) {
      throw std::runtime_error("post_recv failed");
    }
  }
  proto::ConnectParams mine;
  mine.role = proto::Role::client;
  mine.credits = recv_credits_;
  mine.recv_buf_size = kBufSize;
  mine.features = features_;
  const auto priv = proto::encode_connect_params(mine);
  verbs::ConnParams cp;
  cp.private_data = priv;
  id_->connect(cp);
  connect_sent_ = true;
}

void RawClient::on_completion(const verbs::Completion& c) {
  switch (c.wr_id.kind()) {
    case WrKind::recv: {
      if (!c.ok()) return;  // flushed at teardown
      const auto slot = c.wr_id.slot();
      auto buf = std::span<std::byte>(recv_mem_).subspan(std::size_t{slot} * kBufSize, kBufSize);
      if (c.opcode == verbs::CompletionOpcode::recv_rdma_with_imm) {
        // A large GET's value WRITTEN into the buffer it offered: the
        // immediate is its reply (req_id's low 16 bits, credits), byte_len the
        // value's length; nothing is in the receive buffer.
        const proto::WrittenReply w = proto::unpack_written_reply(c.imm);
        proto::Header h;
        h.opcode = proto::Opcode::get_reply;
        h.flags = proto::kFlagFound;
        h.credits = w.credits;
        h.req_id = w.req_low;
        h.value_len = c.byte_len;
        credits_ += w.credits;
        inbox_.push_back({h, {}, std::nullopt, std::nullopt});
        (void)qp_->post_recv(c.wr_id, buf, recv_mr_->lkey());
        return;
      }
      proto::Decoder dec(buf.first(std::min<std::size_t>(c.byte_len, buf.size())));
      for (;;) {
        auto r = dec.next();
        if (std::holds_alternative<proto::EndOfBuffer>(r)) break;
        if (const auto* e = std::get_if<proto::DecodeError>(&r)) {
          failure_ = std::string("undecodable reply: ") + std::string(to_string(e->reason));
          break;
        }
        const auto& m = std::get<proto::MessageView>(r);
        credits_ += m.header.credits;
        inbox_.push_back({m.header, std::string(m.value_text()), m.rdv, m.grant});
      }
      (void)qp_->post_recv(c.wr_id, buf, recv_mr_->lkey());
      return;
    }
    case WrKind::send:
      ++sends_completed_;
      if (!c.ok()) send_errors_.push_back(c);
      return;
    case WrKind::rdma_read:
      ++reads_completed_;
      if (!c.ok()) read_errors_.push_back(c);
      return;
    case WrKind::rdma_write:
      ++writes_completed_;
      if (!c.ok()) write_errors_.push_back(c);
      return;
    case WrKind::none:
    case WrKind::window: return;
  }
}

int RawClient::send_raw(std::span<const std::byte> bytes) {
  if (!qp_ || bytes.size() > kBufSize) return EINVAL;
  const std::uint32_t slot = next_send_slot_++ % send_slots_;
  auto buf = std::span<std::byte>(send_mem_).subspan(std::size_t{slot} * kBufSize, kBufSize);
  if (!bytes.empty()) std::memcpy(buf.data(), bytes.data(), bytes.size());
  return qp_->post_send(WrId(slot, 1, WrKind::send), buf.first(bytes.size()), send_mr_->lkey(), true);
}

int RawClient::send_request(const proto::MessageSpec& m) {
  EXPECT_GT(credits_, 0u) << "a well-behaved client never sends without a credit";
  std::vector<std::byte> out(proto::encoded_size(m));
  const auto r = proto::encode(out, 0, m);
  if (!r.ok()) return EINVAL;
  --credits_;
  return send_raw(out);
}

std::optional<RawReply> RawClient::take_reply(std::uint32_t req_id) {
  for (auto it = inbox_.begin(); it != inbox_.end(); ++it) {
    if (it->header.req_id == req_id) {
      RawReply r = *it;
      inbox_.erase(it);
      return r;
    }
  }
  return std::nullopt;
}

const verbs::MemoryRegion& RawClient::register_memory(std::span<std::byte> bytes, verbs::Access access) {
  if (!pd_) throw std::logic_error("register_memory before the route was resolved");
  return user_mrs_.emplace_back(*pd_, bytes, access);
}

int RawClient::post_read(std::span<std::byte> local, std::uint32_t lkey, std::uint64_t remote_addr,
                         std::uint32_t rkey) {
  if (!qp_) return EINVAL;
  return qp_->post_rdma_read(WrId(0, 1, WrKind::rdma_read), local, lkey, remote_addr, rkey);
}

int RawClient::post_write_imm(std::span<const std::byte> local, std::uint32_t lkey, std::uint64_t remote_addr,
                              std::uint32_t rkey, std::uint32_t imm) {
  if (!qp_) return EINVAL;
  EXPECT_GT(credits_, 0u) << "a WRITE with immediate takes a receive: a credit";
  --credits_;
  const verbs::SendWr w =
      verbs::SendWr::write_imm(WrId(0, 1, WrKind::rdma_write), local, lkey, remote_addr, rkey, imm);
  return qp_->post_chain(std::span<const verbs::SendWr>(&w, 1));
}

int RawClient::stop_answering() { return qp_ ? qp_->to_error() : EINVAL; }

void RawClient::destroy_qp() { qp_.reset(); }

void RawClient::disconnect() {
  if (id_) (void)id_->disconnect();
}

bool wait_until(const std::function<bool()>& done, std::chrono::milliseconds timeout,
                const std::function<void()>& step, std::initializer_list<RawClient*> clients) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    step();
    for (RawClient* c : clients) c->poll();
    if (done()) return true;
    if (std::chrono::steady_clock::now() > deadline) return false;
  }
}

}  // namespace rkv::test
