// The MPI backend of the perf harness (the *_perf_mpi tools): the same
// driver, sizes, data patterns and checks as the Tide tools, with every
// measured call made by the MPI library the job was launched with.
//
// Mapping (tide.h call -> MPI), all on a duplicate of MPI_COMM_WORLD whose
// error handler returns errors:
//   AllReduce     -> MPI_Allreduce (MPI_IN_PLACE when send == recv)
//   AllGather     -> MPI_Allgather (MPI_IN_PLACE when send is this rank's block of recv)
//   ReduceScatter -> MPI_Reduce_scatter_block. Tide's in-place form leaves the
//                    result at recv = send + rank * count; MPI_IN_PLACE leaves it
//                    at the start of the buffer, so it is moved there afterwards
//                    (one memmove of count elements, included in the time).
//   Broadcast     -> MPI_Bcast of the root's send buffer; out of place the root
//                    then copies send to recv (MPI has no out-of-place form;
//                    the copy is included in the time).
//   Reduce        -> MPI_Reduce (MPI_IN_PLACE at the root when send == recv)
//   AlltoAll      -> MPI_Alltoall (MPI_IN_PLACE when send == recv)
//   SendRecv      -> MPI_Sendrecv, or MPI_Sendrecv_replace when send == recv
// Every call is blocking: MPI collectives have no counterpart of a host stream,
// so -z 0 runs exactly like -z 1 (noted in the header).
//
// Types: int8 uint8 int32 uint32 int64 uint64 float double. MPI has no
// standard half, bfloat16 or fp8 type and no average reduction; those are
// rejected (and skipped by -d all / -o all). Counts must fit in an int.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <climits>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "common/backend.h"

namespace tide_perf {
namespace {

class MpiPerfBackend final : public Backend {
 public:
  const char* Name() const override { return "MPI"; }

  std::string Describe() override {
    char lib[MPI_MAX_LIBRARY_VERSION_STRING] = "";
    int len = 0;
    MPI_Get_library_version(lib, &len);
    std::string s(lib, static_cast<size_t>(len > 0 ? len : 0));
    const size_t cut = s.find_first_of(",\n");  // "Open MPI v4.1.4, package: ..."
    if (cut != std::string::npos) s.resize(cut);
    return "MPI backend, " + s;
  }

  const char* Unsupported(const DType& dt, int op) const override {
    if (TypeOf(dt.id) == MPI_DATATYPE_NULL) {
      return "not supported by the MPI tools: MPI has no standard type for it (they run int8 "
             "uint8 int32 uint32 int64 uint64 float double)";
    }
    if (op == tideAvg) {
      return "not supported by the MPI tools: MPI has no average reduction (they run sum prod "
             "max min)";
    }
    return nullptr;
  }

  std::vector<std::string> Notes(bool blocking) const override {
    if (blocking) return {};
    return {"MPI backend: every call is a blocking MPI collective, so -z 0 runs as -z 1"};
  }

  tideResult_t Init(bool, int* rank, int* nranks) override {
    int done = 0;
    MPI_Initialized(&done);
    if (!done && !Ok("MPI_Init", MPI_Init(nullptr, nullptr))) return tideSystemError;
    initialized_ = true;
    if (!Ok("MPI_Comm_dup", MPI_Comm_dup(MPI_COMM_WORLD, &comm_))) return tideSystemError;
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    if (!Ok("MPI_Comm_rank", MPI_Comm_rank(comm_, &rank_)) ||
        !Ok("MPI_Comm_size", MPI_Comm_size(comm_, &nranks_))) {
      return tideSystemError;
    }
    *rank = rank_;
    *nranks = nranks_;
    return tideSuccess;
  }

  tideResult_t Finalize() override {
    if (comm_ != MPI_COMM_NULL && !Ok("MPI_Comm_free", MPI_Comm_free(&comm_))) {
      return tideSystemError;
    }
    comm_ = MPI_COMM_NULL;
    if (initialized_) {
      initialized_ = false;
      if (!Ok("MPI_Finalize", MPI_Finalize())) return tideSystemError;
    }
    return tideSuccess;
  }

  void Abort() override {
    if (initialized_) MPI_Abort(comm_ != MPI_COMM_NULL ? comm_ : MPI_COMM_WORLD, 2);
  }

  const char* ErrorString(tideResult_t res) override {
    switch (res) {
      case tideSuccess:
        return "no error";
      case tideInvalidArgument:
        return "invalid argument";
      default:
        return "MPI error";
    }
  }
  const char* LastError() override { return last_error_.c_str(); }

  tideResult_t Sync() override { return tideSuccess; }

  tideResult_t HostAllReduce(void* data, size_t count, tideDataType_t type,
                             tideRedOp_t op) override {
    return AllReduce(data, data, count, type, op);
  }
  tideResult_t HostAllGather(const void* send, void* recv, size_t bytes) override {
    return AllGather(send, recv, bytes, tideUint8);
  }

  tideResult_t AllReduce(const void* send, void* recv, size_t count, tideDataType_t type,
                         tideRedOp_t op) override {
    int n;
    MPI_Datatype t;
    MPI_Op o;
    if (tideResult_t r = Args(count, type, op, &n, &t, &o); r != tideSuccess) return r;
    const void* s = send == recv ? MPI_IN_PLACE : send;
    return Call("MPI_Allreduce", MPI_Allreduce(s, recv, n, t, o, comm_));
  }

  tideResult_t AllGather(const void* send, void* recv, size_t count, tideDataType_t type) override {
    int n;
    MPI_Datatype t;
    if (tideResult_t r = Args(count, type, tideSum, &n, &t, nullptr); r != tideSuccess) return r;
    const void* s = send == Block(recv, count, type, rank_) ? MPI_IN_PLACE : send;
    return Call("MPI_Allgather", MPI_Allgather(s, n, t, recv, n, t, comm_));
  }

  tideResult_t ReduceScatter(const void* send, void* recv, size_t count, tideDataType_t type,
                             tideRedOp_t op) override {
    int n;
    MPI_Datatype t;
    MPI_Op o;
    if (tideResult_t r = Args(count, type, op, &n, &t, &o); r != tideSuccess) return r;
    void* whole = const_cast<void*>(send);
    if (recv != Block(whole, count, type, rank_)) {
      return Call("MPI_Reduce_scatter_block", MPI_Reduce_scatter_block(send, recv, n, t, o, comm_));
    }
    tideResult_t res = Call("MPI_Reduce_scatter_block",
                            MPI_Reduce_scatter_block(MPI_IN_PLACE, whole, n, t, o, comm_));
    if (res == tideSuccess && recv != whole) std::memmove(recv, whole, count * Size(type));
    return res;
  }

  tideResult_t Broadcast(const void* send, void* recv, size_t count, tideDataType_t type,
                         int root) override {
    int n;
    MPI_Datatype t;
    if (tideResult_t r = Args(count, type, tideSum, &n, &t, nullptr); r != tideSuccess) return r;
    void* buf = rank_ == root ? const_cast<void*>(send) : recv;
    tideResult_t res = Call("MPI_Bcast", MPI_Bcast(buf, n, t, root, comm_));
    if (res == tideSuccess && rank_ == root && send != recv) {
      std::memcpy(recv, send, count * Size(type));
    }
    return res;
  }

  tideResult_t Reduce(const void* send, void* recv, size_t count, tideDataType_t type,
                      tideRedOp_t op, int root) override {
    int n;
    MPI_Datatype t;
    MPI_Op o;
    if (tideResult_t r = Args(count, type, op, &n, &t, &o); r != tideSuccess) return r;
    const void* s = (rank_ == root && send == recv) ? MPI_IN_PLACE : send;
    return Call("MPI_Reduce", MPI_Reduce(s, recv, n, t, o, root, comm_));
  }

  tideResult_t AlltoAll(const void* send, void* recv, size_t count, tideDataType_t type) override {
    int n;
    MPI_Datatype t;
    if (tideResult_t r = Args(count, type, tideSum, &n, &t, nullptr); r != tideSuccess) return r;
    if (send == recv) {  // in place: MPI's form ignores the send arguments
      return Call("MPI_Alltoall",
                  MPI_Alltoall(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, recv, n, t, comm_));
    }
    return Call("MPI_Alltoall", MPI_Alltoall(send, n, t, recv, n, t, comm_));
  }

  tideResult_t SendRecv(const void* send, int to, void* recv, int from, size_t count,
                        tideDataType_t type) override {
    int n;
    MPI_Datatype t;
    if (tideResult_t r = Args(count, type, tideSum, &n, &t, nullptr); r != tideSuccess) return r;
    constexpr int kTag = 7;
    if (send == recv) {
      return Call("MPI_Sendrecv_replace",
                  MPI_Sendrecv_replace(recv, n, t, to, kTag, from, kTag, comm_, MPI_STATUS_IGNORE));
    }
    return Call("MPI_Sendrecv", MPI_Sendrecv(send, n, t, to, kTag, recv, n, t, from, kTag, comm_,
                                             MPI_STATUS_IGNORE));
  }

 private:
  static MPI_Datatype TypeOf(tideDataType_t type) {
    switch (type) {
      case tideInt8:
        return MPI_INT8_T;
      case tideUint8:
        return MPI_UINT8_T;
      case tideInt32:
        return MPI_INT32_T;
      case tideUint32:
        return MPI_UINT32_T;
      case tideInt64:
        return MPI_INT64_T;
      case tideUint64:
        return MPI_UINT64_T;
      case tideFloat32:
        return MPI_FLOAT;
      case tideFloat64:
        return MPI_DOUBLE;
      default:
        return MPI_DATATYPE_NULL;
    }
  }
  static MPI_Op OpOf(tideRedOp_t op) {
    switch (op) {
      case tideSum:
        return MPI_SUM;
      case tideProd:
        return MPI_PROD;
      case tideMax:
        return MPI_MAX;
      case tideMin:
        return MPI_MIN;
      default:
        return MPI_OP_NULL;
    }
  }
  static size_t Size(tideDataType_t type) {
    int s = 0;
    MPI_Type_size(TypeOf(type), &s);
    return static_cast<size_t>(s);
  }
  static const void* Block(const void* base, size_t count, tideDataType_t type, int index) {
    return static_cast<const char*>(base) + static_cast<size_t>(index) * count * Size(type);
  }
  static void* Block(void* base, size_t count, tideDataType_t type, int index) {
    return static_cast<char*>(base) + static_cast<size_t>(index) * count * Size(type);
  }

  // Validates and converts the common arguments; `o` may be null (no op).
  tideResult_t Args(size_t count, tideDataType_t type, tideRedOp_t op, int* n, MPI_Datatype* t,
                    MPI_Op* o) {
    *t = TypeOf(type);
    if (*t == MPI_DATATYPE_NULL) return Invalid("datatype has no MPI equivalent");
    if (o != nullptr) {
      *o = OpOf(op);
      if (*o == MPI_OP_NULL) return Invalid("reduction op has no MPI equivalent");
    }
    if (count > static_cast<size_t>(INT_MAX)) return Invalid("count does not fit in an MPI int");
    *n = static_cast<int>(count);
    return tideSuccess;
  }
  tideResult_t Invalid(const char* why) {
    last_error_ = why;
    return tideInvalidArgument;
  }
  bool Ok(const char* what, int err) { return Call(what, err) == tideSuccess; }
  tideResult_t Call(const char* what, int err) {
    if (err == MPI_SUCCESS) return tideSuccess;
    char msg[MPI_MAX_ERROR_STRING] = "";
    int len = 0;
    MPI_Error_string(err, msg, &len);
    last_error_ = std::string(what) + ": " + std::string(msg, static_cast<size_t>(len));
    return tideSystemError;
  }

  MPI_Comm comm_ = MPI_COMM_NULL;
  bool initialized_ = false;
  int rank_ = 0;
  int nranks_ = 1;
  std::string last_error_ = "no MPI error recorded";
};

}  // namespace

Backend* MpiBackend() {
  static MpiPerfBackend backend;
  return &backend;
}

}  // namespace tide_perf
