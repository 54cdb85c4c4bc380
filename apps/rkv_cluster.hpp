#pragma once

namespace rkv::apps {
// rkv cluster status --server etcd://HOST:PORT/NAME [--json]
int cluster_main(int argc, char** argv);
}  // namespace rkv::apps
