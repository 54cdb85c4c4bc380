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

#include <kv.h> /* from the install (-I.../include/rkv), not the source tree */
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

static const struct {
  const char *name;
  int (*run)(void *kv, const char *prefix);
} checks[] = {
    {"small values round-trip", check_small},
    {"1 MiB value round-trips", check_large},
    {"missing key reads as empty", check_missing},
    {"errors have codes and messages", check_errors},
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
