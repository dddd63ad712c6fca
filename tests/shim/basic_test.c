/*
 * NCCL shim, CPU acceptance: a C program compiled against the installed
 * NCCL header (nccl.h) and linked to Tide's libnccl.so.2.
 *  - the loader resolved libnccl.so.2 to Tide's build (argv[1]), not to an
 *    installed NCCL: checked with dladdr and /proc/self/maps;
 *  - ncclGetVersion, ncclGetUniqueId, ncclGetErrorString work;
 *  - without a GPU (and without TIDE_SHIM_HOST_BUFFERS), ncclCommInitRank,
 *    ncclCommInitAll and ncclMemAlloc fail cleanly with a CUDA error code and
 *    an explanation from ncclGetLastError(NULL) that names Tide;
 *  - bad configs and unsupported calls return error codes, never crash.
 * On a machine with a usable GPU the creation checks accept success instead.
 */
#include <dlfcn.h>
#include <limits.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int g_failures = 0;

#define EXPECT(cond, ...)                                     \
  do {                                                        \
    if (!(cond)) {                                            \
      printf("line %d: check failed: %s: ", __LINE__, #cond); \
      printf(__VA_ARGS__);                                    \
      printf("\n");                                           \
      g_failures++;                                           \
    }                                                         \
  } while (0)

static int cleanFailure(ncclResult_t r) {
  return r == ncclUnhandledCudaError || r == ncclSystemError;
}

static void checkLoadedLibrary(const char* expected) {
  char want[PATH_MAX], got[PATH_MAX];
  EXPECT(realpath(expected, want) != NULL, "cannot resolve %s", expected);
  Dl_info info;
  EXPECT(dladdr((void*)&ncclGetVersion, &info) != 0, "dladdr failed");
  EXPECT(realpath(info.dli_fname, got) != NULL, "cannot resolve %s", info.dli_fname);
  EXPECT(strcmp(want, got) == 0, "ncclGetVersion comes from %s, not %s", got, want);
  /* Every libnccl mapping of the process is Tide's. */
  FILE* maps = fopen("/proc/self/maps", "r");
  EXPECT(maps != NULL, "no /proc/self/maps");
  if (maps == NULL) return;
  char line[PATH_MAX + 128];
  int seen = 0;
  while (fgets(line, sizeof(line), maps) != NULL) {
    char* path = strchr(line, '/');
    if (path == NULL || strstr(path, "libnccl") == NULL) continue;
    path[strcspn(path, "\n")] = '\0';
    EXPECT(realpath(path, got) != NULL && strcmp(got, want) == 0, "foreign NCCL mapped: %s", path);
    seen++;
  }
  fclose(maps);
  EXPECT(seen > 0, "libnccl not found in /proc/self/maps");
  printf("libnccl.so.2 resolved to %s (%d mappings)\n", want, seen);
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s <path of Tide's libnccl.so.2>\n", argv[0]);
    return 2;
  }
  unsetenv("TIDE_SHIM_HOST_BUFFERS");
  checkLoadedLibrary(argv[1]);

  int version = 0;
  EXPECT(ncclGetVersion(&version) == ncclSuccess, "ncclGetVersion failed");
  EXPECT(version == NCCL_VERSION_CODE, "version %d, header %d", version, NCCL_VERSION_CODE);
  EXPECT(ncclGetVersion(NULL) == ncclInvalidArgument, "NULL version accepted");

  ncclUniqueId id;
  memset(&id, 0, sizeof(id));
  EXPECT(ncclGetUniqueId(&id) == ncclSuccess, "ncclGetUniqueId: %s", ncclGetLastError(NULL));
  int nonzero = 0;
  for (int i = 0; i < NCCL_UNIQUE_ID_BYTES; ++i) nonzero |= id.internal[i];
  EXPECT(nonzero, "unique id is all zero");

  for (int r = ncclSuccess; r <= ncclInProgress; ++r) {
    const char* s = ncclGetErrorString((ncclResult_t)r);
    EXPECT(s != NULL && s[0] != '\0', "no string for %d", r);
  }
  EXPECT(ncclGetErrorString((ncclResult_t)99) != NULL, "NULL string for an unknown code");

  /* Creation without a GPU: a clean error with an explanation. */
  ncclComm_t comm = (ncclComm_t)0x1;
  ncclResult_t r = ncclCommInitRank(&comm, 1, id, 0);
  const char* last = ncclGetLastError(NULL);
  printf("ncclCommInitRank -> %d (%s)\n  last error: %s\n", (int)r, ncclGetErrorString(r), last);
  if (r == ncclSuccess) {
    printf("a GPU is usable here: creation succeeded\n");
    int dev = -2;
    EXPECT(ncclCommCuDevice(comm, &dev) == ncclSuccess && dev >= 0, "device %d", dev);
    EXPECT(ncclCommDestroy(comm) == ncclSuccess, "destroy: %s", ncclGetLastError(NULL));
  } else {
    EXPECT(cleanFailure(r), "unexpected code %d", (int)r);
    EXPECT(comm == NULL, "comm not cleared on failure");
    EXPECT(last != NULL && strstr(last, "Tide") != NULL, "last error does not name Tide: %s", last);
    EXPECT(strstr(last, "CUDA") != NULL, "last error does not mention CUDA: %s", last);

    ncclComm_t comms[2] = {NULL, NULL};
    r = ncclCommInitAll(comms, 2, NULL);
    EXPECT(cleanFailure(r) && comms[0] == NULL, "ncclCommInitAll -> %d", (int)r);

    void* p = (void*)0x1;
    r = ncclMemAlloc(&p, 1 << 20);
    EXPECT(cleanFailure(r) && p == NULL, "ncclMemAlloc -> %d", (int)r);

    /* Inside a group, too. */
    EXPECT(ncclGroupStart() == ncclSuccess, "group start");
    r = ncclCommInitRank(&comm, 1, id, 0);
    EXPECT(cleanFailure(r), "ncclCommInitRank in a group -> %d", (int)r);
    EXPECT(ncclGroupEnd() == ncclSuccess, "group end: %s", ncclGetLastError(NULL));
  }

  /* Configs: wrong magic, and an old (smaller) ncclConfig_t, are judged by
   * their fields before any device is needed. */
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.magic = 0;
  r = ncclCommInitRankConfig(&comm, 1, id, 0, &config);
  EXPECT(r == ncclInvalidArgument, "bad magic -> %d", (int)r);
  ncclConfig_t old = NCCL_CONFIG_INITIALIZER;
  old.size = 40; /* an NCCL 2.14-sized config: size..netName */
  old.blocking = 7;
  r = ncclCommInitRankConfig(&comm, 1, id, 0, &old);
  EXPECT(r == ncclInvalidArgument, "blocking=7 accepted -> %d", (int)r);

  /* Unsupported and bad calls: error codes, no crash. */
  ncclWindow_t win;
  EXPECT(ncclCommWindowRegister(NULL, NULL, 0, &win, 0) == ncclInvalidUsage, "window register");
  EXPECT(ncclCommRevoke(NULL, 0) == ncclInvalidUsage, "revoke");
  EXPECT(ncclAllReduce(NULL, NULL, 1, ncclFloat, ncclSum, NULL, NULL) == ncclInvalidArgument,
         "allreduce on NULL comm");
  EXPECT(ncclGroupEnd() == ncclInvalidUsage, "unbalanced group end");
  ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
  EXPECT(ncclGroupSimulateEnd(&sim) == ncclInvalidUsage, "simulate outside a group");
  EXPECT(ncclCommDestroy(NULL) == ncclSuccess, "destroy NULL");
  const char* msg = ncclGetLastError(NULL);
  EXPECT(msg != NULL && strstr(msg, "Tide") != NULL, "last error: %s", msg ? msg : "(null)");
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  ncclResetDebugInit(); /* declared deprecated by nccl.h, still exported */
#pragma GCC diagnostic pop

  printf("%s: %d failure(s)\n", g_failures ? "FAIL" : "PASS", g_failures);
  return g_failures ? 1 : 0;
}
