/*
 * Tide: topology-aware collective communication.
 *
 * Public C API. Includable from C99 and C++; needs no CUDA header.
 *
 * Semantics follow NCCL's wherever this header does not say otherwise:
 * argument order, in-place rules, group semantics and the meaning of the
 * stream argument. Every function returns a tideResult_t and never throws.
 *
 * Thread safety: different communicators may be used concurrently from
 * different threads, and several ranks may live in one process. One
 * communicator must not be used by two threads at the same time, except for
 * tideCommAbort, tideCommGetAsyncError and tideGetLastError.
 */
#ifndef TIDE_TIDE_H_
#define TIDE_TIDE_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TIDE_MAJOR 0
#define TIDE_MINOR 1
#define TIDE_PATCH 0
/* Encoded like NCCL >= 2.9: major*10000 + minor*100 + patch. */
#define TIDE_VERSION_CODE (TIDE_MAJOR * 10000 + TIDE_MINOR * 100 + TIDE_PATCH)

typedef struct tideComm* tideComm_t;
#define TIDE_COMM_NULL NULL

/* ---- Results --------------------------------------------------------------
 * Numeric values match ncclResult_t; tideTimeout is Tide's addition. */
typedef enum {
  tideSuccess = 0,
  tideUnhandledDeviceError = 1, /* a CUDA (or other device runtime) call failed */
  tideSystemError = 2,          /* a system call failed (socket, shm, ...) */
  tideInternalError = 3,        /* a bug in Tide or an impossible state */
  tideInvalidArgument = 4,      /* bad pointer, enum, root, peer or count */
  tideInvalidUsage = 5,         /* a call that is not allowed now */
  tideRemoteError = 6,          /* a peer failed or went away */
  tideInProgress = 7,           /* non-blocking operation not finished yet */
  tideTimeout = 8,              /* no progress from a peer within the timeout */
  tideNumResults = 9
} tideResult_t;

/* Static string for a result code. Never NULL. */
const char* tideGetErrorString(tideResult_t result);

/* Human-readable detail of the last error: of `comm` when it is not NULL,
 * otherwise of the calling thread's last failing call. Never NULL; the string
 * stays valid until the next Tide call on the same thread. */
const char* tideGetLastError(tideComm_t comm);

/* Writes TIDE_VERSION_CODE of the loaded library. */
tideResult_t tideGetVersion(int* version);

/* ---- Types ----------------------------------------------------------------
 * Numeric values match NCCL's. */
typedef enum {
  tideInt8 = 0,
  tideChar = 0,
  tideUint8 = 1,
  tideInt32 = 2,
  tideInt = 2,
  tideUint32 = 3,
  tideInt64 = 4,
  tideUint64 = 5,
  tideFloat16 = 6,
  tideHalf = 6,
  tideFloat32 = 7,
  tideFloat = 7,
  tideFloat64 = 8,
  tideDouble = 8,
  tideBfloat16 = 9,
  tideFloat8e4m3 = 10,
  tideFloat8e5m2 = 11,
  tideNumTypes = 12
} tideDataType_t;

/* Avg is computed as NCCL does: floating types are premultiplied by 1/nranks
 * and summed, integers are summed and then divided. 16- and 8-bit floats
 * reduce in fp32. */
typedef enum {
  tideSum = 0,
  tideProd = 1,
  tideMax = 2,
  tideMin = 3,
  tideAvg = 4,
  tideNumOps = 5
} tideRedOp_t;

/* Opaque stream handle. For host buffers: NULL means "complete before the
 * call returns"; a stream from tideStreamCreate makes operations asynchronous
 * and ordered on that stream. A cudaStream_t (CUstream) cast to tideStream_t
 * is accepted too (any non-NULL stream tideStreamCreate did not make, when a
 * CUDA driver is usable): the call returns at once, the operation is ordered
 * on that CUDA stream and may be captured in a CUDA graph; device and host
 * buffers alike (device buffers are detected per buffer and need a CUDA
 * stream); errors surface through tideCommGetAsyncError. tideStreamSynchronize
 * and tideStreamQuery accept such a stream, tideStreamDestroy does not. */
typedef struct tideStream* tideStream_t;

#define TIDE_UNIQUE_ID_BYTES 128
typedef struct {
  char internal[TIDE_UNIQUE_ID_BYTES];
} tideUniqueId;

/* ---- Configuration --------------------------------------------------------
 * Always initialise with TIDE_CONFIG_INITIALIZER; fields left at
 * TIDE_CONFIG_UNDEF_INT take their defaults (environment, then built-in). */
#define TIDE_CONFIG_UNDEF_INT INT32_MIN
#define TIDE_CONFIG_MAGIC 0x71DEC0F1u

typedef struct tideConfig_v1 {
  size_t size;          /* sizeof(tideConfig_t) of the caller's header */
  unsigned int magic;   /* TIDE_CONFIG_MAGIC */
  unsigned int version; /* TIDE_VERSION_CODE of the caller's header */
  int blocking;         /* 1 (default): init blocks; 0: returns tideInProgress */
  int timeoutSeconds;   /* no-progress timeout for a peer; <= 0 disables */
  const char* commName; /* optional label used in logs */
  int reserved[16];     /* room to grow; keep zero */
} tideConfig_t;

#define TIDE_CONFIG_INITIALIZER                                                        \
  {                                                                                    \
    sizeof(tideConfig_t), TIDE_CONFIG_MAGIC, TIDE_VERSION_CODE, TIDE_CONFIG_UNDEF_INT, \
        TIDE_CONFIG_UNDEF_INT, NULL, {                                                 \
      0                                                                                \
    }                                                                                  \
  }

/* ---- Communicators --------------------------------------------------------*/

/* Creates a unique id: a random 128-bit secret from the OS and the address of
 * a bootstrap root that this call starts in the background. When TIDE_COMM_ID
 * (or NCCL_COMM_ID) is set to host:port, no root is started here: rank 0's
 * init starts it on that address and every rank may call this function to get
 * the same id (the secret then comes from TIDE_SECRET). */
tideResult_t tideGetUniqueId(tideUniqueId* uniqueId);

/* Collective over the nranks callers. Blocks until every rank has joined. */
tideResult_t tideCommInitRank(tideComm_t* comm, int nranks, tideUniqueId commId, int rank);
tideResult_t tideCommInitRankConfig(tideComm_t* comm, int nranks, tideUniqueId commId, int rank,
                                    tideConfig_t* config);

/* Builds a communicator from a launcher's environment: tiderun's TIDE_*,
 * torchrun's RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT (meeting on
 * MASTER_PORT + 1 unless TIDE_MASTER_PORT is set), Open MPI's OMPI_COMM_WORLD_*
 * (PMIx or TIDE_RDZV_FILE) or Slurm's SLURM_*. See docs/env.md. */
tideResult_t tideCommInitFromEnv(tideComm_t* comm);

/* Collective over the ranks of `comm`. Ranks with the same color form a new
 * communicator ordered by (key, old rank); color TIDE_SPLIT_NOCOLOR gets
 * *newcomm = NULL. A NULL config inherits the parent's settings (blocking,
 * timeoutSeconds, commName), as NCCL's does; with blocking = 0 the call
 * returns tideInProgress and the new communicator finishes in the background
 * (tideCommGetAsyncError). The same holds for tideCommShrink. */
#define TIDE_SPLIT_NOCOLOR (-1)
tideResult_t tideCommSplit(tideComm_t comm, int color, int key, tideComm_t* newcomm,
                           tideConfig_t* config);

/* Waits for outstanding work, then frees everything. */
tideResult_t tideCommDestroy(tideComm_t comm);
/* Stops outstanding work at once (callable from another thread while a call
 * on `comm` is blocked), then frees everything once no call uses `comm`. */
tideResult_t tideCommAbort(tideComm_t comm);

tideResult_t tideCommCount(const tideComm_t comm, int* count);
tideResult_t tideCommUserRank(const tideComm_t comm, int* rank);
/* tideSuccess, tideInProgress (non-blocking init running) or the sticky error. */
tideResult_t tideCommGetAsyncError(tideComm_t comm, tideResult_t* asyncError);

/* Builds a communicator of the ranks of `comm` that are not listed in
 * excludeRanks (ranks of `comm`; every survivor passes the same list), keeping
 * their order. Collective over the survivors only: excluded (e.g. dead) ranks
 * are never contacted. With TIDE_SHRINK_ABORT, outstanding work on `comm` is
 * aborted first; with TIDE_SHRINK_DEFAULT it must have completed. `comm`
 * stays valid (destroy or abort it afterwards). A rank that is itself in
 * excludeRanks gets *newcomm = NULL. */
#define TIDE_SHRINK_DEFAULT 0x00
#define TIDE_SHRINK_ABORT 0x01
tideResult_t tideCommShrink(tideComm_t comm, const int* excludeRanks, int nExclude,
                            tideComm_t* newcomm, tideConfig_t* config, int flags);

/* ---- Traffic counters --------------------------------------------------------
 * Payload bytes this rank has sent and received on `comm` since init, by
 * transport and by link class (intra-node: peers on the same node; inter-node:
 * the others). Set `size` to sizeof(tideTraffic_t) before the call. */
#define TIDE_TRAFFIC_MAX_TRANSPORTS 8
typedef struct {
  size_t size;
  unsigned long long intraNodeSent, intraNodeRecv;
  unsigned long long interNodeSent, interNodeRecv;
  int nTransports;
  struct {
    char name[16];
    unsigned long long sent, recv;
  } transport[TIDE_TRAFFIC_MAX_TRANSPORTS];
} tideTraffic_t;
tideResult_t tideCommGetTraffic(tideComm_t comm, tideTraffic_t* traffic);

/* ---- Cost model -------------------------------------------------------------
 * The planner's alpha-beta prediction, for callers that size their own work
 * (the gradient reducer's bucket size, a trainer's planner). */
typedef enum {
  tideCollAllReduce = 0,
  tideCollBroadcast = 1,
  tideCollReduce = 2,
  tideCollAllGather = 3,
  tideCollReduceScatter = 4,
  tideCollAlltoAll = 5,
  tideCollSendRecv = 6
} tideCollective_t;
/* The cost model's predicted time of one call of `bytes` (the per-rank buffer
 * size as nccl-tests counts it: All-Reduce/Broadcast/Reduce the buffer,
 * AllGather the receive buffer, ReduceScatter the send buffer, AlltoAll either
 * buffer, SendRecv the message) with the algorithm the planner would pick on
 * this communicator for float32 host buffers, in microseconds. 0 for 0 bytes.
 * Local (not collective) and the same on every rank. tideInvalidArgument for
 * an unknown collective or a NULL pointer. */
tideResult_t tideCommPredictTime(tideComm_t comm, tideCollective_t coll, size_t bytes,
                                 double* microseconds);
/* The same prediction without a communicator: `nnodes` nodes of
 * `ranksPerNode` ranks each, every node as the topology file `topoFile`
 * describes it (Tide, NCCL or hwloc XML, as tide-topo --xml reads; NULL: this
 * node as detected), with the algorithm the planner would choose (TIDE_ALGO
 * aside: no communicator forces one). For planners that price layouts larger
 * than the machine they run on. Local; the model of a (file, nnodes,
 * ranksPerNode) is built once and cached. tideInvalidArgument for an unknown
 * collective, NULL microseconds, nnodes or ranksPerNode < 1, more than 65536
 * ranks, or a file that cannot be read or parsed. */
tideResult_t tideTopoPredictTime(const char* topoFile, int nnodes, int ranksPerNode,
                                 tideCollective_t coll, size_t bytes, double* microseconds);

/* ---- Waiting ---------------------------------------------------------------
 * How the CALLING THREAD waits inside blocking Tide calls (a per-thread
 * setting, default tideWaitDefault). tideWaitDefault: spin briefly, then
 * poll with sched_yield, then sleep on the sockets or a futex (TIDE_SPIN_US,
 * TIDE_YIELD_US): lowest latency when every rank has its own core.
 * tideWaitSleep: sleep at once: for threads that communicate in the
 * background while the application computes on the same cores, whose spins
 * and yields would take those cores from it (the gradient reducer's thread
 * uses it; docs/overlap.md). Local; tideInvalidArgument for another value. */
typedef enum { tideWaitDefault = 0, tideWaitSleep = 1 } tideWaitMode_t;
tideResult_t tideSetThreadWaitMode(tideWaitMode_t mode);

/* ---- Host streams ----------------------------------------------------------
 * A host stream runs its operations in order on a library thread; the caller
 * does not need to poll. */
tideResult_t tideStreamCreate(tideStream_t* stream);
/* Blocks until every operation enqueued so far has completed; returns the
 * first error any of them hit. */
tideResult_t tideStreamSynchronize(tideStream_t stream);
/* tideSuccess when idle, tideInProgress while work is pending, or an error. */
tideResult_t tideStreamQuery(tideStream_t stream);
/* Waits for pending work, then frees the stream. */
tideResult_t tideStreamDestroy(tideStream_t stream);
/* Queues a call of `callback` on a host stream (not a CUDA stream, not NULL):
 * the stream's thread calls it once every operation enqueued before it has
 * completed, with `status` the first error among the operations since the
 * previous callback on this stream (tideSuccess if none) and `message` that
 * error's text ("" on success; valid during the call only). The callback may
 * enqueue work, but must not synchronize or destroy this stream, and while it
 * runs the stream's later work waits. Returns at once. */
typedef void (*tideStreamCallback_t)(tideStream_t stream, tideResult_t status, const char* message,
                                     void* userData);
tideResult_t tideStreamAddCallback(tideStream_t stream, tideStreamCallback_t callback,
                                   void* userData);

/* ---- Collectives ------------------------------------------------------------
 * Argument order and in-place rules as NCCL:
 *  AllGather: in place when sendbuff == recvbuff + rank * sendcount elements.
 *  ReduceScatter: in place when recvbuff == sendbuff + rank * recvcount.
 *  AlltoAll: count elements to and from each peer; in place when
 *  sendbuff == recvbuff (any other overlap is undefined). */
tideResult_t tideAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                           tideDataType_t datatype, tideRedOp_t op, tideComm_t comm,
                           tideStream_t stream);
tideResult_t tideBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                           tideDataType_t datatype, int root, tideComm_t comm, tideStream_t stream);
tideResult_t tideReduce(const void* sendbuff, void* recvbuff, size_t count, tideDataType_t datatype,
                        tideRedOp_t op, int root, tideComm_t comm, tideStream_t stream);
tideResult_t tideAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                           tideDataType_t datatype, tideComm_t comm, tideStream_t stream);
tideResult_t tideReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                               tideDataType_t datatype, tideRedOp_t op, tideComm_t comm,
                               tideStream_t stream);
tideResult_t tideAlltoAll(const void* sendbuff, void* recvbuff, size_t count,
                          tideDataType_t datatype, tideComm_t comm, tideStream_t stream);

/* inoutbuf[i] = inbuf[i] OP inoutbuf[i] for count elements of host memory, on
 * the calling thread, with the kernels the collectives use (MPI_Reduce_local's
 * contract): 16-bit floats are widened to fp32, combined and rounded to
 * nearest even once. op: tideSum, tideProd, tideMax or tideMin (tideAvg has
 * no local meaning: tideInvalidArgument). No communicator; blocking;
 * thread-safe. count 0 is a no-op; NULL buffers with count > 0, a bad
 * datatype or op are tideInvalidArgument. */
tideResult_t tideReduceLocal(const void* inbuf, void* inoutbuf, size_t count,
                             tideDataType_t datatype, tideRedOp_t op);

/* Point to point. Sends and receives between one pair of ranks are matched in
 * the order they were issued. Inside a group, any order never deadlocks, and a
 * receive may target the buffer a send of the same group reads (it lands once
 * the send has read it). */
tideResult_t tideSend(const void* sendbuff, size_t count, tideDataType_t datatype, int peer,
                      tideComm_t comm, tideStream_t stream);
tideResult_t tideRecv(void* recvbuff, size_t count, tideDataType_t datatype, int peer,
                      tideComm_t comm, tideStream_t stream);

/* ---- Groups ------------------------------------------------------------------
 * Per thread, nestable. Operations issued between the outermost Start and End
 * (on any communicators) are launched together by tideGroupEnd. Argument errors
 * are reported by the call that issued the operation; communication errors by
 * tideGroupEnd (or the stream). A communicator destroyed or aborted (by any
 * thread) while a group holds its operations makes tideGroupEnd launch
 * nothing and return tideInvalidUsage. */
tideResult_t tideGroupStart(void);
tideResult_t tideGroupEnd(void);

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // TIDE_TIDE_H_
