// sendrecv_perf: in one group, each rank sends `count` elements to rank + 1 and
// receives as many from rank - 1 (mod nranks). In place, as in nccl-tests,
// one buffer is both sent and received into: the library stages such a
// receive so the send still reads the original data.
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
  const int next = (b.rank + 1) % b.nranks;
  const int prev = (b.rank - 1 + b.nranks) % b.nranks;
  return b.be->SendRecv(b.send, next, b.recv, prev, b.count, b.dt->id);
}

void Prepare(const Bench& b, const Pattern& p) {
  tide_perf::GarbageRecv(b);
  tide_perf::FillTiled(b.send, b.count, 0, p.Input(b.rank, b.count));
}

uint64_t Check(const Bench& b, const Pattern& p) {
  const int prev = (b.rank - 1 + b.nranks) % b.nranks;
  return tide_perf::CountWrong(b.recv, b.count, 0, p.Input(prev, b.count));
}

}  // namespace

int main(int argc, char** argv) {
  static const tide_perf::Collective kColl = {
      "SendRecv", false,   false, true, Sizes, BusFactor, tide_perf::SamePointerInPlace,
      Issue,      Prepare, Check};
  return tide_perf::PerfMain(argc, argv, kColl);
}
