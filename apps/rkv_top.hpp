#pragma once
namespace rkv::apps {
// `rkv top --server ADDR|LIST [--interval-ms MS] [--count N]`: one line per
// interval per server (rates from its STATS replies). Returns the exit status.
int top_main(int argc, char** argv);
}  // namespace rkv::apps
