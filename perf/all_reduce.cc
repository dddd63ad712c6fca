// all_reduce_perf: tideAllReduce of `count` elements; in place when send == recv.
// --compress: tideAllReduceCompressed (common/compress.h).
#include "common/harness.h"

namespace {

using tide_perf::Bench;
using tide_perf::Pattern;

size_t Sizes(size_t bytes, size_t elem, int, Bench* b) {
  b->count = b->send_count = b->recv_count = bytes / elem;
  return b->count * elem;
}

double BusFactor(int n) { return 2.0 * (n - 1) / n; }

tideResult_t Issue(const Bench& b) {
  return b.be->AllReduce(b.send, b.recv, b.count, b.dt->id, static_cast<tideRedOp_t>(b.op));
}

void Prepare(const Bench& b, const Pattern& p) {
  tide_perf::GarbageRecv(b);
  tide_perf::FillTiled(b.send, b.count, 0, p.Input(b.rank, b.count));
}

uint64_t Check(const Bench& b, const Pattern& p) {
  return tide_perf::CountWrong(b.recv, b.count, 0, p.Reduced(b.count));
}

}  // namespace

int main(int argc, char** argv) {
  static const tide_perf::Collective kColl = {
      "AllReduce", true,    false, true, Sizes, BusFactor, tide_perf::SamePointerInPlace,
      Issue,       Prepare, Check};
  return tide_perf::PerfMain(argc, argv, kColl, tide_perf::CompressKind::kAllReduce);
}
