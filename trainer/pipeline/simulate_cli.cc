#include "pipeline/simulate_cli.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

#include "pipeline/simulate.h"

namespace tide_train::pipeline {
namespace {

Costs load_costs(const std::string& path) {
  Costs c;
  if (path.empty()) return c;
  std::ifstream f(path);
  if (!f) throw std::runtime_error("--profile " + path + ": cannot be read");
  try {
    const nlohmann::json j = nlohmann::json::parse(f);
    c.forward = j.value("forward", c.forward);
    c.backward = j.value("backward", c.backward);
    c.backward_input = j.value("backward_input", c.backward_input);
    c.backward_weight = j.value("backward_weight", c.backward_weight);
    if (j.contains("stage_scale")) c.stage_scale = j.at("stage_scale").get<std::vector<double>>();
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error("--profile " + path + ": " + e.what());
  }
  for (double x : {c.forward, c.backward, c.backward_input, c.backward_weight}) {
    if (!(x >= 0)) throw std::runtime_error("--profile " + path + ": a negative cost");
  }
  return c;
}

void draw(const std::string& png, const std::string& json) {
  const std::string data = png + ".json", py = png + ".py";
  std::ofstream(data) << json;
  std::ofstream(py)
      << "import json,sys\n"
         "try:\n import matplotlib\n matplotlib.use('Agg')\n import matplotlib.pyplot as plt\n"
         "except ImportError:\n print('tide-train: --timeline needs python3-matplotlib'); "
         "sys.exit(0)\n"
         "d=json.load(open(sys.argv[1]))\n"
         "col={'F':'#4c72b0','B':'#dd8452','BI':'#dd8452','W':'#55a868'}\n"
         "fig,ax=plt.subplots(figsize=(max(6,len(d['ranks'][0])*0.12+2),0.5*d['p']+1.2))\n"
         "for r,spans in enumerate(d['ranks']):\n"
         " for s in spans:\n"
         "  ax.barh(r,s['end']-s['start'],left=s['start'],color=col[s['op']],edgecolor='k',"
         "linewidth=.3)\n"
         "  ax.text((s['start']+s['end'])/2,r,str(s['mb']),ha='center',va='center',fontsize=6)\n"
         "ax.invert_yaxis(); ax.set_yticks(range(d['p']));"
         " ax.set_yticklabels(['rank %d'%i for i in range(d['p'])])\n"
         "ax.set_xlabel('time (cost units)')\n"
         "ax.set_title('%s: p=%d m=%d v=%d, bubble %.3f'%(d['schedule'],d['p'],d['m'],d['v'],"
         "d['bubble']))\n"
         "fig.tight_layout(); fig.savefig(sys.argv[2],dpi=110)\n";
  const std::string cmd = "/usr/bin/python3 '" + py + "' '" + data + "' '" + png + "'";
  if (std::system(cmd.c_str()) != 0) std::fprintf(stderr, "tide-train: --timeline failed\n");
  std::remove(py.c_str());
  std::remove(data.c_str());
}

}  // namespace

int run_simulation(const Options& o) {
  ScheduleKind kind;
  if (!parse_schedule(o.schedule, &kind)) {
    std::fprintf(stderr, "tide-train: error: --schedule %s: not gpipe, 1f1b, interleaved or zb\n",
                 o.schedule.c_str());
    return 2;
  }
  Costs costs;
  Schedule s;
  try {
    costs = load_costs(o.profile);
    s = make_schedule(kind, o.pp, o.micro_batches, o.virtual_stages, costs);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tide-train: error: %s\n", e.what());
    return 2;
  }
  const SimResult r = simulate(s, costs);
  std::printf("schedule: %s  pp %d x virtual stages %d = %d stages  micro-batches %d\n",
              schedule_name(kind), s.p, s.v, s.stages(), s.m);
  if (!r.ok) {
    std::printf("deadlock-free: NO: %s\n", r.problem.c_str());
    return 1;
  }
  std::printf("deadlock-free: yes (every transfer waits for its partner; all matched in order)\n");
  std::printf("wall: %.3f cost units\n", r.wall);
  for (int q = 0; q < s.p; ++q) {
    std::printf("rank %d: busy %.3f, idle %.3f (%.1f%%), activations held at most %d\n", q,
                r.busy[q], r.wall - r.busy[q], 100.0 * (r.wall - r.busy[q]) / r.wall,
                r.peak_activations[q]);
  }
  if (costs.stage_scale.empty() && costs.forward == 1 && costs.backward == 2 &&
      (kind != ScheduleKind::kInterleaved || s.m % s.p == 0) && kind != ScheduleKind::kZeroBubble &&
      s.m >= s.p) {
    std::printf(
        "formula: %.6f (%s)\n", formula_bubble(kind, s.p, s.m, s.v),
        kind == ScheduleKind::kInterleaved && s.v > 1 ? "(p-1)/(v m+p-1)" : "(p-1)/(m+p-1)");
  }
  if (!o.timeline.empty()) draw(o.timeline, timeline_json(s, r));
  std::printf("bubble: %.6f\n", r.bubble);
  return 0;
}

}  // namespace tide_train::pipeline
