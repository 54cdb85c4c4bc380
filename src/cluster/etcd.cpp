// EtcdClient: see etcd.hpp.
#include "cluster/etcd.hpp"

#include <curl/curl.h>
#include <spdlog/spdlog.h>

#include <cerrno>
#include <map>
#include <mutex>
#include <optional>

#include "cluster/etcd_wire.hpp"

namespace rkv::cluster {

namespace {

// The endpoint of each endpoint list that last answered (or that requests
// moved on to), shared by every EtcdClient of the process: a new client (a
// read, a watch restarted, the lease, the keeper) starts where the others
// found etcd instead of at a member that is down. Keyed by the list, so
// clients of another cluster address do not interfere.
class Preferred {
 public:
  static Preferred& get() {
    static Preferred p;
    return p;
  }
  [[nodiscard]] std::size_t of(const std::vector<std::string>& endpoints) {
    const std::lock_guard lock(m_);
    const auto it = by_list_.find(key(endpoints));
    if (it == by_list_.end()) return 0;
    for (std::size_t i = 0; i < endpoints.size(); ++i) {
      if (endpoints[i] == it->second) return i;
    }
    return 0;
  }
  void set(const std::vector<std::string>& endpoints, std::size_t current) noexcept {
    try {
      const std::lock_guard lock(m_);
      by_list_[key(endpoints)] = endpoints[current];
    } catch (...) {  // out of memory: the next client starts at the first endpoint, as before
    }
  }

 private:
  static std::string key(const std::vector<std::string>& endpoints) {
    std::string k;
    for (const auto& e : endpoints) k += e + ",";
    return k;
  }
  std::mutex m_;
  std::map<std::string, std::string> by_list_;
};

void global_init() {
  static std::once_flag once;
  static CURLcode rc = CURLE_OK;
  std::call_once(once, [] { rc = curl_global_init(CURL_GLOBAL_DEFAULT); });
  if (rc != CURLE_OK) throw ClusterError(ENOMEM, std::string("libcurl: ") + curl_easy_strerror(rc));
}

int errno_of(CURLcode rc) noexcept {
  switch (rc) {
    case CURLE_COULDNT_CONNECT: return ECONNREFUSED;
    case CURLE_COULDNT_RESOLVE_HOST: return EHOSTUNREACH;
    case CURLE_OPERATION_TIMEDOUT: return ETIMEDOUT;
    case CURLE_OUT_OF_MEMORY: return ENOMEM;
    default: return EIO;
  }
}

}  // namespace

struct EtcdClient::Request {
  CURL* easy = nullptr;
  curl_slist* headers = nullptr;
  std::size_t endpoint = 0;  // its index in endpoints_
  std::string url;
  std::string body;
  std::string response;  // the reply; a stream's unfinished line
  EtcdCallback cb;
  EtcdLineCallback on_line;  // a stream's
  bool ended = false;        // on_line refused a line, or one was too long
  char error[CURL_ERROR_SIZE] = {};

  ~Request() {
    if (easy != nullptr) curl_easy_cleanup(easy);
    if (headers != nullptr) curl_slist_free_all(headers);
  }

  // CURLOPT_WRITEFUNCTION. A stream's lines go to on_line while the reply is
  // a 200; anything else is kept whole for the error message.
  static std::size_t on_data(char* data, std::size_t size, std::size_t n, void* self) {
    auto* r = static_cast<Request*>(self);
    const std::size_t len = size * n;
    long status = 0;
    if (!r->on_line || (curl_easy_getinfo(r->easy, CURLINFO_RESPONSE_CODE, &status), status != 200)) {
      if (r->response.size() + len > kMaxLine) return 0;  // the reply is not etcd's
      r->response.append(data, len);
      return len;
    }
    std::string_view in(data, len);
    while (!in.empty()) {
      const std::size_t nl = in.find('\n');
      if (nl == std::string_view::npos) {
        r->response.append(in);
        break;
      }
      std::string_view line = in.substr(0, nl);
      in.remove_prefix(nl + 1);
      if (!r->response.empty()) {
        r->response.append(line);
        line = r->response;
      }
      const bool go_on = line.empty() || r->on_line(line);
      r->response.clear();
      if (!go_on) {
        r->ended = true;
        return 0;  // curl ends the transfer (CURLE_WRITE_ERROR)
      }
    }
    if (r->response.size() > kMaxLine) {
      r->ended = true;
      return 0;
    }
    return len;
  }
};

void EtcdReply::check(std::string_view what) const {
  if (!ok) throw ClusterError(code != 0 ? code : EIO, std::string(what) + ": " + error);
}

EtcdClient::EtcdClient(reactor::Reactor& reactor, std::vector<std::string> endpoints, std::chrono::milliseconds timeout)
    : reactor_(&reactor), endpoints_(std::move(endpoints)), timeout_(timeout) {
  if (endpoints_.empty()) throw ClusterError(EINVAL, "etcd: no endpoint");
  current_ = Preferred::get().of(endpoints_);
  global_init();
  multi_ = curl_multi_init();
  if (multi_ == nullptr) throw ClusterError(ENOMEM, "libcurl: curl_multi_init failed");
  curl_multi_setopt(multi_, CURLMOPT_SOCKETFUNCTION, &EtcdClient::on_socket);
  curl_multi_setopt(multi_, CURLMOPT_SOCKETDATA, this);
  curl_multi_setopt(multi_, CURLMOPT_TIMERFUNCTION, &EtcdClient::on_timer);
  curl_multi_setopt(multi_, CURLMOPT_TIMERDATA, this);
}

EtcdClient::~EtcdClient() {
  reactor_->assert_owner_thread();
  for (auto& [easy, r] : requests_) curl_multi_remove_handle(multi_, easy);
  requests_.clear();
  // curl_multi_cleanup closes the kept connections, telling on_socket first.
  curl_multi_cleanup(multi_);
  sockets_.clear();
  timer_.reset();
}

void EtcdClient::post(std::string_view path, std::string body, EtcdCallback cb, std::chrono::milliseconds timeout) {
  (void)start(path, std::move(body), std::move(cb), timeout.count() > 0 ? timeout : timeout_);
}

void EtcdClient::stream(std::string_view path, std::string body, EtcdLineCallback on_line, EtcdCallback on_end) {
  (void)start(path, std::move(body), std::move(on_end), std::chrono::milliseconds(0), std::move(on_line));
}

void* EtcdClient::start(std::string_view path, std::string body, EtcdCallback cb, std::chrono::milliseconds timeout,
                        EtcdLineCallback on_line) {
  reactor_->assert_owner_thread();
  auto r = std::make_unique<Request>();
  r->easy = curl_easy_init();
  if (r->easy == nullptr) throw ClusterError(ENOMEM, "libcurl: curl_easy_init failed");
  r->endpoint = current_;
  r->url = endpoints_[current_] + std::string(path);
  r->body = std::move(body);
  r->cb = std::move(cb);
  r->on_line = std::move(on_line);
  r->headers = curl_slist_append(nullptr, "Content-Type: application/json");
  CURL* e = r->easy;
  curl_easy_setopt(e, CURLOPT_URL, r->url.c_str());
  curl_easy_setopt(e, CURLOPT_POSTFIELDS, r->body.c_str());
  curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(r->body.size()));
  curl_easy_setopt(e, CURLOPT_HTTPHEADER, r->headers);
  curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, &Request::on_data);
  curl_easy_setopt(e, CURLOPT_WRITEDATA, r.get());
  curl_easy_setopt(e, CURLOPT_ERRORBUFFER, r->error);
  if (timeout.count() > 0) {
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, static_cast<long>(timeout.count()));
  } else {
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(timeout_.count()));
    curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(e, CURLOPT_TCP_KEEPIDLE, 5L);
    curl_easy_setopt(e, CURLOPT_TCP_KEEPINTVL, 5L);
  }
  curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http");
  if (curl_multi_add_handle(multi_, e) != CURLM_OK) throw ClusterError(ENOMEM, "libcurl: curl_multi_add_handle failed");
  requests_.emplace(e, std::move(r));
  return e;
}

void EtcdClient::cancel(void* easy) noexcept {
  const auto it = requests_.find(easy);
  if (it == requests_.end()) return;
  curl_multi_remove_handle(multi_, easy);
  requests_.erase(it);
}

EtcdReply EtcdClient::call(std::string_view path, std::string body, std::chrono::milliseconds timeout) {
  reactor_->assert_owner_thread();
  if (timeout.count() <= 0) timeout = timeout_;
  for (std::size_t tried = 1;; ++tried) {
    std::optional<EtcdReply> reply;
    const std::string& to = endpoint();
    void* const request = start(path, body, [&reply](EtcdReply& r) { reply = std::move(r); }, timeout);
    // curl's own timeout ends the request; the loop's deadline is a backstop.
    const auto deadline = reactor::Reactor::now() + 2 * timeout + std::chrono::seconds(1);
    while (!reply && reactor::Reactor::now() < deadline) reactor_->run_once(std::chrono::milliseconds(100));
    if (!reply) {
      cancel(request);  // its callback refers to `reply`, which dies with this iteration
      reply.emplace();
      reply->error = "no reply from etcd at " + to;
      reply->code = ETIMEDOUT;
      next_endpoint(current_);
    }
    if (reply->http_status != 0 || tried >= endpoints_.size()) return std::move(*reply);
  }
}

void EtcdClient::next_endpoint(std::size_t failed) noexcept {
  if (failed != current_ || endpoints_.size() == 1) return;  // moved on already, or nowhere to go
  current_ = (current_ + 1) % endpoints_.size();
  Preferred::get().set(endpoints_, current_);
  spdlog::warn("etcd: no reply from {}: using {}", endpoints_[failed], endpoints_[current_]);
}

int EtcdClient::on_socket(void* /*easy*/, int fd, int what, void* self_ptr, void* /*socketp*/) {
  auto* self = static_cast<EtcdClient*>(self_ptr);
  if (what == CURL_POLL_REMOVE) {
    self->sockets_.erase(fd);  // before curl closes it
    return 0;
  }
  std::uint32_t events = 0;
  if (what == CURL_POLL_IN || what == CURL_POLL_INOUT) events |= EPOLLIN;
  if (what == CURL_POLL_OUT || what == CURL_POLL_INOUT) events |= EPOLLOUT;
  if (auto it = self->sockets_.find(fd); it != self->sockets_.end()) {
    it->second.modify(events);
  } else {
    self->sockets_.emplace(fd, self->reactor_->watch(fd, events, [self, fd](std::uint32_t revents) {
      int flags = 0;
      if ((revents & EPOLLIN) != 0) flags |= CURL_CSELECT_IN;
      if ((revents & EPOLLOUT) != 0) flags |= CURL_CSELECT_OUT;
      if ((revents & (EPOLLERR | EPOLLHUP)) != 0) flags |= CURL_CSELECT_ERR;
      self->socket_action(fd, flags);  // may remove this very registration: touch nothing of it after
    }));
  }
  return 0;
}

int EtcdClient::on_timer(void* /*multi*/, long timeout_ms, void* self_ptr) {
  auto* self = static_cast<EtcdClient*>(self_ptr);
  if (timeout_ms < 0) {
    self->timer_.reset();
    return 0;
  }
  self->timer_ = self->reactor_->after(std::chrono::milliseconds(timeout_ms),
                                       [self] { self->socket_action(CURL_SOCKET_TIMEOUT, 0); });
  return 0;
}

void EtcdClient::socket_action(int fd, int flags) {
  int running = 0;
  curl_multi_socket_action(multi_, fd, flags, &running);
  complete_done();
}

void EtcdClient::complete_done() {
  int left = 0;
  while (CURLMsg* m = curl_multi_info_read(multi_, &left)) {
    if (m->msg != CURLMSG_DONE) continue;
    CURL* e = m->easy_handle;
    const CURLcode rc = m->data.result;
    auto it = requests_.find(e);
    if (it == requests_.end()) continue;
    std::unique_ptr<Request> r = std::move(it->second);
    requests_.erase(it);
    curl_multi_remove_handle(multi_, e);
    EtcdReply reply;
    if (rc != CURLE_OK && r->ended) {
      reply.error = "the stream from etcd at " + endpoints_[r->endpoint] + " was ended";
      reply.code = EPROTO;
    } else if (rc != CURLE_OK) {
      reply.error = r->error[0] != '\0' ? std::string(r->error) : std::string(curl_easy_strerror(rc));
      reply.error += " (etcd at " + endpoints_[r->endpoint] + ")";
      reply.code = errno_of(rc);
      next_endpoint(r->endpoint);  // no HTTP reply: the next requests go to another member
    } else {
      curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &reply.http_status);
      reply.ok = reply.http_status == 200;
      if (!reply.ok) {
        reply.error = "HTTP " + std::to_string(reply.http_status) + " from etcd at " + endpoints_[r->endpoint] + ": " +
                      error_message(r->response);
        reply.code = EPROTO;
      }
      reply.body = std::move(r->response);
    }
    r->cb(reply);
  }
}

}  // namespace rkv::cluster
