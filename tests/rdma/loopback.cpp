#include "loopback.hpp"

#include <spdlog/spdlog.h>

#include <array>
#include <cstdlib>
#include <stdexcept>

#include "verbs/device.hpp"

namespace rkv::verbs::test {

std::string softroce_addr() {
  const char* addr = std::getenv("SOFTROCE_ADDR");
  if (addr == nullptr || *addr == '\0') {
    throw std::runtime_error(
        "SOFTROCE_ADDR is not set: the rdma suite must run inside the Soft-RoCE environment "
        "(scripts/softroce exec <test>, or meson test --suite rdma)");
  }
  std::vector<std::string> devices;
  try {
    devices = list_devices();
  } catch (const std::exception& e) {
    throw std::runtime_error(std::string("no RDMA support in this kernel: ") + e.what());
  }
  if (devices.empty()) throw std::runtime_error("no RDMA device found (expected rxe0 from scripts/softroce)");
  return addr;
}

void Endpoint::create_resources(const QpCaps& caps, int cq_entries, const ProtectionDomain* shared_pd) {
  if (shared_pd == nullptr) pd.emplace(*id);
  channel.emplace(*id);
  cq.emplace(*channel, cq_entries);
  qp.emplace(*id, shared_pd != nullptr ? *shared_pd : *pd, *cq, *cq, caps);
}

Completion one_completion(Endpoint& ep) {
  std::vector<Completion> got;
  auto cb = [&](const Completion& c) noexcept { got.push_back(c); };
  if (!ep.drain_until(60s, cb, [&] { return !got.empty(); })) throw std::runtime_error("no completion");
  if (got.size() != 1) throw std::runtime_error(std::to_string(got.size()) + " completions where one was expected");
  return got.front();
}

std::vector<std::byte> byte_pattern(std::size_t n, unsigned seed) {
  std::vector<std::byte> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::byte>((i * 131 + seed) & 0xff);
  return v;
}

Loopback::Loopback(const std::string& addr, LoopbackOptions options) : options_(std::move(options)) {
  listener.emplace(server_events, kListenerToken);
  listener->bind(addr, 0);  // port 0: no clashes between tests
  listener->listen(8);
  const std::uint16_t port = listener->local_port();
  spdlog::info("loopback: listening on {}", listener->local_address());

  client.id.emplace(client_events, kClientToken);
  client.id->resolve_addr(addr, addr, port, 10s);

  bool client_up = false;
  bool server_up = false;
  std::vector<std::byte> connect_private;
  std::vector<std::byte> accept_private;
  pump(
      "connection establishment",
      [&](CmEvent& ev) {
        switch (ev.type) {
          case CmEventType::addr_resolved:
            client.id->resolve_route(10s);
            return;
          case CmEventType::route_resolved: {
            client.create_resources(options_.caps, options_.cq_entries);
            if (options_.before_connect) connect_private = options_.before_connect(client);
            ConnParams p = options_.client_params;
            p.private_data = connect_private;
            client.id->connect(p);
            return;
          }
          case CmEventType::connect_request: {
            if (ev.token != kListenerToken) throw std::runtime_error("connect_request with a foreign token");
            server_saw_private.assign(ev.private_data().begin(), ev.private_data().end());
            server_saw_initiator_depth = ev.peer_initiator_depth;
            server.id = std::move(ev.new_id);
            server.id->set_token(kServerToken);
            server.create_resources(options_.caps, options_.cq_entries, options_.server_pd);
            if (options_.before_accept) accept_private = options_.before_accept(server);
            ConnParams p = options_.server_params;
            p.private_data = accept_private;
            server.id->accept(p);
            return;
          }
          case CmEventType::established:
            if (ev.token == kClientToken) {
              client_saw_private.assign(ev.private_data().begin(), ev.private_data().end());
              client_saw_responder_resources = ev.peer_responder_resources;
              client_up = true;
            } else if (ev.token == kServerToken) {
              server_up = true;
            }
            return;
          case CmEventType::rejected:
          case CmEventType::disconnected:
          case CmEventType::unreachable:
          case CmEventType::connect_error:
          case CmEventType::addr_error:
          case CmEventType::route_error:
          case CmEventType::device_removal:
          case CmEventType::timewait_exit:
          case CmEventType::other:
            throw std::runtime_error("connection setup failed: cm event " + std::string(to_string(ev.type)) +
                                     " status " + std::to_string(ev.status) + " token " +
                                     std::to_string(ev.token));
        }
      },
      [&] { return client_up && server_up; });
  connected_ = true;
  spdlog::info("loopback: connected client {} <-> server {} (qp {} <-> {})", client.id->local_address(),
               server.id->local_address(), client.qp->qp_num(), server.qp->qp_num());
}

void Loopback::disconnect() {
  if (!connected_) return;
  connected_ = false;
  if (int rc = client.id->disconnect(); rc != 0) {
    throw std::runtime_error("client disconnect failed: errno " + std::to_string(rc));
  }
  bool client_down = false;
  bool server_down = false;
  pump(
      "disconnect",
      [&](CmEvent& ev) {
        if (ev.type == CmEventType::timewait_exit) return;
        if (ev.type != CmEventType::disconnected) {
          throw std::runtime_error("unexpected cm event during disconnect: " + std::string(to_string(ev.type)));
        }
        if (ev.token == kClientToken) client_down = true;
        if (ev.token == kServerToken) {
          server_down = true;
          server.id->disconnect();  // answer the DREQ (teardown step 2, passive side)
        }
      },
      [&] { return client_down && server_down; });
}

Loopback::~Loopback() {
  if (!connected_) return;
  try {
    options_.timeout = 10s;
    disconnect();
  } catch (const std::exception& e) {
    spdlog::warn("loopback: teardown: {}", e.what());
  }
}

void Loopback::pump(const char* what, const std::function<void(CmEvent&)>& handle,
                    const std::function<bool()>& done) {
  const auto deadline = std::chrono::steady_clock::now() + options_.timeout;
  while (!done()) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) throw std::runtime_error(std::string("timed out waiting for ") + what);
    std::array<pollfd, 2> fds{{{server_events.fd(), POLLIN, 0}, {client_events.fd(), POLLIN, 0}}};
    const int n = ::poll(fds.data(), fds.size(), static_cast<int>(left.count()));
    if (n < 0) throw std::runtime_error("poll on cm event channels failed");
    for (EventChannel* ch : {&server_events, &client_events}) {
      while (auto ev = ch->next()) {
        spdlog::debug("loopback: cm event {} token {} status {}", to_string(ev->type), ev->token, ev->status);
        handle(*ev);
      }
    }
  }
}

}  // namespace rkv::verbs::test
