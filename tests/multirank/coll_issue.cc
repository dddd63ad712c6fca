// IssueCollective: the library call(s) of one case.
#include "coll_check.h"

namespace tide_test {

tideResult_t IssueCollective(const CaseSpec& s, const CaseEnv& e, const void* send, void* recv,
                             const char** api) {
  tideStream_t st = s.use_stream ? e.stream : nullptr;
  tideComm_t c = e.comm;
  switch (s.coll) {
    case Coll::kAllReduce:
      *api = "tideAllReduce";
      return tideAllReduce(send, recv, s.count, s.dtype, s.op, c, st);
    case Coll::kBroadcast:
      *api = "tideBroadcast";
      return tideBroadcast(send, recv, s.count, s.dtype, s.root, c, st);
    case Coll::kReduce:
      *api = "tideReduce";
      return tideReduce(send, recv, s.count, s.dtype, s.op, s.root, c, st);
    case Coll::kAllGather:
      *api = "tideAllGather";
      return tideAllGather(send, recv, s.count, s.dtype, c, st);
    case Coll::kReduceScatter:
      *api = "tideReduceScatter";
      return tideReduceScatter(send, recv, s.count, s.dtype, s.op, c, st);
    case Coll::kAlltoAll:
      *api = "tideAlltoAll";
      return tideAlltoAll(send, recv, s.count, s.dtype, c, st);
    case Coll::kSendRecv: {
      const int next = (e.rank + 1) % e.nranks, prev = (e.rank - 1 + e.nranks) % e.nranks;
      *api = "tideGroupStart";
      tideResult_t rc = tideGroupStart();
      if (rc != tideSuccess) return rc;
      *api = "tideSend";
      tideResult_t rs = tideSend(send, s.count, s.dtype, next, c, st);
      *api = "tideRecv";
      tideResult_t rr = tideRecv(recv, s.count, s.dtype, prev, c, st);
      *api = "tideGroupEnd";
      rc = tideGroupEnd();
      if (rs != tideSuccess) {
        *api = "tideSend";
        return rs;
      }
      if (rr != tideSuccess) {
        *api = "tideRecv";
        return rr;
      }
      return rc;
    }
  }
  return tideInternalError;
}

}  // namespace tide_test
