// Rank harness, thread mode (see rank_harness.h): each rank a thread of the
// calling process with its own communicator; and RunEnvRank, a worker
// process's one rank from the environment.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdarg>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "rank_harness.h"
#include "rank_harness_internal.h"

namespace tide_test {

using harness::Clock;
using harness::MsSince;
using harness::Tail;

void ThreadRank::Logf(const char* fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  int k = vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  if (k > 0) log.append(buf, std::min<size_t>(static_cast<size_t>(k), sizeof(buf) - 1));
}

namespace {

// Shared between the harness and the rank threads; outlives an early return.
struct ThreadRunState {
  std::mutex mu;
  std::condition_variable cv;
  int finished = 0;
  std::vector<ThreadRank> ctx;
  std::vector<int> codes;
  std::vector<bool> fn_done, aborted, finished_rank;
  std::vector<tideComm_t> comms;  // published after init, for tideCommAbort
};

std::string DescribeThreads(ThreadRunState& st) {
  std::string s;
  for (size_t r = 0; r < st.ctx.size(); ++r) {
    s += "----- rank " + std::to_string(r) +
         (st.finished_rank[r] ? " (finished, code " + std::to_string(st.codes[r]) + ")"
                              : std::string(" (STILL RUNNING)")) +
         " -----\n" + Tail(st.ctx[r].log, 20000);
    if (s.back() != '\n') s += '\n';
  }
  return s;
}

}  // namespace

RunResult RunThreads(const ThreadRunOptions& o, const RankFn& fn) {
  RunResult res;
  const auto t0 = Clock::now();
  const int n = o.nranks;
  tideUniqueId id;
  tideResult_t rc = tideGetUniqueId(&id);
  if (rc != tideSuccess) {
    res.error = std::string("tideGetUniqueId: ") + tideGetErrorString(rc) + ": " +
                tideGetLastError(nullptr);
    return res;
  }
  auto st = std::make_shared<ThreadRunState>();
  st->ctx.resize(n);
  st->codes.assign(n, -1);
  st->fn_done.assign(n, false);
  st->aborted.assign(n, false);
  st->finished_rank.assign(n, false);
  st->comms.assign(n, nullptr);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    st->ctx[r].rank = r;
    st->ctx[r].nranks = n;
    threads.emplace_back([st, r, n, id, fn]() {
      ThreadRank& ctx = st->ctx[r];
      tideComm_t comm = nullptr;
      int code = 0;
      tideResult_t irc = tideCommInitRank(&comm, n, id, r);
      if (irc != tideSuccess) {
        ctx.Logf("rank %d: tideCommInitRank failed: %s: %s\n", r, tideGetErrorString(irc),
                 tideGetLastError(nullptr));
        code = 100 + static_cast<int>(irc);
      } else {
        {
          std::lock_guard<std::mutex> lk(st->mu);
          st->comms[r] = comm;
        }
        ctx.comm = comm;
        code = fn(ctx);
        bool aborted;
        {
          std::lock_guard<std::mutex> lk(st->mu);
          st->fn_done[r] = true;
          aborted = st->aborted[r];
        }
        if (!aborted) {
          tideResult_t drc = code == 0 ? tideCommDestroy(comm) : tideCommAbort(comm);
          if (drc != tideSuccess && code == 0) {
            ctx.Logf("rank %d: tideCommDestroy failed: %s\n", r, tideGetErrorString(drc));
            code = 100 + static_cast<int>(drc);
          }
        }
      }
      std::lock_guard<std::mutex> lk(st->mu);
      st->codes[r] = code;
      st->finished_rank[r] = true;
      st->finished++;
      st->cv.notify_all();
    });
  }
  auto wait_all = [&](int ms) {
    std::unique_lock<std::mutex> lk(st->mu);
    return st->cv.wait_for(lk, std::chrono::milliseconds(ms), [&] { return st->finished == n; });
  };
  bool ok = wait_all(o.timeout_ms);
  if (!ok && !o.exit_on_timeout) {
    res.timed_out = true;
    std::lock_guard<std::mutex> lk(st->mu);
    for (int r = 0; r < n; ++r) {
      if (st->comms[r] && !st->fn_done[r] && !st->aborted[r]) {
        st->aborted[r] = true;
        tideCommAbort(st->comms[r]);
      }
    }
  }
  if (!ok && !o.exit_on_timeout) ok = wait_all(o.timeout_ms);
  if (!ok) {
    std::string report;
    {
      std::lock_guard<std::mutex> lk(st->mu);
      report = DescribeThreads(*st);
    }
    ADD_FAILURE() << "thread-mode run of " << n << " ranks timed out after " << o.timeout_ms
                  << " ms; ending the test process\n"
                  << report;
    fprintf(stderr, "rank_harness: thread-mode run timed out\n%s", report.c_str());
    fflush(stdout);
    fflush(stderr);
    _exit(1);
  }
  for (auto& t : threads) t.join();
  res.ranks.resize(n);
  for (int r = 0; r < n; ++r) {
    RankResult& rr = res.ranks[r];
    rr.rank = r;
    rr.exited = true;
    rr.exit_code = st->codes[r];
    rr.output = st->ctx[r].log;
  }
  res.elapsed_s = MsSince(t0) / 1000.0;
  return res;
}

int RunEnvRank(const RankFn& fn) {
  ThreadRank ctx;
  tideResult_t rc = tideCommInitFromEnv(&ctx.comm);
  if (rc != tideSuccess) {
    printf("tideCommInitFromEnv failed: %s: %s\n", tideGetErrorString(rc),
           tideGetLastError(nullptr));
    return 100 + static_cast<int>(rc);
  }
  if (tideCommUserRank(ctx.comm, &ctx.rank) != tideSuccess ||
      tideCommCount(ctx.comm, &ctx.nranks) != tideSuccess) {
    printf("tideCommUserRank/tideCommCount failed\n");
    return 100 + static_cast<int>(tideInternalError);
  }
  int code = fn(ctx);
  fputs(ctx.log.c_str(), stdout);
  fflush(stdout);
  if (code != 0) {
    tideCommAbort(ctx.comm);
    return code;
  }
  rc = tideCommDestroy(ctx.comm);
  if (rc != tideSuccess) {
    printf("tideCommDestroy failed: %s\n", tideGetErrorString(rc));
    return 100 + static_cast<int>(rc);
  }
  return 0;
}

}  // namespace tide_test
