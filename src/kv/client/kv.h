/* kv.h: the C API of the RDMA key-value store client (C and C++).
 *
 * A handle is one connection with its own event loop, created by kv_open on
 * the calling thread. A handle is used from the thread that opened it: every
 * call that takes the handle (kv_set, kv_get, kv_poll, kv_fd, kv_close,
 * kv_last_error(handle), ...) must be called there (debug builds assert it).
 * Different handles, on the same or different threads, are independent.
 * kv_release and kv_strerror may be called from any thread.
 *
 * Every int function returns 0 on success or a positive errno-style code:
 *   EINVAL        NULL or malformed argument (empty key, bad server name)
 *   E2BIG         key longer than 1024 bytes, or value over the server's limit
 *                 (kvd --max-value, default 256 MiB)
 *   ECONNREFUSED  nothing accepted the connection on that address/port
 *   ETIMEDOUT     no answer in time (connect, or a request)
 *   EHOSTUNREACH  the address cannot be resolved/reached over RDMA
 *   ENETUNREACH   no route to the server's address over RDMA
 *   ENODEV        no RDMA device on this machine, or it was removed
 *   EPROTO        connecting: the server sent bad connect parameters, or an
 *                 unexpected connection event
 *   ENOTCONN      the handle's connection is closed or failed earlier
 *   ECONNRESET    the connection failed while the request was pending
 *   EIO           the server failed the request (internal, remote access or
 *                 disk error; or, in a cluster, a write whose shard moved
 *                 before it was replicated: it may or may not last. Sync
 *                 calls other than kv_call place such a write again)
 *   ENOMEM        out of memory (here or in the server's store)
 *   ENOENT        kv_get_bin, kv_del, a GET or DEL completion: no such key
 *   EAGAIN        kv_*_async: the pipeline is full (see below)
 *   EACCES        kv_open: the server requires an auth token and none, or a
 *                 wrong one, was given (RKV_AUTH_TOKEN_FILE)
 *   EHOSTDOWN     a handle over several servers: the key's server is down
 *                 (its connection failed); the handle reconnects it in the
 *                 background and its keys work again once it is back
 *   ESTALE        a handle on a cluster: the member kept refusing the key
 *                 for the op timeout (RKV_TIMEOUT_MS) a call places it
 *                 again, because the map it knows names another primary,
 *                 or it cannot renew its etcd lease (docs/cluster.md
 *                 "Fencing"); nothing was done.
 *                 Async calls report it at once (submit the op again).
 *   EOPNOTSUPP, EREMOTEIO, EDOM  kv_call, kv_incr, kv_cas (see there)
 * kv_strerror(code) names a code; kv_last_error(handle) gives the last
 * failure's full message. Output parameters are written only on success.
 * (These codes, their kv_strerror texts and the Python classes are one table:
 * src/kv/client/errors.hpp.)
 */
#ifndef RKV_KV_H
#define RKV_KV_H

#include <stddef.h>
#include <stdint.h>

/* KV_API marks the functions librkv.so exports. The library is built with
 * hidden visibility (and a version script that keeps only kv_* names), so
 * only what carries KV_API is visible to programs: declare every new
 * function of this API with it. The install test (tests/install) fails
 * when a kv_* function declared here is not exported, or anything else is. */
#if defined(__GNUC__) || defined(__clang__)
#define KV_API __attribute__((visibility("default")))
#else
#define KV_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Port used when servername has no ":port". */
#define KV_DEFAULT_PORT 7471

/* servername: "host" or "host:port" ("[v6addr]:port" for IPv6), or a
 * comma-separated list of them ("h1:7471,h2:7472,h3:7473"): one connection
 * per server, all driven by the handle's one event loop, and every key on
 * the server rendezvous hashing picks (docs/protocol.md "Several servers":
 * every client must list the servers the same way; the order does not
 * matter). A bad list (empty entry, bad port, a server twice): EINVAL. Every
 * server must accept at kv_open. Later, an operation whose server is down
 * fails with EHOSTDOWN at once (pending ones as soon as the failure is seen)
 * while the other servers keep serving; the handle retries that server with
 * a backoff (100 ms doubling to 2 s) at its calls (kv_fd becomes readable
 * when a retry is due). kv_call (no key) is EINVAL on such a handle; kv_stats
 * gives each server's counters under a "# shard ID up|down|gone" line;
 * kv_counters the sum over the servers plus shard_failures and reconnects
 * lines.
 * servername may also name a cluster, "etcd://HOST:PORT/NAME" (docs/cluster.md):
 * kv_open reads its members and shard map from etcd (within 5 s) and
 * connects every member; a key goes to the primary the map names for its
 * shard (no map yet: as over the list above). The handle then follows the
 * cluster: a member that joins is connected and takes its share of the
 * shards, one that leaves is "gone" once the map no longer names it (its
 * shards go to the others; an operation on it not yet sent fails with
 * EHOSTDOWN). Changes are applied at the handle's calls (kv_fd becomes
 * readable when one arrived); kv_counters adds a membership_changes line.
 * Such a handle is always sharded (EHOSTDOWN, retries, kv_call EINVAL), even
 * with one member. etcd unreachable at kv_open: ECONNREFUSED, ETIMEDOUT or
 * EPROTO; no member: EHOSTDOWN; a malformed address: EINVAL.
 * Environment: RKV_GET_MODE=rpc (default) or read. With "read", kv_get reads
 * values with one-sided RDMA READs of the server's index and memory, sending
 * no message (it falls back to a message GET when the index cannot answer, or
 * when the server has no index; docs/protocol.md "One-sided GET"). Any other
 * non-empty value makes kv_open fail with EINVAL.
 * RKV_READ_FROM=primary (default) or backups: over a cluster, kv_get and
 * the other GETs go to an in-sync backup of the key's shard when the map
 * names one (docs/cluster.md "Reads from backups": what such a read may
 * miss); anything else makes kv_open fail with EINVAL.
 * RKV_POLL_US=N (default 200): after each completion or request the handle
 * keeps polling for N microseconds before it sleeps until a completion event
 * (0: events only; "busy": never sleeps). Anything else: EINVAL.
 * RKV_TIMEOUT_MS=N (default 30000): a request, sync or async, that has had
 * no reply for N ms (while nothing else on its connection moved either)
 * fails its connection: the sync call returns ETIMEDOUT (ECONNRESET when requests
 * on it had been waiting longer and failed it first), every request in
 * flight on it completes with its error (kv_poll returns them), e.g. when
 * the server is stopped but its host still acknowledges. 0: no limit.
 * Anything but 0..86400000: EINVAL.
 * RKV_AUTH_TOKEN_FILE=PATH: present the token in PATH (the file's bytes
 * without the trailing newline) to a kvd started with --auth-token-file;
 * a file that cannot be read, or an empty one, makes kv_open fail with
 * EINVAL; a server that refuses the token, with EACCES. */
KV_API int kv_open(char *servername, void **kv_handle);
/* kv_open with the options given here instead of by the environment:
 * get_mode "rpc" or "read", poll_us as RKV_POLL_US ("200", "0", "busy").
 * NULL (or "") takes the environment variable, as kv_open does. */
KV_API int kv_open_opts(char *servername, const char *get_mode, const char *poll_us, void **kv_handle);
/* Values of any size up to the server's limit. A large value (4 KiB and
 * more) is sent zero-copy: the server RDMA READs it from `value` (registered
 * for the call only). */
KV_API int kv_set(void *kv_handle, const char *key, const char *value);
/* *value: the NUL-terminated value ("" for a missing key); free it with
 * kv_release. A value over 64 KiB is returned in the memory it was
 * RDMA-written or read into (no copy); smaller ones are copied into a
 * malloc'd buffer: up to 64 KiB, copying costs less than the fresh
 * registered buffer a hand-over needs. */
KV_API int kv_get(void *kv_handle, const char *key, char **value);
KV_API void kv_release(char *value);
/* Closes the connection and frees the handle (also after an error). */
KV_API int kv_close(void *kv_handle);

/* Static text for a code returned above (never NULL). */
KV_API const char *kv_strerror(int code);
/* The last failure's message on this handle; with NULL, the calling
 * thread's last failure without a handle (e.g. a failed kv_open). Never
 * NULL; "" when there was none. Valid until the next call on that handle
 * (or thread). */
KV_API const char *kv_last_error(void *kv_handle);

/* ---- Binary-safe calls ----------------------------------------------
 * Keys and values are byte ranges: any bytes, NULs included. A key is 1 to
 * 1024 bytes (key_len 0: EINVAL, over 1024: E2BIG); `value` may be NULL
 * when value_len is 0. These calls and the spec's five share the handle and
 * its order (below): kv_set(h, "k", "v") and kv_set_bin(h, "k", 1, "v", 1)
 * are the same operation. */
KV_API int kv_set_bin(void *kv_handle, const void *key, size_t key_len, const void *value, size_t value_len);
/* ENOENT: no such key (outputs untouched). On success *value holds value_len
 * bytes followed by a NUL that value_len does not count, never NULL (also
 * for an empty value: found, value_len 0); free it with kv_release (from
 * C++: kv_release(static_cast<char *>(value))). A value over 64 KiB is
 * returned in the buffer it was RDMA-written or read into (no copy), as with
 * kv_get. */
KV_API int kv_get_bin(void *kv_handle, const void *key, size_t key_len, void **value, size_t *value_len);
/* Removes the key. ENOENT: there was no such key (nothing changed). After
 * it, GETs of the key find nothing (kv_get: "", kv_get_bin: ENOENT), also
 * one-sided ones (RKV_GET_MODE=read). */
KV_API int kv_del(void *kv_handle, const void *key, size_t key_len);

/* ---- Time to live (docs/protocol.md "Time to live") ----------------
 * kv_set_ttl: a SET whose key expires ttl_ms milliseconds after the server
 * stores it (0: no expiry, as kv_set_bin; a plain SET also clears a TTL the
 * key had). kv_expire: the key expires ttl_ms from now; 0 makes it persist;
 * ENOENT: no such key. kv_ttl: *ttl_ms is the key's remaining time in ms,
 * or -1 when it has no expiry; ENOENT: no such key. An expired key is gone
 * for every call at once, also for a one-sided GET (RKV_GET_MODE=read)
 * while this machine's clock is within 50 ms of the server's (else it may
 * find it for at most 250 ms more; docs/protocol.md). ttl_ms over
 * about 100 years (3,153,600,000,000): EINVAL. */
KV_API int kv_set_ttl(void *kv_handle, const void *key, size_t key_len, const void *value, size_t value_len,
                      uint64_t ttl_ms);
KV_API int kv_expire(void *kv_handle, const void *key, size_t key_len, uint64_t ttl_ms);
KV_API int kv_ttl(void *kv_handle, const void *key, size_t key_len, int64_t *ttl_ms);

/* GET into the caller's memory: the value's bytes are written into
 * buf[0 .. *value_len) and nothing is allocated. A large value goes there by
 * RDMA directly (the server WRITEs it into buf, or the client READs it into
 * buf, also with RKV_GET_MODE=read): buf is registered with the device for
 * this call only (local and remote write) and deregistered before the call
 * returns, so it may be any memory the caller owns (no alignment needed). A
 * small value (key + value under 4 KiB) arrives in a message and is copied
 * in. ENOENT: no such key. E2BIG: the value is longer than buf_len (buf's
 * contents are then unspecified; a GET without a buffer tells its size).
 * buf may be NULL when buf_len is 0 (then only an empty value fits). */
KV_API int kv_get_into(void *kv_handle, const void *key, size_t key_len, void *buf, size_t buf_len,
                       size_t *value_len);

/* The server's counters (its STATS reply): "name value" lines, NUL-terminated;
 * free with kv_release. */
KV_API int kv_stats(void *kv_handle, char **text);
/* This handle's client counters as "name value" lines (requests, replies,
 * registrations, bytes_copied: value bytes copied by the client, gets_into,
 * gets_into_direct: GETs into a caller's buffer that landed there without a
 * copy, ...); free with kv_release. */
KV_API int kv_counters(void *kv_handle, char **text);
/* ---- User-defined operations (docs/protocol.md "CALL") ----------------
 * kv_call runs the server's handler of user opcode `op` (registered by a
 * program embedding the server, Server::handle; kvd itself ships INCR
 * 0x0100 and CAS 0x0101, below) on req_len request bytes (`req` may be NULL
 * when req_len is 0) and returns the handler's reply: *reply holds
 * *reply_len bytes followed by a NUL that *reply_len does not count, never
 * NULL; free it with kv_release (from C++: kv_release(static_cast<char
 * *>(reply))). Requests and replies of any size up to the server's limit:
 * from 4 KiB they move zero-copy by RDMA (the server READs the request from
 * `req`; a large reply is READ into the buffer returned). Errors, besides
 * those above:
 *   EOPNOTSUPP  the server has no handler for `op`
 *   EREMOTEIO   the handler failed (threw; the server logs why)
 *   EDOM        the handler refused the request
 *   EIO         also: the handler's writes could not be made durable
 * kv_calls on one handle run one at a time, in order; they are not ordered
 * with the keyed operations (the handle cannot know which keys a handler
 * touches). */
KV_API int kv_call(void *kv_handle, uint16_t op, const void *req, size_t req_len, void **reply, size_t *reply_len); /* reply freed with kv_release */
/* INCR: adds `delta` to the key's value, a 64-bit signed integer in decimal
 * text ("-12"; a missing key counts as 0), stores the sum as decimal text
 * and writes it to *result. EDOM: the value is not such an integer, or the
 * sum overflows (nothing changed). Ordered with the key's other operations
 * like kv_set; durable and visible to one-sided GETs like a SET. */
KV_API int kv_incr(void *kv_handle, const void *key, size_t key_len, int64_t delta, int64_t *result);
/* CAS: sets the key to `value` only if it exists and its value equals
 * `expected` byte for byte. *swapped: 1 set, 0 the current value differed
 * (or the key is missing). Ordered with the key's other operations. */
KV_API int kv_cas(void *kv_handle, const void *key, size_t key_len, const void *expected, size_t expected_len,
                  const void *value, size_t value_len, int *swapped); /* *swapped: 1 set, 0 current value differed */

/* ---- Asynchronous calls --------------------------------------------------
 * kv_*_async queue an operation and return at once: 0 (its completion comes
 * from kv_poll, carrying `tag`), or an error and no completion at all:
 *   EAGAIN    the pipeline is full: KV_MAX_PENDING operations were submitted
 *             and not yet returned by kv_poll. kv_poll, then submit again.
 *   ENOTCONN  the connection failed or was closed
 *   EINVAL, E2BIG, ENOMEM  as for the sync calls
 * Up to 16 operations are on the wire at once (the connection's request
 * slots); the rest wait in the handle, in submission order.
 *
 * Order: operations on one key complete in submission order, sync calls
 * included, and each sees the effect of the ones before it (a GET after a
 * SET of the same key returns that SET's value, one after a DEL finds
 * nothing, also with RKV_GET_MODE=read).
 * The handle gets this by running the operations on one key one at a time:
 * an operation waits in the handle until the one before it on its key
 * completed. Operations on different keys run concurrently and complete in
 * any order.
 *
 * kv_set_async: the value's memory stays the caller's and must not change or
 * be freed until the operation's completion is returned by kv_poll (a large
 * value is read by the server straight from it; its registration ends with
 * the completion). */
#define KV_MAX_PENDING 1024

typedef struct kv_completion {
  uint64_t tag;     /* as submitted */
  int status;       /* 0; ENOENT: GET or DEL of a missing key; else an errno as above
                       (ECONNRESET, ENOTCONN when the connection failed or was closed, ...) */
  void *value;      /* GET with status 0: the value, as kv_get_bin gives it; CALL
                       with status 0: the reply, as kv_call gives it (free either
                       with kv_release); NULL otherwise */
  size_t value_len; /* their length; 0 otherwise */
} kv_completion;

KV_API int kv_set_async(void *kv_handle, const void *key, size_t key_len, const void *value, size_t value_len,
                 uint64_t tag);
/* kv_set_ttl's async form (the value's memory as kv_set_async's). */
KV_API int kv_set_ttl_async(void *kv_handle, const void *key, size_t key_len, const void *value, size_t value_len,
                            uint64_t ttl_ms, uint64_t tag);
KV_API int kv_get_async(void *kv_handle, const void *key, size_t key_len, uint64_t tag);
/* Its completion: status 0 (the key existed and is gone) or ENOENT. */
KV_API int kv_del_async(void *kv_handle, const void *key, size_t key_len, uint64_t tag);

/* kv_get_into's async form: the completion has value NULL and value_len the
 * bytes written into buf; buf stays the caller's (do not touch or free it)
 * until the completion is returned by kv_poll. */
KV_API int kv_get_into_async(void *kv_handle, const void *key, size_t key_len, void *buf, size_t buf_len,
                             uint64_t tag);
/* kv_call's async form: `req` stays the caller's until the completion is
 * returned by kv_poll; the completion carries the reply (value, value_len)
 * or kv_call's errors. Like kv_call it runs in order with the handle's other
 * kv_calls and kv_call_asyncs, one at a time (not with the keyed
 * operations); EINVAL on a handle of several servers. */
KV_API int kv_call_async(void *kv_handle, uint16_t op, const void *req, size_t req_len, uint64_t tag);

/* Runs the handle's event loop and writes up to `max` completions to `out`.
 * timeout_ms: 0 never blocks; -1 waits until at least one completion is
 * ready; N > 0 waits at most N ms. Returns the number written (0: none ready
 * in time; also at once when nothing is in flight), or a negative errno:
 * -EINVAL (NULL handle, max < 0, out NULL with max > 0, timeout_ms < -1),
 * -EIO (the event loop failed). An error completion (status other than 0 and
 * ENOENT) also leaves its message for kv_last_error(handle). Completions are
 * returned in the order they happened. */
KV_API int kv_poll(void *kv_handle, kv_completion *out, int max, int timeout_ms);

/* A file descriptor for the caller's own poll()/select()/epoll (EPOLLIN,
 * level-triggered; do not use EPOLLET). It is readable whenever kv_poll has
 * something to return or work to do (e.g. right after a submission: kv_poll
 * sends it). So a loop of
 *     poll(kv_fd) until readable;  n = kv_poll(h, out, max, 0);
 * never sleeps while a completion is pending. It may also be readable with
 * nothing to return (kv_poll then returns 0). Only poll it: never read,
 * write or close it. Valid until kv_close; -EINVAL for a NULL handle. */
KV_API int kv_fd(void *kv_handle);

#ifdef __cplusplus
}
#endif

#endif /* RKV_KV_H */
