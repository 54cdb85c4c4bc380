// kvd's INCR and CAS handlers: see kvd_ops.hpp. Reactor thread (handlers).
#include "kvd_ops.hpp"

#include <new>

#include "kv/server/server.hpp"
#include "proto/call_ops.hpp"

namespace rkv::apps {

namespace {

using kv::server::ReplyWriter;
using kv::server::StoreAccess;

// INCR key delta: the key's decimal value (0 if missing) plus delta, stored
// as decimal text; replies the new value. Refused: a value that is not a
// decimal int64, or a sum that overflows.
void incr(std::span<const std::byte> request, ReplyWriter& reply, StoreAccess& store) {
  const auto req = proto::ops::parse_incr(request);
  if (!req) return reply.refuse();
  std::int64_t value = 0;
  if (const auto cur = store.get(req->key)) {
    const auto parsed = proto::ops::parse_decimal(*cur);
    if (!parsed) return reply.refuse();
    value = *parsed;
  }
  if (__builtin_add_overflow(value, req->delta, &value)) return reply.refuse();
  if (!store.set(req->key, proto::ops::to_decimal(value))) throw std::bad_alloc();
  reply.append(proto::ops::incr_reply(value));
}

// CAS key expected new: sets the key to `new` only if its value is exactly
// `expected`; replies 1 (set) or 0 (the key is missing or differs).
void cas(std::span<const std::byte> request, ReplyWriter& reply, StoreAccess& store) {
  const auto req = proto::ops::parse_cas(request);
  if (!req) return reply.refuse();
  const auto cur = store.get(req->key);
  const bool swap = cur && *cur == req->expected;
  if (swap && !store.set(req->key, req->value)) throw std::bad_alloc();
  const std::byte out{static_cast<unsigned char>(swap ? 1 : 0)};
  reply.append(std::span<const std::byte>(&out, 1));
}

}  // namespace

void register_kvd_ops(kv::server::Server& server) {
  server.handle(proto::ops::kIncr, incr);
  server.handle(proto::ops::kCas, cas);
}

}  // namespace rkv::apps
