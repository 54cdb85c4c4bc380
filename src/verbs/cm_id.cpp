#include "verbs/cm_id.hpp"

#include <arpa/inet.h>
#include <spdlog/spdlog.h>

#include <cerrno>
#include <cstdint>

#include "verbs/detail/addr.hpp"
#include "verbs/detail/handles.hpp"
#include "verbs/error.hpp"
#include "verbs/event_channel.hpp"

namespace rkv::verbs {

static_assert(sizeof(void*) == sizeof(std::uint64_t), "the cm_id token is stored in its void* context");

namespace {

void* token_to_context(std::uint64_t token) noexcept {
  return reinterpret_cast<void*>(static_cast<std::uintptr_t>(token));
}

int ms(std::chrono::milliseconds t) noexcept {
  return t.count() > INT32_MAX ? INT32_MAX : static_cast<int>(t.count());
}

rdma_conn_param to_rdma(const ConnParams& p, const char* call) {
  if (p.private_data.size() > UINT8_MAX) detail::throw_error(call, EINVAL);
  if (p.retry_count > 7 || p.rnr_retry_count > 7) detail::throw_error(call, EINVAL);
  rdma_conn_param cp{};
  cp.private_data = p.private_data.empty() ? nullptr : p.private_data.data();
  cp.private_data_len = static_cast<std::uint8_t>(p.private_data.size());
  cp.initiator_depth = p.initiator_depth;
  cp.responder_resources = p.responder_resources;
  cp.flow_control = 1;
  cp.retry_count = p.retry_count;
  cp.rnr_retry_count = p.rnr_retry_count;
  return cp;
}

}  // namespace

CmId::CmId(EventChannel& channel, std::uint64_t token) {
  rdma_cm_id* id = nullptr;
  if (rdma_create_id(channel.handle_->channel, &id, token_to_context(token), RDMA_PS_TCP) != 0) {
    detail::throw_error("rdma_create_id", errno);
  }
  try {
    handle_ = std::make_shared<detail::CmIdHandle>(channel.handle_, id);
  } catch (...) {
    rdma_destroy_id(id);
    throw;
  }
}

CmId::CmId(std::shared_ptr<detail::CmIdHandle> handle) noexcept : handle_(std::move(handle)) {}

std::uint64_t CmId::token() const noexcept {
  return static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(handle_->id->context));
}

void CmId::set_token(std::uint64_t token) noexcept { handle_->id->context = token_to_context(token); }

void CmId::bind(const std::string& ip, std::uint16_t port) {
  sockaddr_storage ss = detail::parse_address(ip, port);
  if (rdma_bind_addr(handle_->id, reinterpret_cast<sockaddr*>(&ss)) != 0) {
    detail::throw_error("rdma_bind_addr", errno);
  }
}

void CmId::listen(int backlog) {
  if (rdma_listen(handle_->id, backlog) != 0) detail::throw_error("rdma_listen", errno);
}

void CmId::resolve_addr(const std::string& src_ip, const std::string& dst_ip, std::uint16_t port,
                        std::chrono::milliseconds timeout) {
  sockaddr_storage dst = detail::parse_address(dst_ip, port);
  sockaddr_storage src{};
  sockaddr* src_ptr = nullptr;
  if (!src_ip.empty()) {
    src = detail::parse_address(src_ip, 0);
    src_ptr = reinterpret_cast<sockaddr*>(&src);
  }
  if (rdma_resolve_addr(handle_->id, src_ptr, reinterpret_cast<sockaddr*>(&dst), ms(timeout)) != 0) {
    detail::throw_error("rdma_resolve_addr", errno);
  }
}

void CmId::resolve_route(std::chrono::milliseconds timeout) {
  if (rdma_resolve_route(handle_->id, ms(timeout)) != 0) detail::throw_error("rdma_resolve_route", errno);
}

void CmId::connect(const ConnParams& params) {
  rdma_conn_param cp = to_rdma(params, "rdma_connect");
  if (rdma_connect(handle_->id, &cp) != 0) detail::throw_error("rdma_connect", errno);
  SPDLOG_DEBUG("verbs: connect token={} to {}", token(), peer_address());
}

void CmId::accept(const ConnParams& params) {
  rdma_conn_param cp = to_rdma(params, "rdma_accept");
  if (rdma_accept(handle_->id, &cp) != 0) detail::throw_error("rdma_accept", errno);
  SPDLOG_DEBUG("verbs: accept token={} from {}", token(), peer_address());
}

int CmId::reject(std::span<const std::byte> private_data) noexcept {
  if (private_data.size() > UINT8_MAX) return EINVAL;
  const void* data = private_data.empty() ? nullptr : private_data.data();
  if (rdma_reject(handle_->id, data, static_cast<std::uint8_t>(private_data.size())) != 0) return errno;
  return 0;
}

int CmId::disconnect() noexcept {
  if (rdma_disconnect(handle_->id) != 0) return errno;
  return 0;
}

bool CmId::has_device() const noexcept { return handle_ && handle_->id->verbs != nullptr; }

std::uint16_t CmId::local_port() const noexcept { return ntohs(rdma_get_src_port(handle_->id)); }

std::string CmId::local_address() const { return detail::format_address(rdma_get_local_addr(handle_->id)); }

std::string CmId::peer_address() const { return detail::format_address(rdma_get_peer_addr(handle_->id)); }

}  // namespace rkv::verbs
