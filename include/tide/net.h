/*
 * Tide network plugin ABI, version 1.
 *
 * A "net" moves messages between two processes over one fabric (TCP sockets,
 * UCX, RDMA verbs, or an external plugin). Tide's "net" transport adapts the
 * chosen net into the core's ordered byte pipes (transports/net/); nets never
 * see collectives, ranks or communicators.
 *
 * Includable from C99 and C++. Built-in nets (socket, ucx, ib) and external
 * plugins implement the same table, tideNet_v1_t.
 *
 * Plugins: a shared object exporting a tideNet_v1_t named tideNetPlugin_v1
 * (TIDE_NET_PLUGIN_SYMBOL). TIDE_NET_PLUGIN=X loads "libtide-net-X.so" through
 * the dynamic loader's search path; a value containing '/' is a file path. A
 * loaded plugin is selected by TIDE_NET=<its name> or, when TIDE_NET is unset,
 * by being loaded. Otherwise TIDE_NET=socket|ucx|ib chooses a built-in net;
 * the default is socket unless an RDMA device exists (/sys/class/infiniband
 * not empty): then ib, or ucx when Tide was built with UCX.
 *
 * Object model
 *   device:     0 .. ndev-1 as reported by devices(); what a device is belongs
 *               to the net (a NIC, an IP interface, a UCX context).
 *   handle:     TIDE_NET_HANDLE_MAXSIZE opaque bytes written by listen();
 *               the caller carries them to the peer (out of band), which
 *               passes them to connect(). Must be position independent (plain
 *               bytes: addresses, ports, keys; no pointers).
 *   listenComm: result of listen(); accept() takes connections from it.
 *   sendComm:   one-directional message channel, connector -> acceptor.
 *   recvComm:   the acceptor's end of the same channel.
 *   request:    one outstanding isend or irecv; finished by test().
 *   mhandle:    a memory registration from regMr(), valid for that comm.
 *
 * Message semantics (what every net must provide)
 *   - Reliable and ordered per (sendComm, recvComm) pair: the k-th isend
 *     matches the k-th irecv buffer (a grouped irecv of n buffers consumes n
 *     sends, one per buffer, in order). Nets that match by tag must still
 *     deliver this order when the caller posts equal tags in the same order,
 *     which is all Tide does.
 *   - Tags: the caller posts the tag it expects. A FIFO net whose send's tag
 *     differs from the receive's must fail that receive with
 *     tideInvalidUsage (never deliver it silently); a tag-matching net may
 *     instead leave it unmatched.
 *   - Sizes: a send of s bytes may land in a receive posted with size r >= s;
 *     test() then reports s. s > r fails the receive with tideInvalidUsage.
 *     0-byte messages are legal and are delivered (they are messages).
 *   - Buffers belong to the caller and must stay valid and unchanged (send)
 *     or untouched (receive) until test() reports the request done.
 *   - Completion does not imply the peer has received a send, only that its
 *     buffer may be reused.
 *
 * Non-blocking rules
 *   Every function returns promptly (no waiting on a peer). connect() and
 *   accept() return tideSuccess with *comm == NULL for "not yet, call again";
 *   isend()/irecv() return tideSuccess with *request == NULL for "no resources
 *   right now, call test() on earlier requests and post again". The caller
 *   keeps calling test() to make progress; a net may also progress on its own
 *   threads. Waiting is the caller's business (it may poll getPollFd()).
 *
 * Errors
 *   A function that fails returns the tideResult_t of tide.h that fits:
 *   tideRemoteError (peer closed, died, reset, unreachable), tideSystemError
 *   (a local call failed), tideInvalidArgument / tideInvalidUsage (caller
 *   bug or mismatched message), tideTimeout (the net's own liveness limit,
 *   e.g. TCP_USER_TIMEOUT, expired), tideInternalError. A request whose test()
 *   returned an error is finished (freed); its comm is broken and only its
 *   close function may still be called. Errors never abort the process.
 *
 * Threading
 *   init(), devices() and getProperties() are thread-safe. Calls on one comm
 *   (and its requests and mhandles) are serialized by the caller; different
 *   comms may be used by different threads concurrently.
 *
 * Lifetime
 *   closeSend/closeRecv/closeListen free the comm at once, even with requests
 *   outstanding (those are cancelled and freed; the caller must not test
 *   them again) and even when the peer is dead. They never wait for a peer
 *   for more than a short, bounded linger. Deregister mhandles before closing
 *   their comm. deregMr may be called while requests that use the mhandle are
 *   still outstanding on the comm (a comm torn down after an error or abort):
 *   the net must then not touch that mhandle again, also not while close
 *   cancels those requests.
 */
#ifndef TIDE_NET_H_
#define TIDE_NET_H_

#include <stddef.h>
#include <stdint.h>

#include "tide/tide.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TIDE_NET_ABI_VERSION 1
#define TIDE_NET_PLUGIN_SYMBOL "tideNetPlugin_v1"

/* Size of a listen handle. listen() writes at most this many bytes; connect()
 * may also use the rest of the caller's buffer to keep its own state between
 * "not yet" calls (the caller passes the same buffer until connect returns a
 * comm or an error). */
#define TIDE_NET_HANDLE_MAXSIZE 128

/* Pointer kinds (ptrSupport bits and the `type` of regMr). */
#define TIDE_NET_PTR_HOST 0x1
#define TIDE_NET_PTR_DEVICE 0x2 /* GPU memory through peer-memory registration */
#define TIDE_NET_PTR_DMABUF 0x4 /* GPU memory through a dma-buf file descriptor */

/* Log levels passed to the logger (same values as TIDE_DEBUG's). */
#define TIDE_NET_LOG_WARN 2
#define TIDE_NET_LOG_INFO 3
#define TIDE_NET_LOG_TRACE 4

/* Tide's logger, given to init(). Thread-safe; printf-style; the line gets
 * Tide's usual prefix and obeys TIDE_DEBUG. */
typedef void (*tideNetLogger_t)(int level, const char* file, int line, const char* fmt, ...);

typedef struct {
  const char* name;    /* device name for logs ("eth0", "mlx5_0:1"); owned by the net */
  const char* pciPath; /* sysfs PCI path of the device, or NULL when none */
  uint64_t guid;       /* unique per physical port (0 when unknown) */
  int ptrSupport;      /* TIDE_NET_PTR_* bits isend/irecv accept */
  int speed;           /* link speed in Mbit/s (0 when unknown) */
  int port;            /* port number on the device (1-based for IB; 0 otherwise) */
  float latency;       /* one-way latency in microseconds (0 when unknown) */
  int maxComms;        /* most comms the device supports (a large number if unlimited) */
  int maxRecvs;        /* largest n irecv accepts (>= 1) */
  size_t maxSize;      /* largest message in bytes (>= 1 MiB) */
} tideNetProperties_v1_t;

typedef struct {
  /* Short, unique among loaded nets ("socket", "ucx", "ib", "example"). */
  const char* name;

  /* Initializes the net; may be called more than once (later calls do
   * nothing). Fails (e.g. tideSystemError) when the net cannot run here. */
  tideResult_t (*init)(tideNetLogger_t logger);
  /* Number of usable devices (0 is legal: the net then cannot be used). */
  tideResult_t (*devices)(int* ndev);
  tideResult_t (*getProperties)(int dev, tideNetProperties_v1_t* props);

  /* Creates a listening endpoint on `dev` and writes its handle
   * (TIDE_NET_HANDLE_MAXSIZE bytes). */
  tideResult_t (*listen)(int dev, void* handle, void** listenComm);
  /* Non-blocking: *sendComm == NULL means "call again". `handle` is the
   * peer's listen handle (see TIDE_NET_HANDLE_MAXSIZE for the state rule). */
  tideResult_t (*connect)(int dev, void* handle, void** sendComm);
  /* Non-blocking: *recvComm == NULL means "call again". Returns connections
   * in the order they complete; nets do not authenticate peers (Tide does,
   * over the comms, before using them). */
  tideResult_t (*accept)(void* listenComm, void** recvComm);

  /* Registers [data, data+size) of kind `type` (TIDE_NET_PTR_*) for use with
   * `comm` (a send or recv comm). Nets that need no registration return a
   * dummy non-NULL handle. */
  tideResult_t (*regMr)(void* comm, void* data, size_t size, int type, void** mhandle);
  tideResult_t (*deregMr)(void* comm, void* mhandle);

  /* Posts a send of `size` bytes. *request == NULL: retry later.
   * mhandle (and irecv's mhandles, or entries of it) may be NULL: the net
   * then handles registration itself (a registration cache, or a copy
   * through pre-registered buffers). Tide's net transport passes NULL for
   * host memory. */
  tideResult_t (*isend)(void* sendComm, const void* data, size_t size, int tag, void* mhandle,
                        void** request);
  /* Posts n (1 <= n <= maxRecvs) receives as one request. *request == NULL:
   * retry later. */
  tideResult_t (*irecv)(void* recvComm, int n, void** data, const size_t* sizes, const int* tags,
                        void** mhandles, void** request);
  /* Progresses and checks a request. *done = 1 when finished: the request is
   * freed and, when `sizes` is not NULL, sizes[i] holds the bytes of each
   * message (1 entry for a send, n for a receive). */
  tideResult_t (*test)(void* request, int* done, size_t* sizes);

  /* Optional (may be NULL, or set *fd = -1): a file descriptor that polls
   * readable when a request on `comm` may have advanced (data arrived, room
   * to send, a helper thread finished something). The caller only poll()s it;
   * the net drains or resets it. Lets an idle caller sleep instead of spin. */
  tideResult_t (*getPollFd)(void* comm, int* fd);

  tideResult_t (*closeSend)(void* sendComm);
  tideResult_t (*closeRecv)(void* recvComm);
  tideResult_t (*closeListen)(void* listenComm);
} tideNet_v1_t;

/* ---- Access from applications (exported by libtide) ----------------------
 * Finds a net by name: "socket", "ucx", "ib" (when built), or a plugin name
 * or path (loaded as TIDE_NET_PLUGIN would load it). NULL or "" selects the
 * net Tide itself would use (TIDE_NET / TIDE_NET_PLUGIN / default rule). The
 * net is initialized with Tide's logger before it is returned and lives until
 * the process exits. Thread-safe. Returns tideInvalidArgument for an unknown
 * name, tideSystemError when a plugin cannot be loaded or init() fails; the
 * reason is logged as a WARN line (TIDE_DEBUG). Used by perf/net_bw and the
 * conformance tests; applications normally never need it. */
tideResult_t tideNetGet(const char* name, const tideNet_v1_t** net);

/* Exports a dma-buf file descriptor covering [ptr, ptr + size) of CUDA device
 * memory, for nets that register GPU memory with a dma-buf (regMr with
 * TIDE_NET_PTR_DMABUF; e.g. ibv_reg_dmabuf_mr(pd, *offset, size, iova, *fd,
 * access)). The exported range is the host-page-aligned range around the
 * buffer, within its allocation; *offset = ptr - range start. The caller owns
 * *fd and closes it (a registration made from it stays valid after close).
 * Returns tideInvalidArgument for memory that is not CUDA device memory (or a
 * zero size, or null arguments), tideSystemError when no GPU is usable or the
 * driver or GPU lacks dma-buf export (cuMemGetHandleForAddressRange, CUDA
 * 11.7+; the reason is logged at INFO), tideSuccess otherwise. Thread-safe;
 * makes a CUDA context current on the calling thread if it has none. */
tideResult_t tideNetDmaBufFd(const void* ptr, size_t size, int* fd, uint64_t* offset);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* TIDE_NET_H_ */
