// The driver-free logic of the CUDA stream path (cuda/stream_order.h), run
// with threads standing in for CUDA's callback thread, the communicator's
// proxy and the streams' device-side waits (cuStreamWaitValue32).
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "cuda/stream_order.h"
#include "tide/tide.h"

namespace tide::cuda {
namespace {

using Clock = std::chrono::steady_clock;

// What the stream waits for, as the GPU would (bounded so a bug fails the
// test instead of hanging it).
bool streamWait(uint32_t* word, double seconds = 10.0) {
  const auto end = Clock::now() + std::chrono::duration<double>(seconds);
  while (!wordIsDone(word)) {
    if (Clock::now() > end) return false;
    std::this_thread::yield();
  }
  return true;
}

struct FakeOp {
  uint64_t ticket = 0;
  int id = 0;
  uint32_t word = kWordPending;
  Fanin posts{1};
  bool replay = false;
};

TEST(StreamOrder, ProxyRunsInIssueOrderWhateverThePostOrder) {
  IssueQueue<FakeOp*> q;
  constexpr int kOps = 64;
  std::vector<FakeOp> ops(kOps);
  for (int i = 0; i < kOps; ++i) {
    ops[i].id = i;
    ops[i].ticket = q.reserve();
  }
  // Two "streams" whose callbacks post their half in a shuffled order.
  std::vector<int> order(kOps);
  for (int i = 0; i < kOps; ++i) order[i] = i;
  std::shuffle(order.begin(), order.end(), std::mt19937(7));
  std::vector<int> ran;
  std::thread proxy([&] {
    for (int n = 0; n < kOps; ++n) {
      FakeOp* op = nullptr;
      ASSERT_EQ(q.pop(&op, 10.0, nullptr), IssueQueue<FakeOp*>::Pop::kItem);
      ran.push_back(op->id);
      wordRelease(&op->word);
    }
  });
  auto poster = [&](int half) {
    for (int i : order) {
      if (i % 2 != half) continue;
      wordArm(&ops[i].word);
      ASSERT_TRUE(q.post(ops[i].ticket, &ops[i]));
    }
  };
  std::thread a(poster, 0), b(poster, 1);
  a.join();
  b.join();
  for (auto& op : ops) EXPECT_TRUE(streamWait(&op.word));
  proxy.join();
  ASSERT_EQ(ran.size(), static_cast<size_t>(kOps));
  for (int i = 0; i < kOps; ++i) EXPECT_EQ(ran[i], i);
  EXPECT_EQ(q.pendingTickets(), 0u);
}

// A captured operation replayed like a CUDA graph: the same callback node
// runs before the same wait node every time. The stream must never pass on
// the previous replay's "done".
TEST(StreamOrder, GraphReplaysWaitForTheirOwnRun) {
  IssueQueue<FakeOp*> q;
  FakeOp op;
  op.replay = true;
  std::atomic<int> runs{0};
  std::atomic<bool> stop{false};
  std::thread proxy([&] {
    for (;;) {
      FakeOp* p = nullptr;
      if (q.pop(&p, 0, &stop) != IssueQueue<FakeOp*>::Pop::kItem) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));  // the collective
      runs.fetch_add(1);
      wordRelease(&p->word);
    }
  });
  for (int replay = 1; replay <= 3; ++replay) {
    // Callback node (CUDA's callback thread), then the stream's wait node.
    std::thread cb([&] {
      wordArm(&op.word);
      if (op.posts.arrive()) {
        ASSERT_TRUE(q.postReplay(&op));
      }
    });
    cb.join();
    ASSERT_TRUE(streamWait(&op.word));
    EXPECT_EQ(runs.load(), replay) << "the stream passed before its replay ran";
  }
  stop = true;
  proxy.join();
}

// One job on three streams (a group over several streams): each stream's
// callback arms the word; only the last arrival posts, once per replay.
TEST(StreamOrder, FaninPostsOncePerRunAndRearms) {
  Fanin f(3);
  for (int run = 0; run < 4; ++run) {
    std::atomic<int> lasts{0};
    std::vector<std::thread> ts;
    for (int s = 0; s < 3; ++s) ts.emplace_back([&] { lasts += f.arrive() ? 1 : 0; });
    for (auto& t : ts) t.join();
    EXPECT_EQ(lasts.load(), 1) << "run " << run;
  }
}

// A replay may run ahead of an issued operation whose callback has not come
// (that operation can sit behind the graph on its stream).
TEST(StreamOrder, ReplayRunsAheadOfAnUnpostedTicket) {
  IssueQueue<FakeOp*> q;
  FakeOp issued, replay;
  issued.id = 1;
  replay.id = 2;
  issued.ticket = q.reserve();
  ASSERT_TRUE(q.postReplay(&replay));
  FakeOp* got = nullptr;
  ASSERT_EQ(q.pop(&got, 5.0, nullptr), IssueQueue<FakeOp*>::Pop::kItem);
  EXPECT_EQ(got->id, 2);
  ASSERT_TRUE(q.post(issued.ticket, &issued));
  ASSERT_EQ(q.pop(&got, 5.0, nullptr), IssueQueue<FakeOp*>::Pop::kItem);
  EXPECT_EQ(got->id, 1);
}

TEST(StreamOrder, WaitsAreBoundedAndHonourAbort) {
  IssueQueue<FakeOp*> q;
  FakeOp op;
  op.ticket = q.reserve();  // issued, its stream never gets there
  FakeOp* got = nullptr;
  auto t0 = Clock::now();
  EXPECT_EQ(q.pop(&got, 0.2, nullptr), IssueQueue<FakeOp*>::Pop::kTimeout);
  double waited = std::chrono::duration<double>(Clock::now() - t0).count();
  EXPECT_GE(waited, 0.2);
  EXPECT_LT(waited, 2.0);
  std::atomic<bool> abort{false};
  std::thread aborter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    abort = true;
  });
  t0 = Clock::now();
  EXPECT_EQ(q.pop(&got, 0, &abort), IssueQueue<FakeOp*>::Pop::kStopped);
  aborter.join();
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 2.0);
}

// Teardown: what was posted comes back (its streams must be released), and
// callbacks that come later are refused (they release the word themselves).
TEST(StreamOrder, StopReturnsPostedWorkAndRefusesLaterPosts) {
  IssueQueue<FakeOp*> q;
  FakeOp a, b, c;
  a.ticket = q.reserve();
  b.ticket = q.reserve();
  c.ticket = q.reserve();
  ASSERT_TRUE(q.post(b.ticket, &b));  // a never posted: b cannot run
  ASSERT_TRUE(q.postReplay(&c));
  std::vector<FakeOp*> left = q.stop();
  EXPECT_EQ(left.size(), 2u);
  EXPECT_FALSE(q.post(a.ticket, &a));
  EXPECT_FALSE(q.postReplay(&c));
  FakeOp* got = nullptr;
  EXPECT_EQ(q.pop(&got, 0, nullptr), IssueQueue<FakeOp*>::Pop::kStopped);
}

TEST(StreamOrder, SlotPoolReusesTheSmallestFitAndKeepsCapturedSlots) {
  SlotPool p;
  EXPECT_EQ(p.acquire(100), SlotPool::kNone);
  int big = p.add(1 << 20, false);
  int small = p.add(4096, false);
  int captured = p.add(64, true);
  p.release(big);
  p.release(small);
  p.release(captured);  // no effect: lives as long as the communicator
  EXPECT_TRUE(p.busy(captured));
  EXPECT_EQ(p.acquire(1000), small);
  EXPECT_EQ(p.acquire(1000), big);
  EXPECT_EQ(p.acquire(10), SlotPool::kNone);
  EXPECT_EQ(p.busyCount(), 3u);
  p.release(small);
  EXPECT_EQ(p.acquire(5000), SlotPool::kNone);
  EXPECT_EQ(p.acquire(4096), small);
}

TEST(StreamOrder, ChunkScheduleCoversEveryElementOnce) {
  for (size_t count : {1ul, 7ul, 1000ul, 1ul << 20, (1ul << 20) + 3}) {
    for (size_t es : {1ul, 2ul, 4ul, 8ul}) {
      auto chunks = chunkSchedule(count, es, 64 << 10, 16);
      ASSERT_FALSE(chunks.empty());
      EXPECT_LE(chunks.size(), 16u);
      size_t next = 0;
      for (const Chunk& c : chunks) {
        EXPECT_EQ(c.offset, next);
        EXPECT_GT(c.count, 0u);
        next += c.count;
      }
      EXPECT_EQ(next, count);
    }
  }
  EXPECT_TRUE(chunkSchedule(0, 4, 1024, 4).empty());
  auto c = chunkSchedule(1000, 4, 1000, 100);  // 250 elements per chunk
  ASSERT_EQ(c.size(), 4u);
  EXPECT_EQ(c[0].count, 250u);
}

TEST(StreamOrder, PipelineOrderOverlapsHeadsWithEarlierTails) {
  for (size_t n : {1ul, 2ul, 3ul, 8ul}) {
    for (size_t window : {1ul, 2ul, 3ul}) {
      auto order = pipelineOrder(n, window);
      ASSERT_EQ(order.size(), 2 * n);
      std::set<long> heads, tails;
      for (long step : order) {
        if (step > 0) {
          EXPECT_TRUE(heads.insert(step).second);
          // At most `window` chunks between head and tail.
          EXPECT_LE(heads.size() - tails.size(), window);
        } else {
          EXPECT_TRUE(heads.count(-step)) << "tail before its head";
          EXPECT_TRUE(tails.insert(-step).second);
          EXPECT_EQ(static_cast<size_t>(-step), tails.size()) << "tails out of order";
        }
      }
      EXPECT_EQ(heads.size(), n);
      EXPECT_EQ(tails.size(), n);
    }
  }
  // Double buffering: chunk 1's head comes before chunk 0's tail.
  EXPECT_EQ(pipelineOrder(3, 2), (std::vector<long>{1, 2, -1, 3, -2, -3}));
}

// Without a CUDA driver (this machine, or TIDE_CUDA_DISABLE), a stream that
// tideStreamCreate did not make is refused with a clear message; Tide host
// streams are told apart exactly and keep working; device-stream entry
// points refuse such streams too.
TEST(StreamOrder, ApiTellsHostStreamsFromOthers) {
  setenv("TIDE_CUDA_DISABLE", "1", 1);
  tideUniqueId id;
  ASSERT_EQ(tideGetUniqueId(&id), tideSuccess);
  tideComm_t comm = nullptr;
  ASSERT_EQ(tideCommInitRank(&comm, 1, id, 0), tideSuccess);
  std::vector<float> in(1000, 2.f), out(1000, 0.f);
  auto bogus = reinterpret_cast<tideStream_t>(0x1234);
  EXPECT_EQ(tideAllReduce(in.data(), out.data(), in.size(), tideFloat32, tideSum, comm, bogus),
            tideInvalidArgument);
  EXPECT_NE(std::string(tideGetLastError(comm)).find("tideStreamCreate"), std::string::npos)
      << tideGetLastError(comm);
  EXPECT_EQ(tideStreamDestroy(bogus), tideInvalidArgument);
  EXPECT_EQ(tideStreamSynchronize(bogus), tideInvalidArgument);
  // A bad stream inside a group fails the group, launching nothing.
  ASSERT_EQ(tideGroupStart(), tideSuccess);
  EXPECT_EQ(tideAllReduce(in.data(), out.data(), in.size(), tideFloat32, tideSum, comm, bogus),
            tideInvalidArgument);
  EXPECT_NE(tideGroupEnd(), tideSuccess);
  tideStream_t s = nullptr;
  ASSERT_EQ(tideStreamCreate(&s), tideSuccess);
  EXPECT_EQ(tideAllReduce(in.data(), out.data(), in.size(), tideFloat32, tideSum, comm, s),
            tideSuccess);
  EXPECT_EQ(tideStreamSynchronize(s), tideSuccess);
  EXPECT_EQ(out[999], 2.f);
  EXPECT_EQ(tideStreamDestroy(s), tideSuccess);
  // Destroyed: no longer a host stream.
  EXPECT_EQ(tideStreamQuery(s), tideInvalidArgument);
  tideResult_t async = tideInternalError;
  EXPECT_EQ(tideCommGetAsyncError(comm, &async), tideSuccess);
  EXPECT_EQ(async, tideSuccess);
  EXPECT_EQ(tideCommDestroy(comm), tideSuccess);
  unsetenv("TIDE_CUDA_DISABLE");
}

}  // namespace
}  // namespace tide::cuda
