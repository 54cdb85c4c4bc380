#pragma once
// RawClient: a tiny test client for the rdma suite built on src/verbs
// directly (not the kv client library), so tests can send exactly the bytes
// they want: well-formed requests, garbage, or more SENDs than credits.
// Non-blocking: poll() handles pending CM events and completions; tests call
// it in a loop together with whatever drives the server (see wait_until).
// Single-threaded; one RawClient per connection.
//
// For the hostile-peer tests (test_hostile.cpp, hostile_helper.cpp) it can
// also register memory a server may READ or WRITE (register_memory), READ
// server memory (post_read), stop at the handshake (Handshake::stall: the
// connect request goes out, the CM events are never read, so librdmacm never
// sends the RTU) and vanish without a disconnect (destroy_qp).

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "proto/decode.hpp"
#include "proto/encode.hpp"
#include "verbs/cm_id.hpp"
#include "verbs/comp_channel.hpp"
#include "verbs/completion.hpp"
#include "verbs/cq.hpp"
#include "verbs/event_channel.hpp"
#include "verbs/mr.hpp"
#include "verbs/pd.hpp"
#include "verbs/qp.hpp"

namespace rkv::test {

struct RawReply {
  proto::Header header;
  std::string value;
  std::optional<proto::RdvDesc> rdv;  // a reply with RDV: its descriptor
  std::optional<proto::GrantDesc> grant;  // a SET_REPLY with GRANT: the grant (capacity: header.value_len)
};

// How far the client takes the connection handshake.
enum class Handshake : std::uint8_t {
  complete,  // resolve, connect, read ESTABLISHED (librdmacm sends the RTU)
  stall,     // stop once the connect request is sent: no CM event is read after it
};

class RawClient {
 public:
  static constexpr std::uint32_t kBufSize = 8192;

  // Starts resolving; the connection comes up while poll() is called.
  RawClient(const std::string& addr, std::uint16_t port, std::uint16_t recv_credits = 8,
            Handshake handshake = Handshake::complete, std::uint32_t send_slots = 32);
  ~RawClient();
  RawClient(const RawClient&) = delete;
  RawClient& operator=(const RawClient&) = delete;

  // Connect parameter features to ask for (proto::kFeature*): call right
  // after constructing, before poll() connects.
  void ask_features(std::uint16_t features) noexcept { features_ = features; }
  // What the server's accept said it does (valid once established).
  [[nodiscard]] std::uint16_t server_features() const noexcept { return server_features_; }
  // Handles every pending CM event and completion. Never blocks.
  void poll();
  // The CM event channel's fd (readable when poll() has a CM event to handle),
  // for callers that sleep in their own poll(2) between calls.
  [[nodiscard]] int cm_fd() const noexcept { return events_.fd(); }

  [[nodiscard]] bool established() const noexcept { return established_; }
  [[nodiscard]] bool disconnected() const noexcept { return disconnected_; }
  [[nodiscard]] bool failed() const noexcept { return !failure_.empty(); }
  [[nodiscard]] const std::string& failure() const noexcept { return failure_; }
  [[nodiscard]] std::uint32_t credits() const noexcept { return credits_; }
  [[nodiscard]] const std::vector<verbs::Completion>& send_errors() const noexcept { return send_errors_; }
  [[nodiscard]] std::size_t sends_completed() const noexcept { return sends_completed_; }
  [[nodiscard]] bool connect_sent() const noexcept { return connect_sent_; }
  // "ip:port" of this end once the address is resolved (what the server logs as its peer).
  [[nodiscard]] std::string local_address() const { return id_ ? id_->local_address() : std::string(); }
  [[nodiscard]] std::size_t reads_completed() const noexcept { return reads_completed_; }
  [[nodiscard]] const std::vector<verbs::Completion>& read_errors() const noexcept { return read_errors_; }
  [[nodiscard]] std::size_t writes_completed() const noexcept { return writes_completed_; }
  [[nodiscard]] const std::vector<verbs::Completion>& write_errors() const noexcept { return write_errors_; }

  // Posts one SEND of exactly `bytes` (may be empty), ignoring credits. 0 or errno.
  int send_raw(std::span<const std::byte> bytes);
  // Encodes and sends one request, spending a credit (fails the test if none).
  int send_request(const proto::MessageSpec& m);
  // The reply to req_id, if it arrived (removed from the inbox).
  std::optional<RawReply> take_reply(std::uint32_t req_id);

  // Registers `bytes` (kept alive by the caller, until this client is gone)
  // in the connection's PD, for descriptors handed to the server. Needs the
  // route resolved (the PD exists from then on); throws otherwise.
  const verbs::MemoryRegion& register_memory(std::span<std::byte> bytes, verbs::Access access);
  // Posts one RDMA READ of [remote_addr, +local.size()) into `local` (within a
  // register_memory region). 0 or errno; its completion counts in reads_completed().
  int post_read(std::span<std::byte> local, std::uint32_t lkey, std::uint64_t remote_addr, std::uint32_t rkey);
  // Posts one RDMA WRITE WITH IMMEDIATE of `local` (within a register_memory
  // region) to [remote_addr, +local.size()): it takes one of the server's
  // receives, so it spends a credit (as send_request does). 0 or errno; its
  // completion counts in writes_completed().
  int post_write_imm(std::span<const std::byte> local, std::uint32_t lkey, std::uint64_t remote_addr,
                     std::uint32_t rkey, std::uint32_t imm);
  // Moves the QP to the error state: it answers nothing more (a peer's READ or
  // WRITE of its memory retries until it gives up), the cm_id stays connected.
  int stop_answering();
  // Destroys the QP without a disconnect (the cm_id stays): the peer learns
  // of it only when its own work requests find nobody.
  void destroy_qp();

  void disconnect();  // initiates; DISCONNECTED arrives through poll()

 private:
  void on_cm(verbs::CmEvent& ev);
  void setup_and_connect();
  void on_completion(const verbs::Completion& c);

  std::string addr_;
  std::uint16_t port_;
  std::uint16_t recv_credits_;
  std::uint32_t send_slots_;
  verbs::EventChannel events_;
  std::optional<verbs::CmId> id_;
  std::optional<verbs::ProtectionDomain> pd_;
  std::optional<verbs::CompletionChannel> channel_;
  std::optional<verbs::CompletionQueue> cq_;
  std::vector<std::byte> recv_mem_;
  std::vector<std::byte> send_mem_;
  std::optional<verbs::MemoryRegion> recv_mr_;
  std::optional<verbs::MemoryRegion> send_mr_;
  std::deque<verbs::MemoryRegion> user_mrs_;  // register_memory()
  std::optional<verbs::QueuePair> qp_;  // last: destroyed first

  Handshake handshake_;
  bool connect_sent_ = false;
  bool established_ = false;
  bool disconnected_ = false;
  std::string failure_;
  std::uint32_t credits_ = 0;
  std::uint32_t next_send_slot_ = 0;
  std::size_t sends_completed_ = 0;
  std::vector<verbs::Completion> send_errors_;
  std::size_t reads_completed_ = 0;
  std::vector<verbs::Completion> read_errors_;
  std::size_t writes_completed_ = 0;
  std::vector<verbs::Completion> write_errors_;
  std::uint16_t features_ = 0;
  std::uint16_t server_features_ = 0;
  std::deque<RawReply> inbox_;
};

// Calls step() and poll() on every client until done() or the timeout.
bool wait_until(const std::function<bool()>& done, std::chrono::milliseconds timeout,
                const std::function<void()>& step, std::initializer_list<RawClient*> clients);

}  // namespace rkv::test
