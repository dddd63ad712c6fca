// reduce_perf: tideReduce of `count` elements to -r root; in place when
// send == recv. Only the root's result is checked.
#include "common/harness.h"

namespace {

using tide_perf::Bench;
using tide_perf::Pattern;

size_t Sizes(size_t bytes, size_t elem, int, Bench* b) {
  b->count = b->send_count = b->recv_count = bytes / elem;
  return b->count * elem;
}

double BusFactor(int) { return 1.0; }

tideResult_t Issue(const Bench& b) {
  return b.be->Reduce(b.send, b.recv, b.count, b.dt->id, static_cast<tideRedOp_t>(b.op), b.root);
}

void Prepare(const Bench& b, const Pattern& p) {
  tide_perf::GarbageRecv(b);
  tide_perf::FillTiled(b.send, b.count, 0, p.Input(b.rank, b.count));
}

uint64_t Check(const Bench& b, const Pattern& p) {
  if (b.rank != b.root) return 0;
  return tide_perf::CountWrong(b.recv, b.count, 0, p.Reduced(b.count));
}

}  // namespace

int main(int argc, char** argv) {
  static const tide_perf::Collective kColl = {
      "Reduce", true,    true, true, Sizes, BusFactor, tide_perf::SamePointerInPlace,
      Issue,    Prepare, Check};
  return tide_perf::PerfMain(argc, argv, kColl);
}
