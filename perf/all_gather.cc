// all_gather_perf: tideAllGather; the size is the total received, each rank
// sends size / nranks. In place: sendbuff = recvbuff + rank * sendcount.
// --compress: tideAllGatherCompressed (common/compress.h).
#include "common/harness.h"

namespace {

using tide_perf::Bench;
using tide_perf::Pattern;

size_t Sizes(size_t bytes, size_t elem, int n, Bench* b) {
  b->count = b->send_count = bytes / elem / static_cast<size_t>(n);
  b->recv_count = b->count * static_cast<size_t>(n);
  return b->recv_count * elem;
}

double BusFactor(int n) { return static_cast<double>(n - 1) / n; }

void SetPointers(Bench* b) {
  b->recv = b->recv_base;
  b->send = b->in_place ? b->recv_base + static_cast<size_t>(b->rank) * b->count * b->dt->size
                        : b->send_base;
}

tideResult_t Issue(const Bench& b) { return b.be->AllGather(b.send, b.recv, b.count, b.dt->id); }

void Prepare(const Bench& b, const Pattern& p) {
  tide_perf::GarbageRecv(b);
  tide_perf::FillTiled(b.send, b.count, 0, p.Input(b.rank, b.count));
}

uint64_t Check(const Bench& b, const Pattern& p) {
  uint64_t wrong = 0;
  for (int r = 0; r < b.nranks; ++r) {
    const char* seg = b.recv_base + static_cast<size_t>(r) * b.count * b.dt->size;
    wrong += tide_perf::CountWrong(seg, b.count, 0, p.Input(r, b.count));
  }
  return wrong;
}

}  // namespace

int main(int argc, char** argv) {
  static const tide_perf::Collective kColl = {"AllGather", false,       false, true,    Sizes,
                                              BusFactor,   SetPointers, Issue, Prepare, Check};
  return tide_perf::PerfMain(argc, argv, kColl, tide_perf::CompressKind::kAllGather);
}
