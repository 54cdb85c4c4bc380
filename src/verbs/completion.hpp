#pragma once
// Completion: a work completion translated out of ibv_wc into project types,
// so no other module needs <infiniband/verbs.h> to handle one.

#include <cstdint>
#include <string_view>

#include "verbs/wr_id.hpp"

namespace rkv::verbs {

enum class CompletionStatus : std::uint8_t {
  success,
  flushed,                 // IBV_WC_WR_FLUSH_ERR: QP went to ERROR (teardown, peer left); normal
  remote_access_error,     // bad rkey / missing remote access flag on the peer's MR
  retry_exceeded,          // transport retries exhausted: peer unreachable
  rnr_retry_exceeded,      // peer had no receive posted (a credit bug if it ever happens)
  local_protection_error,  // bad lkey / local MR lacks local_write
  other,                   // anything else; see Completion::raw_status / status_detail()
};

constexpr std::string_view to_string(CompletionStatus s) noexcept {
  switch (s) {
    case CompletionStatus::success: return "success";
    case CompletionStatus::flushed: return "flushed";
    case CompletionStatus::remote_access_error: return "remote_access_error";
    case CompletionStatus::retry_exceeded: return "retry_exceeded";
    case CompletionStatus::rnr_retry_exceeded: return "rnr_retry_exceeded";
    case CompletionStatus::local_protection_error: return "local_protection_error";
    case CompletionStatus::other: return "other";
  }
  return "invalid";
}

enum class CompletionOpcode : std::uint8_t {
  send,
  recv,
  rdma_read,
  rdma_write,
  recv_rdma_with_imm,
  atomic,   // compare-and-swap / fetch-and-add
  bind_window,  // a memory window bound (SendOp::bind_window)
  invalidate,   // a key invalidated (SendOp::invalidate)
  unknown,  // error completions (verbs leaves opcode undefined), or an opcode we don't use
};

constexpr std::string_view to_string(CompletionOpcode o) noexcept {
  switch (o) {
    case CompletionOpcode::send: return "send";
    case CompletionOpcode::recv: return "recv";
    case CompletionOpcode::rdma_read: return "rdma_read";
    case CompletionOpcode::rdma_write: return "rdma_write";
    case CompletionOpcode::recv_rdma_with_imm: return "recv_rdma_with_imm";
    case CompletionOpcode::atomic: return "atomic";
    case CompletionOpcode::bind_window: return "bind_window";
    case CompletionOpcode::invalidate: return "invalidate";
    case CompletionOpcode::unknown: return "unknown";
  }
  return "invalid";
}

struct Completion {
  WrId wr_id;
  CompletionStatus status = CompletionStatus::other;
  // Only meaningful when status == success: verbs does not define the opcode
  // of an error completion. Owners route by wr_id.kind() instead.
  CompletionOpcode opcode = CompletionOpcode::unknown;
  std::uint32_t byte_len = 0;  // bytes received (recv) / read (rdma_read) / written (recv_rdma_with_imm)
  std::uint32_t imm = 0;       // recv_rdma_with_imm: the writer's SendWr::imm (host order)
  std::uint32_t qp_num = 0;
  int raw_status = 0;           // the ibv_wc_status value, for logs
  std::uint32_t vendor_err = 0; // provider-specific detail, for logs

  [[nodiscard]] bool ok() const noexcept { return status == CompletionStatus::success; }
  // Provider text for raw_status (ibv_wc_status_str), e.g. "remote access error".
  [[nodiscard]] const char* status_detail() const noexcept;
};

}  // namespace rkv::verbs
