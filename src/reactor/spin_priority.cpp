#include "reactor/spin_priority.hpp"

#include <sched.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace rkv::reactor {
namespace {

constexpr int kCapSysNice = 23;  // linux/capability.h

// Whether CAP_SYS_NICE is in this thread's effective set (/proc/thread-self/status, CapEff).
bool has_cap_sys_nice() noexcept {
  std::FILE* f = std::fopen("/proc/thread-self/status", "re");
  if (f == nullptr) return false;
  unsigned long long eff = 0;
  bool found = false;
  char line[256];
  while (!found && std::fgets(line, sizeof line, f) != nullptr) {
    found = std::sscanf(line, "CapEff: %llx", &eff) == 1;
  }
  std::fclose(f);
  return found && ((eff >> kCapSysNice) & 1U) != 0;
}

}  // namespace

SpinPriority::SpinPriority() noexcept {
  if (::sched_getscheduler(0) != SCHED_OTHER) return;
  errno = 0;
  const int nice = ::getpriority(PRIO_PROCESS, 0);  // this thread's (Linux)
  if (errno != 0) return;
  // Leaving SCHED_IDLE counts as lowering the nice value to its own: allowed
  // if 20 - nice is within RLIMIT_NICE (the kernel's can_nice()).
  rlimit lim{};
  const bool rlimit_allows =
      ::getrlimit(RLIMIT_NICE, &lim) == 0 &&
      (lim.rlim_cur == RLIM_INFINITY || static_cast<rlim_t>(20 - nice) <= lim.rlim_cur);
  allowed_ = rlimit_allows || has_cap_sys_nice();
}

SpinPriority::~SpinPriority() { restore(); }

void SpinPriority::set_idle(bool idle) noexcept {
  const sched_param param{};
  if (::sched_setscheduler(0, idle ? SCHED_IDLE : SCHED_OTHER, &param) == 0) {
    lowered_ = idle;
    return;
  }
  const int err = errno;
  // Never lower again: a thread that could not return must not try twice.
  allowed_ = false;
  if (idle) return;  // still SCHED_OTHER: nothing lost
  // The thread stays at idle priority; nothing more to try.
  SPDLOG_ERROR("reactor: cannot leave SCHED_IDLE after a spin ({}); the thread stays at idle priority",
               std::strerror(err));
  lowered_ = false;
}

}  // namespace rkv::reactor
