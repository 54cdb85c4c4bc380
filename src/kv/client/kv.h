/* kv.h: the C API of the RDMA key-value store client (C and C++).
 *
 * A handle is one connection with its own event loop, created by kv_open on
 * the calling thread. A handle is used from the thread that opened it:
 * kv_set, kv_get, kv_close and kv_last_error(handle) must be called there
 * (debug builds assert it). Different handles, on the same or different
 * threads, are independent. kv_release and kv_strerror may be called from
 * any thread.
 *
 * Every int function returns 0 on success or a positive errno-style code:
 *   EINVAL        NULL or malformed argument (empty key, bad server name)
 *   E2BIG         key longer than 1024 bytes, or value over the server's limit
 *                 (kvd --max-value, default 256 MiB)
 *   ECONNREFUSED  nothing accepted the connection on that address/port
 *   ETIMEDOUT     no answer in time (connect, or a request)
 *   EHOSTUNREACH  the address cannot be resolved/reached over RDMA
 *   ENOTCONN      the handle's connection is closed or failed earlier
 *   EIO           the connection failed during the request, or a server error
 *   ENOMEM        out of memory (here or in the server's store)
 * kv_strerror(code) names a code; kv_last_error(handle) gives the last
 * failure's full message. Output parameters are written only on success.
 */
#ifndef RKV_KV_H
#define RKV_KV_H

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

/* servername: "host" or "host:port" ("[v6addr]:port" for IPv6).
 * Environment: RKV_GET_MODE=rpc (default) or read. With "read", kv_get reads
 * values with one-sided RDMA READs of the server's index and memory, sending
 * no message (it falls back to a message GET when the index cannot answer, or
 * when the server has no index; docs/protocol.md "One-sided GET"). Any other
 * non-empty value makes kv_open fail with EINVAL.
 * RKV_POLL_US=N (default 200): after each completion or request the handle
 * keeps polling for N microseconds before it sleeps until a completion event
 * (0: events only; "busy": never sleeps). Anything else: EINVAL. */
KV_API int kv_open(char *servername, void **kv_handle);
/* Values of any size up to the server's limit. A large value (4 KiB and
 * more) is sent zero-copy: the server RDMA READs it from `value` (registered
 * for the call only). */
KV_API int kv_set(void *kv_handle, const char *key, const char *value);
/* *value: the NUL-terminated value ("" for a missing key); free it with
 * kv_release. A large value is returned in the memory it was RDMA-written
 * or read into (no copy); small ones in a malloc'd buffer. */
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

#ifdef __cplusplus
}
#endif

#endif /* RKV_KV_H */
