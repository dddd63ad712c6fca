// broadcast_perf: tideBroadcast of `count` elements from -r root; in place when
// send == recv.
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
  return b.be->Broadcast(b.send, b.recv, b.count, b.dt->id, b.root);
}

void Prepare(const Bench& b, const Pattern& p) {
  tide_perf::GarbageRecv(b);
  if (b.rank == b.root) tide_perf::FillTiled(b.send, b.count, 0, p.Input(b.root, b.count));
}

uint64_t Check(const Bench& b, const Pattern& p) {
  return tide_perf::CountWrong(b.recv, b.count, 0, p.Input(b.root, b.count));
}

}  // namespace

int main(int argc, char** argv) {
  static const tide_perf::Collective kColl = {
      "Broadcast", false,   true, true, Sizes, BusFactor, tide_perf::SamePointerInPlace,
      Issue,       Prepare, Check};
  return tide_perf::PerfMain(argc, argv, kColl);
}
