#include "kv/conn/auth_token.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "proto/auth.hpp"

namespace rkv::kv::conn {

AuthToken read_auth_token_file(const std::string& path) {
  const auto fail = [&path](int code, const std::string& why) {
    return AuthTokenError(code, "auth token file " + path + ": " + why);
  };
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw fail(errno, std::strerror(errno));
  AuthToken out;
  struct stat st {};
  if (::fstat(fd, &st) == 0) out.others_can_read = (st.st_mode & (S_IRGRP | S_IROTH)) != 0;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int e = errno;
      ::close(fd);
      throw fail(e, std::strerror(e));
    }
    if (n == 0) break;
    out.token.append(buf, static_cast<std::size_t>(n));
    if (out.token.size() > proto::kMaxAuthToken + 2) break;  // too long whatever follows
  }
  ::close(fd);
  while (!out.token.empty() && (out.token.back() == '\n' || out.token.back() == '\r')) out.token.pop_back();
  if (out.token.empty()) throw fail(EINVAL, "the token is empty");
  if (out.token.size() > proto::kMaxAuthToken) {
    throw fail(EINVAL, "the token is longer than " + std::to_string(proto::kMaxAuthToken) + " bytes");
  }
  return out;
}

}  // namespace rkv::kv::conn
