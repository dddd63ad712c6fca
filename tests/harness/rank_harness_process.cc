// Rank harness, process mode (see rank_harness.h): each rank a child process
// (fork + exec of the worker) with the harness's environment, its output
// captured through a pipe; bounded by the timeout and the fault hooks.
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "rank_harness.h"
#include "rank_harness_internal.h"

extern char** environ;

namespace tide_test {
namespace {

using harness::Clock;
using harness::MsSince;

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

}  // namespace tide_test
