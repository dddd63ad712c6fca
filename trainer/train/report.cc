// Per-step output, --metrics, the GEMM peak and --plot (train/trainer.h).
#include <cblas.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <vector>

#include "io/error.h"
#include "train/trainer.h"

namespace tide_train {

namespace {

std::string duration_text(double s) {
  char b[32];
  const long t = std::lround(s);
  if (t >= 3600)
    std::snprintf(b, sizeof b, "%ldh%02ldm", t / 3600, t / 60 % 60);
  else
    std::snprintf(b, sizeof b, "%ldm%02lds", t / 60, t % 60);
  return b;
}

// A JSON number, or null for inf and NaN (JSON has neither: an fp16 step
// whose gradients overflowed has no norm).
std::string json_number(double x) {
  if (!std::isfinite(x)) return "null";
  char b[32];
  std::snprintf(b, sizeof b, "%.17g", x);
  return b;
}

}  // namespace

// The single-thread sgemm rate of this rank: the best of a few square
// 768 × 768 × 768 products (about 0.9 GFLOP each), maximised over the ranks
// so every rank reports against the same peak.
double Trainer::measure_gemm_peak() {
  const int n = 768;
  std::vector<float> a(static_cast<size_t>(n) * n, 0.5f), b(a.size(), 0.25f), c(a.size());
  double best = 1e30;
  for (int rep = 0; rep < 4; ++rep) {
    const auto t = std::chrono::steady_clock::now();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1.0f, a.data(), n, b.data(), n,
                0.0f, c.data(), n);
    best =
        std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count());
  }
  double peak = 2.0 * n * n * n / best;
  allreduce(groups_->world, &peak, 1, tideMax);
  return peak;
}

void Trainer::write_metrics_line(const std::string& json) {
  if (!leader() || o_.metrics.empty()) return;
  std::FILE* f = std::fopen(o_.metrics.c_str(), "a");
  if (f == nullptr) throw Error("--metrics " + o_.metrics + ": cannot open for appending");
  std::fprintf(f, "%s\n", json.c_str());
  std::fflush(f);
  fsync(fileno(f));
  std::fclose(f);
}

void Trainer::report(const StepRecord& r, double val_loss, bool has_val) {
  if (!leader()) return;
  if (has_val) val_curve_.emplace_back(r.step, val_loss);
  train_curve_.emplace_back(r.step, r.loss);
  char json[1024];
  int len = std::snprintf(
      json, sizeof json,
      "{\"step\": %lld, \"loss\": %.17g, \"grad_norm\": %s, \"lr\": %.12g, \"step_ms\": "
      "%.9g, \"tokens_per_s\": %.9g, \"flops_per_s\": %.9g, \"mfu\": %.9g, \"comm_share\": %.9g",
      static_cast<long long>(r.step), r.loss, json_number(r.grad_norm).c_str(), r.lr, r.step_ms,
      r.tokens_per_s, r.flops, r.mfu, r.comm_share);
  if (r.bubble >= 0.0)
    len += std::snprintf(json + len, sizeof json - static_cast<size_t>(len),
                         ", \"bubble\": %.9g, \"peak_micro_batches\": %d", r.bubble, r.peak_slots);
  if (r.loss_scale > 0.0)
    len +=
        std::snprintf(json + len, sizeof json - static_cast<size_t>(len),
                      ", \"loss_scale\": %.9g, \"skipped\": %d", r.loss_scale, r.skipped ? 1 : 0);
  if (has_val)
    len += std::snprintf(json + len, sizeof json - static_cast<size_t>(len),
                         ", \"val_loss\": %.12g", val_loss);
  std::snprintf(json + len, sizeof json - static_cast<size_t>(len), "%s}", memory_json().c_str());
  write_metrics_line(json);
  if (o_.log_every <= 0 || (r.step % o_.log_every != 0 && r.step + 1 != o_.steps && !has_val))
    return;
  std::string eta;
  if (tty_) {
    const double spent =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
    const double left =
        spent / static_cast<double>(r.step + 1) * static_cast<double>(o_.steps - r.step - 1);
    eta = " | eta " + duration_text(left);
  }
  std::printf(
      "step %lld/%lld | loss %.6f | grad_norm %.4f | lr %.3e | %.1f ms | %.0f tok/s | "
      "%.2f GFLOP/s | mfu %.1f%% | comm %.1f%%%s%s%s%s\n",
      static_cast<long long>(r.step), static_cast<long long>(o_.steps), r.loss, r.grad_norm, r.lr,
      r.step_ms, r.tokens_per_s, r.flops / 1e9, 100.0 * r.mfu, 100.0 * r.comm_share,
      r.bubble >= 0.0 ? (" | bubble " + std::to_string(r.bubble)).c_str() : "",
      r.loss_scale > 0.0 ? (" | scale " + std::to_string(static_cast<long long>(r.loss_scale)) +
                            (r.skipped ? " (skipped)" : ""))
                               .c_str()
                         : "",
      has_val ? (" | val_loss " + std::to_string(val_loss)).c_str() : "", eta.c_str());
  std::fflush(stdout);
}

// Loss curves through python3-matplotlib (a note when it is missing).
void Trainer::plot_curves() {
  const std::string csv = o_.plot + ".csv";
  {
    std::ofstream f(csv);
    f << "kind,step,loss\n";
    for (auto& [s, l] : train_curve_) f << "train," << s << ',' << l << '\n';
    for (auto& [s, l] : val_curve_) f << "val," << s << ',' << l << '\n';
  }
  const std::string script =
      "import csv,sys\n"
      "try:\n import matplotlib\n matplotlib.use('Agg')\n import matplotlib.pyplot as plt\n"
      "except ImportError:\n print('tide-train: --plot needs python3-matplotlib'); sys.exit(0)\n"
      "rows=list(csv.DictReader(open(sys.argv[1])))\n"
      "fig,ax=plt.subplots(figsize=(7,4))\n"
      "for k in ('train','val'):\n"
      " xs=[int(r['step']) for r in rows if r['kind']==k]\n"
      " ys=[float(r['loss']) for r in rows if r['kind']==k]\n"
      " if xs: ax.plot(xs,ys,label=k)\n"
      "ax.set_xlabel('step'); ax.set_ylabel('loss (nats per byte)'); ax.legend(); "
      "ax.grid(alpha=.3)\n"
      "fig.tight_layout(); fig.savefig(sys.argv[2], dpi=110)\n";
  const std::string py = o_.plot + ".py";
  std::ofstream(py) << script;
  const std::string cmd = "/usr/bin/python3 '" + py + "' '" + csv + "' '" + o_.plot + "'";
  if (std::system(cmd.c_str()) != 0) std::fprintf(stderr, "tide-train: --plot failed\n");
  std::remove(py.c_str());
}

}  // namespace tide_train
