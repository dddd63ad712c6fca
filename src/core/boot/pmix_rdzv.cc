// Unique-id exchange through the PMIx server of the launcher (mpirun, srun
// --mpi=pmix, prterun). Built only when PMIx is found.
#include <pmix.h>

#include <cstring>

#include "core/boot/env_init.h"
#include "core/log.h"

namespace tide {
namespace {

constexpr char kUidKey[] = "tide.uid";

Status pmixError(pmix_status_t rc, const char* what) {
  return systemError("%s failed: %s", what, PMIx_Error_string(rc));
}

// Fills `info` with a PMIX_TIMEOUT when timeoutSeconds > 0; returns the count.
size_t timeoutInfo(int timeoutSeconds, pmix_info_t* info) {
  if (timeoutSeconds <= 0) return 0;
  PMIX_INFO_LOAD(info, PMIX_TIMEOUT, &timeoutSeconds, PMIX_INT);
  return 1;
}

// Everything between PMIx_Init and PMIx_Finalize.
Status exchange(const pmix_proc_t& me, const std::function<Status(tideUniqueId*)>& makeId,
                int timeoutSeconds, int* rank, int* size, tideUniqueId* id) {
  pmix_proc_t job;
  PMIX_PROC_CONSTRUCT(&job);
  std::memcpy(job.nspace, me.nspace, sizeof(job.nspace));
  job.rank = PMIX_RANK_WILDCARD;

  pmix_value_t* val = nullptr;
  pmix_status_t rc = PMIx_Get(&job, PMIX_JOB_SIZE, nullptr, 0, &val);
  if (rc != PMIX_SUCCESS) return pmixError(rc, "PMIx_Get(PMIX_JOB_SIZE)");
  uint32_t jobSize = val->type == PMIX_UINT32 ? val->data.uint32 : 0;
  PMIX_VALUE_RELEASE(val);
  if (jobSize == 0 || me.rank >= jobSize) {
    return internalError("PMIx reports rank %u of a job of %u", me.rank, jobSize);
  }
  if (*size > 0 && static_cast<uint32_t>(*size) != jobSize) {
    return invalidArgument("the environment says %d ranks but PMIx says %u", *size, jobSize);
  }
  if (*rank != static_cast<int>(me.rank)) {
    return invalidArgument("the environment says rank %d but PMIx says %u", *rank, me.rank);
  }
  *size = static_cast<int>(jobSize);

  // Rank 0 publishes the id, or an empty value when it could not build one,
  // so the others fail at once instead of waiting for a timeout.
  Status made;
  if (me.rank == 0) {
    made = makeId(id);
    pmix_value_t v;
    PMIX_VALUE_CONSTRUCT(&v);
    v.type = PMIX_BYTE_OBJECT;
    v.data.bo.bytes = made.ok() ? id->internal : nullptr;
    v.data.bo.size = made.ok() ? sizeof(id->internal) : 0;
    rc = PMIx_Put(PMIX_GLOBAL, kUidKey, &v);
    if (rc != PMIX_SUCCESS) return pmixError(rc, "PMIx_Put");
    rc = PMIx_Commit();
    if (rc != PMIX_SUCCESS) return pmixError(rc, "PMIx_Commit");
  }

  pmix_info_t info[2];
  PMIX_INFO_CONSTRUCT(&info[0]);
  PMIX_INFO_CONSTRUCT(&info[1]);
  bool collect = true;
  PMIX_INFO_LOAD(&info[0], PMIX_COLLECT_DATA, &collect, PMIX_BOOL);
  size_t ninfo = 1 + timeoutInfo(timeoutSeconds, &info[1]);
  rc = PMIx_Fence(&job, 1, info, ninfo);
  PMIX_INFO_DESTRUCT(&info[0]);
  PMIX_INFO_DESTRUCT(&info[1]);
  if (rc != PMIX_SUCCESS) return pmixError(rc, "PMIx_Fence");
  if (me.rank == 0) return made;

  pmix_proc_t root;
  PMIX_PROC_CONSTRUCT(&root);
  std::memcpy(root.nspace, me.nspace, sizeof(root.nspace));
  root.rank = 0;
  pmix_info_t getInfo;
  PMIX_INFO_CONSTRUCT(&getInfo);
  size_t ngetInfo = timeoutInfo(timeoutSeconds, &getInfo);
  val = nullptr;
  rc = PMIx_Get(&root, kUidKey, ngetInfo > 0 ? &getInfo : nullptr, ngetInfo, &val);
  PMIX_INFO_DESTRUCT(&getInfo);
  if (rc != PMIX_SUCCESS) return pmixError(rc, "PMIx_Get(tide.uid)");
  Status s;
  if (val->type != PMIX_BYTE_OBJECT || val->data.bo.size != sizeof(id->internal)) {
    s = remoteError("rank 0 could not create the bootstrap root (see its log)");
  } else {
    std::memcpy(id->internal, val->data.bo.bytes, sizeof(id->internal));
  }
  PMIX_VALUE_RELEASE(val);
  return s;
}

}  // namespace

Status pmixExchangeUniqueId(const std::function<Status(tideUniqueId*)>& makeId, int timeoutSeconds,
                            int* rank, int* size, tideUniqueId* id) {
  pmix_proc_t me;
  PMIX_PROC_CONSTRUCT(&me);
  pmix_status_t rc = PMIx_Init(&me, nullptr, 0);
  if (rc != PMIX_SUCCESS) return pmixError(rc, "PMIx_Init");
  TIDE_INFO("PMIx rank %u in namespace %s", me.rank, me.nspace);
  Status s = exchange(me, makeId, timeoutSeconds, rank, size, id);
  rc = PMIx_Finalize(nullptr, 0);
  if (rc != PMIX_SUCCESS && s.ok()) s = pmixError(rc, "PMIx_Finalize");
  return s;
}

}  // namespace tide
