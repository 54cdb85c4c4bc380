#pragma once
namespace rkv::apps {
// `rkv stats --server ADDR [--port P] [--json]`: the server's counters and
// gauges (its STATS reply). Returns the exit status.
int stats_main(int argc, char** argv);
}  // namespace rkv::apps
