/* outside: a program that uses the INSTALLED store, as a user's program would.
 * tests/install/run.sh builds it outside the source tree's include paths,
 * with only `cc outside.c $(pkg-config --cflags --libs rkv)` against a
 * `meson install --destdir`, and runs it against the installed kvd:
 *
 *   outside SERVER[:PORT] KEY_PREFIX
 *
 * Every check is one function in `checks` below: to cover a new call of
 * kv.h, write a function taking the open handle and the key prefix that
 * returns its number of failures (CHECK counts them), and add it to the
 * table. Prints one line per check and exits 0 only if all of them held. */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <kv.h> /* from the install (-I.../include/rkv), not the source tree */
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(cond)                                                                \
  do {                                                                             \
    if (!(cond)) {                                                                 \
      fprintf(stderr, "outside: %s:%d: CHECK failed: %s (last error: %s)\n", __FILE__, \
              __LINE__, #cond, kv_last_error(kv));                                 \
      ++failures;                                                                  \
    }                                                                              \
  } while (0)

static void key_of(char *out, size_t cap, const char *prefix, const char *name) {
  snprintf(out, cap, "%s-%s", prefix, name);
}

/* kv_set then kv_get of `value`: the same bytes come back; kv_release frees them. */
static int round_trip(void *kv, const char *key, const char *value) {
  int failures = 0;
  CHECK(kv_set(kv, key, value) == 0);
  char *got = NULL;
  CHECK(kv_get(kv, key, &got) == 0);
  CHECK(got != NULL);
  if (got != NULL) {
    CHECK(strlen(got) == strlen(value));
    CHECK(strcmp(got, value) == 0);
    kv_release(got);
  }
  return failures;
}

static int check_small(void *kv, const char *prefix) {
  char key[256];
  key_of(key, sizeof key, prefix, "small");
  int failures = round_trip(kv, key, "hello from outside the tree");
  failures += round_trip(kv, key, "overwritten"); /* a SET replaces the value */
  return failures;
}

static int check_large(void *kv, const char *prefix) {
  enum { kLarge = 1 << 20 }; /* 1 MiB: the zero-copy rendezvous path */
  int failures = 0;
  char *value = malloc(kLarge + 1);
  CHECK(value != NULL);
  if (value == NULL) return failures;
  for (size_t i = 0; i < kLarge; ++i) value[i] = (char)('a' + (i * 7 + i / 4096) % 26);
  value[kLarge] = '\0';
  char key[256];
  key_of(key, sizeof key, prefix, "large");
  failures += round_trip(kv, key, value);
  free(value);
  return failures;
}

static int check_missing(void *kv, const char *prefix) {
  int failures = 0;
  char key[256];
  key_of(key, sizeof key, prefix, "never-set");
  char *got = NULL;
  CHECK(kv_get(kv, key, &got) == 0); /* the spec: a missing key reads as "" */
  CHECK(got != NULL && got[0] == '\0');
  if (got != NULL) kv_release(got);
  return failures;
}

static int check_errors(void *kv, const char *prefix) {
  (void)prefix;
  int failures = 0;
  CHECK(kv_set(kv, "", "x") != 0); /* an empty key is refused... */
  CHECK(kv_last_error(kv)[0] != '\0'); /* ...with a message */
  CHECK(strcmp(kv_strerror(0), "success") == 0);
  return failures;
}

/* kv_set_bin/kv_get_bin: values with NULs inside, byte-exact, at the eager
 * limit and beyond; the value is followed by a NUL value_len does not count. */
static int check_binary(void *kv, const char *prefix) {
  static const size_t sizes[] = {1, 4095, 4096, 1u << 20};
  int failures = 0;
  for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; ++s) {
    const size_t n = sizes[s];
    unsigned char *value = malloc(n);
    CHECK(value != NULL);
    if (value == NULL) return failures;
    for (size_t i = 0; i < n; ++i) value[i] = (unsigned char)(i % 5 == 0 ? 0 : (i * 31 + s) & 0xFF);
    char key[256];
    const int klen = snprintf(key, sizeof key, "%s-bin%c%zu", prefix, '\0', n); /* a NUL in the key */
    CHECK(kv_set_bin(kv, key, (size_t)klen, value, n) == 0);
    void *got = NULL;
    size_t got_len = 0;
    CHECK(kv_get_bin(kv, key, (size_t)klen, &got, &got_len) == 0);
    CHECK(got != NULL && got_len == n);
    if (got != NULL && got_len == n) {
      CHECK(memcmp(got, value, n) == 0);
      CHECK(((const char *)got)[n] == '\0');
    }
    kv_release(got);
    free(value);
  }
  return failures;
}

/* kv_get_bin: a missing key is ENOENT (outputs untouched), an empty value is found. */
static int check_missing_bin(void *kv, const char *prefix) {
  int failures = 0;
  char key[256];
  key_of(key, sizeof key, prefix, "never-set-bin");
  void *got = (void *)&failures;
  size_t got_len = 99;
  CHECK(kv_get_bin(kv, key, strlen(key), &got, &got_len) == ENOENT);
  CHECK(got == (void *)&failures && got_len == 99);
  key_of(key, sizeof key, prefix, "empty-bin");
  CHECK(kv_set_bin(kv, key, strlen(key), NULL, 0) == 0);
  CHECK(kv_get_bin(kv, key, strlen(key), &got, &got_len) == 0);
  CHECK(got != NULL && got != (void *)&failures && got_len == 0);
  if (got != (void *)&failures) kv_release(got);
  return failures;
}

/* kv_del: the key is gone (kv_get_bin: ENOENT), a second kv_del is ENOENT. */
static int check_del(void *kv, const char *prefix) {
  int failures = 0;
  char key[256];
  key_of(key, sizeof key, prefix, "deleted");
  CHECK(kv_set_bin(kv, key, strlen(key), "soon gone", 9) == 0);
  CHECK(kv_del(kv, key, strlen(key)) == 0);
  void *got = NULL;
  size_t got_len = 0;
  CHECK(kv_get_bin(kv, key, strlen(key), &got, &got_len) == ENOENT);
  CHECK(kv_del(kv, key, strlen(key)) == ENOENT);
  return failures;
}

/* User-defined operations: kv_call of kvd's INCR (opcode 0x0100) with the
 * request bytes built here (key_len u16 | key | delta i64, little-endian;
 * the reply is the new value, i64), kv_call of CAS (0x0101) with a 64 KiB
 * new value (sent by RDMA), kv_incr and kv_cas, and an opcode kvd has no
 * handler for (EOPNOTSUPP). */
static void put_le(unsigned char *p, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) p[i] = (unsigned char)(v >> (8 * i));
}
static int check_call(void *kv, const char *prefix) {
  int failures = 0;
  char key[256];
  key_of(key, sizeof key, prefix, "counter");
  const size_t klen = strlen(key);
  unsigned char req[2 + 256 + 8];
  put_le(req, klen, 2);
  memcpy(req + 2, key, klen);
  put_le(req + 2 + klen, (uint64_t)(int64_t)-3, 8);
  void *reply = NULL;
  size_t reply_len = 0;
  CHECK(kv_call(kv, 0x0100, req, 2 + klen + 8, &reply, &reply_len) == 0);
  CHECK(reply != NULL && reply_len == 8);
  if (reply != NULL && reply_len == 8) {
    const unsigned char *r = reply;
    int64_t v = 0;
    for (int i = 7; i >= 0; --i) v = (int64_t)(((uint64_t)v << 8) | r[i]);
    CHECK(v == -3); /* a missing key counts as 0 */
  }
  kv_release(reply);
  int64_t result = 0;
  CHECK(kv_incr(kv, key, klen, 10, &result) == 0 && result == 7);
  void *got = NULL;
  size_t got_len = 0;
  CHECK(kv_get_bin(kv, key, klen, &got, &got_len) == 0 && got_len == 1 && memcmp(got, "7", 1) == 0);
  kv_release(got);
  int swapped = -1;
  CHECK(kv_cas(kv, key, klen, "8", 1, "x", 1, &swapped) == 0 && swapped == 0);
  CHECK(kv_cas(kv, key, klen, "7", 1, "seven", 5, &swapped) == 0 && swapped == 1);
  CHECK(kv_incr(kv, key, klen, 1, &result) == EDOM); /* "seven" is not an integer */
  /* CAS through kv_call with a 64 KiB new value: the request goes by RDMA. */
  enum { kBig = 65536 };
  static unsigned char big[2 + 256 + 4 + 5 + kBig];
  size_t n = 0;
  put_le(big, klen, 2);
  memcpy(big + 2, key, klen);
  n = 2 + klen;
  put_le(big + n, 5, 4);
  memcpy(big + n + 4, "seven", 5);
  n += 4 + 5;
  for (size_t i = 0; i < kBig; ++i) big[n + i] = (unsigned char)(i * 7);
  CHECK(kv_call(kv, 0x0101, big, n + kBig, &reply, &reply_len) == 0);
  CHECK(reply != NULL && reply_len == 1 && ((unsigned char *)reply)[0] == 1);
  kv_release(reply);
  CHECK(kv_get_bin(kv, key, klen, &got, &got_len) == 0 && got_len == kBig);
  if (got != NULL && got_len == kBig) CHECK(memcmp(got, big + n, kBig) == 0);
  kv_release(got);
  CHECK(kv_call(kv, 0x7E57, "x", 1, &reply, &reply_len) == EOPNOTSUPP);
  CHECK(kv_last_error(kv)[0] != '\0');
  CHECK(kv_call(kv, 0x0100, NULL, 0, &reply, &reply_len) == EDOM); /* not an INCR request */
  return failures;
}

/* 256 operations in flight on the handle, driven by this program's own
 * poll() on kv_fd: SETs then GETs of 128 keys (every 16th value 64 KiB, the
 * rest small), each completing once with its tag; a GET sees the SET
 * submitted before it on its key. */
static int check_async(void *kv, const char *prefix) {
  enum { kKeys = 128, kOps = 2 * kKeys };
  int failures = 0;
  static unsigned char values[kKeys][65536];
  size_t lens[kKeys];
  char key[256];
  for (int i = 0; i < kKeys; ++i) {
    lens[i] = i % 16 == 0 ? sizeof values[i] : (size_t)(1 + i);
    for (size_t j = 0; j < lens[i]; ++j) values[i][j] = (unsigned char)((i + j) % 3 == 0 ? 0 : i + j);
    snprintf(key, sizeof key, "%s-async-%d", prefix, i);
    CHECK(kv_set_async(kv, key, strlen(key), values[i], lens[i], (uint64_t)i) == 0);
  }
  for (int i = 0; i < kKeys; ++i) {
    snprintf(key, sizeof key, "%s-async-%d", prefix, i);
    CHECK(kv_get_async(kv, key, strlen(key), (uint64_t)(kKeys + i)) == 0);
  }
  char seen[kOps] = {0};
  int done = 0;
  struct pollfd p = {kv_fd(kv), POLLIN, 0};
  while (done < kOps) {
    if (poll(&p, 1, 30000) != 1) { /* operations pending and kv_fd quiet: a hang */
      fprintf(stderr, "outside: kv_fd not readable within 30 s, %d operations pending\n", kOps - done);
      ++failures;
      break;
    }
    kv_completion c[32];
    const int n = kv_poll(kv, c, 32, 0);
    CHECK(n >= 0);
    if (n < 0) break;
    for (int j = 0; j < n; ++j, ++done) {
      CHECK(c[j].status == 0 && c[j].tag < kOps && !seen[c[j].tag]);
      if (c[j].tag >= kOps) continue;
      seen[c[j].tag] = 1;
      if (c[j].tag >= kKeys) {
        const int i = (int)c[j].tag - kKeys;
        CHECK(c[j].value_len == lens[i] && c[j].value != NULL && memcmp(c[j].value, values[i], lens[i]) == 0);
      }
      kv_release(c[j].value);
    }
  }
  return failures;
}

static const struct {
  const char *name;
  int (*run)(void *kv, const char *prefix);
} checks[] = {
    {"small values round-trip", check_small},
    {"1 MiB value round-trips", check_large},
    {"missing key reads as empty", check_missing},
    {"errors have codes and messages", check_errors},
    {"binary values round-trip", check_binary},
    {"kv_get_bin: ENOENT, empty value", check_missing_bin},
    {"kv_del, then kv_get_bin: ENOENT", check_del},
    {"kv_call, kv_incr, kv_cas", check_call},
    {"256 async ops through kv_fd", check_async},
};

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: outside SERVER[:PORT] KEY_PREFIX\n");
    return 2;
  }
  void *kv = NULL;
  const int rc = kv_open(argv[1], &kv);
  if (rc != 0) {
    fprintf(stderr, "outside: kv_open(%s): %s: %s\n", argv[1], kv_strerror(rc), kv_last_error(NULL));
    return 1;
  }
  int total = 0;
  for (size_t i = 0; i < sizeof checks / sizeof checks[0]; ++i) {
    const int failures = checks[i].run(kv, argv[2]);
    printf("outside: %-36s %s\n", checks[i].name, failures == 0 ? "ok" : "FAILED");
    total += failures;
  }
  if (kv_close(kv) != 0) {
    fprintf(stderr, "outside: kv_close failed\n");
    ++total;
  }
  printf("outside: %zu checks, %d failures\n", sizeof checks / sizeof checks[0], total);
  return total == 0 ? 0 : 1;
}
