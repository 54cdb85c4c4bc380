#pragma once
// RawClient: a tiny test client for the rdma suite built on src/verbs
// directly (not the kv client library), so tests can send exactly the bytes
// they want: well-formed requests, garbage, or more SENDs than credits.
// Non-blocking: poll() handles pending CM events and completions; tests call
// it in a loop together with whatever drives the server (see wait_until).
// Single-threaded; one RawClient per connection.

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
};

class RawClient {
 public:
  static constexpr std::uint32_t kBufSize = 8192;

  // Starts resolving; the connection comes up while poll() is called.
  RawClient(const std::string& addr, std::uint16_t port, std::uint16_t recv_credits = 8);
  ~RawClient();
  RawClient(const RawClient&) = delete;
  RawClient& operator=(const RawClient&) = delete;

  // Handles every pending CM event and completion. Never blocks.
  void poll();

  [[nodiscard]] bool established() const noexcept { return established_; }
  [[nodiscard]] bool disconnected() const noexcept { return disconnected_; }
  [[nodiscard]] bool failed() const noexcept { return !failure_.empty(); }
  [[nodiscard]] const std::string& failure() const noexcept { return failure_; }
  [[nodiscard]] std::uint32_t credits() const noexcept { return credits_; }
  [[nodiscard]] const std::vector<verbs::Completion>& send_errors() const noexcept { return send_errors_; }
  [[nodiscard]] std::size_t sends_completed() const noexcept { return sends_completed_; }

  // Posts one SEND of exactly `bytes` (may be empty), ignoring credits. 0 or errno.
  int send_raw(std::span<const std::byte> bytes);
  // Encodes and sends one request, spending a credit (fails the test if none).
  int send_request(const proto::MessageSpec& m);
  // The reply to req_id, if it arrived (removed from the inbox).
  std::optional<RawReply> take_reply(std::uint32_t req_id);

  void disconnect();  // initiates; DISCONNECTED arrives through poll()

 private:
  void on_cm(verbs::CmEvent& ev);
  void setup_and_connect();
  void on_completion(const verbs::Completion& c);

  std::string addr_;
  std::uint16_t port_;
  std::uint16_t recv_credits_;
  verbs::EventChannel events_;
  std::optional<verbs::CmId> id_;
  std::optional<verbs::ProtectionDomain> pd_;
  std::optional<verbs::CompletionChannel> channel_;
  std::optional<verbs::CompletionQueue> cq_;
  std::vector<std::byte> recv_mem_;
  std::vector<std::byte> send_mem_;
  std::optional<verbs::MemoryRegion> recv_mr_;
  std::optional<verbs::MemoryRegion> send_mr_;
  std::optional<verbs::QueuePair> qp_;  // last: destroyed first

  bool established_ = false;
  bool disconnected_ = false;
  std::string failure_;
  std::uint32_t credits_ = 0;
  std::uint32_t next_send_slot_ = 0;
  std::size_t sends_completed_ = 0;
  std::vector<verbs::Completion> send_errors_;
  std::deque<RawReply> inbox_;
  static constexpr std::uint32_t kSendSlots = 32;
};

// Calls step() and poll() on every client until done() or the timeout.
bool wait_until(const std::function<bool()>& done, std::chrono::milliseconds timeout,
                const std::function<void()>& step, std::initializer_list<RawClient*> clients);

}  // namespace rkv::test
