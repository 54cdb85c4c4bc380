#include "kvd.hpp"

#include <cstdio>

namespace rkv::apps {
// Placeholder until the kvd role lands.
int kvd_main(int, char**) {
  std::fputs("kvd: not implemented yet\n", stderr);
  return 1;
}
}  // namespace rkv::apps
