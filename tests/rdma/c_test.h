/* c_test.h: what the C tests (test_c_api.c, test_c_async.c) share: CHECK
 * macros that count failures, and a kvd child process: start_kvd() forks kvd
 * on an address with --port 0 and returns the port it printed; stop_kvd()
 * SIGTERMs it (SIGKILL after 10 s). One kvd per program. */
#ifndef RKV_TESTS_C_TEST_H
#define RKV_TESTS_C_TEST_H

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kv/client/kv.h"

#ifndef RKV_KVD_PATH
#error "RKV_KVD_PATH must name the kvd binary"
#endif

static int failures = 0;

#define CHECK(cond)                                                      \
  do {                                                                   \
    if (!(cond)) {                                                       \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      ++failures;                                                        \
    }                                                                    \
  } while (0)

#define CHECK_RC(expr, want)                                                           \
  do {                                                                                 \
    int rc_ = (expr);                                                                  \
    if (rc_ != (want)) {                                                               \
      fprintf(stderr, "%s:%d: %s returned %d (%s), expected %d; last error: %s\n", __FILE__, \
              __LINE__, #expr, rc_, kv_strerror(rc_), (want), kv_last_error(NULL));    \
      ++failures;                                                                      \
    }                                                                                  \
  } while (0)

static pid_t kvd_pid = -1;

/* Starts kvd on addr with --port 0 and the NULL-terminated `extra` flags
 * (may be NULL); returns its port (0 on failure). */
static unsigned start_kvd(const char *addr, const char *const *extra) {
  int fds[2];
  if (pipe(fds) != 0) return 0;
  kvd_pid = fork();
  if (kvd_pid < 0) return 0;
  if (kvd_pid == 0) {
    dup2(fds[1], STDOUT_FILENO);
    close(fds[0]);
    close(fds[1]);
    const char *argv[32] = {RKV_KVD_PATH, "--bind", addr, "--port", "0"};
    int argc = 5;
    for (; extra != NULL && *extra != NULL && argc < 31; ++extra) argv[argc++] = *extra;
    argv[argc] = NULL;
    execv(RKV_KVD_PATH, (char *const *)argv);
    perror("exec kvd");
    _exit(127);
  }
  close(fds[1]);
  FILE *out = fdopen(fds[0], "r");
  if (out == NULL) return 0;
  char *line = NULL;
  size_t cap = 0;
  unsigned port = 0;
  while (port == 0 && getline(&line, &cap, out) > 0) {
    fprintf(stderr, "[kvd] %s", line);
    if (strncmp(line, "kvd: listening on ", 18) == 0) {
      const char *colon = strrchr(line, ':');
      if (colon != NULL) port = (unsigned)strtoul(colon + 1, NULL, 10);
    }
  }
  free(line);
  /* Keep draining kvd's stdout so it never blocks on a full pipe. */
  if (fork() == 0) {
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, out)) > 0) fwrite(buf, 1, n, stderr);
    _exit(0);
  }
  fclose(out);
  return port;
}

static void stop_kvd(void) {
  if (kvd_pid <= 0) return;
  kill(kvd_pid, SIGTERM);
  int status = 0;
  for (int i = 0; i < 500; ++i) {
    if (waitpid(kvd_pid, &status, WNOHANG) == kvd_pid) {
      kvd_pid = -1;
      return;
    }
    struct timespec ts = {0, 20 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  kill(kvd_pid, SIGKILL);
  waitpid(kvd_pid, &status, 0);
  kvd_pid = -1;
}

#endif /* RKV_TESTS_C_TEST_H */
