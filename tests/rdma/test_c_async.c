/* c_async: the binary-safe and asynchronous C API (kv.h) from a C program
 * against a kvd child process, once per client configuration (GETs by
 * message or by one-sided RDMA READ, spinning or events only):
 *  - kv_set_bin/kv_get_bin round-trip values with embedded NULs (1 B, 4095 B,
 *    4096 B, 1 MiB) byte-exactly, keys with NULs too; a missing key is ENOENT
 *    with the outputs untouched, an empty value is found with length 0;
 *  - argument errors: NULL, key_len 0 (EINVAL), key_len > 1024 and a value
 *    over kvd --max-value (E2BIG), bad kv_poll arguments (-EINVAL);
 *  - 256 operations in flight on one handle (SETs and GETs, some large)
 *    complete once each with the right tags and values, driven only through
 *    kv_fd in this program's own poll() and kv_poll(..., 0): a poll() that
 *    times out while operations are pending fails the test;
 *  - operations on one key complete in submission order and each GET sees
 *    the SET before it (sizes alternating eager/rendezvous), also against a
 *    sync call on the same key;
 *  - kv_del: then kv_get_bin is ENOENT (never the old value, also one-sided),
 *    a second kv_del is ENOENT; async DELs in order with SETs and GETs;
 *  - EAGAIN once KV_MAX_PENDING operations are pending, progress after
 *    kv_poll; kv_poll with nothing in flight returns at once; kv_close with
 *    operations in flight.
 *  - kv_get_into/kv_get_into_async: values of 1 B .. 1 MiB into exact-size
 *    caller buffers byte-exactly (large ones by RDMA into the buffer:
 *    kv_counters' gets_into_direct), E2BIG for a buffer too small, ENOENT;
 *    kv_stats and kv_counters texts; kv_open_opts' own options.
 *  - kv_call_async: INCRs complete in order with their replies, EOPNOTSUPP,
 *    EINVAL.
 *  - RKV_TIMEOUT_MS: EINVAL for a bad value; with kvd SIGSTOPped, async
 *    operations come back from kv_poll(-1) with an error after the timeout.
 * Fails (never skips) without $SOFTROCE_ADDR. */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "c_test.h"
#include "kv/client/kv.h"

#define MAX_VALUE (4u << 20) /* kvd --max-value */
#define FD_WAIT_MS 20000     /* a pending completion that long without kv_fd readable: a hang */

/* Deterministic bytes with NULs among them (every byte value occurs). */
static void fill(unsigned char *p, size_t n, unsigned seed) {
  uint64_t x = 0x9E3779B97F4A7C15ull * (seed + 1);
  for (size_t i = 0; i < n; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    p[i] = (i % 7 == 3) ? 0 : (unsigned char)x;
  }
}

static unsigned char *make_value(size_t n, unsigned seed) {
  unsigned char *p = malloc(n > 0 ? n : 1);
  if (p == NULL) {
    fprintf(stderr, "out of memory\n");
    exit(1);
  }
  fill(p, n, seed);
  return p;
}

/* The value `got` (len `got_len`) is the n bytes of seed `seed`, NUL-terminated. */
static int is_value(const void *got, size_t got_len, size_t n, unsigned seed) {
  if (got == NULL || got_len != n) return 0;
  unsigned char *want = make_value(n, seed);
  const int same = memcmp(got, want, n) == 0 && ((const unsigned char *)got)[n] == 0;
  free(want);
  return same;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The program's own event loop: poll() on kv_fd, then kv_poll(..., 0).
 * Returns kv_poll's result, or -ETIMEDOUT when kv_fd stayed quiet for
 * FD_WAIT_MS although operations were pending. */
static int wait_and_poll(void *h, kv_completion *out, int max) {
  struct pollfd p = {kv_fd(h), POLLIN, 0};
  const int r = poll(&p, 1, FD_WAIT_MS);
  if (r != 1) {
    fprintf(stderr, "kv_fd not readable within %d ms with operations pending (poll: %d)\n", FD_WAIT_MS, r);
    return -ETIMEDOUT;
  }
  return kv_poll(h, out, max, 0);
}

/* ---- binary values ---- */

static void test_binary(void *h, void *h2) {
  static const size_t sizes[] = {1, 4095, 4096, 1u << 20};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; ++i) {
    const size_t n = sizes[i];
    char key[32];
    const int klen = snprintf(key, sizeof key, "bin%c%zu", '\0', n) ; /* a NUL inside the key */
    unsigned char *v = make_value(n, (unsigned)i);
    CHECK_RC(kv_set_bin(h, key, (size_t)klen, v, n), 0);
    memset(v, 0xAA, n); /* the server has its own copy now */
    free(v);
    void *got = NULL;
    size_t got_len = 0;
    CHECK_RC(kv_get_bin(h2, key, (size_t)klen, &got, &got_len), 0); /* another connection */
    CHECK(is_value(got, got_len, n, (unsigned)i));
    kv_release(got);
    got = NULL;
    CHECK_RC(kv_get_bin(h, key, (size_t)klen, &got, &got_len), 0);
    CHECK(is_value(got, got_len, n, (unsigned)i));
    kv_release(got);
  }
  /* Bytes after a NUL in the key count: two keys, two values. */
  CHECK_RC(kv_set_bin(h, "nul\0A", 5, "first", 5), 0);
  CHECK_RC(kv_set_bin(h, "nul\0B", 5, "second", 6), 0);
  void *got = NULL;
  size_t got_len = 0;
  CHECK_RC(kv_get_bin(h2, "nul\0A", 5, &got, &got_len), 0);
  CHECK(got != NULL && got_len == 5 && memcmp(got, "first", 5) == 0);
  kv_release(got);
  CHECK_RC(kv_get_bin(h2, "nul\0B", 5, &got, &got_len), 0);
  CHECK(got != NULL && got_len == 6 && memcmp(got, "second", 6) == 0);
  kv_release(got);

  /* Missing key: ENOENT, outputs untouched. Empty value: found, length 0. */
  got = (void *)0x1;
  got_len = 77;
  CHECK_RC(kv_get_bin(h, "no-such-key", 11, &got, &got_len), ENOENT);
  CHECK(got == (void *)0x1 && got_len == 77);
  CHECK(strlen(kv_last_error(h)) > 0);
  CHECK_RC(kv_set_bin(h, "empty-bin", 9, NULL, 0), 0);
  got = NULL;
  got_len = 77;
  CHECK_RC(kv_get_bin(h2, "empty-bin", 9, &got, &got_len), 0);
  CHECK(got != NULL && got_len == 0 && ((char *)got)[0] == '\0');
  kv_release(got);

  /* The spec's calls share the keys: kv_get of a binary-set value and of a missing key. */
  CHECK_RC(kv_set_bin(h, "text", 4, "abc", 3), 0);
  char *s = NULL;
  CHECK_RC(kv_get(h2, "text", &s), 0);
  CHECK(s != NULL && strcmp(s, "abc") == 0);
  kv_release(s);
  s = NULL;
  CHECK_RC(kv_get(h2, "no-such-key", &s), 0);
  CHECK(s != NULL && s[0] == '\0');
  kv_release(s);
}

/* ---- argument errors ---- */

static void test_arguments(void *h) {
  char long_key[1025];
  memset(long_key, 'k', sizeof long_key);
  void *got = (void *)0x1;
  size_t got_len = 77;
  kv_completion c;
  CHECK_RC(kv_set_bin(NULL, "k", 1, "v", 1), EINVAL);
  CHECK_RC(kv_get_bin(NULL, "k", 1, &got, &got_len), EINVAL);
  CHECK_RC(kv_set_async(NULL, "k", 1, "v", 1, 1), EINVAL);
  CHECK_RC(kv_get_async(NULL, "k", 1, 1), EINVAL);
  CHECK_RC(kv_poll(NULL, &c, 1, 0), -EINVAL);
  CHECK_RC(kv_fd(NULL), -EINVAL);
  CHECK_RC(kv_set_bin(h, NULL, 1, "v", 1), EINVAL);
  CHECK_RC(kv_set_bin(h, "k", 0, "v", 1), EINVAL);
  CHECK_RC(kv_set_bin(h, long_key, 1025, "v", 1), E2BIG);
  CHECK_RC(kv_set_bin(h, long_key, 1024, "v", 1), 0);
  CHECK_RC(kv_set_bin(h, "k", 1, NULL, 1), EINVAL);
  CHECK_RC(kv_get_bin(h, NULL, 1, &got, &got_len), EINVAL);
  CHECK_RC(kv_get_bin(h, "k", 0, &got, &got_len), EINVAL);
  CHECK_RC(kv_get_bin(h, long_key, 1025, &got, &got_len), E2BIG);
  CHECK_RC(kv_get_bin(h, "k", 1, NULL, &got_len), EINVAL);
  CHECK_RC(kv_get_bin(h, "k", 1, &got, NULL), EINVAL);
  CHECK(got == (void *)0x1 && got_len == 77);
  CHECK_RC(kv_set_async(h, NULL, 1, "v", 1, 1), EINVAL);
  CHECK_RC(kv_set_async(h, "k", 0, "v", 1, 1), EINVAL);
  CHECK_RC(kv_set_async(h, long_key, 1025, "v", 1, 1), E2BIG);
  CHECK_RC(kv_set_async(h, "k", 1, NULL, 1, 1), EINVAL);
  CHECK_RC(kv_get_async(h, NULL, 1, 1), EINVAL);
  CHECK_RC(kv_get_async(h, "k", 0, 1), EINVAL);
  CHECK_RC(kv_get_async(h, long_key, 1025, 1), E2BIG);
  CHECK_RC(kv_poll(h, NULL, 1, 0), -EINVAL);
  CHECK_RC(kv_poll(h, &c, -1, 0), -EINVAL);
  CHECK_RC(kv_poll(h, &c, 1, -2), -EINVAL);
  /* Over the server's limit: refused before anything is sent. */
  unsigned char *big = make_value(MAX_VALUE + 1, 1);
  CHECK_RC(kv_set_bin(h, "too-big", 7, big, MAX_VALUE + 1), E2BIG);
  CHECK_RC(kv_set_async(h, "too-big", 7, big, MAX_VALUE + 1, 1), E2BIG);
  free(big);
  /* None of it queued anything. */
  CHECK_RC(kv_poll(h, &c, 1, 0), 0);
  CHECK(kv_fd(h) >= 0);
}

/* ---- 256 operations in flight, driven through kv_fd ---- */

#define PRE 128
static size_t async_size(int i) {
  if (i % 16 == 0) return (1u << 20) + (size_t)i; /* rendezvous, 1 MiB */
  if (i % 4 == 0) return 8192 + (size_t)i;         /* rendezvous */
  return 64 + (size_t)i;                           /* eager */
}

static void test_async_256(void *h) {
  char key[32];
  for (int i = 0; i < PRE; ++i) { /* the GETs' keys, set beforehand */
    snprintf(key, sizeof key, "pre-%d", i);
    unsigned char *v = make_value(async_size(i), 1000u + (unsigned)i);
    CHECK_RC(kv_set_bin(h, key, strlen(key), v, async_size(i)), 0);
    free(v);
  }
  /* 256 submitted before any kv_poll: even tags GET pre-i, odd tags SET new-i. */
  unsigned char *set_values[PRE];
  for (int t = 0; t < 2 * PRE; ++t) {
    const int i = t / 2;
    if (t % 2 == 0) {
      snprintf(key, sizeof key, "pre-%d", i);
      CHECK_RC(kv_get_async(h, key, strlen(key), (uint64_t)t), 0);
    } else {
      snprintf(key, sizeof key, "new-%d", i);
      set_values[i] = make_value(async_size(i), 2000u + (unsigned)i);
      CHECK_RC(kv_set_async(h, key, strlen(key), set_values[i], async_size(i), (uint64_t)t), 0);
    }
  }
  char seen[2 * PRE] = {0};
  int done = 0;
  kv_completion out[32];
  while (done < 2 * PRE) {
    const int n = wait_and_poll(h, out, 32);
    if (n < 0) {
      fprintf(stderr, "async_256: %d of %d completed, then %d (%s)\n", done, 2 * PRE, n, kv_last_error(h));
      ++failures;
      break;
    }
    for (int j = 0; j < n; ++j) {
      const kv_completion *c = &out[j];
      CHECK(c->tag < 2 * PRE);
      if (c->tag >= 2 * PRE) continue;
      CHECK(!seen[c->tag]);
      seen[c->tag] = 1;
      const int i = (int)c->tag / 2;
      CHECK_RC(c->status, 0);
      if (c->tag % 2 == 0) {
        CHECK(is_value(c->value, c->value_len, async_size(i), 1000u + (unsigned)i));
        kv_release(c->value);
      } else {
        CHECK(c->value == NULL && c->value_len == 0);
      }
      ++done;
    }
  }
  /* The SETs' completions are in: their buffers are the caller's again. */
  for (int i = 0; i < PRE; ++i) free(set_values[i]);
  for (int i = 0; i < PRE; i += 5) {
    snprintf(key, sizeof key, "new-%d", i);
    void *got = NULL;
    size_t got_len = 0;
    CHECK_RC(kv_get_bin(h, key, strlen(key), &got, &got_len), 0);
    CHECK(is_value(got, got_len, async_size(i), 2000u + (unsigned)i));
    kv_release(got);
  }
}

/* ---- per-key order ---- */

#define PAIRS 30
static size_t order_size(int i) {
  switch (i % 3) {
    case 0: return 70000 + (size_t)i; /* rendezvous SET, a GET by pull or WRITE */
    case 1: return 10 + (size_t)i;    /* eager */
    default: return 4096 - 9;         /* key + value = 4096: the first rendezvous size */
  }
}

static void test_order(void *h) {
  /* SET v_i, GET, SET v_i+1, GET, ... on one key, with GETs of another key
   * in between (tags >= 1000), all in flight at once. */
  unsigned char *values[PAIRS];
  int others = 0;
  for (int i = 0; i < PAIRS; ++i) {
    values[i] = make_value(order_size(i), 3000u + (unsigned)i);
    CHECK_RC(kv_set_async(h, "order-key", 9, values[i], order_size(i), (uint64_t)(2 * i)), 0);
    CHECK_RC(kv_get_async(h, "order-key", 9, (uint64_t)(2 * i + 1)), 0);
    if (i % 3 == 0) CHECK_RC(kv_get_async(h, "pre-1", 5, (uint64_t)(1000 + others++)), 0);
  }
  uint64_t next = 0; /* the order key's next tag */
  int done = 0;
  kv_completion out[8];
  while (done < 2 * PAIRS + others) {
    const int n = wait_and_poll(h, out, 8);
    if (n < 0) {
      ++failures;
      break;
    }
    for (int j = 0; j < n; ++j) {
      const kv_completion *c = &out[j];
      ++done;
      CHECK_RC(c->status, 0);
      if (c->tag >= 1000) {
        CHECK(is_value(c->value, c->value_len, async_size(1), 1001));
        kv_release(c->value);
        continue;
      }
      if (c->tag != next) fprintf(stderr, "order-key: tag %llu completed, expected %llu\n",
                                  (unsigned long long)c->tag, (unsigned long long)next);
      CHECK(c->tag == next);
      next = c->tag + 1;
      if (c->tag % 2 == 1) { /* the GET sees the SET just before it */
        const int i = (int)c->tag / 2;
        CHECK(is_value(c->value, c->value_len, order_size(i), 3000u + (unsigned)i));
        kv_release(c->value);
      }
    }
  }
  for (int i = 0; i < PAIRS; ++i) free(values[i]);

  /* A sync call waits for the async ones before it on its key. */
  unsigned char *big = make_value(100000, 4000);
  CHECK_RC(kv_set_async(h, "mixed", 5, big, 100000, 7), 0);
  void *got = NULL;
  size_t got_len = 0;
  CHECK_RC(kv_get_bin(h, "mixed", 5, &got, &got_len), 0);
  CHECK(is_value(got, got_len, 100000, 4000));
  kv_release(got);
  /* Its completion is ready (kv_fd says so) and not lost. */
  const int n = wait_and_poll(h, out, 8);
  CHECK(n == 1 && out[0].tag == 7 && out[0].status == 0);
  free(big);
}

/* ---- DELETE ---- */

static void test_del(void *h, void *h2) {
  static const size_t sizes[] = {5, 4096, 1u << 20};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; ++i) {
    char key[32];
    const int klen = snprintf(key, sizeof key, "del%c%zu", '\0', sizes[i]);
    unsigned char *v = make_value(sizes[i], 6000u + (unsigned)i);
    CHECK_RC(kv_set_bin(h, key, (size_t)klen, v, sizes[i]), 0);
    free(v);
    void *got = NULL;
    size_t got_len = 0;
    CHECK_RC(kv_get_bin(h2, key, (size_t)klen, &got, &got_len), 0); /* h2 has read it (one-sided: its index entry) */
    kv_release(got);
    CHECK_RC(kv_del(h, key, (size_t)klen), 0);
    got = (void *)0x1;
    CHECK_RC(kv_get_bin(h, key, (size_t)klen, &got, &got_len), ENOENT);
    CHECK_RC(kv_get_bin(h2, key, (size_t)klen, &got, &got_len), ENOENT); /* never the old value */
    CHECK(got == (void *)0x1);
    CHECK_RC(kv_del(h2, key, (size_t)klen), ENOENT); /* already gone */
  }
  char *s = NULL;
  CHECK_RC(kv_set(h, "del-text", "x"), 0);
  CHECK_RC(kv_del(h, "del-text", 8), 0);
  CHECK_RC(kv_get(h2, "del-text", &s), 0); /* the spec's kv_get: "" */
  CHECK(s != NULL && s[0] == '\0');
  kv_release(s);

  /* Arguments. */
  char long_key[1025];
  memset(long_key, 'k', sizeof long_key);
  CHECK_RC(kv_del(NULL, "k", 1), EINVAL);
  CHECK_RC(kv_del(h, NULL, 1), EINVAL);
  CHECK_RC(kv_del(h, "k", 0), EINVAL);
  CHECK_RC(kv_del(h, long_key, 1025), E2BIG);
  CHECK_RC(kv_del_async(NULL, "k", 1, 1), EINVAL);
  CHECK_RC(kv_del_async(h, NULL, 1, 1), EINVAL);
  CHECK_RC(kv_del_async(h, "k", 0, 1), EINVAL);
  CHECK_RC(kv_del_async(h, long_key, 1025, 1), E2BIG);

  /* Async, all in flight on one key: SET, DEL, GET, DEL, SET (large), GET. */
  unsigned char *v1 = make_value(100, 7001);
  unsigned char *v2 = make_value(200000, 7002);
  CHECK_RC(kv_set_async(h, "del-async", 9, v1, 100, 0), 0);
  CHECK_RC(kv_del_async(h, "del-async", 9, 1), 0);
  CHECK_RC(kv_get_async(h, "del-async", 9, 2), 0);
  CHECK_RC(kv_del_async(h, "del-async", 9, 3), 0);
  CHECK_RC(kv_set_async(h, "del-async", 9, v2, 200000, 4), 0);
  CHECK_RC(kv_get_async(h, "del-async", 9, 5), 0);
  static const int want[] = {0, 0, ENOENT, ENOENT, 0, 0};
  uint64_t next = 0;
  kv_completion out[8];
  while (next < 6) {
    const int n = wait_and_poll(h, out, 8);
    if (n < 0) {
      ++failures;
      break;
    }
    for (int j = 0; j < n; ++j) {
      CHECK(out[j].tag == next);
      if (out[j].tag < 6) CHECK_RC(out[j].status, want[out[j].tag]);
      if (out[j].tag == 5) CHECK(is_value(out[j].value, out[j].value_len, 200000, 7002));
      if (out[j].tag != 5) CHECK(out[j].value == NULL);
      kv_release(out[j].value);
      next = out[j].tag + 1;
    }
  }
  free(v1);
  free(v2);

  /* kv_incr and kv_cas take their key's turn like kv_set: a sync INCR behind
   * async SETs of the key sees the last of them, a CAS behind an async DEL
   * finds the key gone. */
  CHECK_RC(kv_set_async(h, "incr-order", 10, "1", 1, 10), 0);
  CHECK_RC(kv_set_async(h, "incr-order", 10, "40", 2, 11), 0);
  int64_t sum = 0;
  CHECK_RC(kv_incr(h, "incr-order", 10, 2, &sum), 0);
  CHECK(sum == 42);
  CHECK_RC(kv_del_async(h, "incr-order", 10, 12), 0);
  int swapped = -1;
  CHECK_RC(kv_cas(h, "incr-order", 10, "42", 2, "y", 1, &swapped), 0);
  CHECK(swapped == 0);
  CHECK_RC(kv_incr(h, "incr-order", 10, -5, &sum), 0); /* missing again: counts as 0 */
  CHECK(sum == -5);
  for (int got = 0; got < 3;) {
    const int n = wait_and_poll(h, out, 8);
    if (n <= 0) {
      ++failures;
      break;
    }
    for (int j = 0; j < n; ++j, ++got) {
      CHECK(out[j].tag == (uint64_t)(10 + got));
      CHECK_RC(out[j].status, 0);
    }
  }
}

/* ---- EAGAIN, kv_poll's corners, close with operations in flight ---- */

static void test_pipeline(void *h, const char *name) {
  char key[32];
  int submitted = 0;
  int rc = 0;
  while (submitted <= KV_MAX_PENDING) {
    snprintf(key, sizeof key, "missing-%d", submitted);
    rc = kv_get_async(h, key, strlen(key), (uint64_t)submitted);
    if (rc != 0) break;
    ++submitted;
  }
  CHECK_RC(rc, EAGAIN);
  CHECK(submitted == KV_MAX_PENDING);
  CHECK(strlen(kv_last_error(h)) > 0);
  kv_completion out[64];
  int done = 0;
  int more = 0;
  char *seen = calloc(KV_MAX_PENDING + 1, 1);
  while (done < submitted) {
    const int n = wait_and_poll(h, out, 64);
    if (n < 0) {
      ++failures;
      break;
    }
    for (int j = 0; j < n; ++j) {
      CHECK(out[j].tag < (uint64_t)submitted && !seen[out[j].tag]);
      if (out[j].tag < (uint64_t)submitted) seen[out[j].tag] = 1;
      CHECK_RC(out[j].status, ENOENT);
      CHECK(out[j].value == NULL && out[j].value_len == 0);
    }
    done += n;
    if (n > 0 && !more) { /* room again: one more goes in */
      snprintf(key, sizeof key, "missing-%d", submitted);
      CHECK_RC(kv_get_async(h, key, strlen(key), (uint64_t)submitted), 0);
      ++submitted;
      more = 1;
    }
  }
  free(seen);
  CHECK(done == KV_MAX_PENDING + 1);

  /* Nothing in flight: kv_poll returns at once, even with -1. */
  const double t0 = now_s();
  CHECK_RC(kv_poll(h, out, 64, -1), 0);
  CHECK_RC(kv_poll(h, out, 64, 1000), 0);
  CHECK(now_s() - t0 < 10.0);
  /* A blocking kv_poll waits for the completion. */
  CHECK_RC(kv_get_async(h, "pre-2", 5, 42), 0);
  CHECK_RC(kv_poll(h, out, 64, -1), 1);
  CHECK(out[0].tag == 42 && out[0].status == 0);
  CHECK(is_value(out[0].value, out[0].value_len, async_size(2), 1002));
  kv_release(out[0].value);
  /* A timed kv_poll too (the first call may only send it). */
  CHECK_RC(kv_get_async(h, "pre-3", 5, 43), 0);
  int got = 0;
  for (int i = 0; i < 100 && got == 0; ++i) got = kv_poll(h, out, 64, 200);
  CHECK(got == 1 && out[0].tag == 43 && out[0].status == 0);
  kv_release(out[0].value);

  /* kv_close with operations in flight: they end with the handle; their
   * buffers are the caller's again after kv_close. */
  void *h3 = NULL;
  char server[160];
  snprintf(server, sizeof server, "%s", name);
  CHECK_RC(kv_open(server, &h3), 0);
  if (h3 == NULL) return;
  unsigned char *vals[8];
  for (int i = 0; i < 8; ++i) {
    snprintf(key, sizeof key, "closing-%d", i);
    vals[i] = make_value(async_size(i), 5000u + (unsigned)i);
    CHECK_RC(kv_set_async(h3, key, strlen(key), vals[i], async_size(i), (uint64_t)i), 0);
    CHECK_RC(kv_get_async(h3, "pre-0", 5, (uint64_t)(100 + i)), 0);
  }
  const int n = kv_poll(h3, out, 2, 0);
  CHECK(n >= 0);
  for (int j = 0; j < n; ++j) kv_release(out[j].value);
  CHECK_RC(kv_close(h3), 0);
  for (int i = 0; i < 8; ++i) free(vals[i]);
}

/* ---- GETs into the caller's buffer, counters, kv_open_opts ---- */

/* The value of counter `name` in kv_counters' text, or -1. */
static long long counter(void *h, const char *name) {
  char *text = NULL;
  if (kv_counters(h, &text) != 0 || text == NULL) return -1;
  long long v = -1;
  const size_t n = strlen(name);
  for (const char *line = text; *line != '\0';) {
    if (strncmp(line, name, n) == 0 && line[n] == ' ') v = atoll(line + n + 1);
    const char *nl = strchr(line, '\n');
    if (nl == NULL) break;
    line = nl + 1;
  }
  kv_release(text);
  return v;
}

static void test_get_into(void *h) {
  static const size_t sizes[] = {1, 4095, 4096, 1u << 20};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; ++i) {
    const size_t n = sizes[i];
    char key[32];
    const int klen = snprintf(key, sizeof key, "into-%zu", n);
    unsigned char *v = make_value(n, (unsigned)(40 + i));
    CHECK_RC(kv_set_bin(h, key, (size_t)klen, v, n), 0);
    unsigned char *buf = malloc(n + 1);
    if (buf == NULL) exit(1);
    const long long direct = counter(h, "gets_into_direct");
    size_t len = 0;
    memset(buf, 0x55, n + 1);
    CHECK_RC(kv_get_into(h, key, (size_t)klen, buf, n, &len), 0);
    CHECK(len == n && memcmp(buf, v, n) == 0 && buf[n] == 0x55); /* nothing past the value */
    if (n > 4096) CHECK(counter(h, "gets_into_direct") == direct + 1); /* landed by RDMA (not a one-sided small value) */
    /* async: the completion carries the length, no value */
    memset(buf, 0, n);
    CHECK_RC(kv_get_into_async(h, key, (size_t)klen, buf, n, 77), 0);
    kv_completion c;
    int got = 0;
    while (got == 0) {
      got = wait_and_poll(h, &c, 1);
      if (got < 0) break;
    }
    CHECK(got == 1 && c.tag == 77 && c.status == 0 && c.value == NULL && c.value_len == n);
    CHECK(memcmp(buf, v, n) == 0);
    /* a buffer one byte short: E2BIG, and the handle goes on */
    if (n > 1) CHECK_RC(kv_get_into(h, key, (size_t)klen, buf, n - 1, &len), E2BIG);
    free(buf);
    free(v);
  }
  size_t len = 7;
  unsigned char small[8];
  CHECK_RC(kv_get_into(h, "into-missing", 12, small, sizeof small, &len), ENOENT);
  CHECK(len == 7);
  CHECK_RC(kv_get_into(h, "into-1", 6, NULL, 0, &len), E2BIG);
  CHECK_RC(kv_get_into(h, "into-1", 6, NULL, 5, &len), EINVAL);
  CHECK(counter(h, "gets_into") > 0 && counter(h, "requests") > 0);
  char *text = NULL;
  CHECK_RC(kv_stats(h, &text), 0);
  CHECK(text != NULL && strstr(text, "connections") != NULL);
  kv_release(text);
}

static void test_open_opts(const char *server) {
  void *h = NULL;
  CHECK_RC(kv_open_opts((char *)server, "sideways", NULL, &h), EINVAL);
  CHECK(strstr(kv_last_error(NULL), "get_mode") != NULL);
  CHECK_RC(kv_open_opts((char *)server, NULL, "-3", &h), EINVAL);
  CHECK_RC(kv_open_opts((char *)server, "read", "0", &h), 0);
  if (h == NULL) return;
  CHECK_RC(kv_set_bin(h, "opts", 4, "v", 1), 0);
  void *v = NULL;
  size_t n = 0;
  CHECK_RC(kv_get_bin(h, "opts", 4, &v, &n), 0);
  CHECK(counter(h, "onesided_gets") == 1); /* read mode from the argument, not the environment */
  kv_release(v);
  CHECK_RC(kv_close(h), 0);
}

/* Up to n completions into c, each kv_poll waiting at most timeout_ms; how many came. */
static int poll_n(void *h, kv_completion *c, int n, int timeout_ms) {
  int got = 0;
  while (got < n) {
    const int k = kv_poll(h, c + got, n - got, timeout_ms);
    if (k <= 0) break;
    got += k;
  }
  return got;
}

/* kv_call_async of kvd's INCR (0x0100; request: key_len u16 | key | delta
 * i64 little-endian; reply: the new value, i64): five in flight complete in
 * order with 1..5 as their replies; an opcode kvd has no handler for
 * completes with EOPNOTSUPP; a NULL request with a length is EINVAL. */
static void test_call_async(void *h) {
  static int round = 0;
  char key[32];
  snprintf(key, sizeof key, "call-async-%d", round++);
  const size_t klen = strlen(key);
  unsigned char req[2 + 32 + 8];
  req[0] = (unsigned char)klen;
  req[1] = 0;
  memcpy(req + 2, key, klen);
  req[2 + klen] = 1; /* delta 1 */
  memset(req + 3 + klen, 0, 7);
  for (uint64_t tag = 1; tag <= 5; ++tag) CHECK_RC(kv_call_async(h, 0x0100, req, 2 + klen + 8, tag), 0);
  CHECK_RC(kv_call_async(h, 0x7E57, "x", 1, 6), 0);
  CHECK_RC(kv_call_async(h, 0x0100, NULL, 3, 7), EINVAL);
  kv_completion c[6];
  const int got = poll_n(h, c, 6, 10000);
  CHECK(got == 6);
  for (int i = 0; i < got; ++i) {
    CHECK(c[i].tag == (uint64_t)(i + 1)); /* one at a time, in submission order */
    if (c[i].tag == 6) {
      CHECK(c[i].status == EOPNOTSUPP && c[i].value == NULL);
      continue;
    }
    CHECK(c[i].status == 0 && c[i].value != NULL && c[i].value_len == 8);
    if (c[i].value != NULL && c[i].value_len == 8) {
      const unsigned char *r = c[i].value;
      int64_t v = 0;
      for (int b = 7; b >= 0; --b) v = (int64_t)(((uint64_t)v << 8) | r[b]);
      CHECK(v == (int64_t)c[i].tag);
    }
    kv_release(c[i].value);
  }
}

/* Until /proc says the process is stopped (kill() returns before it is). */
static int wait_stopped(pid_t pid) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  for (int i = 0; i < 500; ++i) {
    FILE *f = fopen(path, "r");
    char state = '?';
    if (f != NULL) {
      if (fscanf(f, "%*d (%*[^)]) %c", &state) != 1) state = '?';
      fclose(f);
    }
    if (state == 'T') return 1;
    struct timespec ten_ms = {0, 10 * 1000 * 1000};
    nanosleep(&ten_ms, NULL);
  }
  return 0;
}

/* RKV_TIMEOUT_MS: a bad value is EINVAL; async requests to a kvd that is
 * stopped (SIGSTOP: its transport still acknowledges) come back from
 * kv_poll(-1) with an error once the timeout passed, instead of never. Runs
 * last: the handle's connection is failed afterwards. */
static void test_stopped_server(const char *server) {
  void *h = NULL;
  setenv("RKV_GET_MODE", "rpc", 1); /* a one-sided GET needs no server CPU: it would succeed */
  setenv("RKV_TIMEOUT_MS", "soon", 1);
  CHECK_RC(kv_open((char *)server, &h), EINVAL);
  CHECK(strstr(kv_last_error(NULL), "RKV_TIMEOUT_MS") != NULL);
  setenv("RKV_TIMEOUT_MS", "1000", 1);
  CHECK_RC(kv_open((char *)server, &h), 0);
  unsetenv("RKV_TIMEOUT_MS");
  if (h == NULL) return;
  CHECK_RC(kv_set_bin(h, "stop", 4, "v", 1), 0);
  CHECK(kill(kvd_pid, SIGSTOP) == 0);
  CHECK(wait_stopped(kvd_pid));
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  CHECK_RC(kv_get_async(h, "stop", 4, 7), 0);
  CHECK_RC(kv_set_async(h, "other", 5, "x", 1, 8), 0);
  kv_completion c[2];
  /* The bounds: not before the timeout (the property: a lower bound, which
   * a slow machine cannot break); the upper bound is only this wait's own
   * generous deadline (60 s for a 1 s timeout): a handle with no watchdog
   * would wait forever, and got would be short. */
  const int got = poll_n(h, c, 2, 60000);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  CHECK(kill(kvd_pid, SIGCONT) == 0);
  const double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
  fprintf(stderr, "stopped kvd: %d of 2 completions after %.2f s\n", got, secs);
  CHECK(got == 2);
  CHECK(secs >= 1.0);
  for (int i = 0; i < got; ++i) CHECK(c[i].status != 0);
  CHECK_RC(kv_close(h), 0);
}

static void run_config(const char *server, const char *get_mode, const char *poll_us) {
  fprintf(stderr, "--- RKV_GET_MODE=%s RKV_POLL_US=%s\n", get_mode, poll_us);
  setenv("RKV_GET_MODE", get_mode, 1);
  setenv("RKV_POLL_US", poll_us, 1);
  void *h = NULL;
  void *h2 = NULL;
  CHECK_RC(kv_open((char *)server, &h), 0);
  CHECK_RC(kv_open((char *)server, &h2), 0);
  if (h == NULL || h2 == NULL) return;
  const int before = failures;
  test_binary(h, h2);
  test_arguments(h);
  test_async_256(h);
  test_order(h);
  test_del(h, h2);
  test_pipeline(h, server);
  test_get_into(h);
  test_call_async(h);
  CHECK_RC(kv_close(h), 0);
  CHECK_RC(kv_close(h2), 0);
  fprintf(stderr, "--- %s/%s: %d failed checks\n", get_mode, poll_us, failures - before);
}

int main(void) {
  const char *addr = getenv("SOFTROCE_ADDR");
  if (addr == NULL || *addr == '\0') {
    fprintf(stderr, "FAIL: SOFTROCE_ADDR is not set: run inside scripts/softroce (meson test --suite rdma)\n");
    return 1;
  }
  char max_value[32];
  snprintf(max_value, sizeof max_value, "%u", MAX_VALUE);
  const char *flags[] = {"--max-value", max_value, NULL};
  const unsigned port = start_kvd(addr, flags);
  if (port == 0) {
    fprintf(stderr, "FAIL: kvd did not start\n");
    stop_kvd();
    return 1;
  }
  char server[160];
  snprintf(server, sizeof server, "%s:%u", addr, port);
  test_open_opts(server);
  run_config(server, "rpc", "200");  /* GETs by message; spin, then block (the default) */
  run_config(server, "read", "200"); /* one-sided GETs */
  run_config(server, "rpc", "0");    /* completion events only */
  run_config(server, "read", "busy"); /* never sleeps inside the handle */
  test_stopped_server(server);
  stop_kvd();
  if (failures > 0) {
    fprintf(stderr, "FAIL: %d checks failed\n", failures);
    return 1;
  }
  fprintf(stderr, "PASS\n");
  return 0;
}
