// The planner's command line and --layout auto (plan/plan_cli.h).
#include "plan/plan_cli.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <vector>

#include "io/error.h"
#include "plan/planner.h"
#include "train/comm.h"

namespace tide_train::plan {
namespace {

ModelConfig model_of(const Options& o) {
  ModelConfig m;
  m.n_layer = o.layers;
  m.n_head = o.heads;
  m.n_embd = o.embd;
  m.block_size = o.ctx;
  m.vocab_size = o.vocab;
  return m;
}

int this_node_cores() {
  const long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? static_cast<int>(n) : 1;
}

// The ranking, with the profile read from (or measured and written to)
// o.profile when given.
std::vector<Candidate> ranking(const Options& o, const Machine& mc, std::string* note) {
  Job job;
  job.model = model_of(o);
  job.batch = o.batch;
  job.bucket_mb = o.bucket_mb;
  validate(job.model, 1);
  Profile prof(job.model, o.optimizer);
  const bool have = !o.profile.empty() && std::filesystem::exists(o.profile);
  if (have) prof.load(o.profile);
  std::vector<Candidate> c = plan_layouts(job, mc, &prof);
  *note = std::to_string(prof.measured()) + " (tp, micro-batch) points measured";
  if (have) *note += ", the rest read from " + o.profile;
  if (!o.profile.empty() && prof.measured() > 0) {
    prof.save(o.profile);
    *note += "; profile written to " + o.profile;
  }
  return c;
}

std::string machine_line(const Machine& mc) {
  return std::to_string(mc.world) + " ranks on " + std::to_string(mc.nodes) + " node" +
         (mc.nodes > 1 ? "s" : "") + " (" + std::to_string(mc.world / mc.nodes) + " per node, " +
         std::to_string(mc.cores_per_node) + " cores per node; topology " +
         (mc.topo_file.empty() ? std::string("this node") : mc.topo_file) + ")";
}

}  // namespace

int run_plan(const Options& o) {
  Machine mc;
  mc.world = o.world;
  mc.nodes = o.nodes;
  mc.topo_file = o.topo_file;
  mc.cores_per_node = o.cores > 0 ? o.cores : this_node_cores();
  if (mc.world < 1) throw Error("--plan needs --world N (the ranks to plan for)");
  std::string note;
  const std::vector<Candidate> c = ranking(o, mc, &note);
  std::printf("plan: %s; model L%d H%d C%d ctx %d vocab %d, batch %d\n", machine_line(mc).c_str(),
              o.layers, o.heads, o.embd, o.ctx, o.vocab, o.batch);
  std::printf("plan: profile: %s\n", note.c_str());
  std::printf("%4s  %-22s %4s  %-15s %9s %9s %8s %8s %8s %7s %6s %9s  %s\n", "#", "layout", "M",
              "schedule", "step_ms", "pipe_ms", "dp_ms", "tp_ms", "opt_ms", "bubble", "cores",
              "mem_MiB", "stage_layers");
  for (size_t i = 0; i < c.size(); ++i) {
    const Candidate& x = c[i];
    std::string sch = x.pp == 1 ? "-" : pipeline::schedule_name(x.schedule);
    if (x.virtual_stages > 1) sch += " V" + std::to_string(x.virtual_stages);
    std::string stages;
    for (size_t k = 0; k < x.stage_layers.size(); ++k)
      stages += (k ? "," : "") + std::to_string(x.stage_layers[k]);
    std::printf("%4zu  %-22s %4d  %-15s %9.3f %9.3f %8.3f %8.3f %8.3f %7.3f %6.2f %9.2f  %s\n",
                i + 1, x.layout().c_str(), x.micro_batches, sch.c_str(), x.step * 1e3,
                x.pipeline * 1e3, x.dp_exposed * 1e3, x.tp_comm * 1e3, x.optimizer * 1e3, x.bubble,
                x.core_share, x.mem_bytes / 1048576.0, stages.c_str());
  }
  std::printf("choice: %s\n", c.front().flags().c_str());
  return 0;
}

void apply_layout(const std::string& flags, Options* o) {
  std::istringstream in(flags);
  std::string k, v;
  Options n = *o;
  n.schedule = "1f1b";
  n.virtual_stages = 1;
  n.stage_layers.clear();
  while (in >> k) {
    if (!(in >> v)) throw Error("layout '" + flags + "': " + k + " has no value");
    try {
      if (k == "--dp")
        n.dp = std::stoi(v);
      else if (k == "--tp")
        n.tp = std::stoi(v);
      else if (k == "--pp")
        n.pp = std::stoi(v);
      else if (k == "--micro-batches")
        n.micro_batches = std::stoi(v);
      else if (k == "--virtual-stages")
        n.virtual_stages = std::stoi(v);
      else if (k == "--schedule")
        n.schedule = v;
      else if (k == "--stage-layers")
        n.stage_layers = v;
      else
        throw Error("layout '" + flags + "': unknown flag " + k);
    } catch (const std::logic_error&) {
      throw Error("layout '" + flags + "': " + k + " " + v + " is not a number");
    }
  }
  *o = n;
}

void choose_layout(Options* o, tideComm_t world, int world_size, int world_rank) {
  constexpr size_t kLen = 1024;
  std::vector<char> msg(kLen, '\0');
  if (world_rank == 0) {
    std::string out;
    try {
      Machine mc;
      mc.world = world_size;
      mc.nodes = 1;
      for (const char* v : {"TIDE_LOCAL_WORLD_SIZE", "LOCAL_WORLD_SIZE"}) {
        const char* s = std::getenv(v);
        const int local = s != nullptr ? std::atoi(s) : 0;
        if (local > 0 && world_size % local == 0) {
          mc.nodes = world_size / local;
          break;
        }
      }
      mc.topo_file = o->topo_file;
      mc.cores_per_node = o->cores > 0 ? o->cores : this_node_cores();
      std::string note;
      const std::vector<Candidate> c = ranking(*o, mc, &note);
      out = c.front().flags();
      std::printf(
          "layout auto: %s (predicted %.2f ms per step, bubble %.3f, %.1f MiB per rank; "
          "%s; %s)\n",
          out.c_str(), c.front().step * 1e3, c.front().bubble, c.front().mem_bytes / 1048576.0,
          machine_line(mc).c_str(), note.c_str());
      std::fflush(stdout);
    } catch (const std::exception& e) {
      out = std::string("!") + e.what();
    }
    std::strncpy(msg.data(), out.c_str(), kLen - 1);
  }
  if (world != nullptr) {
    // The waiting ranks sleep: rank 0 profiles on the cores they share.
    if (world_rank != 0) tideSetThreadWaitMode(tideWaitSleep);
    broadcast(world, msg.data(), kLen, 0);
    if (world_rank != 0) tideSetThreadWaitMode(tideWaitDefault);
  }
  const std::string s(msg.data());
  if (!s.empty() && s[0] == '!') throw Error("--layout auto: " + s.substr(1));
  apply_layout(s, o);
}

}  // namespace tide_train::plan
