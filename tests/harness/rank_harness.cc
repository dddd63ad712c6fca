// Rank harness implementation: see rank_harness.h for the contracts.
#include "rank_harness.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>

#include "gtest/gtest.h"

extern char** environ;

namespace tide_test {
namespace {

using Clock = std::chrono::steady_clock;

int64_t MsSince(Clock::time_point t0) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
}

std::string Tail(const std::string& s, size_t max_chars) {
  if (s.size() <= max_chars) return s;
  return "[... " + std::to_string(s.size() - max_chars) + " bytes cut ...]\n" +
         s.substr(s.size() - max_chars);
}

// Appends to a bounded output buffer, keeping the tail.
void AppendBounded(std::string* out, const char* data, size_t n, size_t max_bytes) {
  out->append(data, n);
  if (out->size() > max_bytes + max_bytes / 4) {
    size_t cut = out->size() - max_bytes;
    out->erase(0, cut);
    out->insert(0, "[... earlier output dropped ...]\n");
  }
}

bool IsHarnessKey(const std::string& key) {
  static const char* kKeys[] = {
      "TIDE_RANK",        "TIDE_WORLD_SIZE",  "TIDE_LOCAL_RANK", "TIDE_LOCAL_WORLD_SIZE",
      "TIDE_MASTER_ADDR", "TIDE_MASTER_PORT", "TIDE_SECRET",     "TIDE_JOB_ID"};
  for (const char* k : kKeys) {
    if (key == k) return true;
  }
  return false;
}

// Builds the environment of one rank: inherited minus the harness keys, then
// the harness keys, then the caller's lists (later entries win).
std::vector<std::string> BuildEnv(const ProcessRunOptions& o, int rank, int port,
                                  const std::string& secret, const std::string& job) {
  std::vector<std::pair<std::string, std::string>> kv;
  for (char** e = environ; e && *e; ++e) {
    const char* eq = strchr(*e, '=');
    if (!eq) continue;
    std::string key(*e, eq - *e);
    if (IsHarnessKey(key)) continue;
    kv.emplace_back(key, eq + 1);
  }
  int local = o.local_world_size > 0 ? o.local_world_size : o.nranks;
  kv.emplace_back("TIDE_RANK", std::to_string(rank));
  kv.emplace_back("TIDE_WORLD_SIZE", std::to_string(o.nranks));
  kv.emplace_back("TIDE_LOCAL_RANK", std::to_string(rank % local));
  kv.emplace_back("TIDE_LOCAL_WORLD_SIZE", std::to_string(local));
  kv.emplace_back("TIDE_MASTER_ADDR", "127.0.0.1");
  kv.emplace_back("TIDE_MASTER_PORT", std::to_string(port));
  kv.emplace_back("TIDE_SECRET", secret);
  kv.emplace_back("TIDE_JOB_ID", job);
  auto set = [&kv](const std::string& k, const std::string& v) {
    for (auto& p : kv) {
      if (p.first == k) {
        p.second = v;
        return;
      }
    }
    kv.emplace_back(k, v);
  };
  for (const auto& p : o.env) set(p.first, p.second);
  if (o.rank_env) {
    for (const auto& p : o.rank_env(rank)) set(p.first, p.second);
  }
  std::vector<std::string> out;
  out.reserve(kv.size());
  for (const auto& p : kv) out.push_back(p.first + "=" + p.second);
  return out;
}

std::vector<char*> CStrings(std::vector<std::string>& v) {
  std::vector<char*> out;
  for (auto& s : v) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

void KillRank(pid_t pid, int sig) {
  kill(-pid, sig);  // its process group (the worker and anything it forked)
  kill(pid, sig);
}

}  // namespace

bool RunResult::AllOk() const {
  if (!error.empty() || timed_out || ranks.empty()) return false;
  for (const auto& r : ranks) {
    if (!r.ok()) return false;
  }
  return true;
}

std::string RunResult::Describe(size_t max_chars) const {
  std::string s;
  char line[256];
  snprintf(line, sizeof(line), "run: %zu ranks, %.2f s%s%s%s\n", ranks.size(), elapsed_s,
           timed_out ? ", TIMED OUT" : "", error.empty() ? "" : ", harness error: ", error.c_str());
  s += line;
  for (const auto& r : ranks) {
    if (r.exited) {
      snprintf(line, sizeof(line), "  rank %d: exit %d\n", r.rank, r.exit_code);
    } else if (r.term_signal) {
      snprintf(line, sizeof(line), "  rank %d: signal %d%s%s%s\n", r.rank, r.term_signal,
               r.hooked ? " (fault hook)" : "", r.timed_out ? " (killed at timeout)" : "",
               r.reaped ? " (killed after another rank failed)" : "");
    } else {
      snprintf(line, sizeof(line), "  rank %d: did not finish%s\n", r.rank,
               r.timed_out ? " (timeout)" : "");
    }
    s += line;
  }
  for (const auto& r : ranks) {
    if (r.ok()) continue;
    s += "----- output of rank " + std::to_string(r.rank) + " -----\n";
    s += Tail(r.output, max_chars);
    if (!s.empty() && s.back() != '\n') s += '\n';
  }
  return s;
}

int PickFreePort() {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  int port = -1;
  socklen_t len = sizeof(a);
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
    port = ntohs(a.sin_port);
  }
  close(fd);
  return port;
}

std::string RandomHex(size_t nbytes) {
  std::vector<unsigned char> buf(nbytes);
  int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  size_t got = 0;
  while (fd >= 0 && got < nbytes) {
    ssize_t n = read(fd, buf.data() + got, nbytes - got);
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  if (fd >= 0) close(fd);
  if (got < nbytes) {  // fall back to a clock-seeded generator
    uint64_t x = static_cast<uint64_t>(Clock::now().time_since_epoch().count()) ^ getpid();
    for (size_t i = got; i < nbytes; ++i) {
      x = x * 6364136223846793005ULL + 1442695040888963407ULL;
      buf[i] = static_cast<unsigned char>(x >> 56);
    }
  }
  static const char kHex[] = "0123456789abcdef";
  std::string s;
  for (unsigned char c : buf) {
    s += kHex[c >> 4];
    s += kHex[c & 15];
  }
  return s;
}

std::string SelfExe() {
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return {};
  return std::string(buf, static_cast<size_t>(n));
}

std::string SelfDir() {
  std::string e = SelfExe();
  size_t slash = e.rfind('/');
  return slash == std::string::npos ? std::string("./") : e.substr(0, slash + 1);
}

namespace {

// The master port is picked free but bound later by rank 0, so another process
// on the machine (a parallel test, an outgoing connection's ephemeral port)
// can take it in between. Rank 0 then fails to start the bootstrap root.
bool LostMasterPort(const RunResult& r) {
  if (r.ranks.empty() || r.timed_out || r.ranks[0].ok()) return false;
  const std::string& out = r.ranks[0].output;
  return out.find("bootstrap root") != std::string::npos &&
         out.find("Address already in use") != std::string::npos;
}

RunResult RunProcessesOnce(const ProcessRunOptions& o);

}  // namespace

RunResult RunProcesses(const ProcessRunOptions& o) {
  // A few attempts, each on a new port, when the master port was lost before
  // any collective ran (kill hooks then re-run with the new job as well).
  constexpr int kAttempts = 3;
  RunResult res;
  for (int i = 0; i < kAttempts; ++i) {
    res = RunProcessesOnce(o);
    if (!LostMasterPort(res)) break;
    fprintf(stderr, "rank_harness: master port taken by another process, retrying on a new one\n");
  }
  return res;
}

namespace {

RunResult RunProcessesOnce(const ProcessRunOptions& o) {
  RunResult res;
  const auto t0 = Clock::now();
  const int n = o.nranks;
  res.ranks.resize(n);
  int port = PickFreePort();
  if (port <= 0) {
    res.error = "no free port";
    return res;
  }
  const std::string secret = RandomHex(16), job = RandomHex(8);

  // Everything the children need is built before fork: between fork and exec
  // the child only calls async-signal-safe functions.
  std::vector<std::string> argv_s;
  argv_s.push_back(o.exe);
  for (const auto& a : o.args) argv_s.push_back(a);
  std::vector<char*> argv = CStrings(argv_s);

  std::vector<pid_t> pids(n, -1);
  std::vector<int> fds(n, -1);
  const pid_t parent = getpid();
  for (int r = 0; r < n; ++r) {
    res.ranks[r].rank = r;
    std::vector<std::string> env_s = BuildEnv(o, r, port, secret, job);
    std::vector<char*> envp = CStrings(env_s);
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0) {
      res.error = std::string("pipe2: ") + strerror(errno);
      break;
    }
    pid_t pid = fork();
    if (pid < 0) {
      res.error = std::string("fork: ") + strerror(errno);
      close(p[0]);
      close(p[1]);
      break;
    }
    if (pid == 0) {
      setpgid(0, 0);
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(127);
      dup2(p[1], 1);
      dup2(p[1], 2);
      execve(argv[0], argv.data(), envp.data());
      static const char kMsg[] = "rank_harness: execve failed\n";
      ssize_t ignored = write(2, kMsg, sizeof(kMsg) - 1);
      (void)ignored;
      _exit(127);
    }
    setpgid(pid, pid);  // also from the parent, so a kill right away hits the group
    close(p[1]);
    fcntl(p[0], F_SETFL, fcntl(p[0], F_GETFL) | O_NONBLOCK);
    pids[r] = pid;
    fds[r] = p[0];
  }

  std::vector<bool> done(n, false), hook_done(o.kills.size(), false);
  for (int r = 0; r < n; ++r) {
    if (pids[r] < 0) done[r] = true;
  }
  if (!res.error.empty()) {  // could not start everyone: stop the ones that run
    for (int r = 0; r < n; ++r) {
      if (pids[r] > 0) KillRank(pids[r], SIGKILL);
    }
  }
  int64_t reap_at_ms = -1;  // when to kill the survivors after a failure
  char buf[65536];
  for (;;) {
    // Read whatever output is available.
    std::vector<pollfd> pfds;
    std::vector<int> who;
    for (int r = 0; r < n; ++r) {
      if (fds[r] >= 0) {
        pfds.push_back({fds[r], POLLIN, 0});
        who.push_back(r);
      }
    }
    if (!pfds.empty()) poll(pfds.data(), pfds.size(), 20);
    for (size_t i = 0; i < pfds.size(); ++i) {
      if (!(pfds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      int r = who[i];
      for (;;) {
        ssize_t k = read(fds[r], buf, sizeof(buf));
        if (k > 0) {
          AppendBounded(&res.ranks[r].output, buf, static_cast<size_t>(k), o.max_output_bytes);
          continue;
        }
        if (k == 0 || (errno != EAGAIN && errno != EINTR)) {
          close(fds[r]);
          fds[r] = -1;
        }
        break;
      }
    }
    // Reap.
    const int64_t now = MsSince(t0);
    for (int r = 0; r < n; ++r) {
      if (done[r]) continue;
      int st = 0;
      if (waitpid(pids[r], &st, WNOHANG) != pids[r]) continue;
      done[r] = true;
      RankResult& rr = res.ranks[r];
      if (WIFEXITED(st)) {
        rr.exited = true;
        rr.exit_code = WEXITSTATUS(st);
      } else if (WIFSIGNALED(st)) {
        rr.term_signal = WTERMSIG(st);
      }
      kill(-pids[r], SIGKILL);  // anything the rank left behind in its group
      bool failed = !(rr.exited && rr.exit_code == 0) && !rr.hooked && !rr.reaped && !rr.timed_out;
      if (failed && o.kill_others_after_failure_ms >= 0 && reap_at_ms < 0) {
        reap_at_ms = now + o.kill_others_after_failure_ms;
      }
    }
    bool all_done = true;
    for (int r = 0; r < n; ++r) all_done = all_done && done[r];
    if (all_done) break;
    // Fault hooks.
    for (size_t h = 0; h < o.kills.size(); ++h) {
      const KillHook& k = o.kills[h];
      if (hook_done[h] || now < k.after_ms || k.rank < 0 || k.rank >= n) continue;
      hook_done[h] = true;
      if (!done[k.rank]) {
        res.ranks[k.rank].hooked = true;
        KillRank(pids[k.rank], k.signal);
      }
    }
    // A failed rank: give the others a moment to report, then stop them.
    if (reap_at_ms >= 0 && now >= reap_at_ms) {
      for (int r = 0; r < n; ++r) {
        if (done[r] || res.ranks[r].reaped) continue;
        res.ranks[r].reaped = true;
        KillRank(pids[r], SIGKILL);
      }
    }
    if (now >= o.timeout_ms && !res.timed_out) {
      res.timed_out = true;
      for (int r = 0; r < n; ++r) {
        if (done[r]) continue;
        res.ranks[r].timed_out = true;
        KillRank(pids[r], SIGKILL);
      }
    }
    if (pfds.empty()) usleep(5000);
  }
  // Drain what the pipes still hold (bounded: writers are gone).
  const auto drain_start = Clock::now();
  for (int r = 0; r < n; ++r) {
    while (fds[r] >= 0 && MsSince(drain_start) < 2000) {
      pollfd pf{fds[r], POLLIN, 0};
      poll(&pf, 1, 50);
      ssize_t k = read(fds[r], buf, sizeof(buf));
      if (k > 0) {
        AppendBounded(&res.ranks[r].output, buf, static_cast<size_t>(k), o.max_output_bytes);
      } else if (k == 0 || (errno != EAGAIN && errno != EINTR)) {
        close(fds[r]);
        fds[r] = -1;
      }
    }
    if (fds[r] >= 0) close(fds[r]);
  }
  res.job_id = job;
  const std::string prefix = "tide-" + job;
  if (DIR* d = opendir("/dev/shm")) {
    while (dirent* de = readdir(d)) {
      if (strncmp(de->d_name, prefix.c_str(), prefix.size()) != 0) continue;
      res.leftover_shm.push_back(de->d_name);
      unlinkat(dirfd(d), de->d_name, 0);
    }
    closedir(d);
  }
  res.elapsed_s = MsSince(t0) / 1000.0;
  return res;
}

}  // namespace

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
