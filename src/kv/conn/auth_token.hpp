#pragma once
// Reading an authentication token file (kvd --auth-token-file, kvload and
// rkv stats --auth-token-file, RKV_AUTH_TOKEN_FILE for kv_open). The token is
// the file's bytes without trailing newlines ("\n" or "\r\n", as an editor or
// `echo` leaves them), 1 to proto::kMaxAuthToken bytes, any bytes otherwise.
// Only its digest travels (proto/auth.hpp). Setup only: throws.

#include <stdexcept>
#include <string>

namespace rkv::kv::conn {

class AuthTokenError : public std::runtime_error {
 public:
  AuthTokenError(int code, const std::string& what) : std::runtime_error(what), code_(code) {}
  // errno-style: the open/read failure's, or EINVAL for an empty or too long token.
  [[nodiscard]] int code() const noexcept { return code_; }

 private:
  int code_;
};

struct AuthToken {
  std::string token;
  bool others_can_read = false;  // the file's mode lets group or others read it
};

// Throws AuthTokenError naming the file.
[[nodiscard]] AuthToken read_auth_token_file(const std::string& path);

}  // namespace rkv::kv::conn
