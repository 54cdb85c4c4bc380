/* rdv_helper: a client process for the rdv_e2e kill tests. Usage:
 *   rdv_helper set|get SERVER KEY SIZE
 * Connects, prints "go" (stdout, flushed), then repeats a SIZE-byte kv_set
 * (or a kv_get of KEY) until killed. Exits 1 on any error. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kv/client/kv.h"

int main(int argc, char **argv) {
  if (argc != 5) {
    fprintf(stderr, "usage: rdv_helper set|get SERVER KEY SIZE\n");
    return 2;
  }
  void *h = NULL;
  if (kv_open(argv[2], &h) != 0) {
    fprintf(stderr, "rdv_helper: kv_open: %s\n", kv_last_error(NULL));
    return 1;
  }
  const size_t size = (size_t)strtoull(argv[4], NULL, 10);
  char *value = malloc(size + 1);
  if (value == NULL) return 1;
  memset(value, 'k', size);
  value[size] = '\0';
  printf("go\n");
  fflush(stdout);
  for (;;) {
    if (strcmp(argv[1], "set") == 0) {
      if (kv_set(h, argv[3], value) != 0) break;
    } else {
      char *out = NULL;
      if (kv_get(h, argv[3], &out) != 0) break;
      kv_release(out);
    }
  }
  fprintf(stderr, "rdv_helper: %s\n", kv_last_error(h));
  kv_close(h);
  free(value);
  return 1;
}
