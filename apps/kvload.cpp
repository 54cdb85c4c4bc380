#include "kvload.hpp"

#include <cstdio>

namespace rkv::apps {
// Placeholder until the kvload role lands.
int kvload_main(int, char**) {
  std::fputs("kvload: not implemented yet\n", stderr);
  return 1;
}
}  // namespace rkv::apps
