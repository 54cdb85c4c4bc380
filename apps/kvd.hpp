#pragma once
namespace rkv::apps {
// The server role: `kvd --port P [--bind ADDR] ...`. Returns the exit status.
int kvd_main(int argc, char** argv);
}  // namespace rkv::apps
