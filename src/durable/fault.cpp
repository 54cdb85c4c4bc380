// Fault injection: see fault.hpp.
#include "durable/fault.hpp"

#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace rkv::durable {

void crash_point(std::string_view point) noexcept {
  static const std::string wanted = [] {
    const char* v = std::getenv("RKV_FAULT");
    const std::string s = v != nullptr ? v : "";
    return s.rfind("crash:", 0) == 0 ? s.substr(6) : std::string();
  }();
  if (wanted.empty() || wanted != point) return;
  std::fprintf(stderr, "kvd: RKV_FAULT: crashing at %s\n", wanted.c_str());
  std::fflush(stderr);
  ::kill(::getpid(), SIGKILL);
  ::_exit(137);
}

bool fail_point(std::string_view point) noexcept {
  static const std::string wanted = [] {
    const char* v = std::getenv("RKV_FAULT");
    const std::string s = v != nullptr ? v : "";
    return s.rfind("fail:", 0) == 0 ? s.substr(5) : std::string();
  }();
  return !wanted.empty() && wanted == point;
}

}  // namespace rkv::durable
