// alltoall_perf: tideAlltoAll; the size is each rank's total, `count` =
// size / nranks elements go to each peer. In place (as nccl-tests runs it)
// the send and receive buffers are the same.
#include "common/harness.h"

namespace {

using tide_perf::Bench;
using tide_perf::Pattern;

size_t Sizes(size_t bytes, size_t elem, int n, Bench* b) {
  b->count = bytes / elem / static_cast<size_t>(n);
  b->send_count = b->recv_count = b->count * static_cast<size_t>(n);
  return b->send_count * elem;
}

double BusFactor(int n) { return static_cast<double>(n - 1) / n; }

tideResult_t Issue(const Bench& b) { return b.be->AlltoAll(b.send, b.recv, b.count, b.dt->id); }

void Prepare(const Bench& b, const Pattern& p) {
  tide_perf::GarbageRecv(b);
  tide_perf::FillTiled(b.send, b.send_count, 0, p.Input(b.rank, b.send_count));
}

uint64_t Check(const Bench& b, const Pattern& p) {
  // Block r of the result is block `rank` of rank r's input.
  uint64_t wrong = 0;
  for (int r = 0; r < b.nranks; ++r) {
    const char* seg = b.recv_base + static_cast<size_t>(r) * b.count * b.dt->size;
    wrong += tide_perf::CountWrong(seg, b.count, static_cast<size_t>(b.rank) * b.count,
                                   p.Input(r, b.send_count));
  }
  return wrong;
}

}  // namespace

int main(int argc, char** argv) {
  static const tide_perf::Collective kColl = {
      "AlltoAll", false,   false, true, Sizes, BusFactor, tide_perf::SamePointerInPlace,
      Issue,      Prepare, Check};
  return tide_perf::PerfMain(argc, argv, kColl);
}
