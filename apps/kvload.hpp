#pragma once
namespace rkv::apps {
// The client role: `kvload --server ADDR [--port P] [--file F] ...`. Returns the exit status.
int kvload_main(int argc, char** argv);
}  // namespace rkv::apps
