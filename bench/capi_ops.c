/* capi_ops: the C API's side of bench/python_vs_c.py: N SETs then N GETs of
 * one value size through kv_set_bin / kv_get_bin (+ kv_release), one key
 * per op round-robin over KEYS keys (default 16); prints one line
 *   capi set_ops_s=... get_ops_s=... set_mb_s=... get_mb_s=...
 *
 *   capi_ops SERVER SIZE N [KEYS]
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kv/client/kv.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
  if (argc != 4 && argc != 5) {
    fprintf(stderr, "usage: %s SERVER SIZE N [KEYS]\n", argv[0]);
    return 2;
  }
  const long keys = argc == 5 ? strtol(argv[4], NULL, 10) : 16;
  if (keys < 1) {
    fprintf(stderr, "capi_ops: KEYS must be at least 1\n");
    return 2;
  }
  const size_t size = strtoull(argv[2], NULL, 10);
  const long n = strtol(argv[3], NULL, 10);
  void *h = NULL;
  int rc = kv_open(argv[1], &h);
  if (rc != 0) {
    fprintf(stderr, "capi_ops: kv_open: %s\n", kv_last_error(NULL));
    return 1;
  }
  char *value = malloc(size > 0 ? size : 1);
  if (value == NULL) return 1;
  for (size_t i = 0; i < size; ++i) value[i] = (char)(i * 31u);
  char key[32];
  double t = now_s();
  for (long i = 0; i < n; ++i) {
    const int len = snprintf(key, sizeof key, "capi-%ld", i % keys);
    if ((rc = kv_set_bin(h, key, (size_t)len, value, size)) != 0) {
      fprintf(stderr, "capi_ops: kv_set_bin: %s\n", kv_last_error(h));
      return 1;
    }
  }
  const double set_s = now_s() - t;
  t = now_s();
  for (long i = 0; i < n; ++i) {
    const int len = snprintf(key, sizeof key, "capi-%ld", i % keys);
    void *got = NULL;
    size_t got_len = 0;
    if ((rc = kv_get_bin(h, key, (size_t)len, &got, &got_len)) != 0 || got_len != size) {
      fprintf(stderr, "capi_ops: kv_get_bin: %s\n", kv_last_error(h));
      return 1;
    }
    kv_release(got);
  }
  const double get_s = now_s() - t;
  printf("capi set_ops_s=%.1f get_ops_s=%.1f set_mb_s=%.1f get_mb_s=%.1f\n", (double)n / set_s, (double)n / get_s,
         (double)n * (double)size / set_s / 1e6, (double)n * (double)size / get_s / 1e6);
  free(value);
  return kv_close(h);
}
