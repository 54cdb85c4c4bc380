#include "verbs/completion.hpp"

#include <arpa/inet.h>
#include <infiniband/verbs.h>

#include "verbs/detail/wc.hpp"

namespace rkv::verbs {

const char* Completion::status_detail() const noexcept {
  return ibv_wc_status_str(static_cast<ibv_wc_status>(raw_status));
}

namespace detail {
namespace {

// Switches over the C enums need a default: providers may add values.
CompletionStatus map_status(ibv_wc_status s) noexcept {
  switch (s) {
    case IBV_WC_SUCCESS: return CompletionStatus::success;
    case IBV_WC_WR_FLUSH_ERR: return CompletionStatus::flushed;
    case IBV_WC_REM_ACCESS_ERR: return CompletionStatus::remote_access_error;
    case IBV_WC_RETRY_EXC_ERR: return CompletionStatus::retry_exceeded;
    case IBV_WC_RNR_RETRY_EXC_ERR: return CompletionStatus::rnr_retry_exceeded;
    case IBV_WC_LOC_PROT_ERR: return CompletionStatus::local_protection_error;
    default: return CompletionStatus::other;
  }
}

CompletionOpcode map_opcode(ibv_wc_opcode o) noexcept {
  switch (o) {
    case IBV_WC_SEND: return CompletionOpcode::send;
    case IBV_WC_RECV: return CompletionOpcode::recv;
    case IBV_WC_RDMA_READ: return CompletionOpcode::rdma_read;
    case IBV_WC_RDMA_WRITE: return CompletionOpcode::rdma_write;
    case IBV_WC_RECV_RDMA_WITH_IMM: return CompletionOpcode::recv_rdma_with_imm;
    case IBV_WC_COMP_SWAP:
    case IBV_WC_FETCH_ADD: return CompletionOpcode::atomic;
    case IBV_WC_BIND_MW: return CompletionOpcode::bind_window;
    case IBV_WC_LOCAL_INV: return CompletionOpcode::invalidate;
    default: return CompletionOpcode::unknown;
  }
}

}  // namespace

Completion to_completion(const ibv_wc& wc) noexcept {
  Completion c;
  c.wr_id = WrId::decode(wc.wr_id);
  c.status = map_status(wc.status);
  c.opcode = wc.status == IBV_WC_SUCCESS ? map_opcode(wc.opcode) : CompletionOpcode::unknown;
  c.byte_len = wc.byte_len;
  if ((wc.wc_flags & IBV_WC_WITH_IMM) != 0) c.imm = ntohl(wc.imm_data);
  c.qp_num = wc.qp_num;
  c.raw_status = static_cast<int>(wc.status);
  c.vendor_err = wc.vendor_err;
  return c;
}

}  // namespace detail
}  // namespace rkv::verbs
