// Measuring the planner's per-layer costs (plan/profile.h).
#include "plan/profile.h"

#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <vector>

#include "io/error.h"
#include "model/gpt.h"
#include "model/params.h"
#include "optim/optimizer.h"

namespace tide_train::plan {
namespace {

using Clock = std::chrono::steady_clock;

// The tensor-parallel collectives left out: only compute is profiled.
class NoCollectives : public TpCollectives {
 public:
  void allreduce_sum(float*, size_t) override {}
  void allreduce_max(float*, size_t) override {}
  void allreduce_sum(double*, size_t) override {}
};

constexpr int kReps = 5;

// Median seconds of fn() over kReps runs after one warm-up.
double median_time(const std::function<void()>& fn) {
  fn();
  std::vector<double> t;
  for (int i = 0; i < kReps; ++i) {
    const auto a = Clock::now();
    fn();
    t.push_back(std::chrono::duration<double>(Clock::now() - a).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// Forward and backward times of `gpt` (a block alone: input and dout
// random; the whole one-block model: tokens and targets random).
Costs time_passes(GPT* gpt, bool zb, const std::vector<int>& tokens,
                  const std::vector<float>& dout) {
  static const std::function<void(int)> kNone = [](int) {};
  const bool block_only = !gpt->stage().embed;
  const int* in = tokens.data();
  const int* tg = gpt->stage().head ? tokens.data() : nullptr;
  const float* d = block_only ? dout.data() : nullptr;
  Costs c;
  c.f = median_time([&] { gpt->forward(0, in, tg); });
  c.b = median_time([&] {
          gpt->forward(0, in, tg);
          gpt->backward(0, d, 1.0f, Pass::kFull, kNone);
        }) -
        c.f;
  if (zb) {
    c.bi = median_time([&] {
             gpt->forward(0, in, tg);
             gpt->backward(0, d, 1.0f, Pass::kInput, kNone);
           }) -
           c.f;
    c.bw = std::max(0.0, c.b - c.bi);
  }
  c.b = std::max(c.b, 0.0);
  c.bi = std::max(c.bi, 0.0);
  return c;
}

double now_s() {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

void pin(int cpu) {
  cpu_set_t s;
  CPU_ZERO(&s);
  CPU_SET(cpu, &s);
  sched_setaffinity(0, sizeof(s), &s);
}

void burn(double seconds) {
  const double end = now_s() + seconds;
  volatile double x = 1.0;
  while (now_s() < end) x = x * 1.0000001 + 1e-9;
}

// Two CPU-bound processes share CPU 0, as ranks do on an oversubscribed
// node: one ("the rank") computes 2 ms, then blocks on a pipe; a waker on
// CPU 1 sends it a timestamp 0.3 ms later; the rank reports how long the
// message waited until it ran (the other process held the CPU), and
// computes again. Median of kSamples hand-offs.
double measure_wake_latency() {
  if (sysconf(_SC_NPROCESSORS_ONLN) < 2) return 0.0;
  constexpr int kSamples = 40;
  int to_rank[2], back[2];
  if (pipe(to_rank) != 0) return 0.0;
  if (pipe(back) != 0) {
    close(to_rank[0]);
    close(to_rank[1]);
    return 0.0;
  }
  const pid_t burner = fork();
  if (burner == 0) {
    pin(0);
    burn(1e9);  // until killed
    _exit(0);
  }
  const pid_t rank = fork();
  if (rank == 0) {
    pin(0);
    double waited = -1;  // the first report only says "ready"
    for (int i = 0; i <= kSamples; ++i) {
      burn(0.002);
      if (write(back[1], &waited, sizeof(waited)) != static_cast<ssize_t>(sizeof(waited))) _exit(1);
      if (i == kSamples) break;
      double sent = 0;
      if (read(to_rank[0], &sent, sizeof(sent)) != static_cast<ssize_t>(sizeof(sent))) _exit(1);
      waited = now_s() - sent;
    }
    _exit(0);
  }
  std::vector<double> w;
  if (burner > 0 && rank > 0) {
    cpu_set_t old;
    sched_getaffinity(0, sizeof(old), &old);
    pin(1);
    for (int i = 0; i <= kSamples; ++i) {
      double waited = 0;
      if (read(back[0], &waited, sizeof(waited)) != static_cast<ssize_t>(sizeof(waited))) break;
      if (waited >= 0) w.push_back(waited);
      if (i == kSamples) break;
      usleep(300);
      const double t = now_s();
      if (write(to_rank[1], &t, sizeof(t)) != static_cast<ssize_t>(sizeof(t))) break;
    }
    sched_setaffinity(0, sizeof(old), &old);
  }
  for (pid_t p : {burner, rank}) {
    if (p > 0) {
      kill(p, SIGKILL);
      waitpid(p, nullptr, 0);
    }
  }
  for (int fd : {to_rank[0], to_rank[1], back[0], back[1]}) close(fd);
  if (w.empty()) return 0.0;
  std::sort(w.begin(), w.end());
  return w[w.size() / 2];
}

}  // namespace

double Profile::wake_latency() {
  if (wake_ < 0) {
    // The scheduler sometimes lets the woken process preempt at once (it
    // credits sleepers): the largest median of three rounds is the wait a
    // busy rank sees.
    wake_ = 0;
    for (int i = 0; i < 3; ++i) wake_ = std::max(wake_, measure_wake_latency());
    ++measured_;
  }
  return wake_;
}

Profile::Profile(const ModelConfig& model, std::string optimizer)
    : m_(model), optimizer_(std::move(optimizer)) {}

const ProfileEntry& Profile::at(int tp, int micro) {
  auto it = entries_.find({tp, micro});
  if (it != entries_.end()) return it->second;
  ++measured_;
  return entries_[{tp, micro}] = measure(tp, micro);
}

ProfileEntry Profile::measure(int tp, int micro) const {
  ModelConfig one = m_;
  one.n_layer = 1;
  TensorParallel t;
  t.size = tp;
  ParamSet params(one, t);
  params.init(1);
  NoCollectives none;
  const size_t n = static_cast<size_t>(micro) * one.block_size;
  std::mt19937 rng(7);
  std::vector<int> tokens(n);
  for (int& x : tokens) x = static_cast<int>(rng() % static_cast<unsigned>(one.vocab_size));
  std::vector<float> dout(n * static_cast<size_t>(one.n_embd));
  std::normal_distribution<float> g(0.0f, 0.02f);
  for (float& x : dout) x = g(rng);

  ProfileEntry e;
  StageSpec block_spec;
  block_spec.embed = false;
  block_spec.head = false;
  GPT block(&params, micro, &none, false, block_spec);
  std::copy(dout.begin(), dout.end(), block.input(0));
  e.block = time_passes(&block, true, tokens, dout);
  GPT whole(&params, micro, &none, false, StageSpec());
  const Costs all = time_passes(&whole, true, tokens, dout);
  e.ends.f = std::max(0.0, all.f - e.block.f);
  e.ends.b = std::max(0.0, all.b - e.block.b);
  e.ends.bi = std::max(0.0, all.bi - e.block.bi);
  e.ends.bw = std::max(0.0, e.ends.b - e.ends.bi);
  e.act_block = 4.0 * static_cast<double>(block.slot_floats());
  e.act_ends = std::max(0.0, 4.0 * static_cast<double>(whole.slot_floats()) - e.act_block);

  OptimConfig oc;
  oc.kind = optimizer_;
  Optimizer opt(&params, oc, &none);
  const double step = median_time([&] { opt.step(1e-5); });
  e.optim_per_param = step / static_cast<double>(std::max<size_t>(1, params.count_local()));
  return e;
}

void Profile::load(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw Error("--profile " + path + ": cannot be read");
  try {
    const nlohmann::json j = nlohmann::json::parse(f);
    const nlohmann::json& m = j.at("model");
    if (m.at("layers") != m_.n_layer || m.at("heads") != m_.n_head || m.at("embd") != m_.n_embd ||
        m.at("ctx") != m_.block_size || m.at("vocab") != m_.vocab_size)
      throw Error("--profile " + path + ": measured for another model (" + m.dump() + ")");
    auto costs = [](const nlohmann::json& c) {
      return Costs{c.at("f"), c.at("b"), c.at("bi"), c.at("bw")};
    };
    if (j.contains("wake_latency")) wake_ = j.at("wake_latency").get<double>();
    for (const nlohmann::json& x : j.at("entries")) {
      ProfileEntry e;
      e.block = costs(x.at("block"));
      e.ends = costs(x.at("ends"));
      e.optim_per_param = x.at("optim_per_param");
      e.act_block = x.at("act_block");
      e.act_ends = x.at("act_ends");
      entries_[{x.at("tp").get<int>(), x.at("micro").get<int>()}] = e;
    }
  } catch (const nlohmann::json::exception& e) {
    throw Error("--profile " + path + ": " + e.what());
  }
}

void Profile::save(const std::string& path) const {
  nlohmann::json j;
  j["model"] = {{"layers", m_.n_layer},
                {"heads", m_.n_head},
                {"embd", m_.n_embd},
                {"ctx", m_.block_size},
                {"vocab", m_.vocab_size}};
  j["optimizer"] = optimizer_;
  if (wake_ >= 0) j["wake_latency"] = wake_;
  j["entries"] = nlohmann::json::array();
  auto costs = [](const Costs& c) {
    return nlohmann::json{{"f", c.f}, {"b", c.b}, {"bi", c.bi}, {"bw", c.bw}};
  };
  for (const auto& [k, e] : entries_) {
    j["entries"].push_back({{"tp", k.first},
                            {"micro", k.second},
                            {"block", costs(e.block)},
                            {"ends", costs(e.ends)},
                            {"optim_per_param", e.optim_per_param},
                            {"act_block", e.act_block},
                            {"act_ends", e.act_ends}});
  }
  std::ofstream f(path);
  f << j.dump(1) << "\n";
  if (!f) throw Error("--profile " + path + ": cannot be written");
}

}  // namespace tide_train::plan
