/*
 * Forking ranks of a C test without forking a threaded process.
 *
 * tideGetUniqueId (and ncclGetUniqueId) start the bootstrap root thread. A
 * process forked while that thread runs inherits whatever lock the thread
 * held at that instant (the allocator's, under AddressSanitizer, which has no
 * fork handler in GCC 12): a child forked while an earlier child's rank was
 * being served could hang before its first bounded wait. So the children are
 * forked first, while the parent has one thread, and the id reaches them
 * through a pipe once all exist.
 *
 * ForkRanksShareId(n, pids, id, id_size, make_id, run, timeout_s):
 *   forks n children; calls make_id(id) in the parent; writes the id_size
 *   bytes to every child; each child waits at most timeout_s seconds for
 *   them, then calls run(rank, id), flushes stdout and _exit()s with its
 *   result (no exit(): the leak check must not run in a forked child).
 *   Returns 0 with pids[] filled, or -1 (message on stderr) after killing
 *   the children it started; a child that got no id exits 3.
 */
#ifndef TIDE_TESTS_HARNESS_FORK_RANKS_H_
#define TIDE_TESTS_HARNESS_FORK_RANKS_H_

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

enum { kForkRanksMax = 64 };

/* Reads exactly n bytes within timeout_s seconds; 0 on success. */
static inline int ForkRanksReadAll(int fd, void* buf, size_t n, int timeout_s) {
  size_t got = 0;
  while (got < n) {
    struct pollfd p;
    p.fd = fd;
    p.events = POLLIN;
    p.revents = 0;
    const int pr = poll(&p, 1, timeout_s * 1000);
    if (pr < 0 && errno == EINTR) continue;
    if (pr <= 0) return -1;
    const ssize_t k = read(fd, (char*)buf + got, n - got);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return -1;
    got += (size_t)k;
  }
  return 0;
}

static inline int ForkRanksShareId(int n, pid_t* pids, void* id, size_t id_size,
                                   int (*make_id)(void* id), int (*run)(int rank, void* id),
                                   int timeout_s) {
  int fds[kForkRanksMax][2];
  int r, started = 0, ok = 1;
  if (n < 1 || n > kForkRanksMax) {
    fprintf(stderr, "ForkRanksShareId: %d ranks (1..%d)\n", n, kForkRanksMax);
    return -1;
  }
  fflush(NULL);
  for (r = 0; r < n; ++r) {
    if (pipe(fds[r]) != 0) {
      fprintf(stderr, "ForkRanksShareId: pipe: %s\n", strerror(errno));
      ok = 0;
      break;
    }
    pids[r] = fork();
    if (pids[r] < 0) {
      fprintf(stderr, "ForkRanksShareId: fork: %s\n", strerror(errno));
      close(fds[r][0]);
      close(fds[r][1]);
      ok = 0;
      break;
    }
    if (pids[r] == 0) {
      int j, code;
      for (j = 0; j < r; ++j) close(fds[j][1]); /* earlier children's pipes */
      close(fds[r][1]);
      if (ForkRanksReadAll(fds[r][0], id, id_size, timeout_s) != 0) _exit(3);
      close(fds[r][0]);
      code = run(r, id);
      fflush(stdout);
      _exit(code);
    }
    close(fds[r][0]);
    started = r + 1;
  }
  signal(SIGPIPE, SIG_IGN); /* a child that died already must not kill the parent */
  if (ok && make_id(id) != 0) {
    fprintf(stderr, "ForkRanksShareId: making the unique id failed\n");
    ok = 0;
  }
  for (r = 0; r < started; ++r) {
    if (ok) {
      const char* p = (const char*)id;
      size_t left = id_size;
      while (left > 0) {
        const ssize_t k = write(fds[r][1], p, left);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) break;
        p += k;
        left -= (size_t)k;
      }
      if (left != 0) ok = 0;
    }
    close(fds[r][1]);
  }
  if (!ok) {
    for (r = 0; r < started; ++r) {
      kill(pids[r], SIGKILL);
      waitpid(pids[r], NULL, 0);
    }
    return -1;
  }
  return 0;
}

#endif /* TIDE_TESTS_HARNESS_FORK_RANKS_H_ */
