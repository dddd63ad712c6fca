// Supervisor (supervisor.h): one attempt of a job on this node.
//
// Each rank is fork+exec'd into its own process group (so signals reach the
// rank's own children too) with PR_SET_PDEATHSIG=SIGKILL (so a killed tiderun
// leaves nothing behind). tiderun stays single-threaded: one poll loop waits
// on a signalfd (SIGCHLD, SIGINT, SIGTERM, SIGHUP) and, with --prefix-output,
// on the ranks' stdout/stderr pipes. Exited ranks are observed with
// waitid(WNOWAIT) and reaped only at the end of the attempt, so a rank's pid
// (its group id) cannot be reused while tiderun may still signal that group.
#include "supervisor.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "job.h"

extern char** environ;

namespace tiderun {
namespace {

constexpr auto kKillGrace = std::chrono::seconds(1);          // SIGTERM -> SIGKILL
constexpr auto kUnkillableWait = std::chrono::seconds(5);     // after SIGKILL, give up
constexpr auto kDrainGrace = std::chrono::milliseconds(500);  // output after last exit
constexpr size_t kReadChunk = 64 * 1024;

}  // namespace

std::string SignalName(int sig) {
  static const std::pair<int, const char*> kNames[] = {
      {SIGHUP, "HUP"},   {SIGINT, "INT"},       {SIGQUIT, "QUIT"},   {SIGILL, "ILL"},
      {SIGTRAP, "TRAP"}, {SIGABRT, "ABRT"},     {SIGBUS, "BUS"},     {SIGFPE, "FPE"},
      {SIGKILL, "KILL"}, {SIGUSR1, "USR1"},     {SIGSEGV, "SEGV"},   {SIGUSR2, "USR2"},
      {SIGPIPE, "PIPE"}, {SIGALRM, "ALRM"},     {SIGTERM, "TERM"},   {SIGCHLD, "CHLD"},
      {SIGCONT, "CONT"}, {SIGSTOP, "STOP"},     {SIGTSTP, "TSTP"},   {SIGTTIN, "TTIN"},
      {SIGTTOU, "TTOU"}, {SIGURG, "URG"},       {SIGXCPU, "XCPU"},   {SIGXFSZ, "XFSZ"},
      {SIGPROF, "PROF"}, {SIGVTALRM, "VTALRM"}, {SIGWINCH, "WINCH"}, {SIGIO, "IO"},
      {SIGSYS, "SYS"},
  };
  for (const auto& [num, name] : kNames) {
    if (num == sig) return std::string("SIG") + name;
  }
  if (sig >= SIGRTMIN && sig <= SIGRTMAX) return "SIGRTMIN+" + std::to_string(sig - SIGRTMIN);
  return "signal " + std::to_string(sig);
}

Supervisor::~Supervisor() {
  if (sigfd_ >= 0) close(sigfd_);
}

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

int Supervisor::PendingStopSignal() {
  int first = 0;
  signalfd_siginfo si;
  while (read(sigfd_, &si, sizeof(si)) == static_cast<ssize_t>(sizeof(si))) {
    int sig = static_cast<int>(si.ssi_signo);
    if (sig != SIGCHLD && first == 0) first = sig;
  }
  return first;
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
    launch_failed_ = true;
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
    launch_failed_ = true;
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
    failure_.outcome = Outcome::kRankFailed;
    failure_.failed_rank = r.global;
    failure_.signal = by_signal ? info.si_status : 0;
    failure_.status = by_signal ? 0 : info.si_status;
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
    interrupted_ = true;  // also while stopping: no restart after this attempt
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
    if (phase_ == Phase::kRunning && deadline_ && now >= *deadline_) {
      Log("timeout of %g s reached; stopping all ranks", opts_.timeout_s);
      timed_out_ = true;
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
      stuck_ = true;
      return;
    }
    std::optional<Clock::time_point> wake;
    if (phase_ == Phase::kRunning) wake = deadline_;
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
      error_ = true;
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

AttemptResult Supervisor::RunAttempt(const AttemptEnv& env) {
  ranks_.clear();
  ranks_.resize(static_cast<size_t>(opts_.nproc));
  phase_ = Phase::kRunning;
  exit_code_.reset();
  deadline_.reset();
  failure_ = AttemptResult{};
  interrupted_ = timed_out_ = launch_failed_ = error_ = stuck_ = false;

  const int world = opts_.nproc * opts_.nnodes;
  int stdin_fd = -1;
  if (isatty(STDIN_FILENO)) {
    // Ranks run in background process groups; a terminal read would stop them.
    stdin_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  }
  if (opts_.timeout_s > 0) {  // per attempt: a restarted job gets the full time again
    deadline_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                   std::chrono::duration<double>(opts_.timeout_s));
  }
  for (int local = 0; local < opts_.nproc; ++local) {
    Rank& r = ranks_[local];
    r.global = opts_.node_rank * opts_.nproc + local;
    std::vector<std::pair<std::string, std::string>> vars = {
        {"TIDE_RANK", std::to_string(r.global)},
        {"TIDE_WORLD_SIZE", std::to_string(world)},
        {"TIDE_LOCAL_RANK", std::to_string(local)},
        {"TIDE_LOCAL_WORLD_SIZE", std::to_string(opts_.nproc)},
        {"TIDE_NODE_RANK", std::to_string(opts_.node_rank)},
        {"TIDE_NNODES", std::to_string(opts_.nnodes)},
        {"TIDE_MASTER_ADDR", opts_.master_addr},
        {"TIDE_MASTER_PORT", std::to_string(env.port)},
        {"TIDE_JOB_ID", env.job_id},
        {"TIDE_RESTART_COUNT", std::to_string(env.restart_count)},
    };
    if (!env.secret.empty()) vars.emplace_back("TIDE_SECRET", env.secret);
    // torchrun's names, so PyTorch scripts (init_method env://) start as under
    // torchrun. MASTER_PORT is the c10d store's port, not Tide's bootstrap.
    const std::pair<const char*, std::string> torch_vars[] = {
        {"RANK", std::to_string(r.global)},
        {"WORLD_SIZE", std::to_string(world)},
        {"LOCAL_RANK", std::to_string(local)},
        {"LOCAL_WORLD_SIZE", std::to_string(opts_.nproc)},
        {"GROUP_RANK", std::to_string(opts_.node_rank)},
        {"ROLE_RANK", std::to_string(r.global)},
        {"ROLE_WORLD_SIZE", std::to_string(world)},
        {"MASTER_ADDR", opts_.master_addr},
        {"MASTER_PORT", std::to_string(env.torch_port)},
        {"TORCHELASTIC_RESTART_COUNT", std::to_string(env.restart_count)},
    };
    for (const auto& [name, value] : torch_vars) vars.emplace_back(name, value);
    EnvBlock block(vars);
    if (!Launch(local, block.envp(), stdin_fd)) break;
  }
  if (stdin_fd >= 0) close(stdin_fd);
  Loop();
  Finish();
  int removed = RemoveShmLeftovers(env.job_id);
  if (removed > 0) {
    Log("removed %d leftover /dev/shm/tide-%s* file(s)", removed, env.job_id.c_str());
  }

  AttemptResult result = failure_;
  if (launch_failed_) {
    result.outcome = Outcome::kLaunchFailed;
  } else if (interrupted_) {
    result.outcome = Outcome::kInterrupted;
  } else if (timed_out_) {
    result.outcome = Outcome::kTimeout;
  } else if (error_ || stuck_) {
    result.outcome = Outcome::kError;
  }  // else kRankFailed as recorded by CheckExits, or kSuccess
  if (exit_code_) {
    result.exit_code = *exit_code_;
  } else {
    for (const Rank& r : ranks_) {
      if (r.code != 0) {
        result.exit_code = r.code;
        break;
      }
    }
  }
  return result;
}

}  // namespace tiderun
