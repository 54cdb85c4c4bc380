// rkv: one executable for both roles, as the assignment asks (plus `rkv stats`, `rkv top`, `rkv cluster`). It picks the
// role from the name it was started under (kvd, kvload: links made by the
// build) or from its first argument (`rkv server ...`, `rkv load ...`).
#include <cstdio>
#include <cstring>
#include <string_view>

#include "cli.hpp"  // version_line
#include "kvd.hpp"
#include "kvload.hpp"
#include "rkv_cluster.hpp"
#include "rkv_stats.hpp"
#include "rkv_top.hpp"

namespace {
std::string_view basename_of(const char* path) {
  std::string_view p(path);
  const auto slash = p.rfind('/');
  return slash == std::string_view::npos ? p : p.substr(slash + 1);
}

int usage() {
  std::fputs("usage: kvd [OPTIONS]            (server; or: rkv server [OPTIONS])\n"
             "       kvload [OPTIONS]         (client; or: rkv load [OPTIONS])\n"
             "       rkv stats --server ADDR [--port P] [--json]   (a kvd's counters)\n"
             "       rkv top --server ADDR|LIST [--interval-ms MS] [--count N]   (a live view, a line per second)\n"
             "       rkv cluster status --server etcd://HOST:PORT/NAME [--json]   (a cluster's members)\n"
             "       rkv --version\n"
             "       run any of them with --help for its options (each also takes --version)\n",
             stderr);
  return 2;
}
}  // namespace

int main(int argc, char** argv) {
  const auto name = basename_of(argv[0]);
  if (name == "kvd") return rkv::apps::kvd_main(argc, argv);
  if (name == "kvload") return rkv::apps::kvload_main(argc, argv);
  if (argc < 2) return usage();
  const std::string_view role(argv[1]);
  if (role == "--version") {
    std::printf("%s\n", rkv::apps::version_line("rkv").c_str());
    return 0;
  }
  if (role == "server" || role == "kvd") return rkv::apps::kvd_main(argc - 1, argv + 1);
  if (role == "load" || role == "client" || role == "kvload") return rkv::apps::kvload_main(argc - 1, argv + 1);
  if (role == "stats") return rkv::apps::stats_main(argc - 1, argv + 1);
  if (role == "top") return rkv::apps::top_main(argc - 1, argv + 1);
  if (role == "cluster") return rkv::apps::cluster_main(argc - 1, argv + 1);
  return usage();
}
