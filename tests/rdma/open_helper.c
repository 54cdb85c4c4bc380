/* open_helper SERVER: kv_open(SERVER) through the C API and print what a
 * program would see: `rc=N` (kv_open's code), `strerror=...` (kv_strerror)
 * and `last_error=...` (kv_last_error(NULL)), one per line. Closes the
 * handle if it opened. Exit status 0 when the lines were printed. The cli
 * test runs it without an RDMA device (test_cli.cpp). */
#include <stdio.h>

#include "kv/client/kv.h"

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: open_helper SERVER\n");
    return 2;
  }
  void *kv = NULL;
  const int rc = kv_open(argv[1], &kv);
  printf("rc=%d\nstrerror=%s\nlast_error=%s\n", rc, kv_strerror(rc), kv_last_error(NULL));
  if (rc == 0) kv_close(kv);
  return 0;
}
