#pragma once
// The CALL operations kvd ships, INCR and CAS (proto/call_ops.hpp for their
// bytes, docs/protocol.md "CALL"), written against the same public handler
// API as any program embedding the server (Server::handle, handler.hpp): no
// private shortcut into the request path.

namespace rkv::kv::server {
class Server;
}

namespace rkv::apps {

// Registers INCR (proto::ops::kIncr) and CAS (proto::ops::kCas) on `server`.
void register_kvd_ops(kv::server::Server& server);

}  // namespace rkv::apps
