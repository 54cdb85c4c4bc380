/* c_api: the C API (kv.h) from a C program against a kvd child process.
 * open/set/get/release/close, the size limits, and misuse (NULL arguments,
 * bad server names, nothing listening) returning errors instead of crashing
 * or hanging. Fails (never skips) without $SOFTROCE_ADDR. */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "c_test.h"
#include "kv/client/kv.h"

static char *repeat(char c, size_t n) {
  char *s = malloc(n + 1);
  memset(s, c, n);
  s[n] = '\0';
  return s;
}

int main(void) {
  const char *addr = getenv("SOFTROCE_ADDR");
  if (addr == NULL || *addr == '\0') {
    fprintf(stderr, "FAIL: SOFTROCE_ADDR is not set: run inside scripts/softroce (meson test --suite rdma)\n");
    return 1;
  }
  /* Misuse needing no server. */
  void *h = (void *)0x1;
  CHECK_RC(kv_open(NULL, &h), EINVAL);
  CHECK(h == (void *)0x1); /* output untouched on failure */
  CHECK_RC(kv_open((char *)"192.0.2.1", NULL), EINVAL);
  CHECK_RC(kv_open((char *)"", &h), EINVAL);
  CHECK_RC(kv_open((char *)"host:", &h), EINVAL);
  CHECK_RC(kv_open((char *)"host:notaport", &h), EINVAL);
  CHECK_RC(kv_open((char *)"host:70000", &h), EINVAL);
  CHECK(strlen(kv_last_error(NULL)) > 0);
  CHECK_RC(kv_set(NULL, "k", "v"), EINVAL);
  char *value = (char *)0x1;
  CHECK_RC(kv_get(NULL, "k", &value), EINVAL);
  CHECK(value == (char *)0x1);
  CHECK_RC(kv_close(NULL), EINVAL);
  kv_release(NULL);
  CHECK(strcmp(kv_strerror(E2BIG), "key or value too large") == 0);
  CHECK(kv_strerror(12345) != NULL);

  unsigned port = start_kvd(addr, NULL);
  if (port == 0) {
    fprintf(stderr, "FAIL: kvd did not start\n");
    stop_kvd();
    return 1;
  }
  char name[128];
  snprintf(name, sizeof name, "%s:%u", addr, port);

  /* Nothing listens on port 1: an error, quickly, not a hang. */
  char nobody[128];
  snprintf(nobody, sizeof nobody, "%s:1", addr);
  time_t t0 = time(NULL);
  h = NULL;
  CHECK_RC(kv_open(nobody, &h), ECONNREFUSED);
  CHECK(h == NULL);
  CHECK(time(NULL) - t0 < 60);
  fprintf(stderr, "unreachable server: %s\n", kv_last_error(NULL));

  void *kv = NULL;
  CHECK_RC(kv_open(name, &kv), 0);
  if (kv == NULL) {
    fprintf(stderr, "FAIL: kv_open(%s): %s\n", name, kv_last_error(NULL));
    stop_kvd();
    return 1;
  }
  void *kv2 = NULL;
  CHECK_RC(kv_open(name, &kv2), 0);

  CHECK_RC(kv_set(kv, "greeting", "hello, world"), 0);
  value = NULL;
  CHECK_RC(kv_get(kv2, "greeting", &value), 0);
  CHECK(value != NULL && strcmp(value, "hello, world") == 0);
  kv_release(value);

  /* Missing key: 0 and "". */
  value = NULL;
  CHECK_RC(kv_get(kv, "missing-key", &value), 0);
  CHECK(value != NULL && value[0] == '\0');
  kv_release(value);

  /* Empty value round-trips as "". */
  CHECK_RC(kv_set(kv, "empty", ""), 0);
  value = NULL;
  CHECK_RC(kv_get(kv, "empty", &value), 0);
  CHECK(value != NULL && value[0] == '\0');
  kv_release(value);

  /* The eager boundary: key + value = 4095 goes eagerly, 4096 by rendezvous;
   * both work. Keys up to 1024. */
  char *key = repeat('k', 95);
  char *v_ok = repeat('v', 4000);
  char *v_big = repeat('v', 4001);
  CHECK_RC(kv_set(kv, key, v_ok), 0);
  value = NULL;
  CHECK_RC(kv_get(kv, key, &value), 0);
  CHECK(value != NULL && strcmp(value, v_ok) == 0);
  kv_release(value);
  CHECK_RC(kv_set(kv, key, v_big), 0);
  value = NULL;
  CHECK_RC(kv_get(kv, key, &value), 0);
  CHECK(value != NULL && strcmp(value, v_big) == 0);
  kv_release(value);

  /* Large values round-trip byte-exactly (checksums), zero-copy both ways. */
  static const size_t sizes[] = {4095, 4096, 4097, 64 << 10, 1 << 20, 64 << 20};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; ++i) {
    const size_t n = sizes[i];
    char *big = malloc(n + 1);
    CHECK(big != NULL);
    if (big == NULL) break;
    unsigned long long x = 0x9E3779B97F4A7C15ull * (i + 1), sum = 0;
    for (size_t j = 0; j < n; ++j) {
      x ^= x << 13; x ^= x >> 7; x ^= x << 17;
      big[j] = (char)('!' + (x % 90)); /* printable, never NUL */
      sum = sum * 131 + (unsigned char)big[j];
    }
    big[n] = '\0';
    char name[32];
    snprintf(name, sizeof name, "large-%zu", n);
    CHECK_RC(kv_set(kv, name, big), 0);
    memset(big, 0, n); /* the server must have its own copy now */
    free(big);
    value = NULL;
    CHECK_RC(kv_get(kv2, name, &value), 0);
    CHECK(value != NULL && strlen(value) == n);
    if (value != NULL) {
      unsigned long long got = 0;
      for (size_t j = 0; j < n; ++j) got = got * 131 + (unsigned char)value[j];
      CHECK(got == sum);
      if (got != sum) fprintf(stderr, "checksum mismatch for %zu bytes\n", n);
    }
    kv_release(value);
  }
  kv_release(NULL); /* a no-op */
  char *long_key = repeat('k', 1025);
  CHECK_RC(kv_set(kv, long_key, "v"), E2BIG);
  value = (char *)0x1;
  CHECK_RC(kv_get(kv, long_key, &value), E2BIG);
  CHECK(value == (char *)0x1);
  long_key[1024] = '\0';
  CHECK_RC(kv_set(kv, long_key, "max key"), 0);
  free(key);
  free(v_ok);
  free(v_big);
  free(long_key);

  /* Misuse on a live handle. */
  CHECK_RC(kv_set(kv, NULL, "v"), EINVAL);
  CHECK_RC(kv_set(kv, "k", NULL), EINVAL);
  CHECK_RC(kv_set(kv, "", "v"), EINVAL);
  CHECK_RC(kv_get(kv, NULL, &value), EINVAL);
  CHECK_RC(kv_get(kv, "k", NULL), EINVAL);
  /* The handle still works after all that. */
  CHECK_RC(kv_set(kv, "after", "misuse"), 0);
  value = NULL;
  CHECK_RC(kv_get(kv, "after", &value), 0);
  CHECK(value != NULL && strcmp(value, "misuse") == 0);
  kv_release(value);

  CHECK_RC(kv_close(kv), 0);
  CHECK_RC(kv_close(kv2), 0);
  stop_kvd();

  if (failures > 0) {
    fprintf(stderr, "FAIL: %d checks failed\n", failures);
    return 1;
  }
  fprintf(stderr, "PASS\n");
  return 0;
}
