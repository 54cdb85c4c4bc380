/* shard_reader SERVERS KEYS_FILE: a program outside the store's code, on the
 * C API only: kv_open(SERVERS) (a comma-separated list of kvd servers), then
 * a GET of every key of KEYS_FILE (one per line; kv_get_async, 64 in flight
 * over the servers, kv_poll) and one line each, in completion order
 *   KEY LEN FNV1A64     the value's length and its FNV-1a 64 (16 hex digits)
 *   KEY MISSING         ENOENT
 *   KEY ERR CODE        any other error (kv_strerror's code)
 * Exit status: 0 when every key was read (found or missing), 1 if any error,
 * 2 bad usage or kv_open failed (its message on stderr). test_shards.cpp
 * compares the lines with the values kvload acknowledged. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kv/client/kv.h"

static uint64_t fnv1a64(const unsigned char *p, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: shard_reader SERVERS KEYS_FILE\n");
    return 2;
  }
  FILE *keys = fopen(argv[2], "r");
  if (keys == NULL) {
    perror(argv[2]);
    return 2;
  }
  void *kv = NULL;
  const int rc = kv_open(argv[1], &kv);
  if (rc != 0) {
    fprintf(stderr, "kv_open(%s): %s: %s\n", argv[1], kv_strerror(rc), kv_last_error(NULL));
    fclose(keys);
    return 2;
  }
  /* Every key in memory, then up to kWindow GETs in flight (kv_get_async,
   * kv_poll): the keys are on three servers, so are the GETs. */
  enum { kWindow = 64, kMaxKeys = 100000 };
  static char *names[kMaxKeys];
  static size_t lens[kMaxKeys];
  size_t n = 0;
  char line[2048];
  while (n < kMaxKeys && fgets(line, sizeof line, keys) != NULL) {
    size_t len = strlen(line);
    while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = '\0';
    if (len == 0) continue;
    names[n] = malloc(len + 1);
    if (names[n] == NULL) return 2;
    memcpy(names[n], line, len + 1);
    lens[n] = len;
    ++n;
  }
  int errors = 0;
  size_t next = 0, done = 0, in_flight = 0;
  while (done < n) {
    while (next < n && in_flight < kWindow) {
      const int a = kv_get_async(kv, names[next], lens[next], next);
      if (a == EAGAIN) break;
      if (a != 0) {
        printf("%s ERR %d\n", names[next], a);
        fprintf(stderr, "kv_get_async(%s): %s\n", names[next], kv_last_error(kv));
        ++errors;
        ++done;
      } else {
        ++in_flight;
      }
      ++next;
    }
    kv_completion c[kWindow];
    const int got = kv_poll(kv, c, kWindow, 10000);
    if (got < 0) {
      fprintf(stderr, "kv_poll: %s\n", kv_last_error(kv));
      return 1;
    }
    if (got == 0 && in_flight > 0) {
      fprintf(stderr, "kv_poll: nothing completed in 10 s with %zu in flight\n", in_flight);
      return 1;
    }
    for (int i = 0; i < got; ++i) {
      const char *name = names[c[i].tag];
      if (c[i].status == 0) {
        printf("%s %zu %016" PRIx64 "\n", name, c[i].value_len, fnv1a64((const unsigned char *)c[i].value, c[i].value_len));
        kv_release((char *)c[i].value);
      } else if (c[i].status == ENOENT) {
        printf("%s MISSING\n", name);
      } else {
        printf("%s ERR %d\n", name, c[i].status);
        ++errors;
      }
      --in_flight;
      ++done;
    }
  }
  for (size_t i = 0; i < n; ++i) free(names[i]);
  fclose(keys);
  kv_close(kv);
  return errors == 0 ? 0 : 1;
}
