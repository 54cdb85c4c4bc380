#pragma once
// CmId: one rdma_cm_id (RC, RDMA_PS_TCP): a listener or one connection.
//
// Its rdma_cm context carries a 64-bit token chosen by the owner (never a
// pointer): CmEvent::token tells which listener/connection an event is for,
// and the owner looks the token up in its own table, so an event can never
// reach a freed object. A CmId handed out by a connect_request event starts
// with the listener's token; the new owner calls set_token() before it
// processes the next event.
//
// Setup/lifecycle calls throw verbs::Error; reject() and disconnect() are
// teardown paths and return 0 or an errno value instead.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

namespace rkv::verbs {

namespace detail {
struct CmIdHandle;
}
class EventChannel;

// Connection parameters for connect()/accept().
//
// rnr_retry_count defaults to 0: no retry after an RNR NAK. The credit
// scheme (docs/protocol.md, "Credits") guarantees a posted receive for every
// SEND, in both directions, so an RNR NAK is impossible unless the credit
// accounting has a bug. With 7 (the IB spec's "retry forever") such a bug
// would show as silent stalls of the whole QP (the sender backs off and
// retries, forever); with 0 it surfaces at once as an rnr_retry_exceeded
// completion: the connection fails, its requests complete with an error,
// and the failure is logged and counted. A small nonzero value would only
// hide a bug for longer. The rdma test no_rnr runs full-depth mixed
// workloads and checks the device's own RNR counters stay unchanged.
// Note: the count a side passes governs the PEER's QP (IB CM REQ/REP). A
// client's 0 covers kvd's replies; kvd's accept passes 7 on purpose so a
// client's SEND beyond its credits reaches kvd, which detects, counts and
// drops the overrun (kv/server/server.cpp, docs/protocol.md).
// min_rnr_timer (how long the peer backs off after our RNR NAK) is not an
// rdma_cm parameter: the kernel CM programs it, and this project leaves it
// at that value.
struct ConnParams {
  // initiator_depth/responder_resources value meaning "device maximum" on
  // connect and "what the peer asked for, capped by the device" on accept.
  static constexpr std::uint8_t kNegotiate = 0xFF;

  // Opaque bytes for the peer's CmEvent::private_data(): at most 56 bytes on
  // connect and 196 on accept (IB CM message sizes, also used by RoCE).
  std::span<const std::byte> private_data{};
  std::uint8_t initiator_depth = kNegotiate;      // RDMA READs we may have in flight
  std::uint8_t responder_resources = kNegotiate;  // peer READs we serve concurrently
  std::uint8_t retry_count = 7;                   // transport retries (0..7); ignored on accept
  std::uint8_t rnr_retry_count = 0;               // 0..7 (7 = infinite); 0: see above
};

class CmId {
 public:
  // rdma_create_id on `channel`; events for this id arrive there.
  CmId(EventChannel& channel, std::uint64_t token);

  CmId(CmId&&) noexcept = default;
  CmId& operator=(CmId&&) noexcept = default;
  CmId(const CmId&) = delete;
  CmId& operator=(const CmId&) = delete;
  ~CmId() = default;  // rdma_destroy_id once the last dependent (QP) is gone

  [[nodiscard]] std::uint64_t token() const noexcept;
  void set_token(std::uint64_t token) noexcept;

  // --- passive side ---------------------------------------------------------
  // Numeric IPv4/IPv6 address; port 0 picks a free port (read it back with
  // local_port()).
  void bind(const std::string& ip, std::uint16_t port);
  void listen(int backlog);

  // --- active side (each completes with an event on the channel) -----------
  // src_ip may be empty (route lookup picks the source).
  void resolve_addr(const std::string& src_ip, const std::string& dst_ip, std::uint16_t port,
                    std::chrono::milliseconds timeout);      // -> addr_resolved / addr_error
  void resolve_route(std::chrono::milliseconds timeout);     // -> route_resolved / route_error
  // Post receives before connect()/accept(): the peer may send as soon as it
  // sees ESTABLISHED.
  void connect(const ConnParams& params);                    // -> established / rejected / ...
  void accept(const ConnParams& params);                     // -> established (passive side)

  // --- teardown (status values) ---------------------------------------------
  int reject(std::span<const std::byte> private_data = {}) noexcept;
  // Also moves the QP to ERROR (librdmacm does that for IB/RoCE). The side
  // that receives DISCONNECTED calls disconnect() too: that answers the
  // peer's DREQ so its DISCONNECTED arrives promptly.
  int disconnect() noexcept;

  // --- introspection ---------------------------------------------------------
  [[nodiscard]] bool has_device() const noexcept;       // bound/resolved to an RDMA device
  [[nodiscard]] std::uint16_t local_port() const noexcept;
  [[nodiscard]] std::string local_address() const;      // "ip:port", for logs
  [[nodiscard]] std::string peer_address() const;       // "ip:port", for logs
  [[nodiscard]] bool valid() const noexcept { return handle_ != nullptr; }

 private:
  friend class EventChannel;       // wraps the ids of connect_request events
  friend class ProtectionDomain;   // needs the verbs context
  friend class CompletionChannel;  // needs the verbs context
  friend class QueuePair;          // rdma_create_qp
  explicit CmId(std::shared_ptr<detail::CmIdHandle> handle) noexcept;

  std::shared_ptr<detail::CmIdHandle> handle_;
};

}  // namespace rkv::verbs
