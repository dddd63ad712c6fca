// reduce_scatter_perf: tideReduceScatter; the size is the total sent, each rank
// receives size / nranks. In place: recvbuff = sendbuff + rank * recvcount.
// --compress: tideReduceScatterCompressed (common/compress.h).
#include "common/harness.h"

namespace {

using tide_perf::Bench;
using tide_perf::Pattern;

size_t Sizes(size_t bytes, size_t elem, int n, Bench* b) {
  b->count = b->recv_count = bytes / elem / static_cast<size_t>(n);
  b->send_count = b->count * static_cast<size_t>(n);
  return b->send_count * elem;
}

double BusFactor(int n) { return static_cast<double>(n - 1) / n; }

void SetPointers(Bench* b) {
  if (b->in_place) {
    b->send = b->recv_base;
    b->recv = b->recv_base + static_cast<size_t>(b->rank) * b->count * b->dt->size;
  } else {
    b->send = b->send_base;
    b->recv = b->recv_base;
  }
}

tideResult_t Issue(const Bench& b) {
  return b.be->ReduceScatter(b.send, b.recv, b.count, b.dt->id, static_cast<tideRedOp_t>(b.op));
}

void Prepare(const Bench& b, const Pattern& p) {
  // In place the received block is part of the input, so garbage goes first.
  tide_perf::GarbageRecv(b);
  tide_perf::FillTiled(b.send, b.send_count, 0, p.Input(b.rank, b.send_count));
}

uint64_t Check(const Bench& b, const Pattern& p) {
  return tide_perf::CountWrong(b.recv, b.count, static_cast<size_t>(b.rank) * b.count,
                               p.Reduced(b.send_count));
}

}  // namespace

int main(int argc, char** argv) {
  static const tide_perf::Collective kColl = {"ReduceScatter", true,        false, true,    Sizes,
                                              BusFactor,       SetPointers, Issue, Prepare, Check};
  return tide_perf::PerfMain(argc, argv, kColl, tide_perf::CompressKind::kReduceScatter);
}
