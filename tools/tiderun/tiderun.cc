// tiderun: starts the local ranks of a Tide job and supervises them.
//
// Each rank is fork+exec'd into its own process group (so signals reach the
// rank's own children too) with PR_SET_PDEATHSIG=SIGKILL (so a killed tiderun
// leaves nothing behind). tiderun stays single-threaded: one poll loop waits
// on a signalfd (SIGCHLD, SIGINT, SIGTERM, SIGHUP) and, with --prefix-output,
// on the ranks' stdout/stderr pipes. Exited ranks are observed with
// waitid(WNOWAIT) and reaped only at the very end, so a rank's pid (its group
// id) cannot be reused while tiderun may still signal that group.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "job.h"
#include "options.h"
#include "output.h"

#ifndef TIDERUN_VERSION
#define TIDERUN_VERSION "unknown"
#endif

extern char** environ;

namespace tiderun {
namespace {

using Clock = std::chrono::steady_clock;

constexpr auto kKillGrace = std::chrono::seconds(1);          // SIGTERM -> SIGKILL
constexpr auto kUnkillableWait = std::chrono::seconds(5);     // after SIGKILL, give up
constexpr auto kDrainGrace = std::chrono::milliseconds(500);  // output after last exit
constexpr size_t kReadChunk = 64 * 1024;

void Log(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void Log(const char* fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  std::string line = std::string("tiderun: ") + buf + "\n";
  WriteAll(STDERR_FILENO, line.data(), line.size());
}

// One relayed output stream of a rank (--prefix-output only).
struct Stream {
  int fd = -1;
  std::unique_ptr<LinePrefixer> relay;
};

struct Rank {
  int global = 0;
  pid_t pid = -1;       // -1: never started
  bool exited = false;  // exit observed (a zombie until Finish reaps it)
  int code = 0;         // exit code, or 128 + signal
  Stream out, err;
};

enum class Phase { kRunning, kStopping, kKilled };

class Supervisor {
 public:
  Supervisor(const Options& opts, std::string job_id) : opts_(opts), job_id_(std::move(job_id)) {}

  // Starts the ranks, supervises them and cleans up. Returns tiderun's exit
  // code. Blocking.
  int Run(const std::string& secret, int port);

 private:
  bool SetupSignals();
  // Starts rank `local`; false (exit code set) when fork or exec failed.
  bool Launch(int local, char** envp, int stdin_fd);
  void Loop();
  void HandleSignals();
  void CheckExits();
  void Pump(Stream* s);
  // Sends `sig` to every rank and its group and starts the SIGKILL clock.
  // `code` becomes the exit code unless one is already set.
  void BeginStop(int sig, int code);
  void SignalAll(int sig);
  void Finish();

  const Options& opts_;
  const std::string job_id_;
  std::vector<Rank> ranks_;
  sigset_t orig_mask_{};
  int sigfd_ = -1;
  Phase phase_ = Phase::kRunning;
  std::optional<int> exit_code_;
  Clock::time_point kill_at_{};
  Clock::time_point killed_at_{};
  std::optional<Clock::time_point> job_deadline_;
};

bool Supervisor::SetupSignals() {
  // Undo dispositions inherited as "ignore" (a shell's background job has
  // SIGINT ignored): an explicit kill -INT must still stop the job. An
  // inherited SIGHUP ignore (nohup) is kept.
  signal(SIGINT, SIG_DFL);
  signal(SIGTERM, SIG_DFL);
  signal(SIGPIPE, SIG_IGN);  // a closed stdout must not kill tiderun mid-cleanup
  sigset_t set;
  sigemptyset(&set);
  for (int s : {SIGCHLD, SIGINT, SIGTERM, SIGHUP}) sigaddset(&set, s);
  if (sigprocmask(SIG_BLOCK, &set, &orig_mask_) != 0) return false;
  sigfd_ = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
  return sigfd_ >= 0;
}

bool Supervisor::Launch(int local, char** envp, int stdin_fd) {
  Rank& r = ranks_[local];
  int out_pipe[2] = {-1, -1};
  int err_pipe[2] = {-1, -1};
  int report[2] = {-1, -1};  // exec failure: the child writes errno here
  bool ok = pipe2(report, O_CLOEXEC) == 0;
  if (ok && opts_.prefix_output) {
    ok = pipe2(out_pipe, O_CLOEXEC) == 0 && pipe2(err_pipe, O_CLOEXEC) == 0;
  }
  std::vector<char*> argv;
  for (const std::string& a : opts_.command) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const pid_t parent = getpid();
  pid_t pid = ok ? fork() : -1;
  if (pid == 0) {
    // Child: only async-signal-safe calls until exec.
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    if (out_pipe[1] >= 0) dup2(out_pipe[1], STDOUT_FILENO);
    if (err_pipe[1] >= 0) dup2(err_pipe[1], STDERR_FILENO);
    if (stdin_fd >= 0) dup2(stdin_fd, STDIN_FILENO);
    signal(SIGPIPE, SIG_DFL);
    sigprocmask(SIG_SETMASK, &orig_mask_, nullptr);
    environ = envp;
    execvp(argv[0], argv.data());
    int e = errno;
    ssize_t ignored = write(report[1], &e, sizeof(e));
    (void)ignored;
    _exit(e == ENOENT ? 127 : 126);
  }
  int fork_errno = errno;
  for (int fd : {out_pipe[1], err_pipe[1], report[1]}) {
    if (fd >= 0) close(fd);
  }
  if (pid < 0) {
    for (int fd : {out_pipe[0], err_pipe[0], report[0]}) {
      if (fd >= 0) close(fd);
    }
    Log("cannot start rank %d: %s", r.global, std::strerror(fork_errno));
    BeginStop(SIGTERM, 1);
    return false;
  }
  setpgid(pid, pid);  // also done by the child; whichever runs first wins
  r.pid = pid;
  if (opts_.prefix_output) {
    std::string prefix = "[" + std::to_string(r.global) + "] ";
    r.out.fd = out_pipe[0];
    r.out.relay = std::make_unique<LinePrefixer>(STDOUT_FILENO, prefix);
    r.err.fd = err_pipe[0];
    r.err.relay = std::make_unique<LinePrefixer>(STDERR_FILENO, prefix);
    fcntl(r.out.fd, F_SETFL, O_NONBLOCK);
    fcntl(r.err.fd, F_SETFL, O_NONBLOCK);
  }
  // Wait for exec: EOF means it succeeded (the pipe closed on exec).
  int child_errno = 0;
  ssize_t n;
  do {
    n = read(report[0], &child_errno, sizeof(child_errno));
  } while (n < 0 && errno == EINTR);
  close(report[0]);
  if (n == static_cast<ssize_t>(sizeof(child_errno))) {
    Log("cannot run '%s': %s", opts_.command[0].c_str(), std::strerror(child_errno));
    BeginStop(SIGTERM, child_errno == ENOENT ? 127 : 126);
    return false;
  }
  return true;
}

void Supervisor::SignalAll(int sig) {
  for (const Rank& r : ranks_) {
    if (r.pid <= 0) continue;
    // The rank's group (its children too) and the rank itself, in case it
    // moved to another group. Exited ranks are zombies: their pid is still
    // reserved, so the group id cannot belong to anyone else.
    kill(-r.pid, sig);
    if (!r.exited) kill(r.pid, sig);
    if (sig != SIGKILL && sig != SIGCONT) {
      kill(-r.pid, SIGCONT);  // a stopped process would not see sig otherwise
      if (!r.exited) kill(r.pid, SIGCONT);
    }
  }
}

void Supervisor::BeginStop(int sig, int code) {
  if (!exit_code_) exit_code_ = code;
  if (phase_ != Phase::kRunning) return;
  phase_ = Phase::kStopping;
  kill_at_ = Clock::now() + kKillGrace;
  SignalAll(sig);
}

void Supervisor::CheckExits() {
  for (Rank& r : ranks_) {
    if (r.pid <= 0 || r.exited) continue;
    siginfo_t info;
    std::memset(&info, 0, sizeof(info));
    if (waitid(P_PID, static_cast<id_t>(r.pid), &info, WEXITED | WNOHANG | WNOWAIT) != 0 ||
        info.si_pid != r.pid) {
      continue;
    }
    r.exited = true;
    bool by_signal = info.si_code == CLD_KILLED || info.si_code == CLD_DUMPED;
    r.code = by_signal ? 128 + info.si_status : info.si_status;
    if (r.code == 0 || phase_ != Phase::kRunning) continue;
    if (by_signal) {
      Log("rank %d (pid %d) was killed by signal %d (%s); stopping all ranks", r.global,
          static_cast<int>(r.pid), info.si_status, strsignal(info.si_status));
    } else {
      Log("rank %d (pid %d) exited with code %d; stopping all ranks", r.global,
          static_cast<int>(r.pid), r.code);
    }
    BeginStop(SIGTERM, r.code);
  }
}

void Supervisor::HandleSignals() {
  signalfd_siginfo si;
  while (read(sigfd_, &si, sizeof(si)) == static_cast<ssize_t>(sizeof(si))) {
    int sig = static_cast<int>(si.ssi_signo);
    if (sig == SIGCHLD) {
      CheckExits();
      continue;
    }
    if (phase_ != Phase::kRunning) {
      // A second request while stopping: do not wait for the grace period.
      if (phase_ == Phase::kStopping) kill_at_ = Clock::now();
      continue;
    }
    Log("got %s; stopping all ranks", sig == SIGINT ? "SIGINT" : strsignal(sig));
    BeginStop(sig == SIGINT ? SIGINT : SIGTERM, 128 + sig);
  }
}

void Supervisor::Pump(Stream* s) {
  char buf[kReadChunk];
  for (int i = 0; i < 16; ++i) {  // bounded, so one chatty rank cannot starve the loop
    ssize_t n = read(s->fd, buf, sizeof(buf));
    if (n > 0) {
      s->relay->Feed(buf, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    s->relay->Finish();  // EOF or error: the stream is done
    close(s->fd);
    s->fd = -1;
    return;
  }
}

void Supervisor::Loop() {
  for (;;) {
    auto now = Clock::now();
    if (phase_ == Phase::kRunning && job_deadline_ && now >= *job_deadline_) {
      Log("timeout of %g s reached; stopping all ranks", opts_.timeout_s);
      BeginStop(SIGTERM, 124);
    }
    if (phase_ == Phase::kStopping && now >= kill_at_) {
      SignalAll(SIGKILL);
      phase_ = Phase::kKilled;
      killed_at_ = now;
    }
    bool all_exited = std::all_of(ranks_.begin(), ranks_.end(),
                                  [](const Rank& r) { return r.pid <= 0 || r.exited; });
    if (all_exited) return;
    if (phase_ == Phase::kKilled && now - killed_at_ >= kUnkillableWait) {
      for (const Rank& r : ranks_) {
        if (r.pid > 0 && !r.exited) {
          Log("rank %d (pid %d) did not exit after SIGKILL", r.global, static_cast<int>(r.pid));
        }
      }
      return;
    }
    std::optional<Clock::time_point> wake;
    if (phase_ == Phase::kRunning) wake = job_deadline_;
    if (phase_ == Phase::kStopping) wake = kill_at_;
    if (phase_ == Phase::kKilled) wake = killed_at_ + kUnkillableWait;
    int timeout_ms = -1;
    if (wake) {
      auto left = std::chrono::duration_cast<std::chrono::microseconds>(*wake - now).count();
      timeout_ms = static_cast<int>(std::clamp<long long>((left + 999) / 1000, 0, 1 << 30));
    }
    std::vector<pollfd> fds{{sigfd_, POLLIN, 0}};
    std::vector<Stream*> streams;
    for (Rank& r : ranks_) {
      for (Stream* s : {&r.out, &r.err}) {
        if (s->fd < 0) continue;
        fds.push_back({s->fd, POLLIN, 0});
        streams.push_back(s);
      }
    }
    int rc = poll(fds.data(), fds.size(), timeout_ms);
    if (rc < 0 && errno != EINTR) {
      Log("poll failed: %s", std::strerror(errno));
      BeginStop(SIGTERM, 1);
      continue;
    }
    if (rc <= 0) continue;
    if (fds[0].revents != 0) HandleSignals();
    for (size_t i = 0; i < streams.size(); ++i) {
      if (fds[i + 1].revents != 0) Pump(streams[i]);
    }
  }
}

void Supervisor::Finish() {
  // Whatever is left in the ranks' groups (children of ranks) goes too.
  SignalAll(SIGKILL);
  for (Rank& r : ranks_) {
    if (r.pid <= 0) continue;
    int status;
    pid_t got;
    do {
      got = waitpid(r.pid, &status, r.exited ? 0 : WNOHANG);
    } while (got < 0 && errno == EINTR);
  }
  // Relay the remaining output; stop waiting for it after a short grace (a
  // process outside the ranks' groups may hold a pipe open).
  auto deadline = Clock::now() + kDrainGrace;
  for (;;) {
    std::vector<pollfd> fds;
    std::vector<Stream*> streams;
    for (Rank& r : ranks_) {
      for (Stream* s : {&r.out, &r.err}) {
        if (s->fd < 0) continue;
        fds.push_back({s->fd, POLLIN, 0});
        streams.push_back(s);
      }
    }
    if (fds.empty()) break;
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) break;
    int rc = poll(fds.data(), fds.size(), static_cast<int>(left.count()));
    if (rc < 0 && errno != EINTR) break;
    for (size_t i = 0; rc > 0 && i < streams.size(); ++i) {
      if (fds[i].revents != 0) Pump(streams[i]);
    }
  }
  for (Rank& r : ranks_) {
    for (Stream* s : {&r.out, &r.err}) {
      if (s->fd < 0) continue;
      s->relay->Finish();
      close(s->fd);
      s->fd = -1;
    }
  }
}

int Supervisor::Run(const std::string& secret, int port) {
  if (!SetupSignals()) {
    Log("cannot set up signal handling: %s", std::strerror(errno));
    return 1;
  }
  const int world = opts_.nproc * opts_.nnodes;
  int stdin_fd = -1;
  if (isatty(STDIN_FILENO)) {
    // Ranks run in background process groups; a terminal read would stop them.
    stdin_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  }
  ranks_.resize(static_cast<size_t>(opts_.nproc));
  if (opts_.timeout_s > 0) {
    job_deadline_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                       std::chrono::duration<double>(opts_.timeout_s));
  }
  for (int local = 0; local < opts_.nproc; ++local) {
    Rank& r = ranks_[local];
    r.global = opts_.node_rank * opts_.nproc + local;
    std::vector<std::pair<std::string, std::string>> env = {
        {"TIDE_RANK", std::to_string(r.global)},
        {"TIDE_WORLD_SIZE", std::to_string(world)},
        {"TIDE_LOCAL_RANK", std::to_string(local)},
        {"TIDE_LOCAL_WORLD_SIZE", std::to_string(opts_.nproc)},
        {"TIDE_NODE_RANK", std::to_string(opts_.node_rank)},
        {"TIDE_NNODES", std::to_string(opts_.nnodes)},
        {"TIDE_MASTER_ADDR", opts_.master_addr},
        {"TIDE_MASTER_PORT", std::to_string(port)},
        {"TIDE_JOB_ID", job_id_},
    };
    if (!secret.empty()) env.emplace_back("TIDE_SECRET", secret);
    EnvBlock block(env);
    if (!Launch(local, block.envp(), stdin_fd)) break;
  }
  if (stdin_fd >= 0) close(stdin_fd);
  Loop();
  Finish();
  int removed = RemoveShmLeftovers(job_id_);
  if (removed > 0) Log("removed %d leftover /dev/shm/tide-%s* file(s)", removed, job_id_.c_str());
  if (exit_code_) return *exit_code_;
  for (const Rank& r : ranks_) {
    if (r.code != 0) return r.code;
  }
  return 0;
}

// Makes sure descriptors 0-2 exist, so pipes never land on them.
void EnsureStdFds() {
  for (int fd = 0; fd <= 2; ++fd) {
    if (fcntl(fd, F_GETFD) < 0 && errno == EBADF) {
      int n = open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY);
      if (n >= 0 && n != fd) close(n);
    }
  }
}

}  // namespace
}  // namespace tiderun

int main(int argc, char** argv) {
  using namespace tiderun;  // NOLINT(google-build-using-namespace): main() of the tool
  EnsureStdFds();
  Options opts;
  std::string error;
  switch (ParseOptions(argc, argv, &opts, &error)) {
    case ParseOutcome::kHelp: {
      std::string text = UsageText();
      WriteAll(STDOUT_FILENO, text.data(), text.size());
      return 0;
    }
    case ParseOutcome::kVersion: {
      std::string text = std::string("tiderun (Tide) ") + TIDERUN_VERSION + "\n";
      WriteAll(STDOUT_FILENO, text.data(), text.size());
      return 0;
    }
    case ParseOutcome::kError:
      Log("%s", error.c_str());
      return 2;
    case ParseOutcome::kRun:
      break;
  }
  std::string job_id = RandomHex(8);
  if (job_id.empty()) {
    Log("no randomness available for the job id");
    return 1;
  }
  std::string secret;
  const char* user_secret = getenv("TIDE_SECRET");
  if (opts.nnodes == 1 && (user_secret == nullptr || *user_secret == '\0')) {
    secret = RandomHex(16);
    if (secret.empty()) {
      Log("no randomness available for TIDE_SECRET");
      return 1;
    }
  }
  int port = opts.master_port;
  if (port <= 0 && opts.nnodes > 1) port = 29500;
  if (port <= 0) {
    port = PickFreePort(opts.master_addr, &error);
    if (port <= 0) {
      Log("%s", error.c_str());
      return 1;
    }
  }
  Supervisor sup(opts, job_id);
  return sup.Run(secret, port);
}
